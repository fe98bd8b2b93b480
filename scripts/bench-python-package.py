"""Benchmark of one ``/metrics`` exposition of a multiprocess directory whose files change between calls (as live
writers change them), in one run, the ways taking turns call by call:

1. prometheus_client 0.26.0: its ``MultiProcessCollector`` and ``generate_latest``;
2. ``prometheus-client-python-speedups`` 0.1.0's ``merge(files)`` (client_python#1086) turned into
   prometheus_client Metrics, then ``generate_latest`` (where it installs);
3. ``multiproc_exporter.MultiProcessCollector`` (the drop-in) and prometheus_client's ``generate_latest``,
   without ``install()``: the collector path (a registry ``install()`` cannot answer natively pays this);
4. ``prometheus_client.generate_latest`` after ``multiproc_exporter.install()``, over a registry holding
   prometheus_client's own ``MultiProcessCollector`` (what vLLM's, SGLang's or a gunicorn app's ``/metrics`` runs);
5. ``multiproc_exporter.generate_latest(path)``;

and with ``--http``, ``GET /metrics`` over HTTP (a kept-alive connection) from two servers running vLLM 0.33.0's
serving path on the same directory (tests/python/package/install_apps/vllm_serve.py: ``attach_router`` under one
``uvicorn.Server``, prometheus-fastapi-instrumentator 8.1.0's ``expose()``): one without ``install()``, one with
``MULTIPROC_EXPORTER_INSTALL=1`` (the import hook); the latter's answers are counted natively. Each request on a new
connection, as Prometheus's scrapes (every 15 s or so; uvicorn closes a connection idle for 5 s); the floor is
``GET /installed`` of the same server (a small JSON answer through the same stack, no exposition).

The directories are scripts/compare.py's (``gen_fixture --processes N``, default 16 and 1,024 writers). While the
ways run, a second process adds 1 to one value in every file every 2 ms (``--bump all``: to every value), through
the files' maps, as a writer does. Every call is what an application's ``/metrics`` does: a new registry and collector, then the exposition.
Before the writer starts, each way's bytes are compared with prometheus_client's on the same files. Prints a
Markdown table: median and p90 milliseconds, ratio of medians to prometheus_client's (over HTTP: to the server
without install()) and to the speedups'.

    python scripts/bench-python-package.py --gen target/debug/examples/gen_fixture [--sizes 16,1024] [--bump all] [--http]

Run with a Python that has the wheel, prometheus_client==0.26.0 and (optionally)
prometheus-client-python-speedups==0.1.0 installed (docs/performance.md#python-drop-in says how).
"""

import argparse
import glob
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest as prometheus_client_generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.samples import Sample

import multiproc_exporter

VLLM_SERVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, 'tests', 'python', 'package',
                          'install_apps', 'vllm_serve.py')

try:
    import prometheus_client_python_speedups as speedups
except ImportError:
    speedups = None

# The writer: one value in every file (the first entry's; with "all", every value of every file), +1 every
# 2 ms, through a shared map.
BUMPER = textwrap.dedent('''
    import glob, mmap, os, struct, sys, time
    from prometheus_client.mmap_dict import _read_all_values
    maps = []
    for path in sorted(glob.glob(os.path.join(sys.argv[1], '*.db'))):
        with open(path, 'r+b') as f:
            m = mmap.mmap(f.fileno(), 0)
        for _key, _value, _timestamp, pos in _read_all_values(m):
            maps.append((m, pos))
            if sys.argv[2] != 'all':
                break
    print(len(maps), flush=True)
    while True:
        for m, pos in maps:
            struct.pack_into('d', m, pos, struct.unpack_from('d', m, pos)[0] + 1)
        time.sleep(0.002)
''')


class SpeedupsCollector:
    """client_python#1086's path: the files merged by the speedups package, then prometheus_client's Metrics."""

    def __init__(self, registry, path):
        self._path = path
        registry.register(self)

    def collect(self):
        out = []
        for m in speedups.merge(glob.glob(os.path.join(self._path, '*.db'))):
            metric = Metric(m.name, m.documentation, m.typ)
            metric.samples = [Sample(s.name, s.labels, s.value, s.timestamp) for s in m.samples]
            out.append(metric)
        return out


HTTP_WAYS = ("HTTP GET /metrics, vLLM's attach_router under uvicorn, prometheus_client",
             "HTTP GET /metrics, vLLM's attach_router under uvicorn, MULTIPROC_EXPORTER_INSTALL=1",
             "HTTP GET /installed, the same server (the floor: no exposition)")


def through(collector_class, encoder):
    def once(path):
        registry = CollectorRegistry()
        collector_class(registry, path=path)
        return encoder(registry)
    return once


class Server:
    """vllm_serve.py on a directory, asked over HTTP (a new connection per request)."""

    def __init__(self, directory, **env):
        import socket
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            port = s.getsockname()[1]
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=directory, **env)
        self.process = subprocess.Popen([sys.executable, VLLM_SERVE, str(port)], env=env)
        deadline = time.monotonic() + 90
        while True:
            try:
                self.port = port
                self.state()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise SystemExit('vllm_serve.py did not answer in 90 s')
                time.sleep(0.3)

    def get(self, path='/metrics'):
        connection = http.client.HTTPConnection('127.0.0.1', self.port, timeout=600)
        try:
            connection.request('GET', path)
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        assert response.status == 200, (response.status, body)
        return body

    def state(self):
        return json.loads(self.get('/installed'))

    def metrics(self, _path):
        return self.get()

    def floor(self, _path):
        return self.get('/installed')

    def stop(self):
        self.process.terminate()
        self.process.wait(30)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--gen', required=True, help='the gen_fixture example binary')
    p.add_argument('--sizes', default='16,1024')
    p.add_argument('--calls', type=int, default=30, help='calls per way and size (at most)')
    p.add_argument('--seconds', type=float, default=60.0, help='time per size (at least 5 rounds)')
    p.add_argument('--bump', choices=['first', 'all'], default='first',
                   help="what the writer changes: one value in every file (default), or every value")
    p.add_argument('--http', action='store_true', help="also GET /metrics of vLLM's serving path with and without install()")
    p.add_argument('--json', help='also write the results here')
    args = p.parse_args()
    # prometheus_client's own objects, kept in local names before install(), which replaces every module-level
    # name bound to them (this module's too).
    original_text, original_collector = prometheus_client_generate_latest, MultiProcessCollector
    multiproc_exporter.install()
    ways = [('prometheus_client 0.26.0 MultiProcessCollector + generate_latest',
             through(original_collector, original_text))]
    if speedups is not None:
        ways.append(('prometheus-client-python-speedups 0.1.0 + generate_latest',
                     through(SpeedupsCollector, original_text)))
    ways.append(('multiproc_exporter.MultiProcessCollector + generate_latest (no install)',
                 through(multiproc_exporter.MultiProcessCollector, original_text)))
    # prometheus_client.generate_latest is install()'s now; the collector is prometheus_client's own class.
    ways.append(('prometheus_client.generate_latest after install()',
                 through(original_collector, prometheus_client.generate_latest)))
    ways.append(('multiproc_exporter.generate_latest()', lambda path: multiproc_exporter.generate_latest(path)))
    results = []
    with tempfile.TemporaryDirectory(prefix='mpe-bench-py-') as work:
        for size in [int(s) for s in args.sizes.split(',')]:
            directory = os.path.join(work, f'p{size}')
            fixture = json.loads(subprocess.run([args.gen, '--processes', str(size), '--dir', directory, '--clean'],
                                                check=True, capture_output=True, text=True).stdout)
            servers = []
            size_ways = list(ways)
            if args.http:
                # The servers write their own (instrumentator) files when they start: compared after.
                servers = [Server(directory), Server(directory, MULTIPROC_EXPORTER_INSTALL='1')]
                assert not servers[0].state()['installed'] and servers[1].state()['installed']
                size_ways += [(HTTP_WAYS[0], servers[0].metrics), (HTTP_WAYS[1], servers[1].metrics),
                              (HTTP_WAYS[2], servers[1].floor)]
            expected = ways[0][1](directory)
            identical = {name: fn(directory) == expected for name, fn in size_ways if name != HTTP_WAYS[2]}
            native_before = servers[1].state()['native_answers'] if servers else 0
            bumper = subprocess.Popen([sys.executable, '-c', BUMPER, directory, args.bump], stdout=subprocess.PIPE, text=True)
            try:
                bumped = int(bumper.stdout.readline())
                times = {name: [] for name, _ in size_ways}
                deadline = time.perf_counter() + args.seconds
                rounds = 0
                while rounds < args.calls and (rounds < 5 or time.perf_counter() < deadline):
                    for name, fn in size_ways:
                        start = time.perf_counter()
                        fn(directory)
                        times[name].append((time.perf_counter() - start) * 1e3)
                    rounds += 1
            finally:
                bumper.kill()
                bumper.wait()
                if servers:
                    native = servers[1].state()['native_answers'] - native_before
                    asked = len(times[HTTP_WAYS[1]])
                    assert native == asked and servers[0].state()['native_answers'] == 0, (native, asked)
                    print(f'{size} writers: the server with install() answered {native} of {asked} natively',
                          file=sys.stderr)
                for server in servers:
                    server.stop()
            files = len(glob.glob(os.path.join(directory, '*.db')))
            for name, _ in size_ways:
                t = sorted(times[name])
                results.append({'writers': size, 'files': files, 'bumped_files': bumped,
                                'bytes': fixture.get('used_bytes'), 'way': name, 'median_ms': statistics.median(t),
                                'p90_ms': t[int(0.9 * (len(t) - 1))], 'calls': len(t),
                                'identical': identical.get(name)})
                print(f'{size} writers, {name}: median {statistics.median(t):.3f} ms ({len(t)} calls), '
                      f'identical: {identical.get(name)}', file=sys.stderr)
    print('| writers | way | median (ms) | p90 (ms) | vs prometheus_client | vs speedups | same bytes |')
    print('|---:|---|---:|---:|---:|---:|---|')
    for r in results:
        row = [x for x in results if x['writers'] == r['writers']]
        # Over HTTP, the server without install() is the base.
        base = next(x for x in row if x['way'] == HTTP_WAYS[0])['median_ms'] if r['way'] in HTTP_WAYS else \
            row[0]['median_ms']
        fast = next((x['median_ms'] for x in row if x['way'].startswith('prometheus-client-python-speedups')), None)
        vs_speedups = f"{fast / r['median_ms']:.1f}x" if fast else 'n/a'
        print(f"| {r['writers']} | {r['way']} | {r['median_ms']:.3f} | {r['p90_ms']:.3f} | "
              f"{base / r['median_ms']:.1f}x | {vs_speedups} | {'n/a' if r['identical'] is None else 'yes' if r['identical'] else 'no'} |")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
