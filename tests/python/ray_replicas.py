"""Writes every vLLM 0.33.0 metric with the real prometheus_client, one process per replica.

Used by tests/it/ray.rs: several real processes, each standing for one vLLM
engine (a Ray Serve replica, or a SkyRL inference-engine actor), write every
``vllm:`` family of vLLM 0.33.0's PrometheusStatLogger with its names, types,
label names, bucket sets and gauge multiprocess modes, as catalogued in
``src/demo/catalogue/vllm-0.33.0-stat-logger.json``, in multiprocess mode. Every
tick, each process adds to every counter, observes into every histogram and
sets every gauge, with values that depend only on the replica and the tick, so
two runs write the same files.

Label values: ``model_name`` is ``--model``; ``engine`` is ``0`` in every
process (each replica runs its own engine 0, as under Ray Serve), or the
replica's index with ``--distinct-engines`` (one pod's data-parallel engines);
any other label takes the first value the catalogue lists for it, or ``x``.

With ``--worker-ids``, the files are named after a Ray-style worker id
(``prometheus_client.values.MultiProcessValue(process_identifier=...)``), 56
hexadecimal digits derived from the replica index, instead of the pid: this is
how a process running in Ray names its files after Ray's ``WorkerId``.

With ``--serve-deployment NAME``, each process also counts its requests in Ray
Serve's per-replica ``serve_deployment_request_counter`` (labels
``deployment``, ``replica``, ``route``, ``application``), standing in for the
Ray Serve replica the engine would run in: Ray's Serve-LLM dashboard joins
every vLLM panel with that series on ``WorkerId``.

Usage: ray_replicas.py DIR --model NAME [--replicas 3] [--ticks T] [--stop-on-eof]
       [--interval 0.25] [--distinct-engines] [--worker-ids] [--serve-deployment NAME]

With ``--ticks`` alone, the processes write that many ticks and exit, and one
JSON line ``{"writers": [...]}`` (each writer's id as it appears in the file
names) is printed at the end. With ``--stop-on-eof``, they run until standard
input is closed (or their parent dies), and the JSON line is printed once
every process has written its first tick (with ``--ticks`` too: its last,
after which they stay alive without writing).
"""
import argparse
import json
import multiprocessing
import os
import sys
import threading
import time

CATALOGUE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'src', 'demo',
                         'catalogue', 'vllm-0.33.0-stat-logger.json')


def worker_id(index):
    """A Ray-style WorkerId (28 bytes, hexadecimal) for a replica."""
    return ('%02x' % (index + 1)) * 28


def observation(buckets, replica, tick):
    """A value inside the bucket set, moving through it with the tick."""
    finite = [b for b in buckets if b != float('inf')]
    if not finite:
        return float(tick)
    bound = finite[(replica + tick) % len(finite)]
    return bound * 0.75


def replica(directory, index, model, ticks, hold, interval, distinct, ids, deployment, queue, stop,
            parent):
    os.environ['PROMETHEUS_MULTIPROC_DIR'] = directory
    import prometheus_client.values as values  # after the variable is set
    if ids:
        values.ValueClass = values.MultiProcessValue(process_identifier=lambda: worker_id(index))
    from prometheus_client import Counter, Gauge, Histogram

    with open(CATALOGUE) as f:
        catalogue = [m for m in json.load(f) if m['name'].startswith('vllm:')]
    metrics = []
    for m in catalogue:
        labels = m['labels']
        if m['type'] == 'counter':
            metric = Counter(m['name'], m['help'], labels)
        elif m['type'] == 'gauge':
            metric = Gauge(m['name'], m['help'], labels, multiprocess_mode=m['mode'])
        elif m['type'] == 'histogram':
            metric = Histogram(m['name'], m['help'], labels, buckets=m['buckets'])
        else:
            continue
        values_of = {}
        for label in labels:
            if label == 'model_name':
                values_of[label] = model
            elif label == 'engine':
                values_of[label] = str(index) if distinct else '0'
            else:
                listed = m.get('label_values', {}).get(label) or ['x']
                values_of[label] = str(listed[0])
        metrics.append((m, metric.labels(**values_of) if labels else metric))

    def tick(t):
        if serve is not None:
            serve.inc(index + 1)
        for m, child in metrics:
            if m['type'] == 'counter':
                child.inc(10 * (index + 1) + t)
            elif m['type'] == 'gauge':
                child.set((index + 1) / 10 + t / 100)
            else:
                child.observe(observation(m['buckets'], index, t))

    serve = None
    if deployment:
        # What Ray Serve records for every replica (serve/_private/replica.py,
        # `serve_deployment_request_counter`), which Ray's Serve-LLM dashboard
        # joins the vLLM series with, on WorkerId.
        requests = Counter('serve_deployment_request_counter',
                           'The number of queries that have been processed in this replica.',
                           ['deployment', 'replica', 'route', 'application'])
        serve = requests.labels(deployment, '%s#%d' % (deployment, index), '/v1', 'llm_app')

    mine = worker_id(index) if ids else str(os.getpid())
    t = 0
    while True:
        t += 1
        tick(t)
        if t == (ticks or 1):
            queue.put(mine)
        if ticks and t >= ticks:
            break
        if stop.is_set() or os.getppid() != parent:
            return
        time.sleep(interval)
    while hold and not stop.is_set() and os.getppid() == parent:
        time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('dir')
    parser.add_argument('--model', required=True)
    parser.add_argument('--replicas', type=int, default=3)
    parser.add_argument('--ticks', type=int, default=0)
    parser.add_argument('--stop-on-eof', action='store_true')
    parser.add_argument('--interval', type=float, default=0.25)
    parser.add_argument('--distinct-engines', action='store_true')
    parser.add_argument('--worker-ids', action='store_true')
    parser.add_argument('--serve-deployment', default='')
    args = parser.parse_args()
    if not args.ticks and not args.stop_on_eof:
        parser.error('give --ticks, --stop-on-eof or both')
    ctx = multiprocessing.get_context('spawn')
    queue, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=replica,
                         args=(args.dir, i, args.model, args.ticks, args.stop_on_eof, args.interval,
                               args.distinct_engines, args.worker_ids, args.serve_deployment, queue, stop,
                               os.getpid()))
             for i in range(args.replicas)]
    for p in procs:
        p.start()
    writers = [queue.get(timeout=60) for _ in procs]
    if not args.stop_on_eof:
        for p in procs:
            p.join()
        print(json.dumps({'writers': sorted(writers)}), flush=True)
        return
    print(json.dumps({'writers': sorted(writers)}), flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    while any(p.is_alive() for p in procs):
        time.sleep(0.1)


if __name__ == '__main__':
    main()
