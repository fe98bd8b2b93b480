"""Records vLLM 0.33.0's metrics through a real Ray 2.60.0 head AND through prometheus_client.

Used by tests/it/ray_agent.rs, and documented in docs/ray.md (it is also how the
capture in tests/data/ray-2.60.0-capture/ was made). It starts a local Ray head
(``ray.init``, no dashboard, metrics reported every second) and ``--actors``
Ray actors, each a Ray worker process standing for one vLLM engine. Every actor
records every ``vllm:`` counter, gauge and histogram of vLLM 0.33.0's
PrometheusStatLogger (``src/demo/catalogue/vllm-0.33.0-stat-logger.json``) for a
few ticks, with the same values two ways:

* through ``ray.util.metrics`` exactly as vLLM's ``RayPrometheusStatLogger``
  wrappers do (``vllm/v1/metrics/ray_wrappers.py``): the name with every
  character outside ``[a-zA-Z0-9_]`` replaced by ``_``, the tag keys plus
  ``ReplicaId`` (``""`` outside Ray Serve), gauges without a multiprocess mode,
  histograms with vLLM's buckets as boundaries, ``inc(0)`` skipped;
* through prometheus_client 0.26.0 in multiprocess mode into ``OUT/multiproc``
  (files named after the actor's pid, as vLLM's own files are), with vLLM's
  names, labels, buckets and gauge modes.

When Ray's metrics agent exports every family for every actor, its exposition
(``MetricsExportPort`` of the node, as SkyRL discovers it) is written to
``OUT/ray_metrics.txt`` and what the exporter needs to know to label its
series as Ray does to ``OUT/ray.json``: each actor's pid and Ray worker id, the
node address, the session name and directory, the Ray version. Then one JSON
line (the same as ``ray.json``) is printed; the actors stay alive (their
gauges would be dropped as a dead writer's) until standard input is closed,
and Ray is shut down.

Usage: ray_agent.py OUT [--actors 2] [--ticks 3]   (with the Python of target/ray-venv)
"""
import argparse
import json
import os
import re
import sys
import time
import urllib.request

CATALOGUE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'src', 'demo',
                         'catalogue', 'vllm-0.33.0-stat-logger.json')
TIMEOUT = 90


def label_values(metric, index):
    values = {}
    for label in metric['labels']:
        if label == 'model_name':
            values[label] = 'm'
        elif label == 'engine':
            values[label] = '0'
        else:
            listed = metric.get('label_values', {}).get(label) or ['x']
            values[label] = str(listed[0])
    return values


def observation(buckets, index, tick):
    bound = buckets[(index + tick) % len(buckets)]
    return bound * 0.75


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out')
    parser.add_argument('--actors', type=int, default=2)
    parser.add_argument('--ticks', type=int, default=3)
    args = parser.parse_args()
    multiproc = os.path.join(os.path.abspath(args.out), 'multiproc')
    os.makedirs(multiproc, exist_ok=True)
    with open(CATALOGUE) as f:
        catalogue = [m for m in json.load(f)
                     if m['name'].startswith('vllm:') and m['type'] in ('counter', 'gauge', 'histogram')]

    import ray
    started = time.time()
    ray.init(include_dashboard=False, num_cpus=args.actors, log_to_driver=False,
             _system_config={'metrics_report_interval_ms': 1000})

    @ray.remote(num_cpus=1)
    class Engine:
        def record(self, index, ticks):
            import prometheus_client
            from ray.util import metrics as ray_metrics
            assert os.environ.get('PROMETHEUS_MULTIPROC_DIR') == multiproc

            def sanitised(name):  # RayPrometheusMetric._get_sanitized_opentelemetry_name
                return re.sub(r'[^a-zA-Z0-9_]', '_', name)

            both = []
            for m in catalogue:
                tag_keys = tuple(m['labels']) + ('ReplicaId',)
                tags = dict(label_values(m, index), ReplicaId='')
                if m['type'] == 'counter':
                    ray_metric = ray_metrics.Counter(sanitised(m['name']), description=m['help'],
                                                     tag_keys=tag_keys)
                    prom = prometheus_client.Counter(m['name'], m['help'], m['labels'])
                elif m['type'] == 'gauge':
                    ray_metric = ray_metrics.Gauge(sanitised(m['name']), description=m['help'],
                                                   tag_keys=tag_keys)
                    prom = prometheus_client.Gauge(m['name'], m['help'], m['labels'],
                                                   multiprocess_mode=m['mode'])
                else:
                    ray_metric = ray_metrics.Histogram(sanitised(m['name']), description=m['help'],
                                                       boundaries=m['buckets'], tag_keys=tag_keys)
                    prom = prometheus_client.Histogram(m['name'], m['help'], m['labels'],
                                                       buckets=m['buckets'])
                child = prom.labels(**label_values(m, index)) if m['labels'] else prom
                both.append((m, ray_metric, tags, child))
            for tick in range(1, ticks + 1):
                for m, ray_metric, tags, child in both:
                    if m['type'] == 'counter':
                        value = 10 * (index + 1) + tick
                        ray_metric.inc(value, tags=tags)
                        child.inc(value)
                    elif m['type'] == 'gauge':
                        value = (index + 1) / 10 + tick / 100
                        ray_metric.set(value, tags=tags)
                        child.set(value)
                    else:
                        value = observation(m['buckets'], index, tick)
                        ray_metric.observe(value, tags=tags)
                        child.observe(value)
            return {'pid': os.getpid(), 'worker_id': ray.get_runtime_context().get_worker_id()}

    env = {'env_vars': {'PROMETHEUS_MULTIPROC_DIR': multiproc}}
    actors = [Engine.options(runtime_env=env).remote() for _ in range(args.actors)]
    workers = ray.get([a.record.remote(i, args.ticks) for i, a in enumerate(actors)], timeout=TIMEOUT)
    node = ray.nodes()[0]
    url = 'http://%s:%d/metrics' % ('127.0.0.1', node['MetricsExportPort'])
    families = {'ray_' + re.sub(r'[^a-zA-Z0-9_]', '_', m['name']) + ('_total' if m['type'] == 'counter' else '')
                for m in catalogue}
    deadline = time.time() + TIMEOUT
    while True:
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError as e:
            text = ''
            error = e
        declared = set(re.findall(r'^# TYPE (ray_vllm_\w+) ', text, re.M))
        ids = {w['worker_id'] for w in workers}
        seen = {f: set(re.findall(r'^%s(?:_bucket)?\{[^}]*WorkerId="([0-9a-f]+)"' % f, text, re.M))
                for f in families}
        if declared >= families and all(seen[f] >= ids for f in families):
            break
        if time.time() > deadline:
            missing = sorted(f for f in families if not seen.get(f, set()) >= ids)
            sys.exit('Ray never exported %d families for every actor: %s' % (len(missing), missing[:10]))
        time.sleep(0.5)
    context = ray.get_runtime_context()
    session_dir = ray._private.worker.global_worker.node.get_session_dir_path()
    info = {
        'workers': workers,
        'node_address': node['NodeManagerAddress'],
        'session_name': os.path.basename(session_dir),
        'session_dir': session_dir,
        'logs': os.path.join(session_dir, 'logs'),
        'ray_version': ray.__version__,
        'job_id': context.get_job_id(),
        'seconds': round(time.time() - started, 1),
    }
    with open(os.path.join(args.out, 'ray_metrics.txt'), 'w') as f:
        f.write(text)
    with open(os.path.join(args.out, 'ray.json'), 'w') as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info), flush=True)
    sys.stdin.read()
    ray.shutdown()


if __name__ == '__main__':
    main()
