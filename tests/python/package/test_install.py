"""``multiproc_exporter.install()`` (issues 50 and 55), run by scripts/test-python-package with the installed wheel:
prometheus_client's own exposition paths give the same bytes with and without it on the same files (written by
real prometheus_client processes), answer natively only for a registry holding just a multiprocess collector,
and fall back to prometheus_client for anything else; ``uninstall()`` restores; the drop-in's ``merge``, the
bounded per-directory state and fork safety; install() replaces the names other modules imported before it (and
warns naming a module it cannot change), uninstall() puts every one back; ``MULTIPROC_EXPORTER_INSTALL=1`` imports
nothing before the application does."""

import asyncio
import gzip
import io
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import types
import warnings
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

# prometheus_client's own objects, kept in a namespace: install() replaces every module-level name bound to them
# (this module's too), not attributes of other objects.
ORIGINAL = types.SimpleNamespace(text=exposition.generate_latest, openmetrics=openmetrics.generate_latest,
                                 collector=multiprocess.MultiProcessCollector)

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


def reference(directory, encoder=ORIGINAL.text, **kwargs):
    """prometheus_client's own answer (its collector, its encoder), without install()."""
    return encoder(registry_of(directory, ORIGINAL.collector), **kwargs)


def test_install_replaces_and_uninstall_restores_and_install_is_idempotent():
    assert not multiproc_exporter._install.installed()
    multiproc_exporter.install()
    try:
        first = (exposition.generate_latest, prometheus_client.generate_latest, openmetrics.generate_latest)
        assert exposition.generate_latest is not ORIGINAL.text
        assert prometheus_client.generate_latest is exposition.generate_latest
        assert openmetrics.generate_latest is not ORIGINAL.openmetrics
        assert multiprocess.MultiProcessCollector is multiproc_exporter.MultiProcessCollector
        multiproc_exporter.install()
        assert (exposition.generate_latest, prometheus_client.generate_latest, openmetrics.generate_latest) == first
        assert exposition.generate_latest.__name__ == 'generate_latest'
    finally:
        multiproc_exporter.uninstall()
    assert exposition.generate_latest is ORIGINAL.text
    assert prometheus_client.generate_latest is ORIGINAL.text
    assert openmetrics.generate_latest is ORIGINAL.openmetrics
    assert multiprocess.MultiProcessCollector is ORIGINAL.collector
    multiproc_exporter.uninstall()
    assert exposition.generate_latest is ORIGINAL.text


@pytest.mark.parametrize('collector', ['drop-in', 'prometheus_client'])
def test_generate_latest_and_openmetrics_are_byte_identical_and_native(directory, installed, native_calls, collector):
    collector_class = multiproc_exporter.MultiProcessCollector if collector == 'drop-in' else ORIGINAL.collector
    registry = registry_of(directory, collector_class)
    cases = [
        (prometheus_client.generate_latest(registry), reference(directory)),
        (exposition.generate_latest(registry), reference(directory)),
        (exposition.generate_latest(registry, 'allow-utf-8'), reference(directory, escaping='allow-utf-8')),
        (openmetrics.generate_latest(registry), reference(directory, ORIGINAL.openmetrics)),
        (openmetrics.generate_latest(registry, 'allow-utf-8', '2.0.0'),
         reference(directory, ORIGINAL.openmetrics, escaping='allow-utf-8', version='2.0.0')),
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
        for app in (make(registry_of(directory)), make(registry_of(directory, ORIGINAL.collector))):
            assert [get(app, *request) for request in REQUESTS] == expected
    finally:
        multiproc_exporter.uninstall()
    assert native_calls.count(True) == 2 * (len(REQUESTS) - 1)


def test_start_http_server_gives_prometheus_clients_bytes(directory, installed, native_calls):
    server, thread = prometheus_client.start_http_server(0, addr='127.0.0.1', registry=registry_of(directory))
    try:
        url = f'http://127.0.0.1:{server.server_port}/metrics'
        for accept, expected in (('', reference(directory)),
                                 ('application/openmetrics-text', reference(directory, ORIGINAL.openmetrics))):
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
    expected = {name: (ORIGINAL.text(r), ORIGINAL.openmetrics(r), ORIGINAL.text(r, 'dots'))
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


def test_a_local_name_imported_before_install_keeps_prometheus_clients_function():
    # A function's local variable is out of install()'s reach (module-level names are not: below).
    from prometheus_client import generate_latest as imported_before
    multiproc_exporter.install()
    try:
        assert imported_before is ORIGINAL.text
        from prometheus_client import generate_latest as imported_after
        assert imported_after is exposition.generate_latest is not ORIGINAL.text
    finally:
        multiproc_exporter.uninstall()


# A module that imports prometheus_client's names as applications and libraries do.
IMPORTER = """
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import generate_latest as aliased
from prometheus_client.exposition import generate_latest as text
from prometheus_client.openmetrics.exposition import generate_latest as om
from prometheus_client.multiprocess import MultiProcessCollector


def metrics(path, encoder=None):
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)
    return (encoder or generate_latest)(registry)
"""

IMPORTED = {'generate_latest': 'text', 'aliased': 'text', 'text': 'text', 'om': 'openmetrics',
            'MultiProcessCollector': 'collector'}


@pytest.fixture
def importer(tmp_path, monkeypatch):
    """A module imported (before install()) from a file, as an application's are."""
    (tmp_path / 'mpe_importer.py').write_text(IMPORTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import mpe_importer
    yield mpe_importer
    sys.modules.pop('mpe_importer', None)


def test_install_after_the_imports_replaces_the_names_modules_imported(directory, importer, native_calls):
    """Issue 55: install() after prometheus-fastapi-instrumentator (or any module) imported generate_latest by name
    left that name prometheus_client's: its /metrics kept prometheus_client's encoder, without a warning."""
    import prometheus_fastapi_instrumentator.instrumentation as instrumentation
    assert instrumentation.generate_latest is ORIGINAL.text
    expected = reference(directory)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # every name reachable: no warning
        multiproc_exporter.install()
    try:
        assert instrumentation.generate_latest is exposition.generate_latest is not ORIGINAL.text
        for name, kind in IMPORTED.items():
            assert getattr(importer, name) is not getattr(ORIGINAL, kind), name
            assert getattr(importer, name) is {'text': exposition.generate_latest,
                                               'openmetrics': openmetrics.generate_latest,
                                               'collector': multiproc_exporter.MultiProcessCollector}[kind], name
        native_calls.clear()
        assert importer.metrics(directory) == expected
        assert importer.metrics(directory, importer.om) == reference(directory, ORIGINAL.openmetrics)
        assert native_calls == [True, True]
        # The package keeps prometheus_client's collector (its merge is the drop-in's).
        assert multiproc_exporter._PrometheusClientCollector is ORIGINAL.collector
    finally:
        multiproc_exporter.uninstall()
    assert instrumentation.generate_latest is ORIGINAL.text
    for name, kind in IMPORTED.items():
        assert getattr(importer, name) is getattr(ORIGINAL, kind), name


def test_uninstall_restores_names_bound_while_installed(tmp_path, monkeypatch):
    """Issue 55: uninstall() left the wrapper in the modules that held it (the instrumentator kept answering
    natively): a module imported while installed binds install()'s objects; uninstall() puts prometheus_client's
    back in it too."""
    multiproc_exporter.install()
    try:
        (tmp_path / 'mpe_imported_while_installed.py').write_text(IMPORTER)
        monkeypatch.syspath_prepend(str(tmp_path))
        import mpe_imported_while_installed as module
        assert module.generate_latest is exposition.generate_latest is not ORIGINAL.text
    finally:
        multiproc_exporter.uninstall()
    try:
        for name, kind in IMPORTED.items():
            assert getattr(module, name) is getattr(ORIGINAL, kind), name
    finally:
        sys.modules.pop('mpe_imported_while_installed', None)


class ReadOnlyModule(types.ModuleType):
    """A module whose names cannot be set (as some lazy-module and proxy types)."""

    def __setattr__(self, name, value):
        raise AttributeError(f'{self.__name__} is read-only')


def test_install_warns_once_naming_each_module_it_cannot_reach(directory, importer):
    """Issue 55: a module holding prometheus_client's generate_latest that install() cannot change is named, in
    one warning; the others are replaced all the same."""
    unreachable = []
    for name in ('mpe_read_only_one', 'mpe_read_only_two'):
        module = ReadOnlyModule(name)
        vars(module).update(generate_latest=ORIGINAL.text, MultiProcessCollector=ORIGINAL.collector)
        sys.modules[name] = module
        unreachable.append(module)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            multiproc_exporter.install()
        try:
            messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
            assert len(messages) == 1, messages
            assert 'mpe_read_only_one, mpe_read_only_two' in messages[0], messages
            assert caught[0].filename == __file__  # the caller of install() is pointed at
            assert all(m.generate_latest is ORIGINAL.text for m in unreachable)
            assert importer.generate_latest is exposition.generate_latest is not ORIGINAL.text
            # Installed already: nothing more, no second warning.
            with warnings.catch_warnings():
                warnings.simplefilter('error')
                multiproc_exporter.install()
        finally:
            multiproc_exporter.uninstall()
        assert importer.generate_latest is ORIGINAL.text
    finally:
        for module in unreachable:
            sys.modules.pop(module.__name__, None)


# An application that points prometheus_client at its directory in its own code, before importing it (gunicorn's
# and Flask's common pattern), then writes a counter and answers /metrics as prometheus_client documents.
APPLICATION = r"""
import json, os, sys
loaded_before = sorted(m for m in sys.modules if m.split('.')[0] in ('prometheus_client', 'multiproc_exporter'))
os.environ['PROMETHEUS_MULTIPROC_DIR'] = sys.argv[1]
from prometheus_client import CollectorRegistry, Counter, generate_latest, multiprocess
counter = Counter('app_requests', 'Requests.', ['path'])
counter.labels('/').inc(3)
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
body = generate_latest(registry)
install = sys.modules.get('multiproc_exporter._install')
print(json.dumps({
    'loaded_before': loaded_before,
    'value_class': type(counter.labels('/')._value).__name__,
    'files': sorted(f.replace(str(os.getpid()), 'PID') for f in os.listdir(sys.argv[1])),
    'body': body.decode(),
    'installed': bool(install and install.installed()),
    'native_answers': install.native_answers if install else 0,
}))
"""


def test_the_switch_imports_nothing_before_the_application_sets_its_directory(tmp_path):
    """Issue 55: MULTIPROC_EXPORTER_INSTALL=1 imported prometheus_client at interpreter start-up (the .pth), so
    an application that sets PROMETHEUS_MULTIPROC_DIR in its code before importing prometheus_client got
    in-memory values (MutexValue) and wrote no file. With the switch it now writes the same files, and its
    /metrics is answered natively."""
    runs = {}
    for switch in ('', '1'):
        directory = tmp_path / f'switch{switch or 0}'
        directory.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ('PROMETHEUS_MULTIPROC_DIR', 'prometheus_multiproc_dir')}
        env['MULTIPROC_EXPORTER_INSTALL'] = switch
        out = subprocess.run([sys.executable, '-c', APPLICATION, str(directory)], env=env, check=True,
                             capture_output=True, text=True)
        assert out.stderr == '', out.stderr
        runs[switch] = json.loads(out.stdout)
    without, with_switch = runs[''], runs['1']
    assert without['value_class'] == with_switch['value_class'] == 'MmapedValue'
    assert without['files'] == with_switch['files'] == ['counter_PID.db']
    assert without['loaded_before'] == with_switch['loaded_before'] == []
    assert without['body'] == with_switch['body'] and 'app_requests_total{path="/"} 3.0' in with_switch['body']
    assert (without['installed'], without['native_answers']) == (False, 0)
    assert (with_switch['installed'], with_switch['native_answers']) == (True, 1)
    # A process that never imports prometheus_client loads nothing of either.
    out = subprocess.run([sys.executable, '-c', 'import sys; print(sorted(m for m in sys.modules if "prometheus" in m '
                          'or "multiproc_exporter" in m))'], env=dict(env, MULTIPROC_EXPORTER_INSTALL='1'),
                         check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "['_multiproc_exporter_hook']", out.stdout


def test_merge_is_prometheus_clients(directory):
    files = sorted(os.path.join(directory, f) for f in os.listdir(directory))
    for accumulate in (True, False):
        ours = list(multiproc_exporter.MultiProcessCollector.merge(files, accumulate=accumulate))
        theirs = list(ORIGINAL.collector.merge(files, accumulate=accumulate))
        assert repr(ours) == repr(theirs) and ours  # repr: NaN is not equal to itself
    multiproc_exporter.install()
    try:
        # prometheus_client's merge calls its helpers through the module's name, the drop-in after install().
        assert repr(list(ORIGINAL.collector.merge(files))) == repr(list(ORIGINAL.collector._accumulate_metrics(
            ORIGINAL.collector._read_metrics(files), True)))
        assert repr(list(multiprocess.MultiProcessCollector.merge(files, accumulate=False))) == \
            repr(list(ORIGINAL.collector._accumulate_metrics(ORIGINAL.collector._read_metrics(files), False)))
    finally:
        multiproc_exporter.uninstall()


def test_collected_families_are_reused_until_they_change_and_are_copies(tmp_path):
    write(tmp_path, 'from prometheus_client import Counter; Counter("a", "A.").inc(); Counter("b", "B.").inc()', 1)
    collector = multiproc_exporter.MultiProcessCollector(None, path=str(tmp_path))
    first = {m.name: m for m in collector.collect()}
    first['a'].samples.append('changed by a caller')
    write(tmp_path, 'from prometheus_client import Counter; Counter("b", "B.").inc(5)', 1)
    second = {m.name: m for m in collector.collect()}
    assert second == {m.name: m for m in ORIGINAL.collector(None, path=str(tmp_path)).collect()}
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
        assert ORIGINAL.text(registry) == expected
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            ok = all(multiproc_exporter.generate_latest(path) == expected and ORIGINAL.text(registry) == expected
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
