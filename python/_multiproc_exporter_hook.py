"""``MULTIPROC_EXPORTER_INSTALL=1``: ``multiproc_exporter.install()`` when the
application first imports prometheus_client, not at interpreter start-up.

The wheel's ``multiproc_exporter-install.pth`` calls ``arm()`` when the
variable is ``1``, ``true``, ``yes`` or ``on``. This module imports nothing of
prometheus_client's (nor ``multiproc_exporter``, which does): prometheus_client
chooses its value class (files or memory) once, when it is imported, from
``PROMETHEUS_MULTIPROC_DIR``; an application that sets the variable in its own
code before its first ``import prometheus_client`` must get the files it gets
without the switch.

``arm()`` puts a finder first on ``sys.meta_path``. It finds nothing itself:
asked for ``prometheus_client``, it takes itself off the path, asks the finders
after it, and makes the loader they found run ``install()`` right after
prometheus_client's package has run (the loader's own ``exec_module``, called
once, then ``install()``; the loader object is the one Python would have used).
A failure of ``install()`` is a ``RuntimeWarning``, never a failed import.
"""

import sys
import warnings

_PACKAGE = "prometheus_client"
_NONE = object()


def _install():
    try:
        import multiproc_exporter

        multiproc_exporter.install()
    except Exception as error:  # the application's import must not fail because of the switch
        warnings.warn(f"MULTIPROC_EXPORTER_INSTALL: multiproc_exporter.install() failed: {error!r}",
                      RuntimeWarning, stacklevel=2)


class _Finder:
    """The meta-path finder of ``arm()`` (see the module's doc)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _PACKAGE:
            return None
        disarm()
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            warnings.warn("MULTIPROC_EXPORTER_INSTALL: prometheus_client's loader has no exec_module; "
                          "call multiproc_exporter.install() in the application", RuntimeWarning, stacklevel=2)
            return spec

        own = getattr(loader, "__dict__", {}).get("exec_module", _NONE)

        def exec_then_install(module):
            # The loader's own method again for anything later (a reload).
            if own is _NONE:
                del loader.exec_module
            else:
                loader.exec_module = own
            exec_module(module)
            _install()

        try:
            loader.exec_module = exec_then_install
        except AttributeError:  # a loader whose attributes cannot be set (__slots__)
            warnings.warn("MULTIPROC_EXPORTER_INSTALL: cannot follow prometheus_client's loader; "
                          "call multiproc_exporter.install() in the application", RuntimeWarning, stacklevel=2)
        return spec


_finder = _Finder()


def arm():
    """Run ``multiproc_exporter.install()`` when prometheus_client is first
    imported (at once if it already is)."""
    if _PACKAGE in sys.modules:
        _install()
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def disarm():
    """Take the finder of ``arm()`` off ``sys.meta_path``."""
    try:
        sys.meta_path.remove(_finder)
    except ValueError:
        pass
