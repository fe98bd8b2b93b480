"""gunicorn settings for ``gunicorn_app.py``: 4 workers recycled every ~50
requests, and prometheus_flask_exporter's documented ``child_exit`` hook
(``mark_process_dead`` for every worker that exits, killed ones included)."""
import os

from prometheus_flask_exporter.multiprocess import GunicornPrometheusMetrics

bind = os.environ.get("APP_BIND", "127.0.0.1:0")
workers = 4
max_requests = 50
max_requests_jitter = 10
graceful_timeout = 5
chdir = os.path.dirname(os.path.abspath(__file__))


def child_exit(server, worker):
    GunicornPrometheusMetrics.mark_process_dead_on_child_exit(worker.pid)
