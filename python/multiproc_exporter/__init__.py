"""multiproc-exporter for Python: a drop-in ``MultiProcessCollector``.

``multiproc_exporter.MultiProcessCollector(registry, path=None)`` replaces
``prometheus_client.multiprocess.MultiProcessCollector``: same arguments and
defaults, it registers itself, and ``collect()`` yields the same
``prometheus_client`` ``Metric`` objects for the same files. The files are read
and merged by multiproc-exporter's Rust library (the code of the
``multiproc-exporter`` binary): incrementally, with the state of a directory
kept across collector objects, without the GIL, and a bad file is skipped
(logged once through the ``multiproc_exporter`` logger) instead of failing
the scrape.

``multiproc_exporter.generate_latest(path=None, openmetrics=False)`` returns
the exposition bytes directly, byte-identical to
``prometheus_client.generate_latest`` of a registry holding the collector.

See docs/python.md.
"""

import logging
import os
import warnings

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from . import _native

__all__ = ["MultiProcessCollector", "generate_latest", "__version__"]

__version__ = _native.__version__

_log = logging.getLogger("multiproc_exporter")


def _directory(path):
    """The directory to read, as prometheus_client's collector chooses it."""
    if path is None:
        # prometheus_client's compatibility with the lower-case name.
        if "prometheus_multiproc_dir" in os.environ and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.environ["prometheus_multiproc_dir"]
            warnings.warn(
                "prometheus_multiproc_dir variable has been deprecated in favor of the upper case naming PROMETHEUS_MULTIPROC_DIR",
                DeprecationWarning,
            )
        path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path or not os.path.isdir(path):
        raise ValueError("env PROMETHEUS_MULTIPROC_DIR is not set or not a directory")
    return path


def _report(skipped):
    for path, reason in skipped:
        _log.warning("multiproc-exporter: skipped %s: %s", path, reason)


class MultiProcessCollector:
    """Collector for files for multi-process mode (drop-in for
    ``prometheus_client.multiprocess.MultiProcessCollector``).

    The keyword options turn on the ``multiproc-exporter`` binary's deliberate
    differences (docs/differences.md); all are off by default, which gives
    prometheus_client's output exactly:

    * ``skip_dead_live_gauges``: leave out the ``live*`` gauges of writers
      whose process is gone (as if ``mark_process_dead`` had been called);
    * ``drop_dead_gauges``: leave out dead writers' ``sum``, ``min`` and
      ``max`` gauges too;
    * ``process_metrics``: serve the live writers' ``process_*`` metrics,
      labelled ``pid``.
    """

    def __init__(self, registry, path=None, *, skip_dead_live_gauges=False,
                 drop_dead_gauges=False, process_metrics=False):
        self._path = _directory(path)
        self._options = {
            "skip_dead_live_gauges": bool(skip_dead_live_gauges),
            "drop_dead_gauges": bool(drop_dead_gauges),
            "process_metrics": bool(process_metrics),
        }
        if registry:
            registry.register(self)

    def collect(self):
        """The merged metrics of the directory, as prometheus_client's
        collector yields them."""
        families, skipped = _native.collect(self._path, **self._options)
        _report(skipped)
        metrics = []
        for name, documentation, typ, samples in families:
            metric = Metric(name, documentation, typ)
            metric.samples = [Sample(s_name, labels, value) for s_name, labels, value in samples]
            metrics.append(metric)
        return metrics


def generate_latest(path=None, openmetrics=False, *, skip_dead_live_gauges=False,
                    drop_dead_gauges=False, process_metrics=False):
    """The exposition of the directory ``path`` (default
    ``PROMETHEUS_MULTIPROC_DIR``) as bytes: the Prometheus text format, or
    OpenMetrics with ``openmetrics=True``; byte-identical to
    ``prometheus_client.generate_latest`` (or the OpenMetrics
    ``generate_latest``) of a registry holding a ``MultiProcessCollector``."""
    body, skipped = _native.exposition(
        _directory(path),
        bool(openmetrics),
        skip_dead_live_gauges=bool(skip_dead_live_gauges),
        drop_dead_gauges=bool(drop_dead_gauges),
        process_metrics=bool(process_metrics),
    )
    _report(skipped)
    return body
