"""A Flask app served by gunicorn in prometheus_client multiprocess mode,
instrumented with prometheus_flask_exporter's ``GunicornPrometheusMetrics``
(its documented gunicorn setup): ``tests/it/writers.rs`` churns its workers
(``max_requests``) and kills some while the exporter is scraped.

Run as ``gunicorn -c tests/python/gunicorn_conf.py gunicorn_app:app`` with
``PROMETHEUS_MULTIPROC_DIR`` set.
"""
from flask import Flask
from prometheus_flask_exporter.multiprocess import GunicornPrometheusMetrics

app = Flask(__name__)
metrics = GunicornPrometheusMetrics(app)


@app.route("/work")
def work():
    return "done\n"


@app.route("/pid")
def pid():
    import os
    return f"{os.getpid()}\n"
