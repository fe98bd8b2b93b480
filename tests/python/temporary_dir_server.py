"""A server that sets up its multiprocess directory as SGLang and TensorRT-LLM do.

Usage: temporary_dir_server.py PATTERN RUN [overloaded]

PATTERN is `sglang` (SGLang 0.5.23's `set_prometheus_multiproc_dir()` in
`python/sglang/srt/utils/common.py`) or `trtllm` (TensorRT-LLM's copy of it in
`tensorrt_llm/utils/utils.py`). Both do the same, re-implemented here: when
PROMETHEUS_MULTIPROC_DIR is set, a `tempfile.TemporaryDirectory` is created
under it (and left empty: the variable keeps pointing at the directory
itself); when it is not, a `TemporaryDirectory()` in the system's temporary
directory (TMPDIR) becomes PROMETHEUS_MULTIPROC_DIR. Then, as SGLang does,
scheduler processes (two ranks, started with multiprocessing after the
variable is set) and the tokenizer manager (this process) write every family of
SGLang's catalogue (src/demo/catalogue/sglang-0.5.23-metrics-collector.json:
SGLang 0.5.23's own definitions) that its collector defines, with
prometheus_client; values are scaled by RUN so that two runs are told apart.

With `overloaded` (the monitoring tests), the schedulers report a long queue
and a nearly full KV cache, and the tokenizer manager keeps serving requests
(counters rising, every first token after 15 s) every half second.

Prints `READY <directory written>` once every writer has written, then waits.
SIGTERM exits cleanly (the schedulers stop, the TemporaryDirectory is
removed by its finalizer); SIGKILL of the process group leaves everything.
"""

import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time

PATTERN = sys.argv[1]
RUN = int(sys.argv[2])
OVERLOADED = sys.argv[3:] == ["overloaded"]
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


CATALOGUE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../src/demo/catalogue/sglang-0.5.23-metrics-collector.json",
)
# Values of the families the tests look at; the others get RUN-scaled ones.
VALUES = {
    "sglang:prompt_tokens": 1000,
    "sglang:generation_tokens": 250,
    "sglang:num_queue_reqs": 12 if OVERLOADED else 1,
    "sglang:token_usage": 0.97 if OVERLOADED else 0.125,
}


def write_families(collector, labels):
    """Writes every family of `collector` in SGLang's catalogue (names,
    types, label names, buckets and gauge modes of SGLang 0.5.23, extracted
    by scripts/sglang-catalogue.py), with `labels` and `x` for any other
    label. Returns the metrics by family name."""
    from prometheus_client import Counter, Gauge, Histogram, Summary

    with open(CATALOGUE) as f:
        catalogue = json.load(f)
    metrics = {}
    for i, family in enumerate(f for f in catalogue if f["collector"] == collector):
        kind = family["type"]
        if family["labels"] is None or (kind == "histogram" and family["buckets"] is None):
            continue  # computed at run time in SGLang: not in the catalogue
        names = family["labels"]
        values = {n: labels.get(n, "x") for n in names}
        value = VALUES.get(family["name"], (i % 7 + 1) * 0.5) * RUN
        common = dict(name=family["name"], documentation=family["help"], labelnames=names)
        if kind == "counter":
            metric = Counter(**common)
            (metric.labels(**values) if names else metric).inc(value)
        elif kind == "gauge":
            metric = Gauge(multiprocess_mode=family["mode"], **common)
            (metric.labels(**values) if names else metric).set(value)
        elif kind == "histogram":
            metric = Histogram(buckets=family["buckets"], **common)
            (metric.labels(**values) if names else metric).observe(value)
        else:
            metric = Summary(**common)
            (metric.labels(**values) if names else metric).observe(value)
        metrics[family["name"]] = metric.labels(**values) if names else metric
    return metrics


def scheduler(tp_rank, ready, stop):
    labels = dict(LABELS, tp_rank=str(tp_rank), pp_rank="0", moe_ep_rank="0", is_streaming="true")
    write_families("SchedulerMetricsCollector", labels)
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

    tokenizer = write_families("TokenizerMetricsCollector", dict(LABELS, is_streaming="true"))

    def terminate(*_):
        stop.set()
        for process in schedulers:
            process.join()
        sys.exit(0)

    signal.signal(signal.SIGTERM, terminate)
    print(f"READY {written}", flush=True)
    while OVERLOADED:
        time.sleep(0.5)
        tokenizer["sglang:prompt_tokens"].inc(100)
        tokenizer["sglang:cached_tokens"].inc(50)
        tokenizer["sglang:generation_tokens"].inc(20)
        tokenizer["sglang:time_to_first_token_seconds"].observe(15.0)
        tokenizer["sglang:inter_token_latency_seconds"].observe(0.02)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
