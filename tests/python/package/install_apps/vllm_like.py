"""A FastAPI app exposing /metrics as vLLM 0.33 does (vllm/entrypoints/serve/instrumentator/metrics.py):
prometheus-fastapi-instrumentator's ``expose()`` (which imports ``generate_latest`` by name when it is imported and,
with ``PROMETHEUS_MULTIPROC_DIR`` set, builds a registry with ``multiprocess.MultiProcessCollector`` per request),
and prometheus_client's ``make_asgi_app`` over a multiprocess registry mounted behind it (here at /prom).
``/installed`` tells whether ``multiproc_exporter.install()`` ran (from sitecustomize.py or the environment)
before the instrumentator was imported. Run by install_servers.py under several uvicorn workers."""

import os
import re

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, make_asgi_app, multiprocess
from prometheus_fastapi_instrumentator import Instrumentator
import prometheus_fastapi_instrumentator.instrumentation as instrumentation
from starlette.routing import Mount

app = FastAPI()

registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)

Instrumentator(excluded_handlers=["/metrics", "/prom", "/installed"]).add().instrument(app).expose(
    app, should_gzip=True)

prom = Mount("/prom", make_asgi_app(registry=registry))
prom.path_regex = re.compile("^/prom(?P<path>.*)$")
app.routes.append(prom)


@app.get("/installed")
def installed():
    import prometheus_client.exposition
    import multiproc_exporter._install as install
    return JSONResponse({
        "installed": install.installed(),
        # The name the instrumentator imported is the replaced function.
        "instrumentator": instrumentation.generate_latest is prometheus_client.exposition.generate_latest
        and install.installed(),
        "pid": os.getpid(),
        "native_answers": install.native_answers,
    })
