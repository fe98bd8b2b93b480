"""A WSGI app served by gunicorn (4 workers) in prometheus_client multiprocess mode whose ``/metrics`` uses the
drop-in the way prometheus_client's documentation shows it (a new registry and collector on every request):

    PROMETHEUS_MULTIPROC_DIR=... gunicorn -w 4 -b 127.0.0.1:PORT gunicorn_dropin_app:app

``/work`` counts a request (labelled with nothing: the counter adds up over the workers), ``/metrics`` is the
collector's text exposition, ``/metrics-direct`` is ``multiproc_exporter.generate_latest()``, ``/pid`` names the
worker that answered.
"""
import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, CONTENT_TYPE_LATEST

import multiproc_exporter

REQUESTS = Counter('app_requests', 'Requests served.', ['path'])
LATENCY = Histogram('app_latency_seconds', 'Latency.', buckets=(0.001, 0.01, 0.1, 1.0))


def app(environ, start_response):
    path = environ.get('PATH_INFO', '/')
    if path == '/metrics':
        registry = CollectorRegistry()
        multiproc_exporter.MultiProcessCollector(registry)
        body = generate_latest(registry)
    elif path == '/metrics-direct':
        body = multiproc_exporter.generate_latest()
    elif path == '/work':
        REQUESTS.labels(path).inc()
        LATENCY.observe(0.005)
        body = b'done\n'
    elif path == '/pid':
        body = f'{os.getpid()}\n'.encode()
    else:
        start_response('404 Not Found', [('Content-Type', 'text/plain')])
        return [b'not found\n']
    start_response('200 OK', [('Content-Type', CONTENT_TYPE_LATEST)])
    return [body]
