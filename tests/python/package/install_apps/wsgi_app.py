"""A WSGI app (prometheus_client's ``make_wsgi_app`` over a multiprocess registry) for gunicorn with
``--preload``: the master imports it and collects once before forking its workers (fork after a collection).
``/installed`` as in vllm_like.py. Run by install_servers.py."""

import json
import os

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app, multiprocess

registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
generate_latest(registry)  # a collection in the master, before the fork
metrics = make_wsgi_app(registry)


def app(environ, start_response):
    if environ['PATH_INFO'] == '/installed':
        import multiproc_exporter._install as install
        body = json.dumps({"installed": install.installed(), "pid": os.getpid(),
                           "native_answers": install.native_answers}).encode()
        start_response('200 OK', [('Content-Type', 'application/json')])
        return [body]
    return metrics(environ, start_response)
