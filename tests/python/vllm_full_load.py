"""Keeps a vLLM pod's PROMETHEUS_MULTIPROC_DIR live with the real prometheus_client.

Used by tests/queries_e2e.rs: every vLLM and LMCache metric that the Grafana
dashboards (grafana/dashboards/) and the Prometheus rules (deploy/prometheus/)
query is written, with vLLM's names, label sets, bucket sets and multiprocess
modes (vLLM 0.33.0 loggers.py, spec decoding, the NIXL and offloading KV
connectors; LMCache's PrometheusLogger), by several real processes in
multiprocess mode:

* ``--api-servers`` API-server processes, each with children for every engine
  (``model_name``, ``engine``), finishing a few requests per engine and tick and
  setting the ``mostrecent`` scheduler gauges;
* ``--workers`` GPU worker processes writing ``lmcache:*`` metrics
  (``model_name``, ``worker_id``, ``role``, ``served_model_name``).

``--profile healthy`` keeps every alert of deploy/prometheus/vllm.rules.yml
quiet; ``--profile overloaded`` makes all of them fire (KV cache above 95 %,
more than 10 requests waiting, queue times of 6-14 s, NIXL transfers failing).

The writers run for ``--max-seconds`` (or until Ctrl-C); with
``--stop-on-eof`` (what the test uses) also until standard input is closed,
and in any case until their parent process dies. When every process has
written its first tick, one JSON line is printed: ``{"ready": true,
"profile": {...}}`` with the ranges the profile draws from, for the test's
plausibility checks.

Usage: vllm_full_load.py DIR --model NAME --profile healthy|overloaded
       [--api-servers 2] [--engines 2] [--workers 1] [--interval 0.25]
       [--max-seconds 600] [--stop-on-eof]
"""
import argparse
import json
import multiprocessing
import os
import random
import signal
import sys
import threading
import time

# vllm/v1/metrics/buckets.py
REQUEST_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
       20.0, 40.0, 80.0]
KV_RESIDENCY = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60,
                120, 300, 600, 1200, 1800]
# NIXL connector (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py)
NIXL_XFER_TIME = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
NIXL_BYTES = [2 ** (10 + i) for i in range(1, 25, 2)]
# LMCache observability.py
LMCACHE_TIME = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0]
LMCACHE_SPEED = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]

FINISH_REASONS = ['stop', 'length', 'abort', 'error', 'repetition']
CACHED_SOURCES = ['device', 'host', 'p2p', 'disk', 'external_unspecified']
SPEC_POSITIONS = 3
KV_BYTES_PER_TOKEN = 131072  # Llama-3.1-8B, bf16

# (low, high) of what each profile draws, per engine and tick.
PROFILES = {
    'healthy': {
        'running': (5, 20), 'waiting': (0, 3), 'kv_cache_usage': (0.3, 0.7),
        'ttft': (0.02, 0.3), 'itl': (0.01, 0.05), 'queue_time': (0.01, 0.2),
        'e2e': (1.0, 8.0), 'prefix_hit_share': (0.3, 0.7), 'nixl_failures': (0, 0),
        'preemptions': (0, 1), 'offload_allocation_failures': (0, 0),
    },
    'overloaded': {
        'running': (50, 64), 'waiting': (20, 60), 'kv_cache_usage': (0.96, 0.995),
        'ttft': (2.0, 8.0), 'itl': (0.05, 0.2), 'queue_time': (6.0, 14.0),
        'e2e': (20.0, 60.0), 'prefix_hit_share': (0.05, 0.2), 'nixl_failures': (1, 2),
        'preemptions': (1, 3), 'offload_allocation_failures': (0, 1),
    },
}
# Acceptance probability of the draft token at each position.
SPEC_ACCEPT = [0.8, 0.6, 0.4]


def keep_running(stop, parent, deadline):
    return not stop.is_set() and os.getppid() == parent and time.time() < deadline


def ignore_ctrl_c():
    """Writers stop through `stop` (set by the parent on Ctrl-C), not by
    KeyboardInterrupt in the middle of a write."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def api_server(directory, model, profile, engines, interval, seed, stop, ready, parent, deadline):
    ignore_ctrl_c()
    os.environ['PROMETHEUS_MULTIPROC_DIR'] = directory
    from prometheus_client import Counter, Gauge, Histogram  # after the variable is set

    p = PROFILES[profile]
    rng = random.Random(seed)
    base = ['model_name', 'engine']

    def gauge(name, doc):
        return Gauge(name, doc, base, multiprocess_mode='mostrecent')

    def counter(name, doc, extra=()):
        return Counter(name, doc, base + list(extra))

    def histogram(name, doc, buckets):
        return Histogram(name, doc, base, buckets=buckets)

    running = gauge('vllm:num_requests_running', 'Number of requests in model execution batches.')
    waiting = gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.')
    kv_usage = gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.')
    prefix_queries = counter('vllm:prefix_cache_queries',
                             'Prefix cache queries, in terms of number of queried tokens.')
    prefix_hits = counter('vllm:prefix_cache_hits', 'Prefix cache hits, in terms of number of cached tokens.')
    ext_queries = counter('vllm:external_prefix_cache_queries',
                          'External prefix cache queries from KV connector cross-instance cache sharing, '
                          'in terms of number of queried tokens.')
    ext_hits = counter('vllm:external_prefix_cache_hits',
                       'External prefix cache hits from KV connector cross-instance cache sharing, '
                       'in terms of number of cached tokens.')
    preemptions = counter('vllm:num_preemptions', 'Cumulative number of preemption from the engine.')
    prompt_tokens = counter('vllm:prompt_tokens', 'Number of prefill tokens processed.')
    generation_tokens = counter('vllm:generation_tokens', 'Number of generation tokens processed.')
    success = counter('vllm:request_success', 'Count of successfully processed requests.',
                      ['finished_reason'])
    cached_by_source = counter('vllm:prompt_tokens_cached_by_source',
                               'Number of cached prompt tokens by source.', ['source'])
    ttft = histogram('vllm:time_to_first_token_seconds',
                     'Histogram of time to first token in seconds.', TTFT)
    itl = histogram('vllm:inter_token_latency_seconds', 'Histogram of inter-token latency in seconds.', ITL)
    tpot = histogram('vllm:request_time_per_output_token_seconds',
                     'Histogram of time_per_output_token_seconds per request.', ITL)
    e2e = histogram('vllm:e2e_request_latency_seconds',
                    'Histogram of e2e request latency in seconds.', REQUEST_LATENCY)
    queue = histogram('vllm:request_queue_time_seconds',
                      'Histogram of time spent in WAITING phase for request.', REQUEST_LATENCY)
    lifetime = histogram('vllm:kv_block_lifetime_seconds',
                         'Histogram of KV cache block lifetime from allocation to eviction.', KV_RESIDENCY)
    idle = histogram('vllm:kv_block_idle_before_evict_seconds',
                     'Histogram of idle time before KV cache block eviction.', KV_RESIDENCY)
    reuse_gap = histogram('vllm:kv_block_reuse_gap_seconds',
                          'Histogram of time gaps between consecutive KV cache block accesses.',
                          KV_RESIDENCY)
    drafts = counter('vllm:spec_decode_num_drafts', 'Number of spec decoding drafts.')
    draft_tokens = counter('vllm:spec_decode_num_draft_tokens', 'Number of draft tokens.')
    accepted = counter('vllm:spec_decode_num_accepted_tokens', 'Number of accepted tokens.')
    accepted_per_pos = counter('vllm:spec_decode_num_accepted_tokens_per_pos',
                               'Accepted tokens per draft position.', ['position'])
    nixl_time = histogram('vllm:nixl_xfer_time_seconds',
                          'Histogram of transfer duration for NIXL KV Cache transfers.', NIXL_XFER_TIME)
    nixl_bytes = histogram('vllm:nixl_bytes_transferred',
                           'Histogram of bytes transferred per NIXL KV Cache transfers.', NIXL_BYTES)
    nixl_failed = counter('vllm:nixl_num_failed_transfers', 'Number of failed NIXL KV Cache transfers.')
    nixl_failed_notifications = counter('vllm:nixl_num_failed_notifications',
                                        'Number of failed NIXL KV Cache notifications.')
    nixl_expired = counter('vllm:nixl_num_kv_expired_reqs',
                           'Number of requests that had their KV expire. '
                           'NOTE: This metric is tracked on the P instance.')
    store_bytes = counter('vllm:kv_offload_store_bytes', 'Total bytes stored from GPU to offload storage.')
    load_bytes = counter('vllm:kv_offload_load_bytes', 'Total bytes loaded from offload storage to GPU.')
    store_time = counter('vllm:kv_offload_store_time', 'Total time spent storing to offload storage.')
    load_time = counter('vllm:kv_offload_load_time', 'Total time spent loading from offload storage.')
    alloc_failures = counter('vllm:kv_offload_allocation_failure',
                             'Number of offload stores that failed to allocate blocks.')
    cpu_cache_usage = gauge('vllm:kv_offload_cpu_cache_usage_perc',
                            'Fraction of CPU offload cache blocks in use.')

    # vLLM creates every child up front (0 until the first increment).
    for e in range(engines):
        m = (model, str(e))
        for c in (prefix_queries, prefix_hits, ext_queries, ext_hits, preemptions, prompt_tokens,
                  generation_tokens, drafts, draft_tokens, accepted, nixl_failed,
                  nixl_failed_notifications, nixl_expired, store_bytes, load_bytes, store_time,
                  load_time, alloc_failures):
            c.labels(*m)
        for reason in FINISH_REASONS:
            success.labels(*m, reason)
        for source in CACHED_SOURCES:
            cached_by_source.labels(*m, source)
        for pos in range(SPEC_POSITIONS):
            accepted_per_pos.labels(*m, str(pos))

    def uniform(key):
        low, high = p[key]
        return rng.uniform(low, high)

    def integer(key):
        low, high = p[key]
        return rng.randint(low, high)

    first = True
    while keep_running(stop, parent, deadline):
        for e in range(engines):
            m = (model, str(e))
            running.labels(*m).set(integer('running'))
            waiting.labels(*m).set(integer('waiting'))
            kv_usage.labels(*m).set(uniform('kv_cache_usage'))
            cpu_cache_usage.labels(*m).set(rng.uniform(0.0, 0.3))
            preemptions.labels(*m).inc(integer('preemptions'))
            nixl_failed.labels(*m).inc(integer('nixl_failures'))
            alloc_failures.labels(*m).inc(integer('offload_allocation_failures'))
            for _ in range(2):  # requests finished this tick
                prompt_len = rng.randint(100, 2000)
                gen_len = rng.randint(20, 400)
                hits = int(prompt_len * uniform('prefix_hit_share'))
                ext_query = prompt_len - hits
                ext_hit = int(ext_query * rng.uniform(0.1, 0.5))
                prompt_tokens.labels(*m).inc(prompt_len)
                generation_tokens.labels(*m).inc(gen_len)
                success.labels(*m, rng.choice(FINISH_REASONS[:3])).inc()
                prefix_queries.labels(*m).inc(prompt_len)
                prefix_hits.labels(*m).inc(hits)
                ext_queries.labels(*m).inc(ext_query)
                ext_hits.labels(*m).inc(ext_hit)
                cached_by_source.labels(*m, 'device').inc(hits)
                cached_by_source.labels(*m, 'host').inc(ext_hit)
                ttft.labels(*m).observe(uniform('ttft'))
                for _ in range(3):
                    itl.labels(*m).observe(uniform('itl'))
                tpot.labels(*m).observe(uniform('itl'))
                e2e.labels(*m).observe(uniform('e2e'))
                queue.labels(*m).observe(uniform('queue_time'))
                lifetime.labels(*m).observe(rng.uniform(1.0, 120.0))
                idle.labels(*m).observe(rng.uniform(0.5, 60.0))
                reuse_gap.labels(*m).observe(rng.uniform(0.1, 30.0))
                n = max(1, gen_len // 3)
                drafts.labels(*m).inc(n)
                draft_tokens.labels(*m).inc(n * SPEC_POSITIONS)
                total = 0
                for pos, share in enumerate(SPEC_ACCEPT):
                    k = sum(1 for _ in range(n) if rng.random() < share)
                    accepted_per_pos.labels(*m, str(pos)).inc(k)
                    total += k
                accepted.labels(*m).inc(total)
                nixl_time.labels(*m).observe(rng.uniform(0.01, 0.2))
                nixl_bytes.labels(*m).observe(prompt_len * KV_BYTES_PER_TOKEN)
                stored = ext_query * KV_BYTES_PER_TOKEN
                loaded = ext_hit * KV_BYTES_PER_TOKEN
                store_bytes.labels(*m).inc(stored)
                store_time.labels(*m).inc(stored / rng.uniform(5e9, 20e9))
                load_bytes.labels(*m).inc(loaded)
                load_time.labels(*m).inc(loaded / rng.uniform(5e9, 20e9))
        if first:
            ready.set()
            first = False
        time.sleep(interval)


def lmcache_worker(directory, model, profile, worker_id, interval, seed, stop, ready, parent,
                   deadline):
    ignore_ctrl_c()
    os.environ['PROMETHEUS_MULTIPROC_DIR'] = directory
    from prometheus_client import Counter, Gauge, Histogram  # after the variable is set

    rng = random.Random(seed)
    names = ['model_name', 'worker_id', 'role', 'served_model_name']
    labels = (model, str(worker_id), 'worker', model)

    def counter(name, doc):
        return Counter(name, doc, names).labels(*labels)

    def histogram(name, doc, buckets):
        return Histogram(name, doc, names, buckets=buckets).labels(*labels)

    requested = counter('lmcache:num_requested_tokens', 'Total number of tokens requested from lmcache')
    hit = counter('lmcache:num_hit_tokens', 'Total number of tokens hit in lmcache')
    lookup_tokens = counter('lmcache:num_lookup_tokens', 'Total number of tokens requested in lookup from lmcache')
    lookup_hits = counter('lmcache:num_lookup_hits', 'Total number of tokens hit in lookup from lmcache')
    retrieve_requests = counter('lmcache:num_retrieve_requests', 'Total number of retrieve requests sent to lmcache')
    store_requests = counter('lmcache:num_store_requests', 'Total number of store requests sent to lmcache')
    lookup_requests = counter('lmcache:num_lookup_requests', 'Total number of lookup requests sent to lmcache')
    evictions = counter('lmcache:local_cpu_evict_count', 'Total number of evictions in local cpu backend')
    cache_usage = Gauge('lmcache:local_cache_usage', 'Local cache usage (bytes) of lmcache',
                        names, multiprocess_mode='sum').labels(*labels)
    retrieve_hit_rate = Gauge('lmcache:retrieve_hit_rate', 'Hit rate of lmcache retrieve requests since last log',
                              names, multiprocess_mode='livemostrecent').labels(*labels)
    time_to_retrieve = histogram('lmcache:time_to_retrieve', 'Time to retrieve from lmcache (seconds)',
                                 LMCACHE_TIME)
    time_to_store = histogram('lmcache:time_to_store', 'Time to store to lmcache (seconds)', LMCACHE_TIME)
    retrieve_speed = histogram('lmcache:retrieve_speed', 'Retrieve speed of lmcache (tokens per second)',
                               LMCACHE_SPEED)
    store_speed = histogram('lmcache:store_speed', 'Store speed of lmcache (tokens per second)', LMCACHE_SPEED)

    overloaded = profile == 'overloaded'
    cached = 0.0
    first = True
    while keep_running(stop, parent, deadline):
        tokens = rng.randint(500, 4000)
        found = int(tokens * rng.uniform(0.1, 0.6))
        requested.inc(tokens)
        hit.inc(found)
        lookup_tokens.inc(tokens)
        lookup_hits.inc(int(tokens * rng.uniform(0.1, 0.6)))
        retrieve_requests.inc(rng.randint(1, 3))
        store_requests.inc(rng.randint(1, 3))
        lookup_requests.inc(rng.randint(1, 3))
        evictions.inc(rng.randint(1, 4) if overloaded else rng.randint(0, 1))
        cached = min(20e9, cached + tokens * KV_BYTES_PER_TOKEN)
        cache_usage.set(cached)
        retrieve_hit_rate.set(found / tokens)
        time_to_retrieve.observe(rng.uniform(0.005, 0.2))
        time_to_store.observe(rng.uniform(0.005, 0.2))
        retrieve_speed.observe(rng.uniform(1000, 30000))
        store_speed.observe(rng.uniform(1000, 30000))
        if first:
            ready.set()
            first = False
        time.sleep(interval)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('dir')
    parser.add_argument('--model', required=True)
    parser.add_argument('--profile', choices=sorted(PROFILES), required=True)
    parser.add_argument('--api-servers', type=int, default=2)
    parser.add_argument('--engines', type=int, default=2)
    parser.add_argument('--workers', type=int, default=1)
    parser.add_argument('--interval', type=float, default=0.25)
    parser.add_argument('--max-seconds', type=float, default=600.0)
    parser.add_argument('--stop-on-eof', action='store_true',
                        help='also stop when standard input is closed')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()

    ctx = multiprocessing.get_context('spawn')
    stop = ctx.Event()
    parent = os.getpid()
    deadline = time.time() + args.max_seconds
    procs = []
    for i in range(args.api_servers):
        ready = ctx.Event()
        procs.append((ctx.Process(target=api_server, args=(
            args.dir, args.model, args.profile, args.engines, args.interval,
            args.seed * 1000 + i, stop, ready, parent, deadline)), ready))
    for w in range(args.workers):
        ready = ctx.Event()
        procs.append((ctx.Process(target=lmcache_worker, args=(
            args.dir, args.model, args.profile, w, args.interval,
            args.seed * 1000 + 500 + w, stop, ready, parent, deadline)), ready))
    for proc, _ in procs:
        proc.start()

    if args.stop_on_eof:
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    try:
        for proc, ready in procs:
            while not ready.wait(0.1):
                if not proc.is_alive():
                    sys.exit(f'writer exited with {proc.exitcode} before its first tick')
        print(json.dumps({'ready': True, 'profile': PROFILES[args.profile]}), flush=True)
        for proc, _ in procs:
            while proc.is_alive():
                proc.join(0.5)
    except KeyboardInterrupt:
        stop.set()
        for proc, _ in procs:
            proc.join()
    for proc, _ in procs:
        if proc.exitcode != 0:
            sys.exit(f'writer exited with {proc.exitcode}')


if __name__ == '__main__':
    main()
