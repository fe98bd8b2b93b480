#!/usr/bin/env python3
"""SGLang's metric families, read from its source at a named release.

Usage:
    pip download --no-deps sglang==0.5.23 -d /tmp/sglang
    python3 scripts/sglang-catalogue.py /tmp/sglang/sglang-0.5.23-*.whl \
        > src/demo/catalogue/sglang-0.5.23-metrics-collector.json

The wheel is read as a zip (nothing is installed or imported: SGLang's
collector module imports torch). `sglang/srt/observability/metrics_collector.py`
(the release's `python/sglang/srt/metrics/collector.py` moved there) is parsed
with `ast`: every `Counter(...)`, `Gauge(...)`, `Histogram(...)` and
`Summary(...)` call whose `name=` is a string starting with `sglang:` gives one
family, with

* `help`: its `documentation=`;
* `labels`: its `labelnames=`, where `labels.keys()` (the collector's label
  set) is replaced by that collector's labels as the release builds them
  (`BASE_LABELS` below, read from `SchedulerMetricsCollector`'s context and
  `tokenizer_metric_labels()` of the same file; optional labels such as
  `dp_rank` and `priority` are left out, as in a default launch);
* `buckets`: its `buckets=` when a list of numbers, directly or through a
  local variable assigned a list literal in the same function (the default
  bucket lists); `null` when computed at run time;
* `mode`: a gauge's `multiprocess_mode=` (prometheus_client's default,
  `all`, when absent);
* `collector`: the class defining it, which says which process writes it:
  `SchedulerMetricsCollector` in each scheduler process (of attention-TP
  rank 0 by default), `TokenizerMetricsCollector` in the tokenizer manager.
  Only these two, the collectors of a default
  `python -m sglang.launch_server --enable-metrics`, are read; the optional
  features' (storage, radix cache, encoder, expert dispatch) are not.

Families are printed sorted by name, one JSON list.
"""

import ast
import json
import sys
import zipfile

SOURCE = "sglang/srt/observability/metrics_collector.py"

# `labels.keys()` of each collector at a default launch (no data
# parallelism, no priority scheduling, no extra labels).
BASE_LABELS = {
    "SchedulerMetricsCollector": ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"],
    "TokenizerMetricsCollector": ["model_name", "engine_type"],
}
KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary"}


def literal_list(node, lists):
    """A list of numbers or strings, from a literal or a local variable."""
    if isinstance(node, ast.Name):
        return lists.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        try:
            return [ast.literal_eval(e) for e in node.elts]
        except ValueError:
            return None
    return None


def label_names(node, base):
    """`labelnames=` with the collector's `labels.keys()` expanded."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "keys":
            return list(base)
        if isinstance(func, ast.Name) and func.id == "list" and node.args:
            return label_names(node.args[0], base)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = label_names(node.left, base)
        right = label_names(node.right, base)
        return None if left is None or right is None else left + right
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                inner = label_names(e.value, base)
                if inner is None:
                    return None
                out.extend(inner)
            elif isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.append(e.value)
            else:
                return None
        return out
    return None


def families(source):
    tree = ast.parse(source)
    found = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        base = BASE_LABELS.get(cls.name)
        if base is None:
            # Optional features' collectors (storage, radix cache, encoder,
            # expert dispatch): not written by a default launch.
            continue
        for func in (n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)):
            lists = {}
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if isinstance(target, ast.Name):
                        value = literal_list(node.value, {})
                        if value is not None:
                            lists[target.id] = value
            for node in ast.walk(func):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                    continue
                kind = KINDS.get(node.func.id)
                if kind is None:
                    continue
                kw = {k.arg: k.value for k in node.keywords if k.arg}
                name = kw.get("name")
                if not (isinstance(name, ast.Constant) and str(name.value).startswith("sglang:")):
                    continue
                doc = kw.get("documentation")
                family = {
                    # A counter's family name is without `_total`, as
                    # prometheus_client names it.
                    "name": name.value[: -len("_total")]
                    if kind == "counter" and name.value.endswith("_total")
                    else name.value,
                    "type": kind,
                    "help": doc.value if isinstance(doc, ast.Constant) else ast.unparse(doc),
                    "labels": label_names(kw["labelnames"], base) if "labelnames" in kw else [],
                    "collector": cls.name,
                }
                if kind == "histogram":
                    family["buckets"] = literal_list(kw["buckets"], lists) if "buckets" in kw else None
                if kind == "gauge":
                    mode = kw.get("multiprocess_mode")
                    family["mode"] = mode.value if isinstance(mode, ast.Constant) else "all"
                found.setdefault(family["name"], family)
    return [found[k] for k in sorted(found)]


def main():
    with zipfile.ZipFile(sys.argv[1]) as wheel:
        source = wheel.read(SOURCE).decode()
    json.dump(families(source), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
