"""The drop-in's own behaviour beyond prometheus_client's tests (run by scripts/test-python-package with the
installed wheel): a bad file is skipped and logged once, the state of a directory outlives its collector objects,
the binary's differences are keyword options off by default."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

import multiproc_exporter


def write(directory, code):
    """Runs ``code`` in a real process writing to ``directory`` (prometheus_client multiprocess mode)."""
    subprocess.run([sys.executable, '-c', textwrap.dedent(code)], check=True,
                   env=dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(directory)))


def exposition(collector_class, directory, **options):
    registry = CollectorRegistry()
    collector_class(registry, path=str(directory), **options)
    return generate_latest(registry)


def test_a_bad_file_is_skipped_and_logged_once_instead_of_raising(tmp_path, caplog):
    write(tmp_path, 'from prometheus_client import Counter; Counter("good", "Good.").inc(2)')
    good = exposition(MultiProcessCollector, tmp_path)
    (tmp_path / 'counter_999.db').write_bytes(b'\x10\x00\x00\x00' + b'\xff' * 60)
    with pytest.raises(Exception):
        exposition(MultiProcessCollector, tmp_path)  # prometheus_client fails the whole collection
    with caplog.at_level(logging.WARNING, logger='multiproc_exporter'):
        assert exposition(multiproc_exporter.MultiProcessCollector, tmp_path) == good
        assert exposition(multiproc_exporter.MultiProcessCollector, tmp_path) == good
        assert multiproc_exporter.generate_latest(str(tmp_path)) == good
    logged = [r.getMessage() for r in caplog.records if r.name == 'multiproc_exporter']
    assert len(logged) == 1 and 'counter_999.db' in logged[0], logged


def test_the_state_of_a_directory_outlives_its_collector_objects(tmp_path):
    write(tmp_path, 'from prometheus_client import Counter; Counter("c", "C.", ["k"]).labels("a").inc()')
    first = exposition(multiproc_exporter.MultiProcessCollector, tmp_path)
    assert b'c_total{k="a"} 1.0' in first
    # A new collector object (the per-request pattern) sees values written since, and new files.
    write(tmp_path, 'from prometheus_client import Counter; Counter("c", "C.", ["k"]).labels("b").inc(5)')
    second = exposition(multiproc_exporter.MultiProcessCollector, tmp_path)
    assert second == exposition(MultiProcessCollector, tmp_path)
    assert b'c_total{k="b"} 5.0' in second


def test_the_collector_takes_prometheus_multiproc_dir_and_raises_like_prometheus_client(tmp_path, monkeypatch):
    monkeypatch.setenv('PROMETHEUS_MULTIPROC_DIR', str(tmp_path / 'missing'))
    with pytest.raises(ValueError, match='PROMETHEUS_MULTIPROC_DIR'):
        multiproc_exporter.MultiProcessCollector(None)
    with pytest.raises(ValueError, match='PROMETHEUS_MULTIPROC_DIR'):
        multiproc_exporter.generate_latest()
    write(tmp_path, 'from prometheus_client import Gauge; Gauge("g", "G.", multiprocess_mode="all").set(3)')
    monkeypatch.setenv('PROMETHEUS_MULTIPROC_DIR', str(tmp_path))
    registry = CollectorRegistry()
    collector = multiproc_exporter.MultiProcessCollector(registry)
    assert registry.get_sample_value('g', {'pid': next(iter(os.listdir(tmp_path)))[10:-3]}) == 3.0
    assert list(collector.collect())[0].samples[0].labels == {'pid': next(iter(os.listdir(tmp_path)))[10:-3]}


def test_a_dead_writers_live_gauge_is_kept_unless_skip_dead_live_gauges(tmp_path):
    # A real writer holding its file, seen alive at one collection, then gone.
    child = subprocess.Popen(
        [sys.executable, '-c', 'from prometheus_client import Gauge; import sys; '
         'Gauge("running", "R.", multiprocess_mode="livesum").set(4); print("ok", flush=True); sys.stdin.read()'],
        env=dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path)), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b'ok\n'
        for options in ({}, {'skip_dead_live_gauges': True}):
            assert b'running 4.0' in exposition(multiproc_exporter.MultiProcessCollector, tmp_path, **options)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    exact = exposition(MultiProcessCollector, tmp_path)
    assert b'running 4.0' in exact
    assert exposition(multiproc_exporter.MultiProcessCollector, tmp_path) == exact
    assert b'running' not in exposition(multiproc_exporter.MultiProcessCollector, tmp_path,
                                        skip_dead_live_gauges=True)
    assert b'running' not in multiproc_exporter.generate_latest(str(tmp_path), skip_dead_live_gauges=True)
