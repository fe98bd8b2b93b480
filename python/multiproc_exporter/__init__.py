"""multiproc-exporter for Python: ``install()``, a drop-in ``MultiProcessCollector``.

``multiproc_exporter.install()`` (one line, e.g. in ``sitecustomize.py``; or
``MULTIPROC_EXPORTER_INSTALL=1`` in the environment, which installs when the
application first imports prometheus_client) makes prometheus_client's
own exposition (``generate_latest``, the OpenMetrics encoder and everything
built on them: ``choose_encoder``, the ASGI and WSGI apps,
``start_http_server``) answer a registry holding only a multiprocess
collector natively, and makes ``prometheus_client.multiprocess.MultiProcessCollector``
the drop-in, in prometheus_client's modules and wherever other modules bound
those names; ``uninstall()`` undoes it (``_install.py``).

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
import threading
import time
import warnings
from collections import OrderedDict

from prometheus_client import multiprocess as _multiprocess
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from . import _native

__all__ = ["MultiProcessCollector", "generate_latest", "install", "uninstall", "installed", "__version__"]

# prometheus_client's collector, kept before ``install()`` replaces its name:
# the drop-in's ``merge`` is its.
_PrometheusClientCollector = _multiprocess.MultiProcessCollector

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


class _Families:
    """The ``Metric`` objects last built for one directory (and set of
    options), by family name, with the version the native state gave each:
    a family whose version did not change is not built again."""

    # Directories kept at most, and for how long unread (seconds): as the
    # native states (python/src/lib.rs).
    MAX = 64
    IDLE = 600.0

    _lock = threading.Lock()
    _by_key = OrderedDict()

    @classmethod
    def of(cls, key):
        """The (versions, metrics) last built for ``key``."""
        with cls._lock:
            kept = cls._by_key.get(key)
            if kept is not None:
                cls._by_key.move_to_end(key)
                return kept[1]
        return {}, {}

    @classmethod
    def keep(cls, key, built):
        now = time.monotonic()
        with cls._lock:
            cls._by_key[key] = (now, built)
            cls._by_key.move_to_end(key)
            while len(cls._by_key) > cls.MAX:
                cls._by_key.popitem(last=False)
            while cls._by_key:
                oldest, (used, _) = next(iter(cls._by_key.items()))
                if now - used <= cls.IDLE:
                    break
                del cls._by_key[oldest]

    @classmethod
    def clear(cls):
        # A new lock too: after fork(), another thread may have held it.
        cls._lock = threading.Lock()
        cls._by_key = OrderedDict()


def _copy(metric):
    """A new ``Metric`` with the samples of ``metric`` (a caller may change
    the list it gets; the samples are immutable tuples)."""
    copy = Metric.__new__(Metric)
    copy.__dict__.update(metric.__dict__)
    copy.samples = metric.samples[:]
    return copy




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

    ``merge(files, accumulate=True)`` is prometheus_client's own (its Python
    merge of a list of files).
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

    # prometheus_client's static merge of a list of files, and the two
    # static methods it calls through the module's name (which ``install()``
    # makes this class).
    _read_metrics = staticmethod(_PrometheusClientCollector._read_metrics)
    _accumulate_metrics = staticmethod(_PrometheusClientCollector._accumulate_metrics)

    @staticmethod
    def merge(files, accumulate=True):
        """Merge metrics from given mmap files (prometheus_client's own
        ``MultiProcessCollector.merge``).

        By default, histograms are accumulated, as per prometheus wire format.
        But if writing the merged data back to mmap files, use
        accumulate=False to avoid compound accumulation.
        """
        metrics = _PrometheusClientCollector._read_metrics(files)
        return _PrometheusClientCollector._accumulate_metrics(metrics, accumulate)

    def collect(self):
        """The merged metrics of the directory, as prometheus_client's
        collector yields them."""
        key = (self._path, self._options["skip_dead_live_gauges"], self._options["drop_dead_gauges"],
               self._options["process_metrics"])
        versions, built = _Families.of(key)
        families, skipped = _native.collect(self._path, known=versions, sample_class=Sample, **self._options)
        _report(skipped)
        new_versions = {}
        new_built = {}
        metrics = []
        for name, version, payload in families:
            if payload is None:
                metric = built[name]
                metrics.append(_copy(metric))
            else:
                documentation, typ, samples = payload
                metric = Metric(name, documentation, typ)
                metric.samples = samples
                metrics.append(_copy(metric))
            new_versions[name] = version
            new_built[name] = metric
        _Families.keep(key, (new_versions, new_built))
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


def _after_fork_in_child():
    _Families.clear()
    _native.after_fork_in_child()


# Fork safety: the directory states are the parent's; a child (a gunicorn
# worker forked from a `--preload` master that collected) starts afresh.
os.register_at_fork(before=_native.before_fork, after_in_parent=_native.after_fork_in_parent,
                    after_in_child=_after_fork_in_child)

from ._install import install, installed, uninstall  # noqa: E402  (uses the names above)
