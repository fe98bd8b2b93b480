#!/usr/bin/env python3
"""Side-by-side performance comparison of multiproc-exporter and prometheus_client 0.26.0.

Runs with the project's virtual environment (``scripts/setup-python-venv`` creates
``target/venv`` with prometheus_client==0.26.0)::

    target/venv/bin/python scripts/compare.py                 # full run, writes docs/performance/
    target/venv/bin/python scripts/compare.py --quick         # CI smoke test (~45 s, debug build)
    target/venv/bin/python scripts/compare.py --sizes 16,256 --no-churn --skip-writers --out /tmp/x
    target/venv/bin/python scripts/compare.py --only polled-pod --no-build   # issue 29's scenario alone

In one run and on the same generated directories (``examples/gen_fixture.rs``: vLLM-like
processes of ~386 series, plus a high-churn directory with many dead processes' files), it

1. checks that prometheus_client's ``MultiProcessCollector`` + ``generate_latest``, the
   exporter's library (``examples/bench_scrape.rs``) and ``multiproc-exporter dump`` produce
   the same bytes, and later that both HTTP servers answer Prometheus's request with the same
   decompressed body: it fails before timing anything if they differ;
2. times both in-process (Python in a child process, the exporter with a warm ``Reader``);
3. times both over HTTP on loopback (``prometheus_client.start_http_server`` with a
   multiprocess registry against ``multiproc-exporter serve --web.disable-exporter-metrics``)
   with Prometheus's ``Accept`` and ``Accept-Encoding: gzip`` headers, at concurrency 1 and 8,
   with a bounded load loop (``examples/http_load.rs``); CPU seconds per scrape come from the
   server's ``utime + stime`` in ``/proc/PID/stat``, peak RSS from ``VmHWM``; then once more at
   concurrency 1 with server and load generator pinned to one CPU (``taskset``; not with
   ``--quick`` or ``--no-one-cpu``), which takes the wake-up of a halted vCPU out of the exchange;
4. computes the "stream the used bytes once" floor: the sum of every file's ``used`` divided
   by the sequential read bandwidth of memory (``bench_scrape --membw``: a u64 read-sum over a
   512 MiB buffer, best of 5), plus the cost of merely opening and reading every file;
5. repeats the in-process timings while Python writer processes increment counters, set
   gauges and observe histograms at a high rate (``--writers``, ``--writer-rate``);
6. measures the "polled pod" of issue 29 (``--no-polled-pod`` skips it, ``--only polled-pod``
   runs it alone): 1, 4 and 16 real prometheus_client writers (``--polled-pod-writers``; their
   own pids, so alive to the exporter) update vLLM 0.33's families (2 models, 2 engines; gauges
   in ``livesum``/``livemostrecent``) every 10 ms while ``serve`` with default flags is polled on
   keep-alive connections by 3 endpoint pickers at 20 Hz (Go's headers: gzip, no ``Accept``) and
   Prometheus 2.x at 0.2 Hz, for ``--polled-pod-seconds`` of wall time (20; quick: 4) after a
   warm-up; the server's CPU share and CPU per scrape come from ``/proc/PID/stat``, and
   prometheus_client's cost at the same rate is its in-process collection time of the same live
   directory times the poll rate; then the same pollers on the path that asks for the endpoint
   picker's four families only (``?name[]=``); then (issue 34) the endpoint pickers alone on
   the view ``/metrics/endpoint-picker``, on the exporter's bare ``/-/healthy`` and, in full
   runs where Debian's nginx-light is installed, on nginx serving the view's answer as a static
   file, one after the other in the same run (the targets are the view's CPU per poll as a
   multiple of ``/-/healthy``'s). The largest directory is then measured unchanged (writers
   stopped with SIGSTOP), with the exporter's own metrics and with
   ``--web.disable-exporter-metrics``;
7. writes ``results.json``, ``results.md`` and ``scaling.svg`` (log-log scrape time against
   processes x series) into ``--out`` and prints the tables and the targets of issues 4, 16 and
   29 (HTTP against Python's in-process merge, resident memory split into anonymous and
   metric-file maps, 4,096 processes, 10,000 dead writers, 500,000 series in one file, the
   polled pod's CPU).

``--quick`` checks equality (in-process and HTTP) at 16 processes with few iterations and
asserts that the exporter is faster than Python, and runs a short polled pod (1 and 16
writers, 4 s each) whose checks are that every poll is answered (the targets, as every other
target, are only checked in full runs, and never fail the script); it exits non-zero on any
failure and ends with a "N passed, N failed" line.

The script also runs itself as a child process in a few internal modes (``_py_inproc``,
``_py_server``, ``_py_writer``, ``_py_poller``) so that Python's memory and CPU are measured
on their own.
"""

import argparse
import gzip
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_HEADERS = [
    "Accept: " + PROMETHEUS_ACCEPT,
    "Accept-Encoding: gzip",
]
WRITER_PID_BASE = 900000


# ---------------------------------------------------------------------------------------------
# Internal child modes
# ---------------------------------------------------------------------------------------------


def vm_hwm_kib(pid="self"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def process_memory(pid, directory):
    """Resident memory of a server, KiB: anonymous (heap), file-backed in all, and the part of
    it that maps files of `directory` (the metric files), from /proc/PID/status and smaps."""
    out = {"rss_anon_kib": None, "rss_file_kib": None, "metric_files_kib": 0}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                out["rss_anon_kib"] = int(line.split()[1])
            elif line.startswith("RssFile:"):
                out["rss_file_kib"] = int(line.split()[1])
    prefix = os.path.realpath(directory) + os.sep
    in_dir = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):
                in_dir = len(fields) >= 6 and fields[5].startswith(prefix)
            elif in_dir and fields[0] == "Rss:":
                out["metric_files_kib"] += int(fields[1])
    return out


def used_bytes(directory):
    """The `used` bytes of every .db file, and the same rounded up to whole 4 KiB pages."""
    used = pages = 0
    for name in os.listdir(directory):
        if name.endswith(".db"):
            with open(os.path.join(directory, name), "rb") as f:
                head = f.read(4)
            if len(head) == 4:
                n = int.from_bytes(head, "little")
                used += n
                pages += (n + 4095) // 4096 * 4096
    return {"used_bytes": used, "used_page_bytes": pages}


def cpu_seconds(pid):
    """utime + stime of a process (all threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentiles(values_ms):
    s = sorted(values_ms)
    if not s:
        return {}

    def at(q):
        return s[round((len(s) - 1) * q)]

    return {"min": s[0], "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": s[-1],
            "mean": sum(s) / len(s)}


def child_py_inproc(argv):
    """_py_inproc DIR ITERATIONS MAX_SECONDS [OUTPUT]: time generate_latest(MultiProcessCollector)."""
    directory, iterations, max_seconds = argv[0], int(argv[1]), float(argv[2])
    output = argv[3] if len(argv) > 3 else None
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    cpu0 = time.process_time()
    t = time.perf_counter()
    body = generate_latest(registry)
    cold_ms = (time.perf_counter() - t) * 1e3
    times = []
    cpu1 = time.process_time()
    start = time.perf_counter()
    while len(times) < iterations and (not times or time.perf_counter() - start < max_seconds):
        t = time.perf_counter()
        body = generate_latest(registry)
        times.append((time.perf_counter() - t) * 1e3)
    cpu2 = time.process_time()
    if output:
        with open(output, "wb") as f:
            f.write(body)
    print(json.dumps({
        "cold_ms": cold_ms,
        "iterations": len(times),
        "scrape_ms": percentiles(times),
        "steady_cpu_ms_per_scrape": (cpu2 - cpu1) * 1e3 / max(1, len(times)),
        "cpu_s_total": cpu2 - cpu0,
        "output_bytes": len(body),
        "vm_hwm_kib": vm_hwm_kib(),
    }))


def child_py_server(argv):
    """_py_server DIR PORT: start_http_server with a multiprocess registry, until killed."""
    directory, port = argv[0], int(argv[1])
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    start_http_server(port, addr="127.0.0.1", registry=registry)
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        time.sleep(3600)


def child_py_writer(argv):
    """_py_writer DIR PID RATE SPEC [TICK]: a prometheus_client process writing SPEC's metrics.

    Without TICK: RATE random operations per second (``inc``, ``set``, ``observe`` on random
    children). With TICK (seconds): every TICK, every gauge child is set and one child of every
    counter and histogram family is updated, with vLLM-like values (RATE is ignored). PID
    ``self`` keeps prometheus_client's own identifier, the real pid (a live writer to the
    exporter's liveness checks); another PID is written into the file names instead."""
    directory, pid, rate, spec_path = argv[0], argv[1], float(argv[2]), argv[3]
    tick = float(argv[4]) if len(argv) > 4 else 0.0
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    import random

    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, values

    if pid == "self":
        pid = str(os.getpid())
    else:
        values.ValueClass = values.MultiProcessValue(process_identifier=lambda: pid)
    registry = CollectorRegistry()
    with open(spec_path) as f:
        spec = json.load(f)
    ops = []
    families = []   # (kind, name, buckets, children) for the tick mode
    for m in spec:
        kind, name, doc, labelnames = m["type"], m["name"], m["help"], m["labelnames"]
        if kind == "counter":
            metric = Counter(name, doc, labelnames, registry=registry)
        elif kind == "gauge":
            metric = Gauge(name, doc, labelnames, registry=registry,
                           multiprocess_mode=m.get("mode", "mostrecent"))
        elif kind == "histogram":
            metric = Histogram(name, doc, labelnames, registry=registry, buckets=m["buckets"])
        else:
            metric = Summary(name, doc, labelnames, registry=registry)
        children = [metric.labels(*child) if labelnames else metric for child in m["children"]]
        ops.extend((kind, child) for child in children)
        families.append((kind, name, m.get("buckets") or [1.0], children))
    rng = random.Random(int(pid))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print("ready", flush=True)
    done = ticks = 0
    start = time.perf_counter()
    if tick > 0:
        # vLLM's stat logger at every scheduler step: the gauges of the engines, the token
        # and cache counters, the histograms of the requests that finished.
        due = start
        while not stop:
            for kind, name, buckets, children in families:
                if kind == "gauge":
                    for child in children:
                        child.set(rng.random() if name.endswith("_perc") else rng.randrange(64))
                    done += len(children)
                    continue
                child = children[rng.randrange(len(children))]
                if kind == "counter":
                    child.inc(rng.randrange(1, 2048) if ("tokens" in name or "bytes" in name
                                                         or "flops" in name) else 1)
                elif kind == "histogram":
                    child.observe(buckets[rng.randrange(len(buckets))] * rng.random() * 1.2)
                else:
                    child.observe(rng.random())
                done += 1
            ticks += 1
            due += tick
            ahead = due - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
            elif ahead < -tick:
                due = time.perf_counter()   # fell behind (a busy machine): no burst to catch up
    else:
        batch = 200
        while not stop:
            for _ in range(batch):
                kind, child = ops[rng.randrange(len(ops))]
                if kind == "counter":
                    child.inc(rng.random() * 10)
                elif kind == "gauge":
                    child.set(rng.random())
                else:
                    child.observe(rng.expovariate(1.0))
            done += batch
            ahead = done / rate - (time.perf_counter() - start)
            if ahead > 0:
                time.sleep(ahead)
    elapsed = time.perf_counter() - start
    print(json.dumps({"pid": pid, "ops": done, "ticks": ticks, "seconds": elapsed,
                      "ops_per_second": done / elapsed, "cpu_s": time.process_time()}), flush=True)


def child_py_poller(argv):
    """_py_poller CONFIG_JSON: HTTP pollers, each at a fixed rate on its own keep-alive
    connection, for a fixed wall time; prints what they got and the CPU that the server
    (``server_pid``) and the processes of ``watch_pids`` used over exactly that time.

    CONFIG_JSON: ``{"port", "path", "seconds", "warmup_s", "server_pid", "watch_pids", "pollers":
    [{"name", "hz", "headers": {..}, "expect"}]}``. Each poller first sends one request (it opens
    the connection; the server's first scrape is not the steady state), then polls at its rate
    for ``warmup_s`` more, none of it counted, then for ``seconds``, measured; the pollers of one
    rate poll at evenly spread phases of their period. A poller that falls behind
    skips the requests it missed rather than sending them in a burst. Bodies are read whole and
    gunzipped, and must contain ``expect``."""
    import http.client
    import threading
    from zlib import error as zlib_error

    cfg = json.loads(argv[0])
    pollers = cfg["pollers"]
    barrier = threading.Barrier(len(pollers) + 1)
    window = {}
    reports = [None] * len(pollers)

    def connection():
        return http.client.HTTPConnection("127.0.0.1", cfg["port"], timeout=60)

    def poll(index, p):
        conn, connects = connection(), 0
        report = {"name": p["name"], "hz": p["hz"], "requests": 0, "errors": 0, "connects": 0,
                  "missing_expected": 0, "content_types": {}, "content_encodings": {},
                  "wire_bytes": 0, "body_bytes": 0, "problems": []}
        latencies = []

        def one(counted):
            nonlocal conn, connects
            if conn.sock is None:
                connects += 1
            t = time.perf_counter()
            try:
                conn.request("GET", cfg["path"], headers=p["headers"])
                resp = conn.getresponse()
                raw = resp.read()
                elapsed = (time.perf_counter() - t) * 1e3
                if resp.status != 200:
                    raise http.client.HTTPException(f"status {resp.status}")
                encoding = resp.getheader("Content-Encoding") or "identity"
                body = gzip.decompress(raw) if encoding == "gzip" else raw
            except (OSError, http.client.HTTPException, EOFError, zlib_error) as e:
                conn.close()
                conn = connection()
                if counted:
                    report["errors"] += 1
                    if len(report["problems"]) < 5:
                        report["problems"].append(repr(e))
                return
            if not counted:
                return
            report["requests"] += 1
            latencies.append(elapsed)
            ctype = resp.getheader("Content-Type") or ""
            report["content_types"][ctype] = report["content_types"].get(ctype, 0) + 1
            report["content_encodings"][encoding] = report["content_encodings"].get(encoding, 0) + 1
            report["wire_bytes"] += len(raw)
            report["body_bytes"] += len(body)
            if p["expect"].encode() not in body:
                report["missing_expected"] += 1

        try:
            one(False)
        finally:
            barrier.wait()
        period = 1.0 / p["hz"]
        same_rate = [q for q in pollers if q["hz"] == p["hz"]]
        phase = period * (same_rate.index(p) + 0.5) / len(same_rate)
        # Polled during the warm-up too, at the same rate, not counted.
        due = window["start"] + phase - period * int(window["warmup"] * p["hz"])
        while due < window["end"]:
            ahead = due - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            one(due >= window["start"])
            due += period
            if due < time.monotonic() - period:
                due = time.monotonic()
        conn.close()
        report["connects"] = connects
        report["latency_ms"] = percentiles(latencies)
        reports[index] = report

    threads = [threading.Thread(target=poll, args=(i, p)) for i, p in enumerate(pollers)]
    for th in threads:
        th.start()
    window["warmup"] = cfg.get("warmup_s", 0.0)
    window["start"] = time.monotonic() + 0.05 + window["warmup"]
    window["end"] = window["start"] + cfg["seconds"]
    barrier.wait()
    time.sleep(max(0.0, window["start"] - time.monotonic()))
    watched = [pid for pid in cfg.get("watch_pids", []) if os.path.exists(f"/proc/{pid}")]
    server0, watched0, client0 = cpu_seconds(cfg["server_pid"]), [cpu_seconds(p) for p in watched], \
        time.process_time()
    t0 = time.monotonic()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    server_cpu = cpu_seconds(cfg["server_pid"]) - server0
    watched_cpu = 0.0
    for pid, before in zip(watched, watched0):
        try:
            watched_cpu += cpu_seconds(pid) - before
        except OSError:
            pass
    print(json.dumps({"wall_s": wall, "server_cpu_s": server_cpu, "watched_cpu_s": watched_cpu,
                      "client_cpu_s": time.process_time() - client0, "clk_tck": os.sysconf("SC_CLK_TCK"),
                      "pollers": reports}), flush=True)


# ---------------------------------------------------------------------------------------------
# Helpers for the driver
# ---------------------------------------------------------------------------------------------


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_json(cmd, timeout=600):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        log(f"   {os.path.basename(cmd[0])} exited with {out.returncode}: {out.stderr.strip()[-2000:]}")
        raise subprocess.CalledProcessError(out.returncode, cmd, out.stdout, out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on port {port} after {timeout} s")


def stop_process(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            line = a.count(b"\n", 0, i) + 1
            return f"first difference at byte {i} (line {line}): {a[i:i + 80]!r} vs {b[i:i + 80]!r}"
    return f"one is a prefix of the other ({len(a)} vs {len(b)} bytes)"


def machine_info(python):
    def cmd(c):
        try:
            return subprocess.run(c, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    model = None
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) // 1024
    pc_version = cmd([python, "-c", "import prometheus_client, importlib.metadata as m; "
                                    "print(m.version('prometheus_client'))"])
    dirty = cmd(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock"])
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "memory_mib": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "prometheus_client": pc_version,
        "rustc": cmd(["rustc", "--version"]),
        "commit": cmd(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        "src_dirty": bool(dirty),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


class Tools:
    def __init__(self, profile):
        base = os.path.join(ROOT, "target", profile)
        self.exporter = os.path.join(base, "multiproc-exporter")
        self.gen = os.path.join(base, "examples", "gen_fixture")
        self.bench = os.path.join(base, "examples", "bench_scrape")
        self.load = os.path.join(base, "examples", "http_load")
        self.python = sys.executable
        self.script = os.path.abspath(__file__)

    def py_child(self, *args):
        return [self.python, self.script, *map(str, args)]


# ---------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------


def check_equal_inprocess(tools, directory, scratch):
    py_out = os.path.join(scratch, "python.txt")
    rs_out = os.path.join(scratch, "exporter.txt")
    run_json(tools.py_child("_py_inproc", directory, 0, 0, py_out))
    run_json([tools.bench, "--dir", directory, "--iterations", "1", "--output", rs_out])
    dump = subprocess.run([tools.exporter, "dump", directory], check=True, capture_output=True).stdout
    with open(py_out, "rb") as f:
        py = f.read()
    with open(rs_out, "rb") as f:
        rs = f.read()
    problems = []
    if py != rs:
        problems.append("library vs python: " + first_difference(py, rs))
    if py != dump:
        problems.append("dump vs python: " + first_difference(py, dump))
    return {"equal": not problems, "bytes": len(py), "problems": problems}


def spawn_exporter(tools, directory, port, *flags):
    """`multiproc-exporter serve` on `directory` and 127.0.0.1:`port`: the given flags, else defaults."""
    return subprocess.Popen([tools.exporter, "serve", "--dir", directory, "--web.listen-address",
                             f"127.0.0.1:{port}", *flags, "--log.level", "warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_servers(tools, directory):
    py_port, rs_port = free_port(), free_port()
    py = subprocess.Popen(tools.py_child("_py_server", directory, py_port), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    rs = spawn_exporter(tools, directory, rs_port,
                        # Byte-identical HTTP answers need Python's negotiation
                        # (the default, `safe`, differs on purpose for Prometheus 2.x).
                        "--web.negotiation", "prometheus-client", "--web.disable-exporter-metrics")
    try:
        wait_listening(py_port, py)
        wait_listening(rs_port, rs)
    except Exception:
        stop_process(py)
        stop_process(rs)
        raise
    return {"python": (py, py_port), "exporter": (rs, rs_port)}


def http_fetch(tools, port, output):
    return run_json([tools.load, "--url", f"http://127.0.0.1:{port}/metrics", "--requests", "1",
                     "--max-seconds", "120", "--output", output]
                    + [a for h in PROMETHEUS_HEADERS for a in ("--header", h)])


def check_equal_http(tools, servers, scratch):
    bodies, meta = {}, {}
    for name, (_, port) in servers.items():
        path = os.path.join(scratch, f"{name}.http")
        result = http_fetch(tools, port, path)
        with open(path, "rb") as f:
            raw = f.read()
        if result.get("content_encoding") == "gzip":
            raw = gzip.decompress(raw)
        bodies[name] = raw
        meta[name] = {"content_type": result.get("content_type"),
                      "content_encoding": result.get("content_encoding"),
                      "body_bytes": result.get("body_bytes"), "decompressed_bytes": len(raw)}
    problems = []
    if bodies["python"] != bodies["exporter"]:
        problems.append("HTTP bodies differ: " + first_difference(bodies["python"], bodies["exporter"]))
    if meta["python"]["content_type"] != meta["exporter"]["content_type"]:
        problems.append(f"content types differ: {meta['python']['content_type']!r} vs "
                        f"{meta['exporter']['content_type']!r}")
    if meta["exporter"]["content_encoding"] != "gzip":
        problems.append("exporter did not gzip")
    return {"equal": not problems, "problems": problems, **{k: v for k, v in meta.items()}}


def children_cpu_seconds():
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def pin_process(pid, cpus):
    """Sets the CPU affinity of every thread of `pid` (``taskset -a -p``)."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, capture_output=True)


def http_load(tools, proc, port, concurrency, requests, max_seconds, cpu=None):
    cpu0 = cpu_seconds(proc.pid)
    client0 = children_cpu_seconds()
    pinned = ["taskset", "-c", cpu] if cpu is not None else []
    result = run_json(pinned + [tools.load, "--url", f"http://127.0.0.1:{port}/metrics",
                       "--concurrency", str(concurrency), "--requests", str(requests),
                       "--max-seconds", str(max_seconds)]
                      + [a for h in PROMETHEUS_HEADERS for a in ("--header", h)], timeout=900)
    cpu = cpu_seconds(proc.pid) - cpu0
    result["client_cpu_s"] = children_cpu_seconds() - client0
    result["server_cpu_s"] = cpu
    result["cpu_ms_per_scrape"] = cpu * 1e3 / max(1, result["requests"])
    return result


def measure_case(tools, args, label, processes, dead, workdir, membw):
    directory = os.path.join(workdir, label)
    scratch = os.path.join(workdir, label + ".out")
    os.makedirs(scratch, exist_ok=True)
    log(f"== {label}: {processes} live + {dead} dead processes")
    fixture = run_json([tools.gen, "--processes", str(processes), "--dead", str(dead),
                        "--dir", directory, "--clean"])
    case = {"label": label, "processes": processes, "dead": dead, "fixture": fixture}
    case["floor_ms"] = fixture["used_bytes"] / (membw["read_gb_s"] * 1e9) * 1e3 if membw else None

    case["equal_inprocess"] = check_equal_inprocess(tools, directory, scratch)
    if not case["equal_inprocess"]["equal"]:
        log(f"   NOT EQUAL: {case['equal_inprocess']['problems']}")
        return case

    log("   python in-process ...")
    case["python"] = run_json(tools.py_child("_py_inproc", directory, args.py_iterations, args.py_seconds),
                              timeout=900)
    log("   exporter in-process ...")
    case["exporter"] = run_json([tools.bench, "--dir", directory, "--iterations", str(args.rs_iterations),
                                 "--max-seconds", str(args.rs_seconds)])
    if not args.quick:
        # What the HTTP path adds: the OpenMetrics encoder Prometheus negotiates, and gzip.
        case["exporter_openmetrics_gzip"] = run_json([tools.bench, "--dir", directory, "--iterations", "500",
                                                      "--max-seconds", "1", "--format", "openmetrics", "--gzip"])
        case["read_floor"] = run_json([tools.bench, "--dir", directory, "--read-floor", "--iterations", "50",
                                       "--max-seconds", "2"])
    if not args.skip_http:
        log("   HTTP ...")
        servers = start_servers(tools, directory)
        try:
            case["equal_http"] = check_equal_http(tools, servers, scratch)
            if not case["equal_http"]["equal"]:
                log(f"   NOT EQUAL over HTTP: {case['equal_http']['problems']}")
                return case
            http = {}
            for name, (proc, port) in servers.items():
                budget = args.py_http if name == "python" else args.rs_http
                for concurrency in args.concurrency:
                    http[f"{name}_c{concurrency}"] = http_load(tools, proc, port, concurrency, budget[0],
                                                               budget[1])
                http[f"{name}_vm_hwm_kib"] = vm_hwm_kib(proc.pid)
                http[f"{name}_memory"] = process_memory(proc.pid, directory)
                if args.one_cpu:
                    # After the memory readings, which stay those of the runs above.
                    # Server and load generator on one CPU: the same exchange
                    # without waking a halted vCPU for the request and again
                    # for the answer (see docs/performance.md).
                    all_cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
                    pin_process(proc.pid, "0")
                    try:
                        http[f"{name}_c1_one_cpu"] = http_load(tools, proc, port, 1, budget[0], budget[1], cpu="0")
                    finally:
                        pin_process(proc.pid, all_cpus)
            http["directory_used"] = used_bytes(directory)
            case["http"] = http
        finally:
            for proc, _ in servers.values():
                stop_process(proc)
    shutil.rmtree(scratch, ignore_errors=True)
    return case


def measure_writers(tools, args, processes, workdir):
    """In-process timings while Python writers hammer the directory, then with them stopped."""
    label = f"writers_{processes}"
    directory = os.path.join(workdir, label)
    run_json([tools.gen, "--processes", str(processes), "--dir", directory, "--clean"])
    spec_path = os.path.join(workdir, "spec.json")
    with open(spec_path, "w") as f:
        f.write(subprocess.run([tools.gen, "--spec"], check=True, capture_output=True, text=True).stdout)
    log(f"== writers active: {processes} processes + {args.writers} writers at {args.writer_rate:g} ops/s each")
    result = {"processes": processes, "writers": args.writers, "writer_rate": args.writer_rate}
    writers = start_writers(tools, directory, args.writers, spec_path, rate=args.writer_rate,
                            first_pid=WRITER_PID_BASE)
    try:
        time.sleep(0.5)
        result["active_exporter"] = run_json([tools.bench, "--dir", directory, "--iterations",
                                              str(args.rs_iterations), "--max-seconds", str(args.rs_seconds)])
        result["active_python"] = run_json(tools.py_child("_py_inproc", directory, args.py_iterations,
                                                          args.py_seconds), timeout=900)
        if not args.skip_http:
            result["active_http"] = http_c1(tools, args, directory)
    finally:
        result["writer_reports"] = stop_writers(writers)
    result["idle_exporter"] = run_json([tools.bench, "--dir", directory, "--iterations", str(args.rs_iterations),
                                        "--max-seconds", str(args.rs_seconds)])
    result["idle_python"] = run_json(tools.py_child("_py_inproc", directory, args.py_iterations,
                                                    args.py_seconds), timeout=900)
    if not args.skip_http:
        result["idle_http"] = http_c1(tools, args, directory)
    return result


def start_writers(tools, directory, count, spec_path, rate=0.0, first_pid=None, tick=None):
    """Starts `count` prometheus_client writer processes (``_py_writer``) on `directory` and waits
    until each has registered its metrics. `first_pid`: the identifiers written into the file names
    count up from it (the processes are not those pids); None: each writer's own pid. `tick`:
    seconds between two rounds of vLLM-like updates instead of `rate` random operations/s."""
    writers = []
    try:
        for i in range(count):
            pid = "self" if first_pid is None else first_pid + i
            tail = [] if tick is None else [tick]
            writers.append(subprocess.Popen(tools.py_child("_py_writer", directory, pid, rate, spec_path, *tail),
                                            stdout=subprocess.PIPE, text=True))
        for w in writers:
            if w.stdout.readline().strip() != "ready":
                raise RuntimeError("writer did not start")
    except BaseException:
        stop_writers(writers)
        raise
    return writers


def stop_writers(writers):
    """Stops writers started by start_writers (stopped ones too); returns their reports."""
    reports = []
    for w in writers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
            w.send_signal(signal.SIGCONT)
    for w in writers:
        try:
            out, _ = w.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            w.kill()
            out, _ = w.communicate()
        lines = [line for line in (out or "").splitlines() if line.startswith("{")]
        if lines:
            reports.append(json.loads(lines[-1]))
    return reports


def http_c1(tools, args, directory):
    """One concurrency-1 HTTP run against each server, by server name."""
    servers = start_servers(tools, directory)
    try:
        return {name: http_load(tools, proc, port, 1, *(args.py_http if name == "python" else args.rs_http))
                for name, (proc, port) in servers.items()}
    finally:
        for proc, _ in servers.values():
            stop_process(proc)


# The "polled pod" (issue 29): a vLLM pod's API-server writers changing values all the time,
# polled by the inference gateway's endpoint pickers (EPP, every 50 ms each, its default
# --refreshMetricsInterval) and by Prometheus. The families are vLLM 0.33's own (the demo's
# catalogue), with 2 models and 2 engines.
POD_CATALOGUE = os.path.join(ROOT, "src", "demo", "catalogue", "vllm-0.33.0-stat-logger.json")
POD_MODELS = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"]
POD_ENGINES = ["0", "1"]
POD_GAUGES = {
    "vllm:num_requests_running": "livesum",
    "vllm:num_requests_waiting": "livesum",
    "vllm:websocket_connections_active": "livesum",
    "vllm:kv_cache_usage_perc": "livemostrecent",
    "vllm:num_requests_waiting_by_reason": "livemostrecent",
}
POD_COUNTERS = [
    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success", "vllm:num_preemptions",
    "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens_by_source",
    "vllm:prompt_tokens_cached", "vllm:prompt_tokens_cached_by_source", "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits", "vllm:mm_cache_queries", "vllm:mm_cache_hits", "vllm:corrupted_requests",
    "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos", "vllm:estimated_flops_per_gpu",
    "vllm:estimated_read_bytes_per_gpu",
]
POD_HISTOGRAMS = [
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds", "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
    "vllm:iteration_tokens_total", "vllm:request_params_max_tokens",
]
# Go's net/http adds `Accept-Encoding: gzip` and its User-Agent; the EPP sets no Accept header
# (gateway-api-inference-extension, pkg/epp/backend/metrics/metrics.go: a bare
# http.NewRequestWithContext, then expfmt.TextParser on the body).
EPP_HEADERS = {"Accept-Encoding": "gzip", "User-Agent": "Go-http-client/1.1"}
# The path docs/gateway-api-inference-extension.md recommended to EPP before issue 34
# (`--model-server-metrics-path`): the four families it reads, restricted by `name[]` (which
# works only where EPP joins the URL as a string; the view EPP_VIEW_PATH replaces it).
EPP_NAMES_PATH = ("/metrics?name[]=vllm:num_requests_waiting&name[]=vllm:num_requests_running"
                  "&name[]=vllm:kv_cache_usage_perc&name[]=vllm:lora_requests_info")
# The endpoint picker's own view (issue 34): the families EPP reads, on a query-free path.
EPP_VIEW_PATH = "/metrics/endpoint-picker"
# Issue 34's targets: the endpoint pickers' CPU per poll of the view, as a multiple of the same
# pollers' on the exporter's /-/healthy (a bare HTTP answer), measured in the same run.
POD_TARGET_VIEW_RATIO = {1: 1.5, 4: 1.5, 16: 2.0}
PROMETHEUS2_HEADERS = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip", "User-Agent": "Prometheus/2.53.4",
                       "X-Prometheus-Scrape-Timeout-Seconds": "10"}
# Issue 29's targets: the exporter's CPU share (% of one core) by live writers; an unchanged
# directory's CPU per scrape (ms, own metrics on); one HTTP scrape against Python's merge.
POD_TARGET_PERCENT = {1: 0.5, 4: 1.0, 16: 2.0}
POD_TARGET_UNCHANGED_MS = 0.15
POD_TARGET_HTTP_RATIO = 150


def polled_pod_spec():
    """The writers' metric spec (``_py_writer``'s format) from the catalogue of vLLM's families."""
    import itertools

    with open(POD_CATALOGUE) as f:
        catalogue = {m["name"]: m for m in json.load(f)}
    spec = []
    for kind, names in (("gauge", list(POD_GAUGES)), ("counter", POD_COUNTERS), ("histogram", POD_HISTOGRAMS)):
        for name in names:
            m = catalogue[name]
            if m["type"] != kind:
                raise RuntimeError(f"{name} is a {m['type']} in {POD_CATALOGUE}, not a {kind}")
            values = {label: POD_MODELS if label == "model_name" else POD_ENGINES if label == "engine"
                      else m["label_values"][label] for label in m["labels"]}
            entry = {"type": kind, "name": name, "help": m["help"], "labelnames": m["labels"],
                     "buckets": m.get("buckets"),
                     "children": [list(c) for c in itertools.product(*(values[label] for label in m["labels"]))]}
            if kind == "gauge":
                entry["mode"] = POD_GAUGES[name]
            spec.append(entry)
    return spec


def polled_pod_pollers():
    """3 endpoint pickers at 20 Hz (no Accept header) and Prometheus 2.x at 0.2 Hz (its 15 s
    interval is long for a run of seconds: every 5 s, its scrape's cost is what counts)."""
    epp = [{"name": f"epp-{i}", "hz": 20.0, "headers": EPP_HEADERS, "expect": "vllm:num_requests_running"}
           for i in range(3)]
    return epp + [{"name": "prometheus-2", "hz": 0.2, "headers": PROMETHEUS2_HEADERS,
                   "expect": "num_requests_running"}]


def epp_pollers(expect):
    """The 3 endpoint pickers of the polled pod alone (Go's headers, 20 Hz each), expecting `expect`."""
    return [dict(p, expect=expect) for p in polled_pod_pollers() if p["hz"] >= 1]


NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
error_log {dir}/error.log;
pid {dir}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}; proxy_temp_path {dir}; fastcgi_temp_path {dir};
    uwsgi_temp_path {dir}; scgi_temp_path {dir};
    server {{
        listen 127.0.0.1:{port};
        location / {{ root {dir}; default_type "text/plain; version=0.0.4; charset=utf-8"; }}
    }}
}}
"""


def nginx_binary():
    for path in ("/usr/sbin/nginx", shutil.which("nginx")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def polled_nginx(tools, args, body, workdir, pids):
    """The floor of any server on this machine: nginx (one process) serving `body` as a static file
    to the endpoint pickers, for --polled-pod-seconds; None without nginx."""
    binary = nginx_binary()
    if not binary:
        return None
    root = tempfile.mkdtemp(prefix="nginx-", dir=workdir)
    with open(os.path.join(root, "view"), "wb") as f:
        f.write(body)
    port = free_port()
    conf = os.path.join(root, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(dir=root, port=port))
    proc = subprocess.Popen([binary, "-c", conf, "-p", root], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proc)
        r = run_pollers(tools, proc, port, epp_pollers("num_requests_running"), args.pod_seconds,
                        args.pod_warmup, pids, path="/view")
        r["body_bytes"] = len(body)
        return r
    finally:
        stop_process(proc)
        shutil.rmtree(root, ignore_errors=True)


def fetch_body(port, path, headers):
    """One GET of `path` on the local `port`: the body as sent."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def run_pollers(tools, proc, port, pollers, seconds, warmup, watch_pids=(), path="/metrics"):
    """Polls the server's `path` for `warmup` seconds, then for `seconds` of measured wall time
    (``_py_poller``); adds the server's CPU share (% of one core) and its CPU per scrape."""
    cfg = {"port": port, "path": path, "seconds": seconds, "warmup_s": warmup, "server_pid": proc.pid,
           "watch_pids": list(watch_pids), "pollers": pollers}
    r = run_json(tools.py_child("_py_poller", json.dumps(cfg)), timeout=seconds + 300)
    if proc.poll() is not None:
        raise RuntimeError(f"exporter exited with {proc.returncode} while polled")
    reports = [p for p in r["pollers"] if p]
    r["scrapes"] = sum(p["requests"] for p in reports)
    r["planned_scrapes"] = sum(p["hz"] for p in pollers) * seconds
    r["errors"] = sum(p["errors"] for p in reports) + (len(pollers) - len(reports))
    r["not_gzip"] = sum(n for p in reports for enc, n in p["content_encodings"].items() if enc != "gzip")
    r["missing_expected"] = sum(p["missing_expected"] for p in reports)
    r["server_cpu_percent"] = r["server_cpu_s"] / r["wall_s"] * 100
    r["server_cpu_ms_per_scrape"] = r["server_cpu_s"] * 1e3 / max(1, r["scrapes"])
    r["watched_cpu_percent"] = r["watched_cpu_s"] / r["wall_s"] * 100
    r["server_vm_hwm_kib"] = vm_hwm_kib(proc.pid)
    return r


def start_exporter(tools, directory, *flags):
    port = free_port()
    proc = spawn_exporter(tools, directory, port, *flags)
    try:
        wait_listening(port, proc)
    except Exception:
        stop_process(proc)
        raise
    return proc, port


def measure_polled_pod(tools, args, workdir):
    """Issue 29's polled pod, for each writer count of --polled-pod-writers."""
    spec_path = os.path.join(workdir, "polled-pod-spec.json")
    spec = polled_pod_spec()
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    pollers = polled_pod_pollers()
    rate = sum(p["hz"] for p in pollers)
    result = {"settings": {
        "seconds": args.pod_seconds, "warmup_s": args.pod_warmup, "tick_s": args.pod_tick, "poll_rate_hz": rate,
        "pollers": [{k: p[k] for k in ("name", "hz", "headers")} for p in pollers],
        "families": {kind: sum(1 for m in spec if m["type"] == kind) for kind in ("gauge", "counter", "histogram")},
        "series": sum(len(m["children"]) for m in spec), "gauge_modes": POD_GAUGES,
        "models": POD_MODELS, "engines": POD_ENGINES, "unchanged_writers": max(args.pod_writers),
        "python_iterations": args.pod_py[0], "python_seconds": args.pod_py[1]}, "runs": []}
    for n in args.pod_writers:
        result["runs"].append(polled_pod_run(tools, args, n, spec_path, pollers, workdir,
                                             unchanged=n == max(args.pod_writers)))
    return result


def polled_pod_run(tools, args, n, spec_path, pollers, workdir, unchanged):
    """n live writers, the exporter with default flags, the pollers for --polled-pod-seconds; then
    Python's collection of the same live directory. With `unchanged`, the writers are then
    stopped (SIGSTOP: alive, their files kept, nothing changes) and the pollers run again, with
    the exporter's own metrics and, on a new exporter, without them."""
    directory = tempfile.mkdtemp(prefix=f"polled-pod-{n}-", dir=workdir)
    log(f"== polled pod: {n} live writer(s) updating every {args.pod_tick * 1e3:g} ms, "
        f"pollers {' + '.join(f'{p[0]} x {p[1]:g} Hz' for p in _poller_groups(pollers))}, {args.pod_seconds:g} s")
    rate = sum(p["hz"] for p in pollers)
    run = {"writers": n}
    writers = start_writers(tools, directory, n, spec_path, tick=args.pod_tick)
    pids = [w.pid for w in writers]
    server = None
    try:
        time.sleep(0.5)    # every family written and moving
        server = start_exporter(tools, directory)
        run["files"] = len([f for f in os.listdir(directory) if f.endswith(".db")])
        run["directory_used"] = used_bytes(directory)
        run["live"] = run_pollers(tools, *server, pollers, args.pod_seconds, args.pod_warmup, pids)
        live = run["live"]
        log(f"   exporter {live['server_cpu_percent']:.2f} % of a core, {live['server_cpu_ms_per_scrape']:.3f} ms "
            f"per scrape ({live['scrapes']} scrapes in {live['wall_s']:.1f} s); writers "
            f"{live['watched_cpu_percent']:.0f} %")
        # The same pollers on the path that asks for EPP's four families only.
        names = run["live_names"] = run_pollers(tools, *server, pollers, args.pod_seconds, args.pod_warmup, pids,
                                                path=EPP_NAMES_PATH)
        log(f"   with ?name[]= (EPP's four families): {names['server_cpu_percent']:.2f} % of a core, "
            f"{names['server_cpu_ms_per_scrape']:.3f} ms per scrape")
        # Issue 34: the endpoint pickers alone, on the view, then on the bare /-/healthy, then (full
        # runs) nginx serving the view's answer as a static file: the ratios come from this one run.
        view = run["live_view"] = run_pollers(tools, *server, epp_pollers("vllm:num_requests_running"),
                                              args.pod_seconds, args.pod_warmup, pids, path=EPP_VIEW_PATH)
        healthy = run["live_healthy"] = run_pollers(tools, *server, epp_pollers("Healthy"), args.pod_seconds,
                                                    args.pod_warmup, pids, path="/-/healthy")
        status, body = fetch_body(server[1], EPP_VIEW_PATH, {})
        run["view_body_bytes"] = len(body) if status == 200 else None
        log(f"   view {EPP_VIEW_PATH}: {view['server_cpu_ms_per_scrape']:.3f} ms per poll, "
            f"{view['server_cpu_percent']:.2f} % of a core; /-/healthy {healthy['server_cpu_ms_per_scrape']:.3f} ms "
            f"per poll: ratio {view['server_cpu_ms_per_scrape'] / max(1e-9, healthy['server_cpu_ms_per_scrape']):.2f}")
        if not args.quick and status == 200:
            floor = run["live_nginx"] = polled_nginx(tools, args, body, workdir, pids)
            if floor:
                log(f"   nginx serving the view's {len(body)} bytes: {floor['server_cpu_ms_per_scrape']:.3f} ms "
                    "per poll")
        py = run["python_live"] = run_json(tools.py_child("_py_inproc", directory, *args.pod_py), timeout=900)
        run["python_live_percent"] = py["scrape_ms"]["p50"] * rate / 10
        log(f"   prometheus_client {py['scrape_ms']['p50']:.2f} ms per collection: "
            f"{run['python_live_percent']:.0f} % of a core at {rate:g} Hz")
        if unchanged:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(0.2)
                u = run["unchanged"] = {}
                u["own_metrics"] = run_pollers(tools, *server, pollers, args.pod_seconds, args.pod_warmup)
                if os.path.exists(tools.load):
                    # Back to back, concurrency 1, as Prometheus's request (target 3).
                    u["own_metrics_http_c1"] = http_load(tools, server[0], server[1], 1, *args.rs_http)
                stop_process(server[0])
                server = start_exporter(tools, directory, "--web.disable-exporter-metrics")
                u["no_own_metrics"] = run_pollers(tools, *server, pollers, args.pod_seconds, args.pod_warmup)
                run["python_unchanged"] = run_json(tools.py_child("_py_inproc", directory, *args.pod_py),
                                                   timeout=900)
                log(f"   unchanged: {u['own_metrics']['server_cpu_ms_per_scrape']:.3f} ms per scrape with the "
                    f"own metrics, {u['no_own_metrics']['server_cpu_ms_per_scrape']:.3f} ms without")
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
    finally:
        if server:
            stop_process(server[0])
        run["writer_reports"] = stop_writers(writers)
        shutil.rmtree(directory, ignore_errors=True)
    return run


def _poller_groups(pollers):
    groups = {}
    for p in pollers:
        groups[p["hz"]] = groups.get(p["hz"], 0) + 1
    return [(count, hz) for hz, count in groups.items()]


def polled_pod_checks(pod, quick):
    """What must hold in every run, --quick included (the targets are checked only in full runs)."""
    checks = []
    for run in pod["runs"]:
        n = run["writers"]
        polls = [("live", run.get("live"))] + ([("live, ?name[]=", run["live_names"])]
                                               if run.get("live_names") else []) + [(f"unchanged, {k.replace('_', ' ')}", v)
                                               for k, v in (run.get("unchanged") or {}).items()
                                               if k != "own_metrics_http_c1"]
        for what, key in (("the view", "live_view"), ("/-/healthy", "live_healthy"), ("nginx", "live_nginx")):
            r = run.get(key)
            if r:
                checks.append((f"polled pod, {n} writer(s), {what}: every poll answered 200 with what it serves",
                               r["errors"] == 0 and r["missing_expected"] == 0 and r["scrapes"] > 0,
                               f"{r['scrapes']} scrapes, {r['errors']} errors, {r['missing_expected']} without "
                               "the expected text" + "".join(f"; {x}" for p in r["pollers"] if p
                                                             for x in p["problems"][:1])))
        for what, r in polls:
            if not r:
                continue
            # A `?name[]=` answer (about 1 kB) is below the size the exporter gzips (issue 34).
            small = "name[]" in what
            checks.append((f"polled pod, {n} writer(s), {what}: every poll answered 200, "
                           f"{'' if small else 'gzipped, '}with vLLM's families",
                           r["errors"] == 0 and (small or r["not_gzip"] == 0) and r["missing_expected"] == 0,
                           f"{r['errors']} errors, {r['not_gzip']} not gzipped, {r['missing_expected']} without "
                           f"the expected family" + "".join(f"; {x}" for p in r["pollers"] if p
                                                            for x in p["problems"][:1])))
            answered = [p["requests"] for p in r["pollers"] if p]
            detail = f"{r['scrapes']} scrapes of {r['planned_scrapes']:.0f} planned, by poller {answered}"
            if quick:
                # A debug build on a busy CI machine may not keep 20 Hz: only that every poller is served.
                checks.append((f"polled pod, {n} writer(s), {what}: every poller was answered",
                               len(answered) == len(r["pollers"]) and min(answered, default=0) > 0, detail))
            else:
                checks.append((f"polled pod, {n} writer(s), {what}: every poller answered, at least half the "
                               "planned scrapes", len(answered) == len(r["pollers"]) and min(answered, default=0) > 0
                               and r["scrapes"] >= 0.5 * r["planned_scrapes"], detail))
        reports = run.get("writer_reports") or []
        checks.append((f"polled pod, {n} writer(s): every writer kept writing",
                       len(reports) == n and all(r["ticks"] > 0 for r in reports),
                       f"{len(reports)} reports, ticks {sorted(r['ticks'] for r in reports)}"))
    return checks


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


def child_py_write_series(argv):
    """_py_write_series DIR N: one writer process with N counter series (prometheus_client)."""
    directory, n = argv[0], int(argv[1])
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import Counter
    c = Counter("hc_requests", "High-cardinality requests.", ["user", "route"])
    for i in range(n):
        c.labels(user=f"user-{i}", route=f"/api/v1/items/{i % 97}").inc(i % 13 + 1)


def run_with_peak(cmd, stdout_path):
    """Runs cmd with stdout to a file; returns (seconds, peak RSS KiB) of that child alone."""
    with open(stdout_path, "wb") as out:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited with {proc.returncode}")
    return seconds, usage.ru_maxrss


def rss_anon_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return None


def measure_cardinality(tools, n, workdir):
    """One writer with n series: time and peak memory of Python's collector, of `dump`, and of
    `serve` for one scrape and for 8 concurrent scrapes (issue 11)."""
    log(f"== high cardinality: one writer, {n} series")
    directory = os.path.join(workdir, f"cardinality_{n}")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    subprocess.run(tools.py_child("_py_write_series", directory, n), check=True)
    py_out, rs_out = os.path.join(workdir, "card_python.txt"), os.path.join(workdir, "card_dump.txt")
    py_json = os.path.join(workdir, "card_python.json")
    py_s, py_kib = run_with_peak(tools.py_child("_py_inproc", directory, 0, 0, py_out), py_json)
    with open(py_json) as f:
        py_merge_s = json.loads(f.read().strip().splitlines()[-1])["cold_ms"] / 1e3
    rs_s, rs_kib = run_with_peak([tools.exporter, "dump", "--dir", directory], rs_out)
    with open(py_out, "rb") as f:
        py = f.read()
    with open(rs_out, "rb") as f:
        rs = f.read()
    result = {"series": n, "file_bytes": sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)),
              "equal": py == rs, "problems": [] if py == rs else [first_difference(py, rs)],
              "python": {"seconds": py_s, "merge_seconds": py_merge_s, "peak_mib": py_kib / 1024},
              "dump": {"seconds": rs_s, "peak_mib": rs_kib / 1024}}
    port = free_port()
    proc = subprocess.Popen([tools.exporter, "serve", "--dir", directory, "--web.listen-address", f"127.0.0.1:{port}",
                             "--web.disable-exporter-metrics", "--log.level", "warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proc)
        import urllib.request
        import threading

        def scrape():
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120).read()

        t = time.perf_counter()
        scrape()
        first_s = time.perf_counter() - t
        anon = rss_anon_kib(proc.pid)
        steady = []
        for _ in range(5):
            t = time.perf_counter()
            scrape()
            steady.append(time.perf_counter() - t)
        steady_s = sorted(steady)[len(steady) // 2]
        threads = [threading.Thread(target=scrape) for _ in range(8)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        result["serve"] = {"first_scrape_seconds": first_s, "steady_scrape_seconds": steady_s,
                           "heap_resident_mib": anon / 1024,
                           "heap_bytes_per_series": anon * 1024 / n,
                           "eight_concurrent_seconds": time.perf_counter() - t,
                           "peak_mib": vm_hwm_kib(proc.pid) / 1024}
    finally:
        stop_process(proc)
        shutil.rmtree(directory, ignore_errors=True)
    return result


def fmt_ms(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_ratio(a, b):
    if not a or not b:
        return "-"
    r = a / b
    return f"{r:.0f}x" if r >= 10 else f"{r:.1f}x"


def cardinality_table(card):
    out = [f"### High cardinality: one writer, {card['series']:,} series ({card['file_bytes'] / 2**20:.0f} MiB file)\n",
           "| | seconds | peak MiB |", "|---|---|---|",
           f"| Python: `MultiProcessCollector` + `generate_latest` (process, of which the merge) "
           f"| {card['python']['seconds']:.2f} ({card['python'].get('merge_seconds', 0):.2f}) "
           f"| {card['python']['peak_mib']:.0f} |",
           f"| exporter: `dump` | {card['dump']['seconds']:.2f} | {card['dump']['peak_mib']:.0f} |"]
    if "serve" in card:
        sv = card["serve"]
        out.append(f"| exporter: `serve`, first scrape, then 8 concurrent | {sv['first_scrape_seconds']:.2f}, "
                   f"{sv['eight_concurrent_seconds']:.2f} | {sv['peak_mib']:.0f} |")
        if "steady_scrape_seconds" in sv:
            out.append(f"| exporter: `serve`, a later scrape over HTTP (median of 5) "
                       f"| {sv['steady_scrape_seconds']:.3f} | |")
        out.append(f"\nHeap resident after the first scrape: {sv['heap_resident_mib']:.0f} MiB "
                   f"({sv['heap_bytes_per_series']:.0f} B per series).\n")
    return "\n".join(out) + "\n"


def tables(results):
    out = []
    if results.get("cardinality"):
        out.append(cardinality_table(results["cardinality"]))
    if any("python" in c for c in results["cases"]):
        out.append("### In-process: one scrape (read + merge + encode), median over the steady state\n")
        out.append("| directory | files | series (entries) | used MB | Python ms | exporter cold ms | exporter ms "
                   "| ratio | floor ms | exporter / floor | open+read only ms | pread, fds kept open ms | Python µs/entry "
                   "| exporter µs/entry |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for c in results["cases"]:
            if "python" not in c:
                continue
            fx = c["fixture"]
            py = c["python"]["scrape_ms"]["p50"]
            rs = c["exporter"]["scrape_ms"]["p50"]
            floor = c.get("floor_ms")
            rf = c.get("read_floor", {}).get("read_ms", {}).get("p50")
            rfo = c.get("read_floor", {}).get("open_fds_read_ms", {}).get("p50")
            out.append(
                f"| {c['label']} | {fx['files']} | {fx['records']} | {fx['used_bytes'] / 1e6:.1f} | {fmt_ms(py)} "
                f"| {fmt_ms(c['exporter']['cold_ms'])} | {fmt_ms(rs)} | {fmt_ratio(py, rs)} | {fmt_ms(floor)} "
                f"| {fmt_ratio(rs, floor)} | {fmt_ms(rf)} | {fmt_ms(rfo)} | {py * 1e3 / fx['records']:.2f} "
                f"| {rs * 1e3 / fx['records']:.4f} |")
        out.append("")
        out.append("### In-process: CPU and memory\n")
        out.append("| directory | Python CPU ms/scrape | exporter CPU ms/scrape | Python peak RSS MiB | exporter peak RSS MiB "
                   "| exporter p99 ms | unchanged scrape: keys decoded / re-plans |")
        out.append("|---|---|---|---|---|---|---|")
        for c in results["cases"]:
            if "python" not in c:
                continue
            p, e = c["python"], c["exporter"]
            out.append(
                f"| {c['label']} | {fmt_ms(p['steady_cpu_ms_per_scrape'])} | {fmt_ms(e['steady_cpu_ms_per_scrape'])} "
                f"| {(p['vm_hwm_kib'] or 0) / 1024:.1f} | {(e['vm_hwm_kib'] or 0) / 1024:.1f} "
                f"| {fmt_ms(e['scrape_ms']['p99'])} | {e['steady_keys_decoded_max']} / {e['steady_replanned']} |")
        out.append("")
    if any("http" in c for c in results["cases"]):
        out.append("### Over HTTP (loopback, Prometheus's Accept header, gzip)\n")
        out.append("| directory | server | conc. | scrapes | scrapes/s | p50 ms | p99 ms | CPU ms/scrape "
                   "| peak RSS MiB | p50 ratio | CPU ratio | load generator CPU ms/scrape |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for c in results["cases"]:
            h = c.get("http")
            if not h:
                continue
            for conc in results["settings"]["concurrency"]:
                py, rs = h.get(f"python_c{conc}"), h.get(f"exporter_c{conc}")
                for name, r in (("python", py), ("exporter", rs)):
                    if not r:
                        continue
                    ratio_lat = fmt_ratio(py["latency_ms"]["p50"], rs["latency_ms"]["p50"]) if name == "exporter" else ""
                    ratio_cpu = fmt_ratio(py["cpu_ms_per_scrape"], rs["cpu_ms_per_scrape"]) if name == "exporter" else ""
                    out.append(
                        f"| {c['label']} | {name} | {conc} | {r['requests']} | {r['requests_per_second']:.0f} "
                        f"| {fmt_ms(r['latency_ms']['p50'])} | {fmt_ms(r['latency_ms']['p99'])} "
                        f"| {fmt_ms(r['cpu_ms_per_scrape'])} | {(h.get(name + '_vm_hwm_kib') or 0) / 1024:.1f} "
                        f"| {ratio_lat} | {ratio_cpu} "
                        f"| {fmt_ms(r.get('client_cpu_s', 0) * 1e3 / max(1, r['requests']))} |")
        out.append("")
        if any((c.get("http") or {}).get("exporter_c1_one_cpu") for c in results["cases"]):
            out.append("### Over HTTP, server and load generator on one CPU (concurrency 1)\n")
            out.append("The same exchange with both processes pinned to CPU 0 (`taskset`), so that no "
                       "request or answer waits for the other vCPU to wake from a halt; the exporter's "
                       "two loading threads share that CPU.\n")
            out.append("| directory | Python p50 ms | exporter p50 ms | ratio | vs Python in-process | "
                       "exporter, both CPUs, p50 ms |")
            out.append("|---|---|---|---|---|---|")
            for c in results["cases"]:
                h = c.get("http") or {}
                py, rs = h.get("python_c1_one_cpu"), h.get("exporter_c1_one_cpu")
                if not py or not rs:
                    continue
                free = h.get("exporter_c1")
                out.append(
                    f"| {c['label']} | {fmt_ms(py['latency_ms']['p50'])} | {fmt_ms(rs['latency_ms']['p50'])} "
                    f"| {fmt_ratio(py['latency_ms']['p50'], rs['latency_ms']['p50'])} "
                    f"| {fmt_ratio(c['python']['scrape_ms']['p50'], rs['latency_ms']['p50'])} "
                    f"| {fmt_ms(free['latency_ms']['p50']) if free else '-'} |")
            out.append("")
        out.append("### Resident memory of the servers after the HTTP runs\n")
        out.append("Anonymous is the heap; \"metric files\" is the part of the file-backed memory that maps "
                   "the directory's files (the rest is the binary and libraries). Used: the files' `used` bytes, "
                   "and the same rounded up to whole 4 KiB pages.\n")
        out.append("| directory | used MiB | used, whole pages MiB | exporter anonymous MiB | exporter metric files MiB "
                   "| exporter file-backed in all MiB | Python RSS MiB |")
        out.append("|---|---|---|---|---|---|---|")
        for c in results["cases"]:
            h = c.get("http")
            if not h or "exporter_memory" not in h:
                continue
            em, pm, u = h["exporter_memory"], h.get("python_memory") or {}, h["directory_used"]
            py_rss = ((pm.get("rss_anon_kib") or 0) + (pm.get("rss_file_kib") or 0)) / 1024
            out.append(f"| {c['label']} | {u['used_bytes'] / 2**20:.1f} | {u['used_page_bytes'] / 2**20:.1f} "
                       f"| {em['rss_anon_kib'] / 1024:.1f} | {em['metric_files_kib'] / 1024:.1f} "
                       f"| {em['rss_file_kib'] / 1024:.1f} | {py_rss:.1f} |")
        out.append("")
    if results.get("writers"):
        out.append("### With writers active (Python processes writing while scraping)\n")
        out.append("| directory | writers | achieved ops/s | Python idle ms | Python active ms | exporter idle ms "
                   "| exporter active ms | exporter p99 idle / active ms |")
        out.append("|---|---|---|---|---|---|---|---|")
        for w in results["writers"]:
            ops = sum(r["ops_per_second"] for r in w["writer_reports"])
            out.append(
                f"| {w['processes']} + {w['writers']} writers | {w['writers']} x {w['writer_rate']:g} | {ops:.0f} "
                f"| {fmt_ms(w['idle_python']['scrape_ms']['p50'])} | {fmt_ms(w['active_python']['scrape_ms']['p50'])} "
                f"| {fmt_ms(w['idle_exporter']['scrape_ms']['p50'])} "
                f"| {fmt_ms(w['active_exporter']['scrape_ms']['p50'])} "
                f"| {fmt_ms(w['idle_exporter']['scrape_ms']['p99'])} / "
                f"{fmt_ms(w['active_exporter']['scrape_ms']['p99'])} |")
        out.append("")
        with_http = [w for w in results["writers"] if w.get("active_http") and w.get("idle_http")]
        if with_http:
            out.append("Over HTTP (concurrency 1, p50 ms). Idle, nothing changes between two scrapes and the "
                       "exporter serves its last families and body again; active, values change before "
                       "every scrape and every scrape merges and encodes.\n")
            out.append("| directory | Python idle | Python active | exporter idle | exporter active "
                       "| exporter active vs Python's in-process merge (active) |")
            out.append("|---|---|---|---|---|---|")
            for w in with_http:
                a, i = w["active_http"], w["idle_http"]
                rs = a["exporter"]["latency_ms"]["p50"]
                out.append(
                    f"| {w['processes']} + {w['writers']} writers "
                    f"| {fmt_ms(i['python']['latency_ms']['p50'])} | {fmt_ms(a['python']['latency_ms']['p50'])} "
                    f"| {fmt_ms(i['exporter']['latency_ms']['p50'])} | {fmt_ms(rs)} "
                    f"| {w['active_python']['scrape_ms']['p50'] / rs:.0f}x |")
            out.append("")
    if results.get("polled_pod"):
        out.append(polled_pod_table(results["polled_pod"]))
    return "\n".join(out)


def _epp_latency(polled):
    """The endpoint pickers' (pollers at 1 Hz or more) median poll latency and their worst p99, ms."""
    epp = [p for p in polled["pollers"] if p and p["hz"] >= 1]
    lat = percentiles([v for p in epp for v in (p["latency_ms"].get("p50"),) if v is not None])
    p99 = max((p["latency_ms"].get("p99") or 0) for p in epp) if epp else None
    return lat.get("p50"), p99


def polled_pod_table(pod):
    st = pod["settings"]
    groups = " + ".join(f"{count} at {hz:g} Hz" for count, hz in _poller_groups(st["pollers"]))
    out = ["### Polled pod (issue 29)\n",
           f"Real prometheus_client writers (vLLM 0.33's families: {st['families']['gauge']} gauges in "
           f"`livesum`/`livemostrecent`, {st['families']['counter']} counters, {st['families']['histogram']} "
           f"histograms; {len(st['models'])} models x {len(st['engines'])} engines, {st['series']} series per "
           f"writer) update values every {st['tick_s'] * 1e3:g} ms. `serve` with default flags (its own metrics "
           f"on) is polled over keep-alive connections by {groups} ({st['poll_rate_hz']:g} scrapes/s: endpoint "
           f"pickers without `Accept`, Prometheus 2.x's `Accept`; gzip) for {st['seconds']:g} s of wall time. "
           "CPU from the server's `utime + stime` (`/proc/PID/stat`) over that time. prometheus_client: the "
           "median time of one `MultiProcessCollector` + `generate_latest` collection of the same live directory "
           f"(in-process) times {st['poll_rate_hz']:g}/s.\n",
           "| writers | files | used KB | scrapes (planned) | exporter, % of a core | exporter CPU ms/scrape "
           "| endpoint pickers' poll p50 / p99 ms | prometheus_client ms/collection | prometheus_client at this rate, % of a core "
           "| writers' CPU, % of a core |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for run in pod["runs"]:
        live = run.get("live")
        if not live:
            continue
        p50, p99 = _epp_latency(live)
        py = run.get("python_live")
        py_ms = fmt_ms(py["scrape_ms"]["p50"]) if py else "-"
        py_percent = f"{run['python_live_percent']:.0f}" if py else "-"
        out.append(f"| {run['writers']} | {run['files']} | {run['directory_used']['used_bytes'] / 1e3:.0f} "
                   f"| {live['scrapes']} ({live['planned_scrapes']:.0f}) | {live['server_cpu_percent']:.2f} "
                   f"| {fmt_ms(live['server_cpu_ms_per_scrape'])} | {fmt_ms(p50)} / {fmt_ms(p99)} "
                   f"| {py_ms} | {py_percent} | {live['watched_cpu_percent']:.0f} |")
    out.append("")
    named = [r for r in pod["runs"] if r.get("live_names")]
    if named:
        out.append("The same live writers and pollers asking for only the four families the endpoint picker "
                   "reads (`?name[]=`; since issue 34 only those families are read, and the answer is sent "
                   "uncompressed).\n")
        out.append("| writers | scrapes (planned) | exporter, % of a core | exporter CPU ms/scrape "
                   "| endpoint pickers' poll p50 / p99 ms |")
        out.append("|---|---|---|---|---|")
        for run in named:
            r = run["live_names"]
            p50, p99 = _epp_latency(r)
            out.append(f"| {run['writers']} | {r['scrapes']} ({r['planned_scrapes']:.0f}) "
                       f"| {r['server_cpu_percent']:.2f} | {fmt_ms(r['server_cpu_ms_per_scrape'])} "
                       f"| {fmt_ms(p50)} / {fmt_ms(p99)} |")
        out.append("")
    viewed = [r for r in pod["runs"] if r.get("live_view") and r.get("live_healthy")]
    if viewed:
        rate = sum(p["hz"] for p in epp_pollers(""))
        out.append(f"Issue 34: the same live writers, the endpoint pickers alone ({rate:g} polls/s, Go's headers) "
                   f"on the view `{EPP_VIEW_PATH}`, then on the exporter's `/-/healthy` (a bare HTTP answer), "
                   "then, where Debian's nginx-light is installed (full runs), on nginx (one process) serving "
                   "the view's answer as a static file: the floor of any server on this machine. All from this "
                   "one run, one after the other; the ratios, not the absolute figures, are what carries over to "
                   "another machine. prometheus_client: its collection above, at this rate.\n")
        out.append("| writers | view bytes | view ms/poll | view, % of a core | /-/healthy ms/poll "
                   "| view / healthy | nginx ms/poll | view / nginx | view poll p50 / p99 ms "
                   "| prometheus_client at this rate, % of a core |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for run in viewed:
            v, h, ng = run["live_view"], run["live_healthy"], run.get("live_nginx")
            a, b = v["server_cpu_ms_per_scrape"], h["server_cpu_ms_per_scrape"]
            p50, p99 = _epp_latency(v)
            py = run.get("python_live")
            py_percent = f"{py['scrape_ms']['p50'] * rate / 10:.0f}" if py else "-"
            nginx_ms = fmt_ms(ng["server_cpu_ms_per_scrape"]) if ng else "-"
            nginx_ratio = f"{a / max(1e-9, ng['server_cpu_ms_per_scrape']):.2f}x" if ng else "-"
            out.append(f"| {run['writers']} | {run.get('view_body_bytes') or '-'} | {fmt_ms(a)} "
                       f"| {v['server_cpu_percent']:.2f} | {fmt_ms(b)} | {a / max(1e-9, b):.2f}x | {nginx_ms} "
                       f"| {nginx_ratio} | {fmt_ms(p50)} / {fmt_ms(p99)} | {py_percent} |")
        out.append("")
    unchanged = [r for r in pod["runs"] if r.get("unchanged")]
    if unchanged:
        out.append("Unchanged directory: the same writers stopped (`SIGSTOP`: alive, files kept, no value "
                   "changes), the same pollers; then, back to back at concurrency 1, Prometheus's request "
                   "(`http_load`), against prometheus_client's in-process collection of that directory.\n")
        out.append("| writers | exporter | scrapes | CPU ms/scrape | % of a core | back to back: p50 ms / CPU ms "
                   "| prometheus_client ms/collection | ratio (p50) |")
        out.append("|---|---|---|---|---|---|---|---|")
        for run in unchanged:
            u, py = run["unchanged"], run.get("python_unchanged")
            for key, name in (("own_metrics", "default (own metrics on)"),
                              ("no_own_metrics", "`--web.disable-exporter-metrics`")):
                r = u.get(key)
                if not r:
                    continue
                c1 = u.get(key + "_http_c1")
                b2b = f"{fmt_ms(c1['latency_ms']['p50'])} / {fmt_ms(c1['cpu_ms_per_scrape'])}" if c1 else "-"
                ratio = fmt_ratio(py["scrape_ms"]["p50"], c1["latency_ms"]["p50"]) if c1 and py else "-"
                out.append(f"| {run['writers']} | {name} | {r['scrapes']} | {fmt_ms(r['server_cpu_ms_per_scrape'])} "
                           f"| {r['server_cpu_percent']:.2f} | {b2b} "
                           f"| {fmt_ms(py['scrape_ms']['p50']) if py else '-'} | {ratio} |")
        out.append("")
    return "\n".join(out)


def targets(results):
    by = {c["label"]: c for c in results["cases"] if "python" in c}
    t = []

    def add(name, ok, detail):
        t.append({"target": name, "met": ok, "detail": detail})

    c = by.get("1024")
    if c:
        py, rs = c["python"]["scrape_ms"]["p50"], c["exporter"]["scrape_ms"]["p50"]
        add("1,024 processes: >= 200x faster than prometheus_client", py / rs >= 200,
            f"{py:.0f} ms vs {rs:.2f} ms = {py / rs:.0f}x")
        if c.get("floor_ms"):
            add("1,024 processes: within 3x of streaming the used bytes once", rs / c["floor_ms"] <= 3,
                f"{rs:.2f} ms vs floor {c['floor_ms']:.2f} ms = {rs / c['floor_ms']:.1f}x")
    c = by.get("16")
    if c:
        py, rs = c["python"]["scrape_ms"]["p50"], c["exporter"]["scrape_ms"]["p50"]
        add("16 processes: >= 50x faster than prometheus_client", py / rs >= 50,
            f"{py:.1f} ms vs {rs:.3f} ms = {py / rs:.0f}x")
        add("16 processes: < 1 ms per scrape in-process", rs < 1.0, f"{rs:.3f} ms")
        h = c.get("http")
        if h:
            rss = (h.get("exporter_vm_hwm_kib") or 0) / 1024
            add("serving 16 processes: peak RSS < 20 MiB", rss < 20, f"VmHWM {rss:.1f} MiB")
            rates = {k: v["requests_per_second"] for k, v in h.items()
                     if k.startswith("exporter_c") and not k.endswith("_one_cpu") and isinstance(v, dict)}
            best = max(rates.values()) if rates else 0
            add("serving 16 processes: >= 2,000 scrapes/s over HTTP", best >= 2000,
                ", ".join(f"{k.split('_')[1]}: {v:.0f}/s" for k, v in sorted(rates.items())))
    sized = [c for c in results["cases"] if "python" in c and c["dead"] == 0 and c["processes"] >= 16]
    if len(sized) >= 2:
        per = [c["exporter"]["scrape_ms"]["p50"] * 1e3 / c["fixture"]["records"] for c in sized]
        by_size = {c["processes"]: p for c, p in zip(sized, per)}
        detail = ", ".join(f"{c['label']}: {p * 1e3:.1f} ns" for c, p in zip(sized, per))
        if 256 in by_size and 1024 in by_size:
            # Per-entry cost is lower while the used bytes fit in the CPU caches (16, 64 processes);
            # what matters for linear growth is that it stays flat once they do not.
            growth = by_size[1024] / by_size[256]
            add("cost grows linearly with processes x series (cost per entry at 1,024 within 1.5x of 256)",
                growth <= 1.5, f"{detail}; 1,024/256 = {growth:.2f}")
        else:
            spread = max(per) / min(per)
            add("cost grows linearly with processes x series (max/min cost per entry <= 2)",
                spread <= 2, detail)
    # Issue 16.
    active = {str(w["processes"]): w for w in results.get("writers") or [] if w.get("active_http")}
    for label, factor in (("1024", 200), ("16", 100)):
        c = by.get(label)
        if c and c.get("http"):
            py = c["python"]["scrape_ms"]["p50"]
            rs = c["http"]["exporter_c1"]["latency_ms"]["p50"]
            detail = f"{py:.1f} ms vs {rs:.3f} ms = {py / rs:.0f}x"
            w = active.get(label)
            if w:
                # The fixture does not change between scrapes; say what a changing one gives.
                apy, ars = w["active_python"]["scrape_ms"]["p50"], w["active_http"]["exporter"]["latency_ms"]["p50"]
                detail += (f" (unchanged directory; with {w['writers']} writers changing values before every "
                           f"scrape: {apy:.1f} ms vs {ars:.3f} ms = {apy / ars:.0f}x)")
            add(f"{label} processes: one HTTP scrape (gzip) >= {factor}x prometheus_client's in-process merge",
                py / rs >= factor, detail)
    c = by.get("1024")
    if c and c.get("floor_ms"):
        rs = c["exporter"]["scrape_ms"]["p50"]
        add("1,024 processes: in-process scrape <= 1.5x streaming the used bytes once",
            rs / c["floor_ms"] <= 1.5, f"{rs:.2f} ms vs floor {c['floor_ms']:.2f} ms = {rs / c['floor_ms']:.2f}x")
    if c and c.get("http", {}).get("exporter_memory"):
        em, u = c["http"]["exporter_memory"], c["http"]["directory_used"]
        add("1,024 processes: anonymous RSS <= 32 MiB", em["rss_anon_kib"] <= 32 * 1024,
            f"{em['rss_anon_kib'] / 1024:.1f} MiB")
        add("1,024 processes: file-backed memory of the metric files <= their used bytes (in whole pages)",
            em["metric_files_kib"] * 1024 <= u["used_page_bytes"],
            f"{em['metric_files_kib'] / 1024:.1f} MiB resident; used {u['used_bytes'] / 2**20:.1f} MiB, "
            f"{u['used_page_bytes'] / 2**20:.1f} MiB in whole pages")
    card = results.get("cardinality")
    if card and "serve" in card and card["python"].get("merge_seconds"):
        py, rs = card["python"]["merge_seconds"], card["serve"]["steady_scrape_seconds"]
        add(f"{card['series']:,} series in one file: a scrape >= 50x faster than prometheus_client",
            py / rs >= 50, f"{py:.2f} s vs {rs:.3f} s = {py / rs:.0f}x")
        add(f"{card['series']:,} series in one file: peak memory below prometheus_client's",
            card["serve"]["peak_mib"] < card["python"]["peak_mib"],
            f"serve {card['serve']['peak_mib']:.0f} MiB (8 concurrent scrapes), dump "
            f"{card['dump']['peak_mib']:.0f} MiB, Python {card['python']['peak_mib']:.0f} MiB")
    # Issue 29.
    pod = results.get("polled_pod")
    for run in (pod or {}).get("runs", []):
        live, limit = run.get("live"), POD_TARGET_PERCENT.get(run["writers"])
        if live and limit is not None:
            rate = pod["settings"]["poll_rate_hz"]
            detail = (f"{live['server_cpu_percent']:.2f} % ({live['server_cpu_ms_per_scrape']:.3f} ms per scrape, "
                      f"{live['scrapes']} scrapes in {live['wall_s']:.1f} s)")
            if run.get("python_live"):
                detail += (f"; prometheus_client would need {run['python_live_percent']:.0f} % "
                           f"({run['python_live']['scrape_ms']['p50']:.1f} ms per collection x {rate:g}/s)")
            add(f"polled pod, {run['writers']} live writer(s), {rate:g} scrapes/s: exporter <= {limit:g} % of one core",
                live["server_cpu_percent"] <= limit, detail)
        view, healthy = run.get("live_view"), run.get("live_healthy")
        limit = POD_TARGET_VIEW_RATIO.get(run["writers"])
        if view and healthy and limit is not None:
            a, b = view["server_cpu_ms_per_scrape"], healthy["server_cpu_ms_per_scrape"]
            detail = f"{a:.3f} ms vs {b:.3f} ms per poll = {a / max(1e-9, b):.2f}x"
            if run.get("live_nginx"):
                detail += f"; nginx serving the view's bytes {run['live_nginx']['server_cpu_ms_per_scrape']:.3f} ms"
            add(f"polled pod, {run['writers']} live writer(s): a poll of {EPP_VIEW_PATH} (Go's headers) <= "
                f"{limit:g}x a poll of /-/healthy, same run", a <= limit * b, detail)
        u = run.get("unchanged") if run["writers"] == 16 else None    # the targets are for 16 writers
        if u and u.get("own_metrics"):
            own = u["own_metrics"]["server_cpu_ms_per_scrape"]
            detail = f"{own:.3f} ms"
            if u.get("no_own_metrics"):
                detail += f" ({u['no_own_metrics']['server_cpu_ms_per_scrape']:.3f} ms with --web.disable-exporter-metrics)"
            add(f"polled pod, unchanged {run['writers']}-writer directory: <= {POD_TARGET_UNCHANGED_MS:g} ms of server "
                "CPU per scrape, own metrics on", own <= POD_TARGET_UNCHANGED_MS, detail)
            c1, py = u.get("own_metrics_http_c1"), run.get("python_unchanged")
            if c1 and py:
                a, b = py["scrape_ms"]["p50"], c1["latency_ms"]["p50"]
                add(f"polled pod, unchanged {run['writers']}-writer directory: one HTTP scrape (keep-alive, gzip, "
                    f"Prometheus 2.x Accept, own metrics on) >= {POD_TARGET_HTTP_RATIO}x prometheus_client's "
                    "in-process merge", a / b >= POD_TARGET_HTTP_RATIO, f"{a:.1f} ms vs {b:.3f} ms = {a / b:.0f}x")
    if any("exporter" in c for c in results["cases"]):
        no_json = all(c["exporter"]["steady_keys_decoded_max"] == 0 and c["exporter"]["steady_replanned"] == 0
                      for c in results["cases"] if "exporter" in c)
        add("unchanged directory: no JSON parsing (no key decoded, no re-plan)", no_json,
            "checked on every steady-state scrape of every directory")
    return t


def svg_plot(results, path):
    """Log-log plot of scrape time (ms) against processes x series, hand-written SVG."""
    import math

    cases = [c for c in results["cases"] if "python" in c and c["dead"] == 0]
    if len(cases) < 2:
        return
    series = [
        ("prometheus_client 0.26 (Python)", "#d62728", "circle",
         [(c["fixture"]["records"], c["python"]["scrape_ms"]["p50"]) for c in cases]),
        ("multiproc-exporter, first scrape (cold reader)", "#ff7f0e", "square",
         [(c["fixture"]["records"], c["exporter"]["cold_ms"]) for c in cases]),
        ("multiproc-exporter, steady state (warm reader)", "#1f77b4", "circle",
         [(c["fixture"]["records"], c["exporter"]["scrape_ms"]["p50"]) for c in cases]),
        ("multiproc-exporter over HTTP (gzip, p50 at concurrency 1)", "#17becf", "square",
         [(c["fixture"]["records"], c["http"]["exporter_c1"]["latency_ms"]["p50"]) for c in cases
          if "exporter_c1" in c.get("http", {})]),
        ("list + open + pread every file, nothing else", "#7f7f7f", "diamond",
         [(c["fixture"]["records"], c["read_floor"]["read_ms"]["p50"]) for c in cases if "read_floor" in c]),
        ("pread every file through descriptors kept open", "#9467bd", "diamond",
         [(c["fixture"]["records"], c["read_floor"]["open_fds_read_ms"]["p50"]) for c in cases
          if "open_fds_read_ms" in c.get("read_floor", {})]),
        ("floor: used bytes / memory bandwidth", "#2ca02c", "none",
         [(c["fixture"]["records"], c["floor_ms"]) for c in cases if c.get("floor_ms")]),
    ]
    churn = [c for c in results["cases"] if "python" in c and c["dead"] > 0]
    points = [p for s in series for p in s[3]]
    xs = [math.log10(x) for x, _ in points]
    ys = [math.log10(y) for _, y in points if y > 0]
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs))
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    w, h, ml, mr, mt, mb = 760, 560, 70, 20, 40, 140

    def px(x):
        return ml + (math.log10(x) - x0) / (x1 - x0) * (w - ml - mr)

    def py(y):
        return h - mb - (math.log10(y) - y0) / (y1 - y0) * (h - mt - mb)

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
         'font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="15">Scrape time vs processes x series '
         f'(log-log, {results["machine"]["cpus"]} CPUs, median)</text>']
    for e in range(x0, x1 + 1):
        x = ml + (e - x0) / (x1 - x0) * (w - ml - mr)
        o.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{h - mb}" stroke="#ddd"/>')
        o.append(f'<text x="{x:.1f}" y="{h - mb + 16}" text-anchor="middle">1e{e}</text>')
    for e in range(y0, y1 + 1):
        y = h - mb - (e - y0) / (y1 - y0) * (h - mt - mb)
        label = f"{10.0 ** e:g} ms"
        o.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{w - mr}" y2="{y:.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    o.append(f'<rect x="{ml}" y="{mt}" width="{w - ml - mr}" height="{h - mt - mb}" fill="none" stroke="#333"/>')
    o.append(f'<text x="{(ml + w - mr) / 2}" y="{h - mb + 34}" text-anchor="middle">'
             'entries = processes x series per process (~386)</text>')
    for c in cases:
        x = px(c["fixture"]["records"])
        o.append(f'<text x="{x:.1f}" y="{mt + 12}" text-anchor="middle" fill="#555" font-size="10">'
                 f'{c["processes"]} proc</text>')
    legend_y = h - mb + 52
    for i, (name, color, marker, pts) in enumerate(series):
        if not pts:
            continue
        d = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(pts))
        dash = ' stroke-dasharray="5,4"' if marker == "none" else ""
        o.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in pts:
            cx, cy = px(x), py(y)
            if marker == "circle":
                o.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{color}"/>')
            elif marker == "square":
                o.append(f'<rect x="{cx - 3.5:.1f}" y="{cy - 3.5:.1f}" width="7" height="7" fill="{color}"/>')
            elif marker == "diamond":
                o.append(f'<path d="M{cx:.1f},{cy - 4.5:.1f} L{cx + 4.5:.1f},{cy:.1f} L{cx:.1f},{cy + 4.5:.1f} '
                         f'L{cx - 4.5:.1f},{cy:.1f} Z" fill="{color}"/>')
        lx = ml + (i % 2) * 330
        ly = legend_y + (i // 2) * 18
        o.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 24}" y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>')
        o.append(f'<text x="{lx + 30}" y="{ly}">{name}</text>')
    for c in churn:
        for value, color in ((c["python"]["scrape_ms"]["p50"], "#d62728"),
                             (c["exporter"]["scrape_ms"]["p50"], "#1f77b4")):
            cx, cy = px(c["fixture"]["records"]), py(value)
            o.append(f'<text x="{cx:.1f}" y="{cy + 4:.1f}" text-anchor="middle" fill="{color}" '
                     'font-size="14" font-weight="bold">x</text>')
    if churn:
        ly = legend_y + ((len(series) + 1) // 2) * 18
        o.append(f'<text x="{ml}" y="{ly}">x: high churn ({churn[0]["processes"]} live + {churn[0]["dead"]} dead '
                 'processes), Python red, exporter blue</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="CI smoke test: 16 processes, few iterations, debug build; assert equality and speed")
    p.add_argument("--sizes", default=None,
                   help="live process counts (default 1,16,64,256,1024,4096; quick: 16)")
    p.add_argument("--churn", default="16:1024,16:10000",
                   help="LIVE:DEAD of the high-churn directories, comma-separated (default 16:1024,16:10000)")
    p.add_argument("--no-churn", action="store_true", help="skip the high-churn directory")
    p.add_argument("--profile", default=None, help="cargo profile of the binaries: release (default) or debug "
                                                  "(default with --quick)")
    p.add_argument("--no-build", action="store_true", help="do not run cargo build first")
    p.add_argument("--out", default=None, help="where to write results (default docs/performance; "
                                               "with --quick nothing is written unless given)")
    p.add_argument("--workdir", default=None, help="where to generate fixtures (default: a new temporary dir)")
    p.add_argument("--keep", action="store_true", help="keep the generated fixtures")
    p.add_argument("--skip-http", action="store_true")
    p.add_argument("--skip-writers", action="store_true")
    p.add_argument("--no-one-cpu", action="store_true",
                   help="skip the concurrency-1 HTTP runs with server and load generator pinned to one CPU")
    p.add_argument("--writers", type=int, default=4, help="Python writer processes (default 4)")
    p.add_argument("--writer-rate", type=float, default=20000.0,
                   help="operations per second per writer (default 20000)")
    p.add_argument("--writer-sizes", default="16,256", help="directories measured with writers active")
    p.add_argument("--cardinality", type=int, default=None,
                   help="series of the one-writer high-cardinality case (default 500000; quick: 20000; 0: skip)")
    p.add_argument("--no-polled-pod", action="store_true", help="skip the polled pod (issue 29)")
    p.add_argument("--polled-pod-writers", default=None,
                   help="live writer counts of the polled pod (default 1,4,16; quick: 1,16); the largest is also "
                        "measured unchanged")
    p.add_argument("--polled-pod-seconds", type=float, default=None,
                   help="wall time of each polled-pod measurement (default 20; quick: 4)")
    p.add_argument("--only", choices=["polled-pod"], default=None,
                   help="run this scenario alone (no other directory, no default --out)")
    args = p.parse_args(argv)
    quick = args.quick
    args.profile = args.profile or ("debug" if quick else "release")
    args.sizes = [int(s) for s in (args.sizes or ("16" if quick else "1,16,64,256,1024,4096")).split(",") if s]
    args.writer_sizes = [int(s) for s in args.writer_sizes.split(",") if s]
    if args.cardinality is None:
        args.cardinality = 20000 if quick else 500000
    if quick:
        args.no_churn, args.skip_writers = True, True
    args.py_iterations, args.py_seconds = (10, 2.0) if quick else (100, 8.0)
    args.rs_iterations, args.rs_seconds = (100, 1.0) if quick else (2000, 3.0)
    args.concurrency = [1] if quick else [1, 8]
    args.one_cpu = not quick and not args.no_one_cpu and shutil.which("taskset") is not None \
        and len(os.sched_getaffinity(0)) > 1 and 0 in os.sched_getaffinity(0)
    args.py_http = (10, 2.0) if quick else (400, 8.0)     # (requests, seconds)
    args.rs_http = (200, 1.0) if quick else (50000, 5.0)
    args.pod_writers = [int(s) for s in (args.polled_pod_writers or ("1,16" if quick else "1,4,16")).split(",") if s]
    args.pod_seconds = args.polled_pod_seconds or (4.0 if quick else 20.0)
    args.pod_tick = 0.01                                   # the writers update every 10 ms
    args.pod_warmup = 1.0 if quick else 3.0                # polled, not measured (a new server settles)
    args.pod_py = (5, 1.0) if quick else (30, 4.0)         # Python's collections: (at most, seconds)
    if args.only == "polled-pod" and args.no_polled_pod:
        p.error("--only polled-pod and --no-polled-pod exclude each other")
    if args.out is None and not quick and not args.only:
        args.out = os.path.join(ROOT, "docs", "performance")
    return args


def main(argv):
    if argv and argv[0] == "_plot":
        # Re-draw the plot from a results.json: _plot RESULTS.json OUT.svg
        with open(argv[1]) as f:
            svg_plot(json.load(f), argv[2])
        return 0
    children = {"_py_inproc": child_py_inproc, "_py_server": child_py_server, "_py_writer": child_py_writer,
                "_py_write_series": child_py_write_series, "_py_poller": child_py_poller}
    if argv and argv[0] in children:
        children[argv[0]](argv[1:])
        return 0
    args = parse_args(argv)
    start = time.time()
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        log("compare.py: prometheus_client is missing: run scripts/setup-python-venv and use target/venv/bin/python")
        return 2
    if not args.no_build:
        cmd = ["cargo", "build", "--quiet", "--examples", "--bins"] + (["--release"] if args.profile == "release" else [])
        log("$ " + " ".join(cmd))
        subprocess.run(cmd, check=True, cwd=ROOT)
    tools = Tools(args.profile)
    workdir = args.workdir or tempfile.mkdtemp(prefix="mpe-compare-")
    os.makedirs(workdir, exist_ok=True)
    results = {"machine": machine_info(tools.python), "settings": {
        "profile": args.profile, "quick": args.quick, "concurrency": args.concurrency,
        "python_iterations": args.py_iterations, "python_seconds": args.py_seconds,
        "exporter_iterations": args.rs_iterations, "exporter_seconds": args.rs_seconds,
        "python_http": args.py_http, "exporter_http": args.rs_http, "workdir_fs": fs_type(workdir),
        "accept": PROMETHEUS_ACCEPT}}
    only_pod = args.only == "polled-pod"
    checks = []
    try:
        if only_pod:
            pass
        elif not args.quick:
            log("== memory bandwidth")
            results["membw"] = run_json([tools.bench, "--membw"])
        else:
            results["membw"] = run_json([tools.bench, "--membw", "--mib", "64"])
        cases = [] if only_pod else [(str(n), n, 0) for n in args.sizes]
        if not args.no_churn and not only_pod:
            for spec in args.churn.split(","):
                live, dead = (int(x) for x in spec.split(":"))
                cases.append((f"churn_{live}+{dead}dead", live, dead))
        results["cases"] = []
        for label, processes, dead in cases:
            c = measure_case(tools, args, label, processes, dead, workdir, results["membw"])
            results["cases"].append(c)
            checks.append((f"{label}: library, dump and Python give the same bytes", c["equal_inprocess"]["equal"],
                           "; ".join(c["equal_inprocess"]["problems"])))
            if "equal_http" in c:
                checks.append((f"{label}: same body over HTTP (Prometheus Accept, gzip)", c["equal_http"]["equal"],
                               "; ".join(c["equal_http"]["problems"])))
            if "python" in c:
                py, rs = c["python"]["scrape_ms"]["p50"], c["exporter"]["scrape_ms"]["p50"]
                checks.append((f"{label}: exporter faster than Python in-process", rs < py,
                               f"{rs:.3f} ms vs {py:.3f} ms"))
                e = c["exporter"]
                checks.append((f"{label}: unchanged directory decodes no key and does not re-plan",
                               e["steady_keys_decoded_max"] == 0 and e["steady_replanned"] == 0,
                               f"keys {e['steady_keys_decoded_max']}, re-plans {e['steady_replanned']}"))
            if "http" in c:
                py, rs = c["http"]["python_c1"]["latency_ms"]["p50"], c["http"]["exporter_c1"]["latency_ms"]["p50"]
                checks.append((f"{label}: exporter faster than Python over HTTP", rs < py,
                               f"{rs:.3f} ms vs {py:.3f} ms"))
            log(f"   done ({time.time() - start:.0f} s so far)")
        if not args.skip_writers and not only_pod:
            results["writers"] = [measure_writers(tools, args, n, workdir) for n in args.writer_sizes]
        if args.cardinality and not only_pod:
            card = results["cardinality"] = measure_cardinality(tools, args.cardinality, workdir)
            checks.append((f"{card['series']} series: dump gives Python's bytes", card["equal"],
                           "; ".join(card["problems"])))
            checks.append((f"{card['series']} series: dump needs less memory than Python",
                           card["dump"]["peak_mib"] < card["python"]["peak_mib"],
                           f"{card['dump']['peak_mib']:.0f} MiB vs {card['python']['peak_mib']:.0f} MiB"))
        if not args.no_polled_pod:
            results["settings"]["polled_pod"] = {"writers": args.pod_writers, "seconds": args.pod_seconds}
            results["polled_pod"] = measure_polled_pod(tools, args, workdir)
            checks.extend(polled_pod_checks(results["polled_pod"], args.quick))
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    results["seconds"] = time.time() - start
    results["checks"] = [{"check": n, "ok": ok, "detail": d} for n, ok, d in checks]
    if not args.quick:
        results["targets"] = targets(results)
    table = tables(results)
    print(table)
    if results.get("targets"):
        print("### Targets (issues 4, 16 and 29)\n")
        for t in results["targets"]:
            print(f"- [{'met' if t['met'] else 'NOT met'}] {t['target']}: {t['detail']}")
        print()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
            f.write("\n")
        with open(os.path.join(args.out, "results.md"), "w") as f:
            f.write("<!-- Generated by scripts/compare.py; do not edit. -->\n")
            m = results["machine"]
            f.write(f"Machine: {m['cpus']} x {m['cpu']}, {m['memory_mib']} MiB, Linux {m['kernel']}; "
                    f"Python {m['python']}, prometheus_client {m['prometheus_client']}; {m['rustc']}; "
                    f"commit {m['commit']}{' (src modified)' if m['src_dirty'] else ''}; {m['date']}. ")
            if results.get("membw"):
                f.write(f"Memory read bandwidth {results['membw']['read_gb_s']:.1f} GB/s "
                        f"(copy {results['membw']['copy_gb_s']:.1f} GB/s). ")
            f.write(f"Fixtures on {results['settings']['workdir_fs']}.\n\n")
            f.write(table + "\n")
            if results.get("targets"):
                f.write("### Targets (issues 4, 16 and 29)\n\n")
                for t in results["targets"]:
                    f.write(f"- [{'met' if t['met'] else 'NOT met'}] {t['target']}: {t['detail']}\n")
        svg_plot(results, os.path.join(args.out, "scaling.svg"))
        log(f"wrote {args.out}/results.json, results.md, scaling.svg")
    failed = [c for c in checks if not c[1]]
    for name, ok, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f" ({detail})" if detail else ""))
    print(f"compare: {len(checks) - len(failed)} passed, {len(failed)} failed")
    log(f"total {time.time() - start:.0f} s")
    return 1 if failed else 0


def fs_type(path):
    # findmnt names ext4 correctly; `stat -f` reports it as "ext2/ext3".
    for cmd in (["findmnt", "-n", "-o", "FSTYPE", "-T", path], ["stat", "-f", "-c", "%T", path]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            return out.stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            continue
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
