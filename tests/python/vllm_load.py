"""Writes vLLM-named metrics with the real prometheus_client in multiprocess mode.

Used by the end-to-end tests: several real processes (spawned, each with its own
pid, as vLLM's API servers are) write a fixed number of ticks, so the final
totals are known exactly:

* ``vllm:prompt_tokens_total{model_name, engine}``: +10 per tick per process
* ``vllm:kv_block_lifetime_seconds{model_name}``: one observation of 0.3 s per tick
  (vLLM's ``kv_cache_residency`` buckets)
* ``vllm:num_requests_running{model_name}`` (``mostrecent``): the tick number of
  the last tick written by any process
* ``lmcache:num_hit_tokens_total``: +1 per tick per process

Usage: vllm_load.py DIR --processes N --ticks T --interval SECONDS
Prints one JSON line with the expected totals when every process is done.
"""
import argparse
import json
import multiprocessing
import os
import sys
import time

KV_CACHE_RESIDENCY = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10,
                      20, 30, 60, 120, 300, 600, 1200, 1800]


def writer(directory, index, ticks, interval):
    os.environ['PROMETHEUS_MULTIPROC_DIR'] = directory
    from prometheus_client import Counter, Gauge, Histogram  # after the variable is set

    prompt = Counter('vllm:prompt_tokens', 'Number of prefill tokens processed.',
                     ['model_name', 'engine'])
    lifetime = Histogram('vllm:kv_block_lifetime_seconds', 'KV cache block lifetime.',
                         ['model_name'], buckets=KV_CACHE_RESIDENCY)
    running = Gauge('vllm:num_requests_running', 'Number of requests in model execution batches.',
                    ['model_name'], multiprocess_mode='mostrecent')
    hits = Counter('lmcache:num_hit_tokens', 'Number of hit tokens.')
    for tick in range(1, ticks + 1):
        prompt.labels('test-model', str(index)).inc(10)
        lifetime.labels('test-model').observe(0.3)
        running.labels('test-model').set(tick)
        hits.inc(1)
        time.sleep(interval)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('dir')
    parser.add_argument('--processes', type=int, default=2)
    parser.add_argument('--ticks', type=int, default=30)
    parser.add_argument('--interval', type=float, default=0.1)
    args = parser.parse_args()
    ctx = multiprocessing.get_context('spawn')
    procs = [ctx.Process(target=writer, args=(args.dir, i, args.ticks, args.interval))
             for i in range(args.processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(f'writer exited with {p.exitcode}')
    print(json.dumps({
        'prompt_tokens_total': 10.0 * args.ticks * args.processes,
        'kv_block_lifetime_count': float(args.ticks * args.processes),
        'num_requests_running': float(args.ticks),
        'lmcache_hits_total': float(args.ticks * args.processes),
    }), flush=True)


if __name__ == '__main__':
    main()
