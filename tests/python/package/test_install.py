"""``multiproc_exporter.install()`` (issue 50), run by scripts/test-python-package with the installed wheel:
prometheus_client's own exposition paths give the same bytes with and without it on the same files (written by
real prometheus_client processes), answer natively only for a registry holding just a multiprocess collector,
and fall back to prometheus_client for anything else; ``uninstall()`` restores; the drop-in's ``merge``, the
bounded per-directory state and fork safety."""

import asyncio
import gzip
import io
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import urllib.request
import wsgiref.util

import pytest
import prometheus_client
import prometheus_client.exposition as exposition
import prometheus_client.multiprocess as multiprocess
import prometheus_client.openmetrics.exposition as openmetrics
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily

import multiproc_exporter
import multiproc_exporter._install as install_module
from multiproc_exporter import _native

ORIGINAL_TEXT = exposition.generate_latest
ORIGINAL_OPENMETRICS = openmetrics.generate_latest
ORIGINAL_COLLECTOR = multiprocess.MultiProcessCollector

# Every kind of multiprocess file and the names and label values that need escaping.
WRITER = r'''
from prometheus_client import Counter, Gauge, Histogram, Summary
c = Counter("vllm:request_success", "Finished requests.", ["model_name", "finished_reason"])
c.labels("m", "stop").inc(3)
c.labels("m", 'quote"back\\slash\nnewline').inc(0.5)
c.labels("m", "ünïcode").inc(-0.0)
Counter("plain", "Plain.\nSecond line \\ backslash").inc(2**53 + 1)
for mode in ("all", "liveall", "sum", "livesum", "max", "livemax", "min", "livemin", "mostrecent", "livemostrecent"):
    Gauge("g_" + mode, "Gauge " + mode, ["k"], multiprocess_mode=mode).labels("v").set(float(__import__("os").getpid() % 7) + 0.25)
h = Histogram("vllm:e2e_request_latency_seconds", "Latency.", ["model_name"], buckets=[0.1, 1, 2.5, float("inf")])
for v in (0.05, 0.5, 3, 1e9):
    h.labels("m").observe(v)
Summary("s", "Summary.").observe(1.5)
g = Gauge("nan_inf", "Specials.", multiprocess_mode="all")
g.set(float("nan"))
'''


def write(directory, code=WRITER, processes=3):
    for _ in range(processes):
        subprocess.run([sys.executable, '-c', textwrap.dedent(code)], check=True,
                       env=dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(directory)))


@pytest.fixture
def directory(tmp_path):
    write(tmp_path)
    return str(tmp_path)


@pytest.fixture
def installed():
    multiproc_exporter.install()
    yield
    multiproc_exporter.uninstall()


@pytest.fixture
def native_calls(monkeypatch):
    """How many expositions were answered natively."""
    calls = []
    real = install_module._native_exposition

    def spy(registry, openmetrics_, escaping):
        body = real(registry, openmetrics_, escaping)
        calls.append(body is not None)
        return body

    monkeypatch.setattr(install_module, '_native_exposition', spy)
    return calls


def registry_of(directory, collector_class=None):
    registry = CollectorRegistry()
    (collector_class or multiprocess.MultiProcessCollector)(registry, path=directory)
    return registry


def reference(directory, encoder=ORIGINAL_TEXT, **kwargs):
    """prometheus_client's own answer (its collector, its encoder), without install()."""
    return encoder(registry_of(directory, ORIGINAL_COLLECTOR), **kwargs)


def test_install_replaces_and_uninstall_restores_and_install_is_idempotent():
    assert not multiproc_exporter._install.installed()
    multiproc_exporter.install()
    try:
        first = (exposition.generate_latest, prometheus_client.generate_latest, openmetrics.generate_latest)
        assert exposition.generate_latest is not ORIGINAL_TEXT
        assert prometheus_client.generate_latest is exposition.generate_latest
        assert openmetrics.generate_latest is not ORIGINAL_OPENMETRICS
        assert multiprocess.MultiProcessCollector is multiproc_exporter.MultiProcessCollector
        multiproc_exporter.install()
        assert (exposition.generate_latest, prometheus_client.generate_latest, openmetrics.generate_latest) == first
        assert exposition.generate_latest.__name__ == 'generate_latest'
    finally:
        multiproc_exporter.uninstall()
    assert exposition.generate_latest is ORIGINAL_TEXT
    assert prometheus_client.generate_latest is ORIGINAL_TEXT
    assert openmetrics.generate_latest is ORIGINAL_OPENMETRICS
    assert multiprocess.MultiProcessCollector is ORIGINAL_COLLECTOR
    multiproc_exporter.uninstall()
    assert exposition.generate_latest is ORIGINAL_TEXT


@pytest.mark.parametrize('collector', ['drop-in', 'prometheus_client'])
def test_generate_latest_and_openmetrics_are_byte_identical_and_native(directory, installed, native_calls, collector):
    collector_class = multiproc_exporter.MultiProcessCollector if collector == 'drop-in' else ORIGINAL_COLLECTOR
    registry = registry_of(directory, collector_class)
    cases = [
        (prometheus_client.generate_latest(registry), reference(directory)),
        (exposition.generate_latest(registry), reference(directory)),
        (exposition.generate_latest(registry, 'allow-utf-8'), reference(directory, escaping='allow-utf-8')),
        (openmetrics.generate_latest(registry), reference(directory, ORIGINAL_OPENMETRICS)),
        (openmetrics.generate_latest(registry, 'allow-utf-8', '2.0.0'),
         reference(directory, ORIGINAL_OPENMETRICS, escaping='allow-utf-8', version='2.0.0')),
    ]
    for got, expected in cases:
        assert got == expected
    assert b'vllm:request_success_total' in cases[0][0] and b'# EOF' in cases[3][0]
    assert native_calls == [True] * len(cases)


ACCEPT = [
    '',
    'text/plain',
    'text/plain;version=1.0.0;escaping=allow-utf-8',
    'text/plain;version=1.0.0;escaping=underscores',
    'application/openmetrics-text',
    'application/openmetrics-text; version=1.0.0; charset=utf-8',
    'application/openmetrics-text;version=1.0.0;escaping=allow-utf-8',
    'application/openmetrics-text;version=2.0.0',
    'application/openmetrics-text;version=1.0.0;escaping=dots',  # falls back: no native "dots"
]


def bake(registry, accept, params):
    """prometheus_client's _bake_output (behind its WSGI and ASGI apps and start_http_server), gzip asked."""
    status, headers, body = exposition._bake_output(registry, accept, 'gzip', params, False)
    headers = dict(headers)
    assert headers.pop('Content-Encoding') == 'gzip'
    # gzip's header holds the time of compression: the bytes compared are the decompressed ones.
    return status, headers, gzip.decompress(body)


def test_choose_encoder_and_bake_output_give_prometheus_clients_bytes(directory, native_calls):
    expected = {(accept, name): bake(registry_of(directory), accept, {'name[]': [name]} if name else {})
                for accept in ACCEPT for name in (None, 'plain')}
    native_calls.clear()
    multiproc_exporter.install()
    try:
        for (accept, name), answer in expected.items():
            params = {'name[]': [name]} if name else {}
            assert bake(registry_of(directory), accept, params) == answer, (accept, name)
    finally:
        multiproc_exporter.uninstall()
    # Native for every Accept but the "dots" escaping; never for name[] (a restricted registry).
    assert native_calls.count(True) == len(ACCEPT) - 1
    assert len(native_calls) == 2 * len(ACCEPT)


def wsgi_get(app, query='', accept='', encoding=''):
    environ = {'REQUEST_METHOD': 'GET', 'PATH_INFO': '/metrics', 'QUERY_STRING': query,
               'HTTP_ACCEPT': accept, 'HTTP_ACCEPT_ENCODING': encoding}
    wsgiref.util.setup_testing_defaults(environ)
    answer = {}

    def start_response(status, headers):
        answer['status'], answer['headers'] = status, dict(headers)

    body = b''.join(app(environ, start_response))
    if answer['headers'].pop('Content-Encoding', None) == 'gzip':
        body = gzip.decompress(body)
    return answer['status'], answer['headers'], body


def asgi_get(app, query='', accept='', encoding=''):
    scope = {'type': 'http', 'method': 'GET', 'path': '/metrics', 'query_string': query.encode(),
             'headers': [(b'accept', accept.encode()), (b'accept-encoding', encoding.encode())]}
    sent = []

    async def receive():
        return {'type': 'http.request', 'body': b'', 'more_body': False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    headers = {k.decode(): v.decode() for k, v in sent[0]['headers']}
    body = b''.join(m.get('body', b'') for m in sent[1:])
    if headers.pop('Content-Encoding', None) == 'gzip':
        body = gzip.decompress(body)
    return sent[0]['status'], headers, body


REQUESTS = [('', '', ''), ('', 'application/openmetrics-text', ''), ('', '', 'gzip'),
            ('', 'application/openmetrics-text', 'gzip'), ('name[]=plain_total&name[]=s', '', '')]


@pytest.mark.parametrize('kind', ['wsgi', 'asgi'])
def test_the_wsgi_and_asgi_apps_give_prometheus_clients_bytes(directory, kind, native_calls):
    make, get = ((prometheus_client.make_wsgi_app, wsgi_get) if kind == 'wsgi'
                 else (prometheus_client.make_asgi_app, asgi_get))
    expected = [get(make(registry_of(directory)), *request) for request in REQUESTS]
    native_calls.clear()
    multiproc_exporter.install()
    try:
        # The app made after install(), and one made before it (it looks generate_latest up when it answers).
        for app in (make(registry_of(directory)), make(registry_of(directory, ORIGINAL_COLLECTOR))):
            assert [get(app, *request) for request in REQUESTS] == expected
    finally:
        multiproc_exporter.uninstall()
    assert native_calls.count(True) == 2 * (len(REQUESTS) - 1)


def test_start_http_server_gives_prometheus_clients_bytes(directory, installed, native_calls):
    server, thread = prometheus_client.start_http_server(0, addr='127.0.0.1', registry=registry_of(directory))
    try:
        url = f'http://127.0.0.1:{server.server_port}/metrics'
        for accept, expected in (('', reference(directory)),
                                 ('application/openmetrics-text', reference(directory, ORIGINAL_OPENMETRICS))):
            request = urllib.request.Request(url, headers={'Accept': accept, 'Accept-Encoding': 'gzip'})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.headers['Content-Encoding'] == 'gzip'
                assert gzip.decompress(response.read()) == expected
    finally:
        server.shutdown()
        thread.join(10)
    assert native_calls == [True, True]


class Custom:
    def collect(self):
        return [CounterMetricFamily('custom', 'Custom.', value=1)]


class SubclassedCollector(multiproc_exporter.MultiProcessCollector):
    pass


def fallback_registries(directory):
    """Registries whose exposition only prometheus_client's path gives."""
    mixed = registry_of(directory)
    Counter('beside', 'A counter beside the multiprocess collector.', registry=mixed).inc()
    custom = registry_of(directory)
    custom.register(Custom())
    two = registry_of(directory)
    multiproc_exporter.MultiProcessCollector(two, path=directory)
    target_info = registry_of(directory)
    target_info.set_target_info({'service': 'x'})
    replaced = CollectorRegistry()
    collector = multiproc_exporter.MultiProcessCollector(replaced, path=directory)
    collector.collect = lambda: []
    return {
        'a counter beside it': mixed,
        'a custom collector beside it': custom,
        'two multiprocess collectors': two,
        'target_info': target_info,
        'a restricted registry': registry_of(directory).restricted_registry(['plain_total']),
        'a subclass of the collector': registry_of(directory, SubclassedCollector),
        'collect replaced on the object': replaced,
    }


def test_other_registries_fall_back_to_prometheus_client(directory, native_calls):
    registries = fallback_registries(directory)
    expected = {name: (ORIGINAL_TEXT(r), ORIGINAL_OPENMETRICS(r), ORIGINAL_TEXT(r, 'dots'))
                for name, r in registries.items()}
    native_calls.clear()
    multiproc_exporter.install()
    try:
        got = {name: (exposition.generate_latest(r), openmetrics.generate_latest(r), exposition.generate_latest(r, 'dots'))
               for name, r in registries.items()}
    finally:
        multiproc_exporter.uninstall()
    assert got == expected
    assert b'beside_total 1.0' in got['a counter beside it'][0]
    assert native_calls and not any(native_calls)
    # And a registry holding only a multiprocess collector over a directory removed since.
    gone = registry_of(directory)
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    os.rmdir(directory)
    multiproc_exporter.install()
    try:
        assert exposition.generate_latest(gone) == b''
    finally:
        multiproc_exporter.uninstall()


def test_a_name_imported_before_install_keeps_prometheus_clients_function():
    from prometheus_client import generate_latest as imported_before
    multiproc_exporter.install()
    try:
        assert imported_before is ORIGINAL_TEXT
        from prometheus_client import generate_latest as imported_after
        assert imported_after is exposition.generate_latest is not ORIGINAL_TEXT
    finally:
        multiproc_exporter.uninstall()


def test_merge_is_prometheus_clients(directory):
    files = sorted(os.path.join(directory, f) for f in os.listdir(directory))
    for accumulate in (True, False):
        ours = list(multiproc_exporter.MultiProcessCollector.merge(files, accumulate=accumulate))
        theirs = list(ORIGINAL_COLLECTOR.merge(files, accumulate=accumulate))
        assert repr(ours) == repr(theirs) and ours  # repr: NaN is not equal to itself
    multiproc_exporter.install()
    try:
        # prometheus_client's merge calls its helpers through the module's name, the drop-in after install().
        assert repr(list(ORIGINAL_COLLECTOR.merge(files))) == repr(list(ORIGINAL_COLLECTOR._accumulate_metrics(
            ORIGINAL_COLLECTOR._read_metrics(files), True)))
        assert repr(list(multiprocess.MultiProcessCollector.merge(files, accumulate=False))) == \
            repr(list(ORIGINAL_COLLECTOR._accumulate_metrics(ORIGINAL_COLLECTOR._read_metrics(files), False)))
    finally:
        multiproc_exporter.uninstall()


def test_collected_families_are_reused_until_they_change_and_are_copies(tmp_path):
    write(tmp_path, 'from prometheus_client import Counter; Counter("a", "A.").inc(); Counter("b", "B.").inc()', 1)
    collector = multiproc_exporter.MultiProcessCollector(None, path=str(tmp_path))
    first = {m.name: m for m in collector.collect()}
    first['a'].samples.append('changed by a caller')
    write(tmp_path, 'from prometheus_client import Counter; Counter("b", "B.").inc(5)', 1)
    second = {m.name: m for m in collector.collect()}
    assert second == {m.name: m for m in ORIGINAL_COLLECTOR(None, path=str(tmp_path)).collect()}
    # "a" did not change: the same sample objects, in a new list; "b" is new.
    assert second['a'].samples[0] is first['a'].samples[0] and len(second['a'].samples) == 1
    assert second['b'].samples[0] is not first['b'].samples[0]


def kept_directories():
    return [str(p) for p in _native._kept_directories()]


def test_the_state_of_a_directory_not_read_for_a_while_is_dropped(tmp_path):
    one, two = tmp_path / 'one', tmp_path / 'two'
    for d in (one, two):
        d.mkdir()
        write(d, 'from prometheus_client import Counter; Counter("c", "C.").inc()', 1)
    _native._reset()
    try:
        multiproc_exporter.generate_latest(str(one))
        assert kept_directories() == [str(one)]
        _native._set_idle_limit(0.05)
        import time
        time.sleep(0.2)
        multiproc_exporter.generate_latest(str(two))
        assert kept_directories() == [str(two)]
        # At most 64 directories, however recently read.
        _native._set_idle_limit(600)
        for i in range(70):
            d = tmp_path / f'd{i}'
            d.mkdir()
            multiproc_exporter.generate_latest(str(d))
        kept = kept_directories()
        assert len(kept) == 64 and str(tmp_path / 'd69') in kept and str(two) not in kept
    finally:
        _native._set_idle_limit(600)
        _native._reset()


def test_fork_after_a_collection(tmp_path):
    """A gunicorn --preload master that collected, then forked: the child collects (it does not wait for the
    parent's helper thread, which it does not have) and sees what the files hold."""
    # One file with more than 65,536 values: the loads after the first collection use the helper thread.
    write(tmp_path, 'from prometheus_client import Counter\n'
                    'c = Counter("many", "Many.", ["i"])\n'
                    'for i in range(70000): c.labels(str(i)).inc()', 1)
    path = str(tmp_path)
    expected = reference(path)
    registry = registry_of(path, multiproc_exporter.MultiProcessCollector)
    for _ in range(3):
        assert multiproc_exporter.generate_latest(path) == expected
        assert ORIGINAL_TEXT(registry) == expected
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            ok = all(multiproc_exporter.generate_latest(path) == expected and ORIGINAL_TEXT(registry) == expected
                     for _ in range(3))
            os.write(write_end, b'ok' if ok else b'different')
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read], [], [], 120)
        answer = os.read(read, 16) if ready else b'no answer in 120 s (hung)'
    finally:
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
    assert answer == b'ok'
    # The parent goes on.
    assert multiproc_exporter.generate_latest(path) == expected


def test_threads_collecting_while_the_process_forks(tmp_path):
    write(tmp_path, 'from prometheus_client import Counter; Counter("c", "C.").inc()', 2)
    path = str(tmp_path)
    expected = reference(path)
    stop = threading.Event()

    def collect():
        while not stop.is_set():
            multiproc_exporter.generate_latest(path)

    threads = [threading.Thread(target=collect) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(20):
            pid = os.fork()
            if pid == 0:
                os._exit(0 if multiproc_exporter.generate_latest(path) == expected else 1)
            deadline_ok = False
            for _ in range(600):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    deadline_ok = True
                    break
                select.select([], [], [], 0.05)
            if not deadline_ok:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            assert deadline_ok and os.waitstatus_to_exitcode(status) == 0
    finally:
        stop.set()
        for t in threads:
            t.join()
