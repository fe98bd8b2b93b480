"""One prometheus_client 0.26.0 process in multiprocess mode, driven from stdin.

It writes a counter (``app_requests_total`` +3), a ``livesum`` gauge
(``app_in_flight`` = 1) and a ``sum`` gauge (``app_cache_objects`` = 5),
prints ``ready``, then obeys one command a line:

* ``hold NAME``: creates ``NAME`` in the metrics directory and keeps it open
  at 0 bytes, as prometheus_client does for an instant between creating a
  file and sizing it; prints ``held``;
* ``exit``: exits (without ``mark_process_dead``, like a crash).

``tests/it/writers.rs`` kills these processes and checks what the exporter
serves.
"""
import os
import sys

from prometheus_client import Counter, Gauge

requests = Counter("app_requests", "Requests handled.")
in_flight = Gauge("app_in_flight", "Requests in flight.", multiprocess_mode="livesum")
cache = Gauge("app_cache_objects", "Objects cached.", multiprocess_mode="sum")
requests.inc(3)
in_flight.set(1)
cache.set(5)
print("ready", flush=True)

held = []
for line in sys.stdin:
    command, *args = line.split()
    if command == "hold":
        held.append(open(os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"], args[0]), "a+b"))
        print("held", flush=True)
    elif command == "exit":
        break
