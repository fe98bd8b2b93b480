"""``install()`` and ``uninstall()``: prometheus_client's own exposition made native
for a registry that holds only a multiprocess collector.

``install()`` replaces four module attributes (kept to be put back by
``uninstall()``):

* ``prometheus_client.exposition.generate_latest`` and
  ``prometheus_client.generate_latest`` (the text format);
* ``prometheus_client.openmetrics.exposition.generate_latest`` (OpenMetrics);
* ``prometheus_client.multiprocess.MultiProcessCollector`` (the drop-in).

prometheus_client's exposition paths look ``generate_latest`` up when they
run (``choose_encoder`` returns the module's ``generate_latest`` or
``openmetrics.generate_latest``; ``_bake_output``, behind ``make_wsgi_app``,
``make_asgi_app`` and ``start_http_server``, calls ``choose_encoder`` and
gzips what the encoder returns; ``write_to_textfile`` and the push
functions call ``generate_latest``), so they all take the new functions.

Code that imported one of those names before ``install()``
(``from prometheus_client import generate_latest``, as
prometheus-fastapi-instrumentator's ``instrumentation`` module does when it is
imported) holds prometheus_client's object in its module: ``install()`` finds
every module-level name bound to one of them (under any name, in every module
of ``sys.modules`` but this package's) and replaces it too; a module whose name
cannot be set is named in one ``RuntimeWarning``. ``uninstall()`` puts back
every name ``install()`` replaced, and every module-level name bound to one of
the new objects since (a module imported while installed).

The new functions answer natively only when the answer is provably
prometheus_client's: the registry is a plain ``CollectorRegistry`` (not a
subclass, not ``restricted_registry(...)``), without ``target_info``, holding
exactly one collector that is the drop-in or prometheus_client's own
``MultiProcessCollector`` (not a subclass, ``collect`` not replaced), over a
directory that exists, with an escaping the native encoder has
(``underscores``, ``allow-utf-8``). Anything else goes to prometheus_client's
function unchanged.
"""

import functools
import os
import sys
import threading
import warnings

import prometheus_client
from prometheus_client import exposition as _exposition
from prometheus_client import multiprocess as _multiprocess
from prometheus_client import registry as _registry
from prometheus_client.openmetrics import exposition as _openmetrics

from . import MultiProcessCollector, _PrometheusClientCollector, _native, _report

# The escapings the native encoder has, by prometheus_client's names.
_NATIVE_ESCAPINGS = frozenset({"underscores", "allow-utf-8"})

_NO_OPTIONS = {"skip_dead_live_gauges": False, "drop_dead_gauges": False, "process_metrics": False}

_lock = threading.Lock()
# Expositions answered natively by this process (a diagnostic for tests).
native_answers = 0
# (module, attribute, prometheus_client's value, ours) while installed.
_replaced = []


def _native_source(registry):
    """The (directory, options) whose native exposition is ``registry``'s, or
    None when only prometheus_client's own path gives it."""
    if type(registry) is not _registry.CollectorRegistry:
        return None
    with registry._lock:
        if registry._target_info or len(registry._collector_to_names) != 1:
            return None
        (collector,) = registry._collector_to_names
    kind = type(collector)
    if "collect" in vars(collector):
        return None
    if kind is MultiProcessCollector:
        options = collector._options
    elif kind is _PrometheusClientCollector:
        options = _NO_OPTIONS
    else:
        return None
    path = getattr(collector, "_path", None)
    if not isinstance(path, str) or not os.path.isdir(path):
        return None
    return path, options


def _native_exposition(registry, openmetrics, escaping):
    """The native exposition of ``registry``, or None (see the module's doc)."""
    if not isinstance(escaping, str) or escaping not in _NATIVE_ESCAPINGS:
        return None
    source = _native_source(registry)
    if source is None:
        return None
    path, options = source
    body, skipped = _native.exposition(path, openmetrics, escaping=escaping, **options)
    _report(skipped)
    global native_answers
    native_answers += 1
    return body


def _text(original):
    @functools.wraps(original)
    def generate_latest(registry=_registry.REGISTRY, escaping=_openmetrics.UNDERSCORES):
        body = _native_exposition(registry, False, escaping)
        return original(registry, escaping) if body is None else body

    generate_latest.__multiproc_exporter__ = original
    return generate_latest


def _openmetrics_text(original):
    @functools.wraps(original)
    def generate_latest(registry, escaping=_openmetrics.UNDERSCORES, version="1.0.0"):
        # The version changes only native histograms, which multiprocess
        # files do not hold.
        body = _native_exposition(registry, True, escaping)
        return original(registry, escaping, version) if body is None else body

    generate_latest.__multiproc_exporter__ = original
    return generate_latest


def _own(name):
    """Whether ``name`` is a module of this package (which keeps prometheus_client's
    collector on purpose: the drop-in's ``merge`` is its)."""
    return name == __package__ or name.startswith(__package__ + ".")


def _rebind(objects):
    """Binds every module-level name of ``sys.modules`` (this package's modules
    left out) that holds a key of ``objects`` (by identity: ``{id(old): (old,
    new)}``) to its new object. Returns the (module, name, old, new) rebound and
    the names of the modules whose name could not be set."""
    rebound, unreachable = [], []
    for module_name, module in list(sys.modules.items()):
        if module is None or _own(module_name):
            continue
        try:
            namespace = vars(module)
        except Exception:  # no __dict__, or one that is a property that fails
            continue
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            pair = objects.get(id(value))
            if pair is None or pair[0] is not value:
                continue
            old, new = pair
            try:
                setattr(module, name, new)
                done = namespace.get(name) is new
            except Exception:  # a module type whose attributes are read-only, or that refuses
                done = False
            if done:
                rebound.append((module, name, old, new))
            elif module_name not in unreachable:
                unreachable.append(module_name)
    return rebound, unreachable


def install():
    """Make prometheus_client's exposition native for registries holding only a
    multiprocess collector, and ``prometheus_client.multiprocess.MultiProcessCollector``
    the drop-in, wherever those names are bound: names other modules imported
    before (``from prometheus_client import generate_latest``) are replaced too;
    a module that cannot be changed is named in one ``RuntimeWarning``.
    Idempotent; ``uninstall()`` undoes it."""
    with _lock:
        if _replaced:
            return
        text = _text(_exposition.generate_latest)
        targets = [
            (_exposition, "generate_latest", _exposition.generate_latest, text),
            (_openmetrics, "generate_latest", _openmetrics.generate_latest,
             _openmetrics_text(_openmetrics.generate_latest)),
            (_multiprocess, "MultiProcessCollector", _multiprocess.MultiProcessCollector, MultiProcessCollector),
        ]
        # The package's name is prometheus_client.exposition's function
        # unless someone replaced it: then that one is wrapped.
        package_text = prometheus_client.generate_latest
        targets.append((prometheus_client, "generate_latest", package_text,
                        text if package_text is _exposition.generate_latest else _text(package_text)))
        for module, name, original, ours in targets:
            setattr(module, name, ours)
            _replaced.append((module, name, original, ours))
        # Then every other module's name bound to one of prometheus_client's
        # objects (prometheus_fastapi_instrumentator.instrumentation's
        # generate_latest, an application's MultiProcessCollector).
        rebound, unreachable = _rebind({id(original): (original, ours) for _, _, original, ours in targets})
        _replaced.extend(rebound)
    if unreachable:
        warnings.warn(
            "multiproc_exporter.install(): prometheus_client's generate_latest or MultiProcessCollector is "
            "bound in module(s) whose names cannot be replaced, which keep prometheus_client's own (not answered "
            "natively): " + ", ".join(unreachable),
            RuntimeWarning,
            stacklevel=2,
        )


def uninstall():
    """Put back what ``install()`` replaced, in every module it replaced a name
    in, and in modules that bound the new objects since (a name replaced again
    by someone else since is left as it is)."""
    with _lock:
        back = {}
        while _replaced:
            module, name, original, ours = _replaced.pop()
            back[id(ours)] = (ours, original)
            if getattr(module, name, None) is ours:
                setattr(module, name, original)
        if back:
            _rebind(back)


def installed():
    """Whether ``install()`` is in effect."""
    return bool(_replaced)
