"""Differential test of the Python package: random multiprocess directories (tests/python/differential.py's
scenarios, written by the real prometheus_client) read through prometheus_client's MultiProcessCollector and
through multiproc_exporter's, through both entry points:

* ``multiproc_exporter.MultiProcessCollector(registry, path)``: ``collect()`` yields Metric objects equal to
  prometheus_client's (same names, types, help, samples in the same order, each label dict in the same order,
  the same float values; see ``comparable``), and prometheus_client's text and OpenMetrics ``generate_latest`` of a registry holding it
  are the same bytes;
* ``multiproc_exporter.generate_latest(path, openmetrics)``: the same bytes as prometheus_client's.

    python tests/python/package/dropin_differential.py --seed 1 --count 200

Needs the wheel installed (scripts/test-python-package). A scenario on which prometheus_client itself raises (in
glob order) is regenerated. Last line: ``dropin differential: N passed, M failed``; exit 1 if M > 0.
"""

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
import differential  # noqa: E402

import multiproc_exporter  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client import multiprocess  # noqa: E402
from prometheus_client.openmetrics import exposition as om  # noqa: E402


def comparable(metrics):
    """Metrics as plain values, stricter than ``Metric.__eq__``: NaN equals NaN (a float NaN is never equal to
    itself, so prometheus_client's own Metrics of a NaN sample are unequal), -0.0 differs from 0.0, label order and
    the value's type count."""
    return [(m.name, m.documentation, m.type, m.unit,
             [(s.name, list(s.labels.items()), type(s.value).__name__, repr(s.value), s.timestamp, s.exemplar,
               s.native_histogram) for s in m.samples])
            for m in metrics]


def python_side(path):
    registry = CollectorRegistry()
    collector = multiprocess.MultiProcessCollector(registry, path=path)
    metrics = list(collector.collect())
    return metrics, generate_latest(registry), om.generate_latest(registry)


def ours(path):
    registry = CollectorRegistry()
    collector = multiproc_exporter.MultiProcessCollector(registry, path=path)
    metrics = list(collector.collect())
    return metrics, generate_latest(registry), om.generate_latest(registry)


def scenario(seed, index, files_dir):
    """Writes scenario (seed, index) into files_dir; returns prometheus_client's results (in glob order)."""
    return differential.generate_until(seed, index, files_dir, lambda *_: python_side(files_dir))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--count', type=int, default=200)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='mpe-dropin-')
    passed = failed = 0
    for index in range(args.count):
        files_dir = os.path.join(workdir, str(index))
        expected = scenario(args.seed, index, files_dir)
        actual = ours(files_dir)
        direct = (multiproc_exporter.generate_latest(files_dir),
                  multiproc_exporter.generate_latest(files_dir, openmetrics=True))
        problems = []
        if comparable(actual[0]) != comparable(expected[0]):
            problems.append('collect() metrics differ')
        if actual[1] != expected[1]:
            problems.append('generate_latest (text) through the collector differs')
        if actual[2] != expected[2]:
            problems.append('OpenMetrics generate_latest through the collector differs')
        if direct[0] != expected[1]:
            problems.append('multiproc_exporter.generate_latest (text) differs')
        if direct[1] != expected[2]:
            problems.append('multiproc_exporter.generate_latest(openmetrics=True) differs')
        if problems:
            failed += 1
            print(f'scenario {index} (seed {args.seed}, kept in {files_dir}): ' + '; '.join(problems))
            if failed == 1:
                print('--- expected (text)\n' + '\n'.join(differential.show(expected[1])))
                print('--- actual (text)\n' + '\n'.join(differential.show(actual[1])))
        else:
            passed += 1
            shutil.rmtree(files_dir)
    print(f'dropin differential: {passed} passed, {failed} failed')
    sys.exit(1 if failed or passed < args.count else 0)


if __name__ == '__main__':
    main()
