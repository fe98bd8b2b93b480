#!/usr/bin/env python3
"""Issue 47's stall scenario: Prometheus's first scrape of a large directory beside a burst of view polls and new
``?name[]=`` sets, measured on one or more exporter binaries in the same run.

The directory: ``--writers`` live prometheus_client processes (pinned 0.26.0, target/venv) sharing ``--series``
series of one counter family (``hc_requests_total``) and the four families the endpoint picker reads
(``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``,
``vllm:lora_requests_info``). The writers stay alive (their pids are live) until the end.

For each round, each exporter in turn (interleaved: a, b, a, b, ...), each on a fresh process (so that each
``/metrics`` is the first collection of the directory):

* **alone**: ``/metrics`` alone.
* **crowded**: ``/metrics``; 50 ms later, while its collection is in flight, 4 polls of the built-in
  endpoint-picker view (``/metrics/endpoint-picker``) and 4 distinct ``?name[]=`` sets of the endpoint picker's
  families, all at once; ``/-/healthy`` every 20 ms meanwhile (its worst answer is reported).

Every answer must be 200 and hold what was asked (the script exits non-zero otherwise); timings are printed as a
Markdown table of ranges (min-max over rounds) and, with ``--out``, written as JSON. With ``--quick`` (CI): the
debug build, 20,000 series, one round, answers checked, no timing target.

Usage:
    target/venv/bin/python scripts/stall.py --exporter prev=/path/to/old/multiproc-exporter \\
        --exporter new=target/release/multiproc-exporter --rounds 2 --out docs/performance/stall/results.json
    target/venv/bin/python scripts/stall.py --quick
"""

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import ROOT, free_port, log, stop_process  # noqa: E402  (the benchmark's helpers)

EPP = ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
       "vllm:lora_requests_info"]
NAME_SETS = [[EPP[0]], [EPP[1], EPP[2]], [EPP[0], EPP[1], EPP[2]], [EPP[2], EPP[3]]]
VIEW = "/metrics/endpoint-picker"


def child_writer(argv):
    """_writer DIR N INDEX: one live prometheus_client process writing N series; prints "ready", then waits for
    standard input to close."""
    directory, n, index = argv[0], int(argv[1]), int(argv[2])
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import Counter, Gauge

    requests = Counter("hc_requests", "High-cardinality requests.", ["user", "route"])
    for i in range(n):
        requests.labels(user=f"user-{index}-{i}", route=f"/api/v1/items/{i % 97}").inc(i % 13 + 1)
    model = {"model_name": "m"}
    Gauge(EPP[0], "Waiting.", ["model_name"], multiprocess_mode="livesum").labels(**model).set(index + 1)
    Gauge(EPP[1], "Running.", ["model_name"], multiprocess_mode="livesum").labels(**model).set(2 * index + 1)
    Gauge(EPP[2], "KV cache usage.", ["model_name"], multiprocess_mode="livemostrecent").labels(**model).set(0.5)
    Gauge(EPP[3], "LoRA requests.", ["max_lora", "running_lora_adapters", "waiting_lora_adapters"],
          multiprocess_mode="livemostrecent").labels(max_lora="1", running_lora_adapters="",
                                                     waiting_lora_adapters="").set(time.time())
    print("ready", flush=True)
    sys.stdin.read()


def write_directory(directory, series, writers):
    procs = []
    per = series // writers
    for index in range(writers):
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "_writer", directory, str(per),
                                       str(index)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for proc in procs:
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"a writer failed (exit {proc.poll()})")
    return procs


def start_exporter(binary, directory):
    port = free_port()
    proc = subprocess.Popen([binary, "serve", "--dir", directory, "--web.listen-address", f"127.0.0.1:{port}",
                             "--log.level", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{binary} exited with {proc.returncode}")
        try:
            status, _, _ = get(port, "/-/healthy")
            if status == 200:
                return proc, port
        except OSError:
            pass
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"{binary}: nothing listening on {port}")
        time.sleep(0.05)


def get(port, path):
    """(status, body, seconds) of one GET on a fresh connection (the path sent as it is)."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        return response.status, body, time.perf_counter() - start
    finally:
        conn.close()


def query_path(names):
    return "/metrics?" + "&".join(f"name[]={n}" for n in names)


def check(label, status, body, want, unwanted=()):
    text = body.decode(errors="replace")
    if status != 200:
        raise AssertionError(f"{label}: status {status}")
    for w in want:
        if w not in text:
            raise AssertionError(f"{label}: {w!r} missing from {text[:300]!r}")
    for u in unwanted:
        if u in text:
            raise AssertionError(f"{label}: {u!r} in the answer")


def alone(binary, directory):
    proc, port = start_exporter(binary, directory)
    try:
        status, body, took = get(port, "/metrics")
        check("/metrics alone", status, body, ["hc_requests_total{", EPP[0]])
        return {"metrics": took}
    finally:
        stop_process(proc)


def crowded(binary, directory):
    proc, port = start_exporter(binary, directory)
    results = {}
    done = threading.Event()

    def one(key, path, want, unwanted=()):
        status, body, took = get(port, path)
        check(key, status, body, want, unwanted)
        results[key] = took

    healthy = []

    def poll_healthy():
        while not done.is_set():
            status, _, took = get(port, "/-/healthy")
            if status != 200:
                raise AssertionError(f"/-/healthy: {status}")
            healthy.append(took)
            time.sleep(0.02)

    errors = []

    def guarded(fn, *a):
        def run():
            try:
                fn(*a)
            except Exception as e:  # reported below
                errors.append(e)
        return threading.Thread(target=run)

    try:
        metrics = guarded(one, "metrics", "/metrics", ["hc_requests_total{", EPP[0]])
        metrics.start()
        time.sleep(0.05)
        others = [guarded(one, f"view{i}", VIEW, [EPP[0]], ["hc_requests"]) for i in range(4)]
        for i, names in enumerate(NAME_SETS):
            unwanted = ["hc_requests"] + [n + "{" for n in EPP if n not in names]
            others.append(guarded(one, f"query{i}", query_path(names), [n + "{" for n in names], unwanted))
        health = guarded(poll_healthy)
        health.start()
        for t in others:
            t.start()
        metrics.join()
        for t in others:
            t.join()
        done.set()
        health.join()
        if errors:
            raise errors[0]
        return {
            "metrics": results["metrics"],
            "views": [results[f"view{i}"] for i in range(4)],
            "queries": [results[f"query{i}"] for i in range(len(NAME_SETS))],
            "healthy_worst": max(healthy) if healthy else None,
        }
    finally:
        done.set()
        stop_process(proc)


def span(values, scale=1000.0, fmt="{:.0f}"):
    values = [v for v in values if v is not None]
    lo, hi = min(values) * scale, max(values) * scale
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def table(runs, labels):
    out = ["| exporter | `/metrics` alone ms | `/metrics` crowded ms | crowded / alone | each `?name[]=` set ms "
           "| each view poll ms | `/-/healthy` worst ms |",
           "|---|---|---|---|---|---|---|"]
    for label in labels:
        mine = [r for r in runs if r["exporter"] == label]
        a = [r["alone"]["metrics"] for r in mine]
        c = [r["crowded"]["metrics"] for r in mine]
        ratios = [r["crowded"]["metrics"] / r["alone"]["metrics"] for r in mine]
        out.append(f"| {label} | {span(a)} | {span(c)} | {span(ratios, 1.0, '{:.2f}')} "
                   f"| {span([q for r in mine for q in r['crowded']['queries']])} "
                   f"| {span([v for r in mine for v in r['crowded']['views']])} "
                   f"| {span([r['crowded']['healthy_worst'] for r in mine], fmt='{:.1f}')} |")
    return "\n".join(out)


def main(argv):
    if argv and argv[0] == "_writer":
        child_writer(argv[1:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--exporter", action="append", default=[],
                   help="LABEL=PATH of an exporter binary (repeatable; default: this checkout's build)")
    p.add_argument("--series", type=int, default=None, help="series in the directory (default 300000; quick: "
                                                            "20000)")
    p.add_argument("--writers", type=int, default=4, help="live writer processes (default 4)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (each exporter alone then crowded; default 2; "
                                                            "quick: 1)")
    p.add_argument("--quick", action="store_true", help="CI: debug build, small directory, answers checked only")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    series = args.series or (20000 if args.quick else 300000)
    rounds = args.rounds or (1 if args.quick else 2)
    exporters = [e.split("=", 1) for e in args.exporter] or [
        ["this", os.path.join(ROOT, "target", "debug" if args.quick else "release", "multiproc-exporter")]]
    for label, path in exporters:
        if not os.access(path, os.X_OK):
            log(f"stall.py: {label}: no executable at {path} (build it first)")
            return 2
    workdir = tempfile.mkdtemp(prefix="mpe-stall-")
    writers = []
    try:
        directory = os.path.join(workdir, "metrics")
        os.mkdir(directory)
        start = time.time()
        writers = write_directory(directory, series, args.writers)
        log(f"stall.py: {series} series by {args.writers} live writers in {time.time() - start:.1f} s")
        runs = []
        for round_ in range(rounds):
            for label, path in exporters:
                run = {"exporter": label, "round": round_, "alone": alone(path, directory),
                       "crowded": crowded(path, directory)}
                log(f"  round {round_} {label}: alone {run['alone']['metrics'] * 1000:.0f} ms, crowded "
                    f"{run['crowded']['metrics'] * 1000:.0f} ms")
                runs.append(run)
        print(table(runs, [label for label, _ in exporters]))
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump({"series": series, "writers": args.writers, "exporters": dict(exporters), "runs": runs},
                          f, indent=1)
        return 0
    finally:
        for w in writers:
            w.stdin.close()
            w.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
