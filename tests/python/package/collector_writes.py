"""Issue 47: the collector inside the application. A real gunicorn app (2 sync workers) whose workers write with
prometheus_client (a ``livesum`` gauge, a ``sum`` gauge, a counter) AND serve ``/metrics`` through the drop-in with
every liveness option on (``skip_dead_live_gauges``, ``drop_dead_gauges``, ``process_metrics``). The worker that
collects is a live writer: its own live and sum gauges and its own ``process_*`` series are served, by whichever
worker answers. (Before the fix the collecting process left its own pid out of the candidate writers: once the other
worker showed that pids are visible, the answering worker's own files were "dead" and its series dropped.)

    python tests/python/package/collector_writes.py

Run as gunicorn's app (``collector_writes:app``), this module is the app.
"""

import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from _servers import free_port, stop

WORKERS = 2

if 'PROMETHEUS_MULTIPROC_DIR' in os.environ and __name__ != '__main__':
    # The app, imported by each gunicorn worker after the fork.
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    import multiproc_exporter

    ALIVE = Gauge('app_workers_alive', 'Workers running.', multiprocess_mode='livesum')
    SLOTS = Gauge('app_worker_slots', 'Slots per worker, summed.', multiprocess_mode='sum')
    SERVED = Counter('app_scrapes', 'Scrapes served.')
    ALIVE.set(1)
    SLOTS.set(1)

    def app(environ, start_response):
        if environ['PATH_INFO'] != '/metrics':
            start_response('404 Not Found', [('Content-Type', 'text/plain')])
            return [b'not found\n']
        SERVED.inc()
        registry = CollectorRegistry()
        multiproc_exporter.MultiProcessCollector(
            registry, skip_dead_live_gauges=True, drop_dead_gauges=True, process_metrics=True)
        body = generate_latest(registry)
        start_response('200 OK', [('Content-Type', 'text/plain'), ('X-Worker-Pid', str(os.getpid()))])
        return [body]


def scrape(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return int(response.headers['X-Worker-Pid']), response.read().decode()


def value(body, series):
    match = re.search(r'^' + re.escape(series) + r' (\S+)$', body, re.M)
    return float(match.group(1)) if match else None


def main():
    metrics_dir = tempfile.mkdtemp(prefix='mpe-collector-writes-')
    port = free_port()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=metrics_dir)
    gunicorn = os.path.join(os.path.dirname(sys.executable), 'gunicorn')
    server = subprocess.Popen(
        [gunicorn, '-w', str(WORKERS), '-b', f'127.0.0.1:{port}', '--chdir',
         os.path.dirname(os.path.abspath(__file__)), 'collector_writes:app'], env=env)
    url = f'http://127.0.0.1:{port}/metrics'
    try:
        # Every worker has written its files before any is asked.
        deadline = time.monotonic() + 60
        while len([n for n in os.listdir(metrics_dir) if n.startswith('gauge_livesum_')]) < WORKERS:
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit('collector_writes: gunicorn did not start its workers')
            time.sleep(0.1)
        answered = {}
        for _ in range(400):
            pid, body = scrape(url)
            answered[pid] = body
            if len(answered) == WORKERS:
                break
        if len(answered) < WORKERS:
            raise SystemExit(f'collector_writes: only workers {sorted(answered)} answered')
        for pid, body in answered.items():
            problems = []
            if value(body, 'app_workers_alive') != WORKERS:
                problems.append(f'app_workers_alive is {value(body, "app_workers_alive")}, want {WORKERS}')
            if value(body, 'app_worker_slots') != WORKERS:
                problems.append(f'app_worker_slots is {value(body, "app_worker_slots")}, want {WORKERS}')
            for other in answered:
                if value(body, f'process_start_time_seconds{{pid="{other}"}}') is None:
                    problems.append(f'no process_start_time_seconds of worker {other}')
            if problems:
                sys.stdout.write(body)
                raise SystemExit(f'collector_writes: worker {pid} serving /metrics: ' + '; '.join(problems))
        print(f'collector_writes: {WORKERS} gunicorn workers each serve their own live gauges and process_* series')
    finally:
        stop(server, metrics_dir)


if __name__ == '__main__':
    main()
