"""A server that sets up its multiprocess directory as SGLang and TensorRT-LLM do.

Usage: temporary_dir_server.py PATTERN RUN

PATTERN is `sglang` (SGLang 0.5.23's `set_prometheus_multiproc_dir()` in
`python/sglang/srt/utils/common.py`) or `trtllm` (TensorRT-LLM's copy of it in
`tensorrt_llm/utils/utils.py`). Both do the same, re-implemented here: when
PROMETHEUS_MULTIPROC_DIR is set, a `tempfile.TemporaryDirectory` is created
under it (and left empty: the variable keeps pointing at the directory
itself); when it is not, a `TemporaryDirectory()` in the system's temporary
directory (TMPDIR) becomes PROMETHEUS_MULTIPROC_DIR. Then, as SGLang does,
scheduler processes (two ranks, started with multiprocessing after the
variable is set) and the tokenizer manager (this process) write some of
SGLang's families with prometheus_client; values are scaled by RUN so that
two runs are told apart.

Prints `READY <directory written>` once every writer has written, then waits.
SIGTERM exits cleanly (the schedulers stop, the TemporaryDirectory is
removed by its finalizer); SIGKILL of the process group leaves everything.
"""

import multiprocessing
import os
import signal
import sys
import tempfile

PATTERN = sys.argv[1]
RUN = int(sys.argv[2])
LABELS = {"model_name": "qwen", "engine_type": "unified"}

prometheus_multiproc_dir = None


def set_prometheus_multiproc_dir():
    global prometheus_multiproc_dir
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        prometheus_multiproc_dir = tempfile.TemporaryDirectory(
            dir=os.environ["PROMETHEUS_MULTIPROC_DIR"]
        )
    else:
        prometheus_multiproc_dir = tempfile.TemporaryDirectory()
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = prometheus_multiproc_dir.name


def scheduler(tp_rank, ready, stop):
    from prometheus_client import Gauge

    labels = dict(LABELS, tp_rank=str(tp_rank), pp_rank="0", moe_ep_rank="0")
    gauges = {}
    for name, documentation in [
        ("sglang:num_running_reqs", "The number of running requests."),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
        ("sglang:gen_throughput", "The generation throughput (token/s)."),
        ("sglang:cache_hit_rate", "The prefix cache hit rate."),
        ("sglang:token_usage", "The token usage."),
    ]:
        gauges[name] = Gauge(
            name=name,
            documentation=documentation,
            labelnames=labels.keys(),
            multiprocess_mode="mostrecent",
        )
    gauges["sglang:num_running_reqs"].labels(**labels).set(3 * RUN + tp_rank)
    gauges["sglang:num_queue_reqs"].labels(**labels).set(RUN)
    gauges["sglang:gen_throughput"].labels(**labels).set(100.5 * RUN)
    gauges["sglang:cache_hit_rate"].labels(**labels).set(0.25)
    gauges["sglang:token_usage"].labels(**labels).set(0.125 * RUN)
    ready.set()
    stop.wait()


def main():
    set_prometheus_multiproc_dir()
    written = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    schedulers = []
    for rank in (0, 1):
        ready = context.Event()
        process = context.Process(target=scheduler, args=(rank, ready, stop))
        process.start()
        ready.wait()
        schedulers.append(process)

    from prometheus_client import Counter, Histogram

    prompt = Counter(
        name="sglang:prompt_tokens_total",
        documentation="Number of prefill tokens processed.",
        labelnames=list(LABELS.keys()) + ["is_streaming"],
    )
    generation = Counter(
        name="sglang:generation_tokens_total",
        documentation="Number of generation tokens processed.",
        labelnames=list(LABELS.keys()) + ["is_streaming"],
    )
    ttft = Histogram(
        name="sglang:time_to_first_token_seconds",
        documentation="Histogram of time to first token in seconds.",
        labelnames=[*LABELS.keys(), "is_streaming"],
        buckets=[0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400],
    )
    prompt.labels(**LABELS, is_streaming="true").inc(1000 * RUN)
    generation.labels(**LABELS, is_streaming="true").inc(250 * RUN)
    ttft.labels(**LABELS, is_streaming="true").observe(0.3 * RUN)

    def terminate(*_):
        stop.set()
        for process in schedulers:
            process.join()
        sys.exit(0)

    signal.signal(signal.SIGTERM, terminate)
    print(f"READY {written}", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
