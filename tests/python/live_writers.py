"""Live writers for tests/it/live_writers.rs: real processes writing prometheus_client 0.26.0 metrics in multiprocess mode
at a high rate, starting and exiting, while the exporter is scraped.

    live_writers.py DIR --seconds 60 --processes 4 --lifetime 2:8 --rate 20000 --seed 1

The parent keeps --processes writer processes running for --seconds. Each writer lives a random lifetime (seconds,
from --lifetime MIN:MAX), then exits; the parent then calls ``mark_process_dead(pid)`` for it, as gunicorn's
``child_exit`` hook does, and starts a new one. Writers still running at the end stop writing and exit without being
marked dead (their live gauges stay, like processes that stopped but were never reaped).

Each writer performs about --rate operations per second on:

* ``lw_tokens_total{series}``: counter, integer increments, new ``series`` values added all the time, so the
  counter file grows past 64 KiB and prometheus_client grows and remaps it;
* ``lw_gauge_<mode>{series}``: one gauge per multiprocess mode (all ten), set / inc / dec;
* ``lw_latency_seconds{route}``: histogram, observations that are multiples of 1/8 (exact sums in any order), new
  routes added all the time (the histogram file grows past 64 KiB too);
* ``lw_size_bytes{route}``: summary, non-negative integer observations.

Counters, histogram buckets, ``_count`` and ``_sum`` therefore never decrease across scrapes (files of dead
processes stay; only live-gauge files are deleted). Prints one JSON line with what was done.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

MODES = ('all', 'liveall', 'min', 'livemin', 'max', 'livemax', 'sum', 'livesum', 'mostrecent', 'livemostrecent')
MOSTRECENT = ('mostrecent', 'livemostrecent')
BUCKETS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
MAX_SERIES = 1500
MAX_ROUTES = 150


def worker(directory, seed, lifetime, until, rate):
    """One writer process; prints its operation count when done."""
    os.environ['PROMETHEUS_MULTIPROC_DIR'] = directory
    from prometheus_client import Counter, Gauge, Histogram, Summary  # after the variable is set

    rng = random.Random(seed)
    tokens = Counter('lw_tokens', 'Tokens processed.', ['series'])
    gauges = [(mode, Gauge(f'lw_gauge_{mode}', f'A gauge in {mode} mode.', ['series'], multiprocess_mode=mode))
              for mode in MODES]
    latency = Histogram('lw_latency_seconds', 'Request latency.', ['route'], buckets=BUCKETS)
    size = Summary('lw_size_bytes', 'Request size.', ['route'])
    start = time.time()
    end = min(start + lifetime, until)
    ops = 0
    while True:
        now = time.time()
        if now >= end:
            break
        elapsed = now - start
        # New label values all the time: the files keep growing.
        series = rng.randrange(min(MAX_SERIES, 1 + int(elapsed * 600)))
        route = rng.randrange(min(MAX_ROUTES, 1 + int(elapsed * 60)))
        for _ in range(100):
            kind = rng.randrange(4)
            if kind == 0:
                tokens.labels(str(series)).inc(rng.randrange(1, 5))
                series = rng.randrange(min(MAX_SERIES, 1 + int(elapsed * 600)))
            elif kind == 1:
                mode, gauge = gauges[rng.randrange(len(gauges))]
                child = gauge.labels(str(rng.randrange(8)))
                op = rng.randrange(3)
                if op == 0 or mode in MOSTRECENT:
                    child.set(rng.randrange(-1000, 1000) / 4)
                elif op == 1:
                    child.inc(rng.randrange(10))
                else:
                    child.dec(rng.randrange(10))
            elif kind == 2:
                latency.labels(f'/r{route}').observe(rng.randrange(0, 80) / 8)
            else:
                size.labels(f'/r{route}').observe(rng.randrange(0, 4096))
        ops += 100
        behind = ops / rate - (time.time() - start)
        if behind > 0:
            time.sleep(behind)
    print(json.dumps({'ops': ops}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('dir')
    parser.add_argument('--seconds', type=float, default=60)
    parser.add_argument('--processes', type=int, default=4)
    parser.add_argument('--lifetime', default='2:8')
    parser.add_argument('--rate', type=float, default=20000, help='operations per second per process')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--worker', nargs=3, metavar=('SEED', 'LIFETIME', 'UNTIL'), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        seed, lifetime, until = args.worker
        worker(args.dir, int(seed), float(lifetime), float(until), args.rate)
        return

    from prometheus_client.multiprocess import mark_process_dead

    rng = random.Random(args.seed)
    low, high = (float(x) for x in args.lifetime.split(':'))
    until = time.time() + args.seconds
    running = []
    started = marked_dead = ops = 0

    def start():
        nonlocal started
        command = [sys.executable, os.path.abspath(__file__), args.dir, '--rate', str(args.rate),
                   '--worker', str(rng.randrange(1 << 30)), str(rng.uniform(low, high)), str(until)]
        running.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
        started += 1

    def finish(proc):
        nonlocal ops
        out, _ = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f'writer {proc.pid} exited with {proc.returncode}')
        ops += json.loads(out.strip().splitlines()[-1])['ops']

    for _ in range(args.processes):
        start()
    while time.time() < until:
        time.sleep(0.05)
        for proc in [p for p in running if p.poll() is not None]:
            running.remove(proc)
            finish(proc)
            if time.time() < until:
                mark_process_dead(proc.pid, args.dir)
                marked_dead += 1
                start()
    for proc in running:
        finish(proc)
    sizes = [os.path.getsize(os.path.join(args.dir, n)) for n in os.listdir(args.dir) if n.endswith('.db')]
    print(json.dumps({
        'processes': started,
        'marked_dead': marked_dead,
        'operations': ops,
        'files': len(sizes),
        'files_over_64k': sum(1 for s in sizes if s > 65536),
        'largest_file': max(sizes, default=0),
    }), flush=True)


if __name__ == '__main__':
    main()
