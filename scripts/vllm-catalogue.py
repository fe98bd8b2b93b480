#!/usr/bin/env python3
"""Extracts the metric families that vLLM and LMCache define, from their own code.

Writes ``vllm-0.33.0-stat-logger.json`` and ``lmcache-0.5.6-prometheus-logger.json``
into the directory given (``tests/data``). The first has one entry per family that
``vllm.v1.metrics.loggers.PrometheusStatLogger`` registers for a deployment with
2 engines, speculative decoding (3 tokens), a ``MultiConnector`` of NIXL and
CPU offloading, LoRA, watermarking and NaN counting (after
``log_engine_initialized``, which writes the cache configuration), plus the
API server's own families (websockets, the tool-call parser, sleep mode, RL
weight updates, and prometheus-fastapi-instrumentator's HTTP metrics after
one request): name, type, help, label names, histogram bounds, gauge
multiprocess mode, and whether the family is written to the multiprocess
directory right away (it has a child at start-up). For
``vllm:cache_config_info`` the label values of a default ``CacheConfig`` are
kept too (``info``). The second has LMCache 0.5.6's ``PrometheusLogger`` families
for one worker. ``tests/it/demo.rs`` checks the demo's families against both.

It needs vLLM itself, which is not a test dependency (about 8 GB with torch)::

    python3 -m venv /tmp/vllm-venv
    /tmp/vllm-venv/bin/pip install vllm==0.33.0 lmcache==0.5.6   # ~5 minutes
    /tmp/vllm-venv/bin/python scripts/vllm-catalogue.py tests/data

No GPU is needed: the logger is given a stand-in for ``VllmConfig`` holding only
the settings it reads (unknown ones read as ``None``), and a real
``KVTransferConfig`` and ``CacheConfig``. Not extracted yet: the tiering
offload manager's families and those written only after traffic (offloading,
sleep and wake, weight updates, LoRA).
"""
import json
import os
import sys
import tempfile

os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()
# Counts requests with NaNs in their logits: vllm:corrupted_requests.
os.environ["VLLM_COMPUTE_NANS_IN_LOGITS"] = "1"


MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class Settings:
    """A stand-in for a vLLM config object: given attributes, ``None`` for the rest."""

    def __init__(self, **given):
        self.__dict__.update(given)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def main(out_dir):
    import vllm
    import vllm.v1.metrics.loggers as loggers
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
    from vllm.config import CacheConfig, KVTransferConfig

    cache = CacheConfig(block_size=16, gpu_memory_utilization=0.9)
    cache.num_gpu_blocks = 27_000
    cache.num_cpu_blocks = 0
    kv_transfer = KVTransferConfig(
        kv_connector="MultiConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"connectors": [
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
            {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
             "kv_connector_extra_config": {"num_cpu_blocks": 1000}},
        ]},
    )
    config = Settings(
        observability_config=Settings(show_hidden_metrics=False, kv_cache_metrics=True,
                                      kv_cache_metrics_sample=0.01, custom_histogram_buckets=None),
        model_config=Settings(served_model_name=MODEL,
                              max_model_len=8192, is_diffusion=False),
        speculative_config=Settings(num_speculative_tokens=3, method="eagle"),
        kv_transfer_config=kv_transfer,
        watermark_config=Settings(),
        lora_config=Settings(max_loras=4),
        cache_config=cache,
    )
    logger = loggers.PrometheusStatLogger(config, engine_indexes=[0, 1])
    logger.log_engine_initialized()
    # The API server's own families (module-level, or created at start-up).
    import vllm.entrypoints.speech_to_text.realtime.metrics  # noqa: F401
    from vllm.entrypoints.rl.online.metrics import weight_operation_metrics
    from vllm.entrypoints.serve.dev.sleep.metrics import sleep_mode_operation_metrics
    from vllm.parser.metrics import init_parser_metrics
    sleep_mode_operation_metrics()
    weight_operation_metrics()
    init_parser_metrics(model_name=MODEL)
    http_registry = instrumented_request()

    # LMCache's logger, for one worker of the same model.
    import torch
    from lmcache.observability import PrometheusLogger
    from lmcache.v1.metadata import LMCacheMetadata
    PrometheusLogger.GetOrCreate(LMCacheMetadata(
        model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.bfloat16, kv_shape=(32, 2, 256, 8, 128), role="worker",
        served_model_name=MODEL,
    ))

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])
    written = {family.name for family in registry.collect()}
    families = {"vllm": [], "lmcache": []}
    collectors = list(REGISTRY._collector_to_names) + list(http_registry._collector_to_names)
    for collector in collectors:
        if not hasattr(collector, "_name"):
            continue
        prefix = collector._name.split(":", 1)[0]
        if prefix.startswith("http_"):
            prefix = "vllm"  # the API server's HTTP metrics
        if prefix not in families:
            continue
        entry = {"name": collector._name, "type": collector._type, "help": collector._documentation,
                 "labels": list(collector._labelnames), "written": collector._name in written}
        if collector._type == "histogram":
            entry["buckets"] = [b for b in collector._upper_bounds if b != float("inf")]
        if collector._type == "gauge":
            entry["mode"] = collector._multiprocess_mode
        if collector._name == "vllm:cache_config_info":
            entry["info"] = {k: str(v) for k, v in cache.metrics_info().items()}
        families[prefix].append(entry)
    for prefix, file_name in [("vllm", f"vllm-{vllm.__version__}-stat-logger.json"),
                              ("lmcache", f"lmcache-{lmcache_version()}-prometheus-logger.json")]:
        entries = sorted(families[prefix], key=lambda e: e["name"])
        with open(os.path.join(out_dir, file_name), "w") as out:
            json.dump(entries, out, indent=1)
            out.write("\n")
        print(f"{file_name}: {len(entries)} families, {sum(e['written'] for e in entries)} written",
              file=sys.stderr)


def instrumented_request():
    """The API server's prometheus-fastapi-instrumentator metrics, as vLLM
    attaches them, after one request (they are created lazily); returns the
    registry vLLM made for them."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    import vllm.entrypoints.serve.instrumentator.metrics as instrumentator

    made = []
    make_registry = instrumentator.get_prometheus_registry

    def remember():
        made.append(make_registry())
        return made[-1]

    instrumentator.get_prometheus_registry = remember
    app = FastAPI()

    @app.post("/v1/chat/completions")
    def chat_completions():
        return {}

    instrumentator.attach_router(app)
    TestClient(app).post("/v1/chat/completions", json={})
    return made[0]


def lmcache_version():
    from importlib.metadata import version
    return version("lmcache")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
