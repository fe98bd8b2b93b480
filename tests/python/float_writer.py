"""One prometheus_client 0.26.0 process in multiprocess mode that counts in
floats (issue 54): ``SERIES`` labelled counters (``app_work_seconds_total``)
and histograms (``app_latency_seconds``), each incremented or observed with
values drawn from ``random.Random(SEED)``, the arguments; prints ``ready``,
then exits when stdin says ``exit`` (without ``mark_process_dead``, as a
recycled gunicorn worker whose server does not call it).

``tests/it/monotone_sums.rs`` makes six of these, lets four exit and checks
that no counter, bucket, ``_count`` or ``_sum`` served goes down.
"""
import random
import sys

from prometheus_client import Counter, Histogram

series, seed = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
work = Counter("app_work", "Work done, in seconds.", ["series"])
latency = Histogram("app_latency_seconds", "Latency.", ["series"], buckets=(0.1, 1.0, 10.0))
for i in range(series):
    label = "s%03d" % i
    for _ in range(3):
        work.labels(label).inc(rng.uniform(0.0, 10.0))
        latency.labels(label).observe(rng.uniform(0.0, 12.0))
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "exit":
        break
