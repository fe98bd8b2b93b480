"""pytest configuration for prometheus_client 0.26.0's own tests/test_multiprocess.py (downloaded at test time by
scripts/test-python-package): ``prometheus_client.multiprocess.MultiProcessCollector`` is swapped for
``multiproc_exporter.MultiProcessCollector`` before the test module imports it, and the swap is checked."""

import prometheus_client.multiprocess

import multiproc_exporter

prometheus_client.multiprocess.MultiProcessCollector = multiproc_exporter.MultiProcessCollector


def pytest_collection_finish(session):
    modules = {item.module for item in session.items if item.module.__name__.endswith('test_multiprocess')}
    assert modules, 'test_multiprocess.py was not collected'
    for module in modules:
        assert module.MultiProcessCollector is multiproc_exporter.MultiProcessCollector, \
            'the test module does not use the drop-in collector'
