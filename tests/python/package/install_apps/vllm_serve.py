"""vLLM 0.33.0's API server's ``/metrics``, built as vLLM's own code builds it, for install_servers.py:
``build_app()`` makes the FastAPI app and (through ``register_api_routers`` ->
``register_vllm_serve_api_routers`` -> ``serve/instrumentator``) calls ``attach_router(app)`` of
``vllm/entrypoints/serve/instrumentator/metrics.py``, restated below with the registry of
``vllm/v1/metrics/prometheus.py`` ``get_prometheus_registry()``; ``serve_http()`` runs it in one
``uvicorn.Server`` in this process (one API server; several are several such processes).
``GET /metrics`` is prometheus-fastapi-instrumentator 8.1.0's ``expose()``: per request a new
``CollectorRegistry`` and ``multiprocess.MultiProcessCollector``, then the ``generate_latest`` its
``instrumentation`` module imported by name when it was loaded.

Where ``multiproc_exporter.install()`` runs, by ``MPE_INSTALL_AT``:
  ``before``  first thing, before any import of prometheus_client, FastAPI or the instrumentator;
  ``after``   in ``main()``, after the app is built (the instrumentator holds prometheus_client's function);
  unset      not here (none, or ``MULTIPROC_EXPORTER_INSTALL=1``: the wheel's import hook).
``/installed`` (not in vLLM; excluded from the instrumentation as vLLM excludes ``/metrics``, so that the
files hold still) tells where the instrumentator's ``generate_latest`` points and how many expositions this
process answered natively.

    python vllm_serve.py PORT
"""

import os

if os.environ.get("MPE_INSTALL_AT") == "before":
    import multiproc_exporter

    multiproc_exporter.install()

import re  # noqa: E402  (vLLM: `import regex as re`)
import sys  # noqa: E402

import prometheus_client  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Response  # noqa: E402
from prometheus_client import REGISTRY, CollectorRegistry, make_asgi_app, multiprocess  # noqa: E402
from prometheus_fastapi_instrumentator import Instrumentator  # noqa: E402
from starlette.routing import Mount  # noqa: E402


def get_prometheus_registry():
    """vllm/v1/metrics/prometheus.py."""
    if os.getenv("PROMETHEUS_MULTIPROC_DIR") is not None:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


class PrometheusResponse(Response):
    media_type = prometheus_client.CONTENT_TYPE_LATEST


def attach_router(app: FastAPI):
    """vllm/entrypoints/serve/instrumentator/metrics.py (0.33.0)."""
    registry = get_prometheus_registry()
    Instrumentator(
        excluded_handlers=[
            "/metrics",
            "/health",
            "/health/decode",
            "/load",
            "/ping",
            "/version",
            "/server_info",
            "/installed",  # this test's
        ],
        registry=registry,
    ).add().instrument(app).expose(app, response_class=PrometheusResponse)
    metrics_route = Mount("/metrics", make_asgi_app(registry=registry))
    metrics_route.path_regex = re.compile("^/metrics(?P<path>.*)$")
    app.routes.append(metrics_route)


def installed():
    import prometheus_fastapi_instrumentator.instrumentation as instrumentation

    install = sys.modules.get("multiproc_exporter._install")
    return {
        "pid": os.getpid(),
        "installed": bool(install and install.installed()),
        "instrumentator": bool(install) and getattr(instrumentation.generate_latest, "__multiproc_exporter__",
                                                    None) is not None,
        "native_answers": install.native_answers if install else 0,
    }


def build_app():
    app = FastAPI()
    attach_router(app)
    app.get("/installed")(installed)
    return app


def main():
    app = build_app()
    if os.environ.get("MPE_INSTALL_AT") == "after":
        import multiproc_exporter

        multiproc_exporter.install()
    config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
