"""pytest configuration for prometheus_client 0.26.0's own tests/test_multiprocess.py (downloaded at test time by
scripts/test-python-package): ``multiproc_exporter.install()`` runs before the test module imports
``prometheus_client.multiprocess.MultiProcessCollector`` (so the tests get the drop-in, its ``merge`` included, and
prometheus_client's ``generate_latest`` answers natively where it can), and the swap is checked."""

import prometheus_client.exposition
import prometheus_client.multiprocess

import multiproc_exporter

multiproc_exporter.install()


def pytest_collection_finish(session):
    modules = {item.module for item in session.items if item.module.__name__.endswith('test_multiprocess')}
    assert modules, 'test_multiprocess.py was not collected'
    for module in modules:
        assert module.MultiProcessCollector is multiproc_exporter.MultiProcessCollector, \
            'the test module does not use the drop-in collector'
    assert prometheus_client.multiprocess.MultiProcessCollector is multiproc_exporter.MultiProcessCollector
    assert prometheus_client.exposition.generate_latest.__multiproc_exporter__ is not None, 'install() is not active'
