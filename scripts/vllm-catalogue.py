#!/usr/bin/env python3
"""Extracts the metric families that vLLM's own stat logger defines, from vLLM's own code.

Writes ``tests/data/vllm-0.33.0-stat-logger.json``: one entry per family that
``vllm.v1.metrics.loggers.PrometheusStatLogger`` registers for a deployment with
2 engines, speculative decoding (3 tokens) and a ``MultiConnector`` of NIXL and
CPU offloading: name, type, help, label names, histogram bounds, gauge
multiprocess mode, and whether the family is written to the multiprocess
directory right away (it has a child at start-up). ``tests/it/demo.rs`` checks
the demo's families against it.

It needs vLLM itself, which is not a test dependency (about 8 GB with torch)::

    python3 -m venv /tmp/vllm-venv
    /tmp/vllm-venv/bin/pip install vllm==0.33.0      # ~5 minutes
    /tmp/vllm-venv/bin/python scripts/vllm-catalogue.py > tests/data/vllm-0.33.0-stat-logger.json

No GPU is needed: the logger is given a stand-in for ``VllmConfig`` holding only
the settings it reads (unknown ones read as ``None``), and a real
``KVTransferConfig``. Families of other vLLM modules (the HTTP instrumentator,
sleep mode, RL weight updates, websockets, tool parsers, LoRA and watermark
info, the tiering offload manager) and LMCache's are not extracted yet.
"""
import json
import os
import sys
import tempfile

os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()


class Settings:
    """A stand-in for a vLLM config object: given attributes, ``None`` for the rest."""

    def __init__(self, **given):
        self.__dict__.update(given)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def main():
    import vllm
    import vllm.v1.metrics.loggers as loggers
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector
    from vllm.config import KVTransferConfig

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
        model_config=Settings(served_model_name="meta-llama/Llama-3.1-8B-Instruct",
                              max_model_len=8192, is_diffusion=False),
        speculative_config=Settings(num_speculative_tokens=3, method="eagle"),
        kv_transfer_config=kv_transfer,
    )
    loggers.PrometheusStatLogger(config, engine_indexes=[0, 1])

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])
    written = {family.name for family in registry.collect()}
    families = []
    for collector in REGISTRY._collector_to_names:
        if not hasattr(collector, "_name"):
            continue
        entry = {"name": collector._name, "type": collector._type, "help": collector._documentation,
                 "labels": list(collector._labelnames), "written": collector._name in written}
        if collector._type == "histogram":
            entry["buckets"] = [b for b in collector._upper_bounds if b != float("inf")]
        if collector._type == "gauge":
            entry["mode"] = collector._multiprocess_mode
        families.append(entry)
    families.sort(key=lambda e: e["name"])
    json.dump(families, sys.stdout, indent=1)
    sys.stdout.write("\n")
    print(f"vLLM {vllm.__version__}: {len(families)} families, {len(written)} written", file=sys.stderr)


if __name__ == "__main__":
    main()
