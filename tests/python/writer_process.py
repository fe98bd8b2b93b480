"""One prometheus_client 0.26.0 process in multiprocess mode, driven from stdin.

It writes a counter (``app_requests_total`` +3), a ``livesum`` gauge
(``app_in_flight`` = 1) and a ``sum`` gauge (``app_cache_objects`` = 5), and,
with ``WRITER_ALL_KINDS=1``, with values that differ between processes (from
the pid), a histogram, a summary and gauges in ``min``, ``max``,
``mostrecent`` and ``all`` modes (every kind compaction knows, and one it
must leave alone); prints ``ready``, then obeys one command a line:

* ``hold NAME``: creates ``NAME`` in the metrics directory and keeps it open
  at 0 bytes, as prometheus_client does for an instant between creating a
  file and sizing it; prints ``held``;
* ``series N``: increments ``app_paths_total{path="/p/<i>"}`` for ``i`` in
  ``0..N`` (a pod of many series); prints ``wrote``;
* ``exit``: exits (without ``mark_process_dead``, like a crash).

``tests/it/writers.rs`` kills these processes and checks what the exporter
serves.
"""
import os
import sys

from prometheus_client import Counter, Gauge, Histogram, Summary

requests = Counter("app_requests", "Requests handled.")
in_flight = Gauge("app_in_flight", "Requests in flight.", multiprocess_mode="livesum")
cache = Gauge("app_cache_objects", "Objects cached.", multiprocess_mode="sum")
requests.inc(3)
in_flight.set(1)
cache.set(5)

if os.environ.get("WRITER_ALL_KINDS") == "1":
    spread = os.getpid() % 97
    Histogram("app_latency_seconds", "Latency.", buckets=(0.5, 2.0)).observe(spread / 4)
    Summary("app_payload_bytes", "Payload sizes.").observe(spread * 8)
    Gauge("app_free_min", "Lowest free slots.", multiprocess_mode="min").set(spread)
    Gauge("app_queue_max", "Longest queue.", multiprocess_mode="max").set(spread)
    Gauge("app_last_seen", "Last seen.", multiprocess_mode="mostrecent").set(spread)
    Gauge("app_workers", "Per worker.", multiprocess_mode="all").set(spread)
print("ready", flush=True)

held = []
paths = None
for line in sys.stdin:
    command, *args = line.split()
    if command == "hold":
        held.append(open(os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"], args[0]), "a+b"))
        print("held", flush=True)
    elif command == "series":
        if paths is None:
            paths = Counter("app_paths", "Requests by path.", ["path"])
        for i in range(int(args[0])):
            paths.labels("/p/%d" % i).inc()
        print("wrote", flush=True)
    elif command == "exit":
        break
