"""Shared helpers for the conformance and differential tooling (gen_fixtures.py, differential.py).

They write multiprocess ``.db`` files with the real ``prometheus_client`` (pinned in requirements.txt)
and compute the exposition that ``MultiProcessCollector`` + ``generate_latest`` produce for an explicit,
ordered list of files, in the four (format, escaping) combinations the exporter must reproduce byte for byte.

Simulated processes. A "process" is a ``MultiProcessValue(lambda: <id>)`` value class installed as
``prometheus_client.values.ValueClass`` (exactly what client_python's own tests do); every metric object
created while it is installed writes to ``<type>_<id>.db``. ``values.close_all_multiprocess_files()`` ends
all simulated processes. ``self_test()`` checks that this in-process simulation writes exactly the same bytes
as running every process in its own forked child (``run_forked``), so the fast in-process path can be used.

Time. Gauges in ``mostrecent``/``livemostrecent`` mode store ``time.time()`` next to the value; ``FakeClock``
patches ``time.time`` so that files are reproducible and ties can be forced.
"""

import contextlib
import os
import struct
import sys
import time
import traceback
from importlib.metadata import version as _dist_version

from prometheus_client import values
from prometheus_client.exposition import generate_latest as _text_generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead  # noqa: F401 (re-export)
from prometheus_client.openmetrics.exposition import generate_latest as _om_generate_latest
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString  # noqa: F401 (re-export)
from prometheus_client.values import MultiProcessValue, MutexValue

PINNED_VERSION = '0.26.0'
FORMATS = ('text', 'openmetrics')
ESCAPINGS = ('underscores', 'allow-utf-8')
COMBOS = tuple((f, e) for f in FORMATS for e in ESCAPINGS)
INITIAL_SIZE = 1 << 16


def check_version():
    """Refuse to run against any prometheus_client other than the pinned one."""
    v = _dist_version('prometheus_client')
    if v != PINNED_VERSION:
        sys.exit(f'{sys.argv[0]}: prometheus_client {v} is installed, need {PINNED_VERSION} '
                 f'(run scripts/setup-python-venv and use target/venv/bin/python)')


def expected_name(fmt, esc, prefix='expected'):
    return f'{prefix}.{fmt}.{esc}'


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

class FakeClock:
    """Replacement for ``time.time``: returns ``now``, then adds ``step`` (0 keeps it frozen)."""

    def __init__(self, start=1700000000.0, step=0.25):
        self.now = float(start)
        self.step = float(step)
        self.queue = []

    def push(self, *stamps):
        """The next calls return these values (in order) before falling back to now/step."""
        self.queue.extend(float(s) for s in stamps)

    def __call__(self):
        if self.queue:
            return self.queue.pop(0)
        t = self.now
        self.now += self.step
        return t


@contextlib.contextmanager
def patched_time(clock):
    """Patch ``time.time`` (prometheus_client.metrics calls ``time.time()`` through the module)."""
    orig = time.time
    time.time = clock
    try:
        yield clock
    finally:
        time.time = orig


@contextlib.contextmanager
def multiproc_env(path, clock=None):
    """Point PROMETHEUS_MULTIPROC_DIR at ``path`` (created if needed) for the duration.

    On exit every simulated process is closed and ``values.ValueClass`` is reset to ``MutexValue``.
    """
    os.makedirs(path, exist_ok=True)
    old = {k: os.environ.get(k) for k in ('PROMETHEUS_MULTIPROC_DIR', 'prometheus_multiproc_dir')}
    os.environ['PROMETHEUS_MULTIPROC_DIR'] = path
    os.environ.pop('prometheus_multiproc_dir', None)
    clock = clock if clock is not None else FakeClock()
    try:
        with patched_time(clock):
            yield clock
    finally:
        values.close_all_multiprocess_files()
        values.ValueClass = MutexValue
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def use_process(ident):
    """Install a simulated process: metrics created from now on write ``<type>_<ident>.db``.

    ``ident`` may be a value or a zero-argument callable (to simulate a pid change, like a fork).
    """
    fn = ident if callable(ident) else (lambda: ident)
    values.ValueClass = MultiProcessValue(fn)
    return values.ValueClass


def end_processes():
    """Close every open .db file of every simulated process (flushes nothing: writes go to mmap)."""
    values.close_all_multiprocess_files()


def run_forked(ident, fn):
    """Run ``fn()`` in a forked child that has ``MultiProcessValue(lambda: ident)`` installed.

    The real-process counterpart of ``use_process``; used by ``self_test`` to validate the in-process path.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            use_process(ident)
            fn()
            values.close_all_multiprocess_files()
        except BaseException:  # noqa: B036 -- report anything, then leave without running parent cleanup
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f'forked writer for process {ident!r} failed')


# --------------------------------------------------------------------------------------------
# Reading: Python's expected output
# --------------------------------------------------------------------------------------------

class _FixedCollector:
    def __init__(self, metrics):
        self._metrics = list(metrics)

    def collect(self):
        return self._metrics


def in_view(metric, view):
    """Whether a merged family belongs to a view listing the names ``view`` (the exporter's rule: the family's
    name, or the name the text format declares for it, ``<name>_total`` for a counter, ``<name>_info`` for an
    info metric)."""
    suffix = {'counter': '_total', 'info': '_info'}.get(metric.type)
    return metric.name in view or (suffix is not None and metric.name + suffix in view)


def merge_outputs(files, accumulate=True, view=None):
    """Python's exposition for ``files`` merged in the given order: {(fmt, esc): bytes}; with ``view`` (a set
    of names), only the families of that view (:func:`in_view`).

    Raises whatever Python raises (corrupt files, ...).
    """
    metrics = list(MultiProcessCollector.merge(list(files), accumulate=accumulate))
    if view is not None:
        metrics = [m for m in metrics if in_view(m, view)]
    registry = CollectorRegistry()
    registry.register(_FixedCollector(metrics))
    out = {}
    for fmt, esc in COMBOS:
        if fmt == 'text':
            out[(fmt, esc)] = _text_generate_latest(registry, escaping=esc)
        else:
            out[(fmt, esc)] = _om_generate_latest(registry, escaping=esc)
    return out


def try_merge_outputs(files, accumulate=True):
    """(outputs, None) or (None, 'ExceptionType: message') if Python raises for this file list."""
    try:
        return merge_outputs(files, accumulate), None
    except Exception as e:  # noqa: BLE001
        return None, f'{type(e).__name__}: {e}'


def dir_outputs(path):
    """Python's exposition for a directory exactly as MultiProcessCollector.collect() reads it (glob order, which
    is raw readdir order); returns (outputs, basenames in the order glob returned them)."""
    import glob
    files = glob.glob(os.path.join(path, '*.db'))
    return merge_outputs(files), [os.path.basename(f) for f in files]


# --------------------------------------------------------------------------------------------
# File inspection
# --------------------------------------------------------------------------------------------

def used_bytes(path):
    """The ``used`` header field (native int32) of a .db file."""
    with open(path, 'rb') as f:
        head = f.read(4)
    return struct.unpack('i', head)[0]


def truncate_to_used(path):
    """Cut a .db file down to its ``used`` bytes, only if everything after ``used`` is zero.

    Returns True if the file was shortened.
    """
    with open(path, 'rb') as f:
        data = f.read()
    if len(data) < 4:
        return False
    used = struct.unpack_from('i', data, 0)[0]
    if used < 8 or used >= len(data):
        return False
    if data[used:].strip(b'\0'):
        raise RuntimeError(f'{path}: non-zero bytes after used={used}; refusing to truncate')
    with open(path, 'r+b') as f:
        f.truncate(used)
    return True


def records(path):
    """[(key, value, timestamp)] of a .db file, via the library's own reader."""
    from prometheus_client.mmap_dict import MmapedDict
    return [(k, v, t) for k, v, t, _ in MmapedDict.read_all_values_from_file(path)]


def listdir_db(path):
    """Sorted basenames of the ``*.db`` files in ``path`` (no hidden files)."""
    return sorted(n for n in os.listdir(path) if n.endswith('.db') and not n.startswith('.'))


# --------------------------------------------------------------------------------------------
# Self test: in-process simulation == forked processes
# --------------------------------------------------------------------------------------------

def _selftest_writer(ident, clock_start):
    """A little of everything; deterministic given ident and the fake clock."""
    from prometheus_client import Counter, Gauge, Histogram, Summary

    def fn():
        with patched_time(FakeClock(clock_start, 0.5)):
            c = Counter('st_c', 'counter help', ['l'], registry=None)
            c.labels('a').inc(ident)
            c.labels('é"\\\n').inc(0.25)
            g = Gauge('st_g', 'gauge help', ['l'], registry=None, multiprocess_mode='mostrecent')
            g.labels('x').set(ident * 1.5)
            g.labels('never')
            ga = Gauge('st_ga', 'all', registry=None)
            ga.set(-0.0)
            gs = Gauge('st_gs', 'sum', registry=None, multiprocess_mode='livesum')
            gs.inc(ident)
            h = Histogram('st_h', 'histogram help', ['v'], registry=None, buckets=(1, 1e6, 1e10))
            h.labels('v1').observe(0.5 * ident)
            h.labels('v2').observe(2e6)
            s = Summary('st_s', 'summary help', registry=None)
            s.observe(ident)
            # Enough records to go past one page and past the initial 64 KiB.
            big = Counter('st_big', 'x' * 700, ['i'], registry=None)
            for i in range(100):
                big.labels(str(i)).inc(i)
    return fn


def self_test(tmp):
    """Write the same processes in-process and forked; the .db bytes must be identical."""
    import filecmp
    idents = [7, 8, 9]
    a, b = os.path.join(tmp, 'inproc'), os.path.join(tmp, 'forked')
    with multiproc_env(a):
        for i in idents:
            use_process(i)
            _selftest_writer(i, 1000.0 + i)()
            end_processes()
    with multiproc_env(b):
        for i in idents:
            run_forked(i, _selftest_writer(i, 1000.0 + i))
    na, nb = listdir_db(a), listdir_db(b)
    if na != nb:
        raise AssertionError(f'file sets differ: {na} vs {nb}')
    for n in na:
        if not filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False):
            raise AssertionError(f'{n} differs between in-process and forked writers')
    sizes = {n: os.path.getsize(os.path.join(a, n)) for n in na}
    assert sizes['counter_7.db'] > INITIAL_SIZE, sizes  # the growth path was exercised
    outs = [merge_outputs([os.path.join(d, n) for n in na]) for d in (a, b)]
    assert outs[0] == outs[1]
    return na


if __name__ == '__main__':
    import tempfile
    check_version()
    if sys.argv[1:] != ['--self-test']:
        sys.exit('usage: pcharness.py --self-test')
    with tempfile.TemporaryDirectory() as d:
        names = self_test(d)
    print(f'pcharness self-test: in-process and forked writers produced identical files ({len(names)} files) '
          f'with prometheus_client {_dist_version("prometheus_client")}')
