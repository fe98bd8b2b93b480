"""A real gunicorn app (4 workers, gunicorn_dropin_app.py) serving /metrics through the drop-in: after N requests
spread over the workers, every scrape (through ``MultiProcessCollector`` and through
``multiproc_exporter.generate_latest``) counts all N and is byte-identical to prometheus_client's exposition of the
same directory.

    python tests/python/package/gunicorn_dropin.py
"""

import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from _servers import free_port, stop

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

REQUESTS = 200


def get(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def main():
    metrics_dir = tempfile.mkdtemp(prefix='mpe-gunicorn-')
    port = free_port()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=metrics_dir)
    gunicorn = os.path.join(os.path.dirname(sys.executable), 'gunicorn')
    server = subprocess.Popen(
        [gunicorn, '-w', '4', '-b', f'127.0.0.1:{port}', '--chdir', os.path.dirname(os.path.abspath(__file__)),
         'gunicorn_dropin_app:app'], env=env)
    base = f'http://127.0.0.1:{port}'
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get(base + '/pid')
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit('gunicorn did not start')
                time.sleep(0.2)
        for _ in range(REQUESTS):
            assert get(base + '/work') == b'done\n'
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=metrics_dir)
        expected = generate_latest(registry)
        total = re.search(rb'^app_requests_total\{path="/work"\} (\S+)$', expected, re.M)
        assert total and float(total.group(1)) == REQUESTS, expected.decode()
        count = re.search(rb'^app_latency_seconds_count (\S+)$', expected, re.M)
        assert count and float(count.group(1)) == REQUESTS, expected.decode()
        writers = {name for name in os.listdir(metrics_dir) if name.startswith('counter_')}
        for _ in range(10):
            for route in ('/metrics', '/metrics-direct'):
                body = get(base + route)
                if body != expected:
                    sys.stdout.write(f'--- prometheus_client\n{expected.decode()}--- {route}\n{body.decode()}')
                    raise SystemExit(f'gunicorn drop-in: {route} differs from prometheus_client')
        print(f'gunicorn drop-in: {REQUESTS} requests over {len(writers)} writer files, 20 scrapes identical')
    finally:
        stop(server, metrics_dir)


if __name__ == '__main__':
    main()
