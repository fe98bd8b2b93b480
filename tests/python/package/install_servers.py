"""``multiproc_exporter.install()`` in real servers (issue 50): the same bytes with and without it, each equal to
prometheus_client's own exposition (computed here, without install()) of the same files (written beforehand by
real prometheus_client processes, plus the files the servers' workers write when they start: the instrumentator's
unlabelled histogram; no request the test makes is instrumented, so the files hold still), from
  * a FastAPI app exposed as vLLM 0.33 exposes it (install_apps/vllm_like.py: prometheus-fastapi-instrumentator's
    ``expose()``, prometheus_client's ``make_asgi_app`` mounted behind it) under 3 uvicorn workers, ``install()``
    run by a ``sitecustomize.py`` (before the instrumentator imports ``generate_latest`` by name);
  * a WSGI app (install_apps/wsgi_app.py: ``make_wsgi_app``) under gunicorn with 3 workers and ``--preload``
    (the master collects before it forks), switched on by ``MULTIPROC_EXPORTER_INSTALL=1``;
for the text format, OpenMetrics, gzip and ``name[]``. With install(), every worker asked answered natively.

And vLLM 0.33.0's own serving path (issue 55): install_apps/vllm_serve.py builds the app as vLLM's
``attach_router`` does and serves it as ``serve_http`` does (one uvicorn server in the process), without
``install()``, with ``install()`` before the imports, after them (in ``main()``, once the instrumentator has
imported ``generate_latest`` by name) and through ``MULTIPROC_EXPORTER_INSTALL=1`` (the import hook). Every
``GET /metrics`` answer is byte-identical to prometheus_client's exposition of the same files, and, with
install() wherever it ran, every one was answered natively (the process's count of native answers grows by
exactly the number of requests).

    python tests/python/package/install_servers.py
"""

import gzip
import json
from urllib.parse import parse_qs, urlsplit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

from _servers import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.path.join(HERE, 'install_apps')
WORKERS = 3

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, exposition, multiprocess

WRITER = '''
from prometheus_client import Counter, Gauge, Histogram
Counter("vllm:request_success", "Finished requests.", ["model_name", "finished_reason"]).labels("m", "stop").inc(3)
Gauge("vllm:num_requests_running", "Running.", ["model_name"], multiprocess_mode="livemostrecent").labels("m").set(2)
Gauge("g_all", "All.", multiprocess_mode="all").set(1.5)
h = Histogram("vllm:e2e_request_latency_seconds", "Latency.", ["model_name"], buckets=[0.1, 1, float("inf")])
for v in (0.05, 0.5, 3):
    h.labels("m").observe(v)
'''

# (path and query, Accept, Accept-Encoding)
REQUESTS = [(path + query, accept, encoding)
            for path in ('/metrics', '/prom/')
            for query, accept, encoding in [('', '', ''), ('', 'application/openmetrics-text', ''),
                                            ('', '', 'gzip'), ('', 'application/openmetrics-text', 'gzip'),
                                            ('?name[]=g_all', '', '')]]


def get(url, accept='', encoding=''):
    request = urllib.request.Request(url, headers={'Accept': accept, 'Accept-Encoding': encoding})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
        content_type = response.headers['Content-Type']
        if response.headers['Content-Encoding'] == 'gzip':
            body = gzip.decompress(body)  # gzip's header holds the time: compare what it holds
            content_type += ' (gzip)'
        return content_type, body


def reference(metrics_dir, path, accept, instrumentator):
    """prometheus_client's own answer (no install() in this process) for the directory as it is now: the
    instrumentator's ``expose()`` answers ``generate_latest`` whatever is asked; prometheus_client's apps
    answer through ``_bake_output``."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=metrics_dir)
    if instrumentator:
        return exposition.generate_latest(registry)
    params = parse_qs(urlsplit(path).query)
    return exposition._bake_output(registry, accept, '', params, True)[2]


def ask(base, requests, rounds):
    """Asks every request ``rounds`` times, checks each answer is the same every time, and returns the answers."""
    answers = {}
    for _ in range(rounds):
        for path, accept, encoding in requests:
            answer = get(base + path, accept, encoding)
            assert answers.setdefault((path, accept, encoding), answer) == answer, (path, accept, encoding)
    return answers


def stop_session(server):
    """SIGTERM to the server's session (its workers), SIGKILL if it has not exited within 30 s."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def serve(command, env, requests, installed):
    """Starts ``command``, asks every request 4 times (spread over the workers), checks each answer is the
    same every time, and returns the answers."""
    port = free_port()
    server = subprocess.Popen([a.replace('PORT', str(port)) for a in command], env=env, cwd=APPS,
                              start_new_session=True)
    base = f'http://127.0.0.1:{port}'
    try:
        # Every worker up (each has written its files when it answers), so that the files hold still.
        deadline = time.monotonic() + 90
        started = set()
        while len(started) < WORKERS:
            try:
                started.add(json.loads(get(base + '/installed')[1])['pid'])
            except OSError:
                time.sleep(0.3)
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit(f'{command[0]}: {len(started)} of {WORKERS} workers answered in 90 s')
        answers = ask(base, requests, 4)
        states = {}
        for _ in range(8 * WORKERS):
            state = json.loads(get(base + '/installed')[1])
            states[state['pid']] = state
        for state in states.values():
            assert state['installed'] is installed, state
            if 'instrumentator' in state:
                assert state['instrumentator'] is installed, state
            # With install(), each worker that answered a scrape answered natively (name[] falls back).
            if not installed:
                assert state['native_answers'] == 0, state
        if installed:
            assert sum(s['native_answers'] for s in states.values()) > 0, states
        return answers, len(states)
    finally:
        stop_session(server)


# What vLLM's /metrics (the instrumentator's expose(): Accept and the query ignored, gzip off) is asked.
VLLM_REQUESTS = [('/metrics', '', ''), ('/metrics', 'application/openmetrics-text', ''), ('/metrics', '', 'gzip'),
                 ('/metrics?name[]=g_all', '', '')]
VLLM_ROUNDS = 4
# Where install() runs: the environment of vllm_serve.py.
VLLM_INSTALLS = {
    'no install()': {},
    'install() before the imports': {'MPE_INSTALL_AT': 'before'},
    'install() after the imports, in main()': {'MPE_INSTALL_AT': 'after'},
    'MULTIPROC_EXPORTER_INSTALL=1': {'MULTIPROC_EXPORTER_INSTALL': '1'},
}


def serve_vllm(env):
    """Starts vllm_serve.py (one process), asks VLLM_REQUESTS VLLM_ROUNDS times, and returns the answers (each
    the same every time), and /installed before and after the requests."""
    port = free_port()
    server = subprocess.Popen([sys.executable, os.path.join(APPS, 'vllm_serve.py'), str(port)], env=env, cwd=APPS,
                              start_new_session=True)
    base = f'http://127.0.0.1:{port}'
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                before = json.loads(get(base + '/installed')[1])
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit('vllm_serve.py did not answer in 90 s')
                time.sleep(0.3)
        answers = ask(base, VLLM_REQUESTS, VLLM_ROUNDS)
        after = json.loads(get(base + '/installed')[1])
        assert before['pid'] == after['pid'] == server.pid, (before, after, server.pid)
        return answers, before, after
    finally:
        stop_session(server)


def vllm_serving_path(metrics_dir, env):
    content_types = set()
    for name, extra in VLLM_INSTALLS.items():
        answers, before, after = serve_vllm(dict(env, **extra))
        # The server has stopped: the files hold what they held when it answered.
        expected = reference(metrics_dir, '/metrics', '', True)
        for request, (content_type, body) in answers.items():
            assert body == expected, (name, request, body, expected)
            content_types.add(content_type)
        installed = bool(extra)
        assert before['installed'] is after['installed'] is installed, (name, before, after)
        # The name prometheus-fastapi-instrumentator imported is install()'s function.
        assert after['instrumentator'] is installed, (name, after)
        native = after['native_answers'] - before['native_answers']
        asked = VLLM_ROUNDS * len(VLLM_REQUESTS)
        assert native == (asked if installed else 0), (name, native, asked)
        print(f'install_servers: vLLM 0.33.0 attach_router + serve_http, {name}: {asked} GET /metrics, each equal '
              f'to prometheus_client\'s exposition of the same files, {native} answered natively')
    assert content_types == {CONTENT_TYPE_LATEST}, content_types


def main():
    metrics_dir = tempfile.mkdtemp(prefix='mpe-install-servers-')
    try:
        for _ in range(3):
            subprocess.run([sys.executable, '-c', textwrap.dedent(WRITER)], check=True,
                           env=dict(os.environ, PROMETHEUS_MULTIPROC_DIR=metrics_dir))
        bindir = os.path.dirname(sys.executable)
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=metrics_dir)
        env.pop('MULTIPROC_EXPORTER_INSTALL', None)
        env.pop('PYTHONPATH', None)
        uvicorn = [os.path.join(bindir, 'uvicorn'), '--workers', str(WORKERS), '--host', '127.0.0.1',
                   '--port', 'PORT', '--log-level', 'warning', 'vllm_like:app']
        gunicorn = [os.path.join(bindir, 'gunicorn'), '-w', str(WORKERS), '--preload', '-b', '127.0.0.1:PORT',
                    '--log-level', 'warning', 'wsgi_app:app']
        cases = [
            ('uvicorn, vLLM-like FastAPI app, sitecustomize.py', uvicorn, REQUESTS,
             dict(env, PYTHONPATH=os.path.join(APPS, 'sitecustomize_dir'))),
            ('gunicorn --preload, WSGI app, MULTIPROC_EXPORTER_INSTALL=1', gunicorn,
             [(p.replace('/prom/', '/metrics'), a, e) for p, a, e in REQUESTS if p.startswith('/prom/')],
             dict(env, MULTIPROC_EXPORTER_INSTALL='1')),
        ]
        for name, command, requests, installed_env in cases:
            answers = {}
            for installed, run_env in ((False, env), (True, installed_env)):
                answers[installed], workers = serve(command, run_env, requests, installed)
                # The servers have stopped: their files hold what they held when they answered.
                for (path, accept, encoding), (_, body) in answers[installed].items():
                    expected = reference(metrics_dir, path, accept, 'vllm_like' in command[-1] and
                                         path.startswith('/metrics'))
                    assert body == expected, (name, installed, path, accept, encoding, body, expected)
            # And the same content types.
            assert {k: v[0] for k, v in answers[False].items()} == {k: v[0] for k, v in answers[True].items()}
            assert any(b'vllm:request_success_total' in body for _, body in answers[True].values())
            print(f'install_servers: {name}: {len(requests)} requests x 4, each equal to prometheus_client\'s '
                  f'exposition of the same files, with and without install() ({workers} workers answered)')
        vllm_serving_path(metrics_dir, env)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    print('install_servers: ok')


if __name__ == '__main__':
    main()
