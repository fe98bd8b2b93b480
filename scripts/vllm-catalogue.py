#!/usr/bin/env python3
"""Extracts the metric families that vLLM and LMCache define, from their own code.

Writes ``vllm-0.33.0-stat-logger.json`` and ``lmcache-0.5.6-prometheus-logger.json``
into the directory given (``src/demo/catalogue``, the demo's and the benchmarks'
catalogue). The first has one entry per family that
``vllm.v1.metrics.loggers.PrometheusStatLogger`` registers for a deployment with
2 engines, speculative decoding (3 tokens), a ``MultiConnector`` of NIXL and
CPU offloading, LoRA, watermarking and NaN counting (after
``log_engine_initialized``, which writes the cache configuration), plus the
API server's own families (websockets, the tool-call parser, sleep mode, RL
weight updates, and prometheus-fastapi-instrumentator's HTTP metrics): name,
type, help, label names, histogram bounds, gauge multiprocess mode, whether
the family is written to the multiprocess directory right away (it has a
child at start-up, ``written``) and whether it is once the deployment served
(``after_traffic``: ``drive_traffic`` sends one request, records one
scheduler step with LoRA adapters and a CPU-offloading payload per engine,
runs every sleep-mode and weight-update operation and pushes one LMCache
statistics interval, all through vLLM's and LMCache's own code), with the
label values the families then carry (``label_values``; for
``vllm:cache_config_info`` those of a default ``CacheConfig``). The second has LMCache 0.5.6's ``PrometheusLogger`` families
for one worker. ``tests/it/demo.rs`` checks the demo's families against both.

It needs vLLM itself, which is not a test dependency (about 8 GB with torch)::

    python3 -m venv /tmp/vllm-venv
    /tmp/vllm-venv/bin/pip install vllm==0.33.0 lmcache==0.5.6   # ~5 minutes
    /tmp/vllm-venv/bin/python scripts/vllm-catalogue.py src/demo/catalogue

No GPU is needed: the logger is given a stand-in for ``VllmConfig`` holding only
the settings it reads (unknown ones read as ``None``), and a real
``KVTransferConfig`` and ``CacheConfig``. Not extracted: the tiering offload
manager's families (a separate process), and 8 LMCache timing histograms
that only its instrumented connector, remote backend and GPU connector paths
observe.
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
    http_registry, http_client = instrumented_app()

    # LMCache's logger, for one worker of the same model.
    import torch
    from lmcache.observability import PrometheusLogger
    from lmcache.v1.metadata import LMCacheMetadata
    lmcache_logger = PrometheusLogger.GetOrCreate(LMCacheMetadata(
        model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.bfloat16, kv_shape=(32, 2, 256, 8, 128), role="worker",
        served_model_name=MODEL,
    ))

    written = {family.name for family in collect()}
    drive_traffic(logger, sleep_mode_operation_metrics(), weight_operation_metrics(),
                  lmcache_logger, http_client)
    after_traffic = {family.name: family for family in collect()}
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
                 "labels": list(collector._labelnames), "written": collector._name in written,
                 "after_traffic": collector._name in after_traffic}
        if collector._name in after_traffic:
            entry["label_values"] = label_values(after_traffic[collector._name], entry["labels"])
        if collector._type == "histogram":
            entry["buckets"] = [b for b in collector._upper_bounds if b != float("inf")]
        if collector._type == "gauge":
            entry["mode"] = collector._multiprocess_mode
        families[prefix].append(entry)
    for prefix, file_name in [("vllm", f"vllm-{vllm.__version__}-stat-logger.json"),
                              ("lmcache", f"lmcache-{lmcache_version()}-prometheus-logger.json")]:
        entries = sorted(families[prefix], key=lambda e: e["name"])
        with open(os.path.join(out_dir, file_name), "w") as out:
            json.dump(entries, out, indent=1)
            out.write("\n")
        print(f"{file_name}: {len(entries)} families, {sum(e['written'] for e in entries)} written",
              file=sys.stderr)


def collect():
    """The families prometheus_client reads from the multiprocess directory."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])
    return registry.collect()


def label_values(family, names):
    """The values each label takes in ``family``'s samples, in order of first
    appearance (``model_name``, ``engine`` and the like included)."""
    seen = {name: [] for name in names}
    for sample in family.samples:
        for name in names:
            value = sample.labels.get(name)
            if value is not None and value not in seen[name]:
                seen[name].append(value)
    return seen


def drive_traffic(logger, sleep_metrics, weight_metrics, lmcache_logger, http_client):
    """What a served deployment adds to its start-up families, through the
    same code paths vLLM and LMCache use: one scheduler step with LoRA
    adapters and a CPU-offloading payload on every engine, each sleep-mode and
    weight-update operation once, and one LMCache statistics interval with
    lookups, retrievals, stores, remote traffic and evictions; and one HTTP
    request to the API server."""
    http_client.post("/v1/chat/completions", json={})
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
        OffloadingConnectorStats)
    from vllm.v1.metrics.stats import SchedulerStats

    offloading = next(prom for prom in logger.kv_connector_prom.prom_metrics._prom_metrics.values()
                      if hasattr(prom, "_offloading_metric_defs"))
    for engine in (0, 1):
        stats = OffloadingConnectorStats()
        for name, metric in offloading._offloading_metric_defs.items():
            kind = metric._type
            if name == "vllm:kv_offload_config_info":
                continue  # the info payload below fills its labels
            if kind == "counter":
                stats.increase_counter(name, 4096)
            elif kind == "gauge":
                stats.set_gauge(name, 0.25)
            elif kind == "histogram":
                stats.observe_histogram(name, 2e6)
        stats.set_info([{key: str(value) for key, value in zip(
            offloading._info_keys, (1000, 16, 2_147_483_648, 16_000))}])
        offloading.observe(stats.data, engine)
        logger.record(scheduler_stats=SchedulerStats(
            running_lora_adapters={"sql-lora": 2}, waiting_lora_adapters={"chat-lora": 1}),
            iteration_stats=None, engine_idx=engine)
    for operation in ("sleep", "release_kv_cache_memory", "wake"):
        with sleep_metrics.record(operation):
            pass
    for operation in ("init", "start", "update", "finish", "shutdown"):
        with weight_metrics.record(operation):
            pass

    from lmcache.observability import LMCStatsMonitor
    monitor = LMCStatsMonitor.GetOrCreate()
    lookup = monitor.on_lookup_request(256)
    monitor.on_lookup_finished(lookup, 128)
    retrieve = monitor.on_retrieve_request(256)
    monitor.on_retrieve_finished(retrieve, 128)
    store = monitor.on_store_request(256)
    monitor.on_store_finished(store, 256)
    transfer = monitor.on_p2p_transfer_request(256)
    monitor.on_p2p_transfer_finished(transfer)
    monitor.on_chunk_reuse(1.5)
    monitor.update_local_cache_usage(1 << 20)
    monitor.update_remote_cache_usage(1 << 20)
    monitor.update_local_storage_usage(1 << 20)
    monitor.update_interval_remote_read_metrics(1 << 16)
    monitor.update_interval_remote_write_metrics(1 << 16)
    monitor.update_interval_remote_time_to_get(0.01)
    monitor.update_interval_remote_time_to_put(0.01)
    monitor.update_interval_remote_time_to_get_sync(0.01)
    monitor.update_remote_ping_latency(0.001)
    monitor.update_remote_ping_error_code(0)
    monitor.update_local_cpu_evict_metrics(3)
    monitor.update_local_cpu_evict_failed_count(1)
    monitor.update_forced_unpin_count(1)
    monitor.update_active_memory_objs_count(12)
    monitor.update_pinned_memory_objs_count(2)
    monitor.update_interval_vllm_hit_tokens(64)
    monitor.update_interval_prompt_tokens(256)
    lmcache_logger.log_prometheus(monitor.get_stats_and_clear())


def instrumented_app():
    """The API server's prometheus-fastapi-instrumentator metrics, attached as
    vLLM attaches them; returns the registry vLLM made for them and a client
    of the app (its children are created by the first request)."""
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
    return made[0], TestClient(app)


def lmcache_version():
    from importlib.metadata import version
    return version("lmcache")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "src/demo/catalogue")
