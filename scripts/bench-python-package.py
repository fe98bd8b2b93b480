"""Benchmark of one ``generate_latest`` of a multiprocess directory, in one run, through
(1) prometheus_client 0.26.0's ``MultiProcessCollector``, (2) ``prometheus-client-python-speedups`` 0.1.0's
``merge(files)`` (client_python#1086) where it installs, (3) ``multiproc_exporter.MultiProcessCollector`` and
(4) ``multiproc_exporter.generate_latest``, on scripts/compare.py's directories (``gen_fixture --processes N``,
default 16 and 1,024 writers). Every call is what an application's ``/metrics`` does: a new registry and
collector, then the exposition (the drop-in keeps its state per directory, so calls after the first read only
what changed). Prints a Markdown table (median and p90 milliseconds; ratio to prometheus_client).

    python scripts/bench-python-package.py --gen target/release/examples/gen_fixture [--sizes 16,1024]

Run with a Python that has the wheel, prometheus_client==0.26.0 and (optionally)
prometheus-client-python-speedups==0.1.0 installed (docs/performance.md#python-drop-in says how).
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.samples import Sample

import multiproc_exporter

try:
    import prometheus_client_python_speedups as speedups
except ImportError:
    speedups = None


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


def through(collector_class):
    def once(path):
        registry = CollectorRegistry()
        collector_class(registry, path=path)
        return generate_latest(registry)
    return once


def time_calls(fn, path, seconds, max_calls):
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < max_calls and (len(times) < 3 or time.perf_counter() < deadline):
        start = time.perf_counter()
        fn(path)
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))], len(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--gen', required=True, help='the gen_fixture example binary')
    p.add_argument('--sizes', default='16,1024')
    p.add_argument('--seconds', type=float, default=5.0, help='time per way and size')
    p.add_argument('--json', help='also write the results here')
    args = p.parse_args()
    ways = [('prometheus_client MultiProcessCollector', through(MultiProcessCollector))]
    if speedups is not None:
        ways.append(('prometheus-client-python-speedups 0.1.0 merge', through(SpeedupsCollector)))
    ways.append(('multiproc_exporter.MultiProcessCollector', through(multiproc_exporter.MultiProcessCollector)))
    ways.append(('multiproc_exporter.generate_latest', lambda path: multiproc_exporter.generate_latest(path)))
    results = []
    with tempfile.TemporaryDirectory(prefix='mpe-bench-py-') as work:
        for size in [int(s) for s in args.sizes.split(',')]:
            directory = os.path.join(work, f'p{size}')
            fixture = json.loads(subprocess.run([args.gen, '--processes', str(size), '--dir', directory, '--clean'],
                                                check=True, capture_output=True, text=True).stdout)
            expected = through(MultiProcessCollector)(directory)
            for name, fn in ways:
                start = time.perf_counter()
                first_body = fn(directory)
                first = (time.perf_counter() - start) * 1e3
                median, p90, calls = time_calls(fn, directory, args.seconds, 2000)
                results.append({'writers': size, 'files': len(glob.glob(os.path.join(directory, '*.db'))),
                                'bytes': fixture.get('used_bytes'), 'way': name, 'first_ms': first,
                                'median_ms': median, 'p90_ms': p90, 'calls': calls,
                                'identical': first_body == expected})
                print(f'{size} writers, {name}: first {first:.2f} ms, median {median:.3f} ms, p90 {p90:.3f} ms '
                      f'({calls} calls), identical: {first_body == expected}', file=sys.stderr)
    print('| writers | way | first call (ms) | median (ms) | p90 (ms) | vs prometheus_client | same bytes |')
    print('|---:|---|---:|---:|---:|---:|---|')
    for r in results:
        base = next(x for x in results if x['writers'] == r['writers'] and x['way'].startswith('prometheus_client'))
        print(f"| {r['writers']} | {r['way']} | {r['first_ms']:.2f} | {r['median_ms']:.3f} | {r['p90_ms']:.3f} | "
              f"{base['median_ms'] / r['median_ms']:.1f}x | {'yes' if r['identical'] else 'no'} |")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
