"""Generates the committed conformance fixtures in tests/fixtures/<case>/ with the real prometheus_client.

Usage (from the repository root, with the pinned library, see scripts/setup-python-venv):

    target/venv/bin/python tests/python/gen_fixtures.py            # (re)write tests/fixtures
    target/venv/bin/python tests/python/gen_fixtures.py --check    # regenerate in a temp dir, diff, exit 1 on drift
    target/venv/bin/python tests/python/gen_fixtures.py --list     # case names and descriptions

Every case directory holds
  files/*.db                     the library's own bytes (see "Truncation" below)
  order.txt                      file basenames in merge order, one per line (may name files that do not exist)
  expected.<format>.<escaping>   Python's output for that ordered list; format text|openmetrics,
                                 escaping underscores|allow-utf-8
  description.txt                what the case pins (first line), plus notes
optionally
  python_error.txt               Python raises for the full list (bad files). The expected.* files then hold Python's
                                 output for the list WITHOUT the files named in bad_files.txt: the exporter skips bad
                                 files (each bad file is broken from its first record, so "skip the file" and "keep the
                                 records before the damage" agree).
  bad_files.txt                  basenames of the bad files
  expected-no-accumulate.*       MultiProcessCollector.merge(files, accumulate=False): library-level mode that the
                                 dump CLI does not expose; kept for reference, not checked by tests/it/conformance.rs.

Cases: every reading/merging test of client_python 0.26.0 tests/test_multiprocess.py, then the extra cases of
shared/research/prometheus_client_multiproc.md section 6.1 and a few more found while writing this.
Writers are in-process simulated processes (pcharness.use_process), with time.time patched so the bytes are
reproducible. The generator is deterministic: running it twice gives identical bytes.

Truncation: the library pre-sizes every file to 64 KiB. To keep the repository small, files are cut to their
`used` bytes (everything after `used` must be zero) unless the case says `truncate=False`; for every truncated
case the generator checks that Python's output is identical before and after truncation, and expected outputs
are computed from the truncated files that are committed.
"""

import argparse
import filecmp
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcharness as H  # noqa: E402

from prometheus_client import Counter, Enum, Gauge, Histogram, Info, Summary  # noqa: E402
from prometheus_client.mmap_dict import MmapedDict  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, 'tests', 'fixtures')

CASES = []


class Case:
    def __init__(self, name, description, fn, truncate=True, orders=None, no_accumulate=False):
        self.name = name
        self.description = description
        self.fn = fn
        self.truncate = truncate
        # {suffix: function(order) -> order}: extra cases with the same files in another order
        self.orders = orders or {}
        self.no_accumulate = no_accumulate


def case(name, description, **kw):
    def deco(fn):
        CASES.append(Case(name, description, fn, **kw))
        return fn
    return deco


REVERSED = {'__reversed': lambda o: list(reversed(o))}


class Ctx:
    """What a case function gets: the files directory, the fake clock, and knobs for the result."""

    def __init__(self, files_dir, clock):
        self.dir = files_dir
        self.clock = clock
        self.order = None        # basenames in merge order; default: sorted listing
        self.bad = []            # basenames of files the exporter must skip
        self.notes = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def mark_dead(self, pid):
        H.end_processes()
        H.mark_process_dead(pid, self.dir)


def proc(ident):
    return H.use_process(ident)


def raw_write(path, entries):
    """Write records with the library's own MmapedDict (keys are arbitrary strings)."""
    d = MmapedDict(path)
    for key, value, ts in entries:
        d.write_value(key, value, ts)
    d.close()


# ============================================================================================
# client_python tests/test_multiprocess.py (0.26.0)
# ============================================================================================

def _two(metric_cls, **kw):
    proc(123)
    a = metric_cls(**kw)
    proc(456)
    b = metric_cls(**kw)
    return a, b


@case('counter_adds', 'test_counter_adds: two processes\' counters sum (1 + 2 = 3)')
def _(ctx):
    c1, c2 = _two(lambda: Counter('c', 'help', registry=None))
    c1.inc(1)
    c2.inc(2)


@case('counter_adds_initial', 'test_counter_adds, before inc: freshly constructed label-less counters show 0.0')
def _(ctx):
    _two(lambda: Counter('c', 'help', registry=None))


@case('summary_adds', 'test_summary_adds: s_count 2, s_sum 3 (count before sum)')
def _(ctx):
    s1, s2 = _two(lambda: Summary('s', 'help', registry=None))
    s1.observe(1)
    s2.observe(2)


@case('summary_adds_initial', 'test_summary_adds, before observe: s_count and s_sum are 0.0')
def _(ctx):
    _two(lambda: Summary('s', 'help', registry=None))


@case('histogram_adds', 'test_histogram_adds: h_count 2 (derived), h_sum 3, cumulative buckets, le="5.0"')
def _(ctx):
    h1, h2 = _two(lambda: Histogram('h', 'help', registry=None))
    h1.observe(1)
    h2.observe(2)


@case('histogram_adds_initial', 'test_histogram_adds, before observe: all zero, _count derived as 0.0')
def _(ctx):
    _two(lambda: Histogram('h', 'help', registry=None))


def _gauge_pair(mode, v1, v2, die, ctx):
    g1, g2 = _two(lambda: Gauge('g', 'help', registry=None, multiprocess_mode=mode))
    g1.set(v1)
    g2.set(v2)
    if die:
        ctx.mark_dead(123)


@case('gauge_all', 'test_gauge_all: one series per pid (pid label); mark_process_dead(123) keeps "all" files')
def _(ctx):
    _gauge_pair('all', 1, 2, True, ctx)


@case('gauge_all_initial', 'test_gauge_all, before set: g{pid="123"} 0.0, g{pid="456"} 0.0')
def _(ctx):
    _two(lambda: Gauge('g', 'help', registry=None))


@case('gauge_liveall_before_death', 'test_gauge_liveall before mark_process_dead: both pids')
def _(ctx):
    _gauge_pair('liveall', 1, 2, False, ctx)


@case('gauge_liveall', 'test_gauge_liveall: after mark_process_dead(123) only pid 456 remains')
def _(ctx):
    _gauge_pair('liveall', 1, 2, True, ctx)


@case('gauge_min', 'test_gauge_min: min = 1.0, no pid label')
def _(ctx):
    _gauge_pair('min', 1, 2, False, ctx)


@case('gauge_livemin_before_death', 'test_gauge_livemin before mark_process_dead: 1.0')
def _(ctx):
    _gauge_pair('livemin', 1, 2, False, ctx)


@case('gauge_livemin', 'test_gauge_livemin: after pid 123 dies, 2.0')
def _(ctx):
    _gauge_pair('livemin', 1, 2, True, ctx)


@case('gauge_max', 'test_gauge_max: max = 2.0')
def _(ctx):
    _gauge_pair('max', 1, 2, False, ctx)


@case('gauge_livemax_before_death', 'test_gauge_livemax before mark_process_dead: 2.0')
def _(ctx):
    _gauge_pair('livemax', 2, 1, False, ctx)


@case('gauge_livemax', 'test_gauge_livemax: after pid 123 dies, 1.0')
def _(ctx):
    _gauge_pair('livemax', 2, 1, True, ctx)


@case('gauge_sum', 'test_gauge_sum: 3.0, unchanged after mark_process_dead(123)')
def _(ctx):
    _gauge_pair('sum', 1, 2, True, ctx)


@case('gauge_livesum_before_death', 'test_gauge_livesum before mark_process_dead: 3.0')
def _(ctx):
    _gauge_pair('livesum', 1, 2, False, ctx)


@case('gauge_livesum', 'test_gauge_livesum: after pid 123 dies, 2.0')
def _(ctx):
    _gauge_pair('livesum', 1, 2, True, ctx)


def _mostrecent(mode, die, ctx):
    g1, g2 = _two(lambda: Gauge('g', 'help', registry=None, multiprocess_mode=mode))
    g2.set(2)  # earlier timestamp (the clock advances)
    g1.set(1)
    if die:
        ctx.mark_dead(123)


@case('gauge_mostrecent', 'test_gauge_mostrecent: later timestamp wins (1.0) whatever the file order; '
      'unchanged after mark_process_dead', orders=REVERSED)
def _(ctx):
    _mostrecent('mostrecent', True, ctx)


@case('gauge_livemostrecent_before_death', 'test_gauge_livemostrecent before mark_process_dead: 1.0',
      orders=REVERSED)
def _(ctx):
    _mostrecent('livemostrecent', False, ctx)


@case('gauge_livemostrecent', 'test_gauge_livemostrecent: after pid 123 dies, 2.0')
def _(ctx):
    _mostrecent('livemostrecent', True, ctx)


@case('namespace_subsystem', 'test_namespace_subsystem: family ns_ss_c, sample ns_ss_c_total')
def _(ctx):
    proc(123)
    Counter('c', 'help', registry=None, namespace='ns', subsystem='ss').inc(1)


@case('counter_across_forks', 'test_counter_across_forks: pid changes 0 -> 1 mid-life, total 3.0 over two files')
def _(ctx):
    pid = [0]
    proc(lambda: pid[0])
    c1 = Counter('c', 'help', registry=None)
    c1.inc(1)
    c1.inc(1)
    pid[0] = 1
    c1.inc(1)


@case('initialization_detects_pid_change', 'test_initialization_detects_pid_change: c1, c2 in counter_0.db, '
      'c3 in counter_1.db (pid change seen at construction)')
def _(ctx):
    pid = [0]
    proc(lambda: pid[0])
    Counter('c1', 'c1', registry=None)
    Counter('c2', 'c2', registry=None)
    pid[0] = 1
    Counter('c3', 'c3', registry=None)


def _collect_like(helps=('help', 'help', 'help')):
    """The writers of test_collect / test_collect_preserves_help / test_restrict."""
    pid = [0]
    proc(lambda: pid[0])
    labels = {i: i for i in 'abcd'}
    c = Counter('c', helps[0], labelnames=labels.keys(), registry=None)
    g = Gauge('g', helps[1], labelnames=labels.keys(), registry=None)
    h = Histogram('h', helps[2], labelnames=labels.keys(), registry=None)
    c.labels(**labels).inc(1)
    g.labels(**labels).set(1)
    h.labels(**labels).observe(1)
    pid[0] = 1
    c.labels(**labels).inc(1)
    g.labels(**labels).set(1)
    h.labels(**labels).observe(5)


@case('collect', 'test_collect: counter 2.0, gauge per pid, histogram h_sum 6.0, 15 cumulative buckets, h_count',
      orders=REVERSED)
def _(ctx):
    _collect_like()


@case('collect_full_size_files', 'test_collect with the files left at their real 64 KiB size (not truncated)',
      truncate=False)
def _(ctx):
    _collect_like()


@case('collect_histogram_ordering', 'test_collect_histogram_ordering: samples grouped per label set '
      '[sum, buckets, count], view1 then view2', orders=REVERSED)
def _(ctx):
    pid = [0]
    proc(lambda: pid[0])
    h = Histogram('h', 'help', labelnames=['view'], registry=None)
    h.labels(view='view1').observe(1)
    pid[0] = 1
    h.labels(view='view1').observe(5)
    h.labels(view='view2').observe(1)


@case('collect_preserves_help', 'test_collect_preserves_help: help text comes from the file keys')
def _(ctx):
    _collect_like(('c help', 'g help', 'h help'))


@case('merge_no_accumulate', 'test_merge_no_accumulate: same files as test_collect\'s histogram. expected.* is the '
      'normal (accumulating) output; expected-no-accumulate.* is merge(files, accumulate=False): non-cumulative '
      'buckets, no _count. The dump CLI always accumulates, so tests only check expected.*', no_accumulate=True)
def _(ctx):
    pid = [0]
    proc(lambda: pid[0])
    labels = {i: i for i in 'abcd'}
    h = Histogram('h', 'help', labelnames=labels.keys(), registry=None)
    h.labels(**labels).observe(1)
    pid[0] = 1
    h.labels(**labels).observe(5)


@case('missing_gauge_file_during_merge', 'test_missing_gauge_file_during_merge: order.txt names '
      'gauge_liveall_9999999.db and gauge_livesum_9999999.db which do not exist; Python returns nothing')
def _(ctx):
    ctx.order = ['gauge_liveall_9999999.db', 'gauge_livesum_9999999.db']
    ctx.notes.append('files/ is empty (and absent from git); the listed files do not exist.')


@case('child_name_built_once', 'test_child_name_is_built_once_with_namespace_subsystem_unit: family '
      'ns_ss_m_seconds, samples ns_ss_m_seconds_total (#1035)')
def _(ctx):
    class CustomCounter(Counter):
        def __init__(self, name, documentation, labelnames=(), namespace="mydefaultnamespace",
                     subsystem="mydefaultsubsystem", unit="", registry=None, _labelvalues=None):
            super().__init__(name=name, documentation=documentation, labelnames=labelnames, namespace=namespace,
                             subsystem=subsystem, unit=unit, registry=registry, _labelvalues=_labelvalues)

    proc(123)
    c = CustomCounter(name='m', documentation='help', labelnames=('status', 'method'), namespace='ns',
                      subsystem='ss', unit='seconds', registry=None)
    c.labels(status='200', method='GET').inc()
    c.labels(status='404', method='POST').inc()


# ============================================================================================
# Extra cases (research note section 6.1 and more)
# ============================================================================================

@case('mostrecent_never_set', 'mostrecent/livemostrecent series never set(): HELP/TYPE only, no sample')
def _(ctx):
    proc(1)
    Gauge('g_never', 'never set', ['l'], registry=None, multiprocess_mode='mostrecent').labels('a')
    Gauge('g_never_unlabelled', 'never set either', registry=None, multiprocess_mode='livemostrecent')
    g = Gauge('g_partly', 'one of two series set', ['l'], registry=None, multiprocess_mode='mostrecent')
    g.labels('unset')
    g.labels('set').set(5)
    proc(2)
    Gauge('g_never', 'never set', ['l'], registry=None, multiprocess_mode='mostrecent').labels('b')
    g = Gauge('g_partly', 'one of two series set', ['l'], registry=None, multiprocess_mode='mostrecent')
    g.labels('unset')


@case('mostrecent_tie', 'mostrecent with equal timestamps: the file earlier in the order wins', orders=REVERSED)
def _(ctx):
    ctx.clock.step = 0.0
    ctx.clock.now = 1000.0
    for pid, v in ((1, 1.0), (2, 2.0), (3, 3.0)):
        proc(pid)
        Gauge('tie', 'tie help', registry=None, multiprocess_mode='mostrecent').set(v)
        Gauge('livetie', 'tie help', ['l'], registry=None, multiprocess_mode='livemostrecent').labels('x').set(v * 10)


@case('mostrecent_odd_timestamps', 'mostrecent with patched time.time returning 0.0 (never wins), a negative '
      'value (never wins), +inf (wins, a later +inf ties), NaN (never wins)', orders=REVERSED)
def _(ctx):
    ctx.clock.step = 0.0
    stamps = {
        'zero': (0.0, 0.0, None),
        'negative': (-5.0, 10.0, None),
        'inf': (math.inf, 20.0, math.inf),
        'nan': (math.nan, math.nan, 30.0),
    }
    for i in range(3):
        proc(10 + i)
        g = Gauge('odd_ts', 'odd timestamps', ['case'], registry=None, multiprocess_mode='mostrecent')
        for name, ts in stamps.items():
            if ts[i] is None:
                continue
            ctx.clock.now = ts[i]
            g.labels(name).set(100 * i + len(name))


@case('mixed_gauge_modes', 'one gauge family in all/sum/max files: the LAST gauge file decides the mode '
      '(max: 3.0, no pid); reversed order -> all, with pid labels', orders=REVERSED)
def _(ctx):
    for pid, mode, v in ((1, 'all', 1.0), (2, 'sum', 1.0), (3, 'max', 3.0)):
        proc(pid)
        Gauge('modediff', 'mode help', registry=None, multiprocess_mode=mode).set(v)
    ctx.order = ['gauge_all_1.db', 'gauge_sum_2.db', 'gauge_max_3.db']


@case('mixed_gauge_modes_mostrecent', 'gauge family in mostrecent and livesum files; order decides the mode',
      orders=REVERSED)
def _(ctx):
    proc(1)
    Gauge('mm', 'first', ['l'], registry=None, multiprocess_mode='mostrecent').labels('a').set(4)
    proc(2)
    Gauge('mm', 'second', ['l'], registry=None, multiprocess_mode='livesum').labels('a').set(7)
    ctx.order = ['gauge_mostrecent_1.db', 'gauge_livesum_2.db']


@case('different_help', 'different help texts across files: the first file\'s help wins', orders=REVERSED)
def _(ctx):
    for pid in (1, 2):
        proc(pid)
        Counter('helpdiff', f'help from {pid}', registry=None).inc(pid)
        Gauge('ghelpdiff', f'gauge help from {pid}', registry=None, multiprocess_mode='livesum').set(pid)
    ctx.order = ['counter_2.db', 'gauge_livesum_2.db', 'counter_1.db', 'gauge_livesum_1.db']


@case('user_label_pid', 'a user label named pid: overwritten by the file pid in all mode (two series print '
      'the same label set), removed in sum/min/max/mostrecent')
def _(ctx):
    for pid in (1, 2):
        proc(pid)
        Gauge('pid_all', 'h', ['pid'], registry=None).labels('user').set(pid)
        g = Gauge('pid_all2', 'h', ['pid', 'x'], registry=None)
        g.labels('u1', 'a').set(pid)
        g.labels('u2', 'a').set(pid + 10)
        Gauge('pid_sum', 'h', ['pid', 'x'], registry=None, multiprocess_mode='sum').labels('user', 'a').set(pid)
        Gauge('pid_min', 'h', ['pid'], registry=None, multiprocess_mode='min').labels('user').set(pid)
        Gauge('pid_max', 'h', ['pid'], registry=None, multiprocess_mode='livemax').labels('user').set(pid)
        Gauge('pid_recent', 'h', ['pid'], registry=None, multiprocess_mode='mostrecent').labels(
            'user' + str(pid)).set(pid)
        Counter('pid_counter', 'counters keep a user pid label', ['pid'], registry=None).labels('user').inc(pid)


@case('negative_zero', '-0.0: sum/livesum print 0.0 (0.0 + -0.0), all/min/max/mostrecent print -0.0')
def _(ctx):
    for pid in (1,):
        proc(pid)
        for mode in ('all', 'liveall', 'sum', 'livesum', 'min', 'livemin', 'max', 'livemax', 'mostrecent',
                     'livemostrecent'):
            Gauge('negzero_' + mode, mode, registry=None, multiprocess_mode=mode).set(-0.0)
        Histogram('negzero_hist', 'observe -0.0', registry=None, buckets=(0,)).observe(-0.0)
        Summary('negzero_summary', 'observe -0.0', registry=None).observe(-0.0)


@case('nan_min_max', 'NaN in min/max: a NaN seen first sticks, a NaN seen later never replaces', orders=REVERSED)
def _(ctx):
    for pid, v in ((1, math.nan), (2, 1.0), (3, -1.0)):
        proc(pid)
        Gauge('nan_min', 'min', registry=None, multiprocess_mode='min').set(v)
        Gauge('nan_livemax', 'livemax', registry=None, multiprocess_mode='livemax').set(v)
        Gauge('nan_sum', 'sum', registry=None, multiprocess_mode='sum').set(v)
        Gauge('nan_all', 'all', registry=None).set(v)


@case('infinities', '+Inf/-Inf in sums, min/max; inf + -inf = NaN in a sum')
def _(ctx):
    for pid, v in ((1, math.inf), (2, -math.inf), (3, 5.0)):
        proc(pid)
        Gauge('inf_sum', 'sum', registry=None, multiprocess_mode='sum').set(v)
        Gauge('inf_min', 'min', registry=None, multiprocess_mode='min').set(v)
        Gauge('inf_max', 'max', registry=None, multiprocess_mode='max').set(v)
        Counter('inf_counter', 'counter', registry=None).inc(math.inf if pid == 1 else 1)
    ctx.order = ['counter_1.db', 'counter_2.db', 'counter_3.db', 'gauge_sum_1.db', 'gauge_sum_2.db',
                 'gauge_sum_3.db', 'gauge_min_3.db', 'gauge_min_2.db', 'gauge_min_1.db', 'gauge_max_2.db',
                 'gauge_max_3.db', 'gauge_max_1.db']


@case('bucket_union', 'bucket sets unioned across processes: [1,2] u [1.5,3] -> 1.0,1.5,2.0,3.0,+Inf, cumulative',
      orders=REVERSED)
def _(ctx):
    proc(1)
    h = Histogram('hu', 'union', registry=None, buckets=(1, 2))
    for v in (0.5, 1.5, 2.5, 10):
        h.observe(v)
    proc(2)
    h = Histogram('hu', 'union', registry=None, buckets=(1.5, 3))
    for v in (1, 1.75, 3, 4):
        h.observe(v)
    proc(3)
    h = Histogram('hu', 'union', ['l'], registry=None, buckets=(-1, 0, 1))
    h.labels('x').observe(-0.5)


@case('histogram_odd_observations', 'histogram observe(NaN) (no bucket, NaN sum), +Inf, -Inf, negative '
      'bounds, a -Inf bucket')
def _(ctx):
    proc(1)
    h = Histogram('hodd', 'odd', registry=None, buckets=(-5, 0, 5))
    for v in (math.nan, math.inf, -math.inf, -3, 0, 7):
        h.observe(v)
    h2 = Histogram('hneginf', 'a -Inf bucket', registry=None, buckets=(-math.inf, 0))
    h2.observe(-math.inf)
    h2.observe(-1)
    h3 = Histogram('hsum_only_inf', 'sum is inf', registry=None, buckets=(1,))
    h3.observe(math.inf)
    proc(2)
    h = Histogram('hodd', 'odd', registry=None, buckets=(-5, 0, 5))
    h.observe(-math.inf)


FLOAT_VALUES = [
    0.0, -0.0, 1.0, 42.0, 0.0001, 1e-05, 1.5e-07, 5e-324, 2.2250738585072014e-308, 999999.0, 1e6, 1234567.0,
    1000000.5, 12345678.9, 123456789.123, 1e10, 1.5e10, 1e15, 1.234567890123e12, 9999999999999998.0, 1e16,
    1.5e21, 1e22, -1000000.0, -1e16, -1234567.0, 0.30000000000000004, 1.7976931348623157e308,
    -1.7976931348623157e308, 15.299999999999999, 0.1, 1 / 3, 2 / 3, 100.0, 123456.0, 1e-4, 9.999999999999999e15,
    -1113178120592002.25, 111659285584252.12, 2.0 ** 53, 2.0 ** 53 + 2, 2.0 ** 63, 2.0 ** -1074, 1e300, 1e-300,
    math.inf, -math.inf, math.nan, 0.5, 0.25, 1e21, 1e23, 4.35, 1e100,
]


@case('float_format', 'floatToGoString of sample values (1e+06, 1e+10, 1.234567e+06, 5e-324, +Inf, NaN, -0.0, '
      'ties, ...) and of histogram le labels')
def _(ctx):
    proc(1)
    g = Gauge('floats', 'one series per value', ['i'], registry=None)
    for i, v in enumerate(FLOAT_VALUES):
        g.labels(f'{i:02d}').set(v)
    bounds = sorted({abs(v) for v in FLOAT_VALUES if math.isfinite(v)} | {-1e6, -1.5e10, -0.5})
    h = Histogram('float_buckets', 'le formatting', registry=None, buckets=bounds)
    for v in (1e6, 1.5e10, 2e16, 3.5, 1e-5, -1):
        h.observe(v)


@case('escaping', 'name/label escaping: dotted metric name, dashed/digit-leading/non-ASCII/empty label names, '
      'astral characters, HELP and label values with quotes, backslashes, newlines, CR, tab, NUL, DEL, U+2028')
def _(ctx):
    proc(1)
    c = Counter('my.metric', 'Total "requests"\nwith \\ backslash', ['my-label', '0lead', 'é', 'ok_label'],
                registry=None)
    c.labels('v', 'w', 'x', 'y').inc()
    c.labels('q"uote', 'back\\slash', 'new\nline', 'ü😀').inc(2)
    g = Gauge('métrique_😀', 'unicode help é 😀 \t tab \r cr', ['lbl', 'with space', '😀'], registry=None)
    g.labels('\x00nul\x7fdel\u2028ls\r\t', 'a b', 'z').set(3)
    g2 = Gauge('0starts.with-digit', '', ['', 'a:b', '_'], registry=None, multiprocess_mode='sum')
    g2.labels('empty-name', 'colon', 'underscore').set(4)
    h = Histogram('hist.dotted', 'h\\\\n not a newline', ['la-bel'], registry=None, buckets=(1,))
    h.labels('"\\\n').observe(0.5)
    s = Summary('sum mary', 'space in name', ['ä'], registry=None)
    s.labels('ö').observe(1)
    Gauge('quote"in\\name\nnl', 'odd name', registry=None).set(1)


@case('colon_names', 'vllm:-style names: text keeps ":"; OM underscores rewrites ":" in sample lines only; '
      'allow-utf-8 keeps it')
def _(ctx):
    for pid in (1, 2):
        proc(pid)
        c = Counter('vllm:prompt_tokens', 'Number of prefill tokens processed.', ['model_name'], registry=None)
        c.labels('m').inc(10 * pid)
        g = Gauge('vllm:gpu_cache_usage_perc', 'GPU KV-cache usage.', ['model_name'], registry=None,
                  multiprocess_mode='livemostrecent')
        g.labels('m').set(0.25 * pid)
        h = Histogram('vllm:e2e_request_latency_seconds', 'E2E latency.', ['model_name'], registry=None,
                      buckets=(0.3, 1.0, 2.5))
        h.labels('m').observe(0.7 * pid)
        Gauge('vllm:num_requests_running', 'running', ['model_name'], registry=None,
              multiprocess_mode='all').labels('m').set(pid)
        Gauge(':leading:colon', 'leading colon', registry=None, multiprocess_mode='max').set(pid)


@case('empty_dir', 'no files at all: text output is empty, OpenMetrics is "# EOF\\n"')
def _(ctx):
    ctx.order = []
    ctx.notes.append('order.txt is empty and files/ is absent: run dump on an empty directory.')


@case('large_files', 'counter_1.db uses more than one page (used > 4096) and counter_2.db grew past the initial '
      '64 KiB (131072-byte file); files kept at full size', truncate=False)
def _(ctx):
    proc(1)
    c = Counter('big', 'long help ' + 'x' * 300, ['i'], registry=None)
    for i in range(12):
        c.labels(str(i)).inc(i)
    proc(2)
    c = Counter('big', 'long help ' + 'x' * 300, ['i'], registry=None)
    for i in range(200):
        c.labels(str(i)).inc(i + 0.5)
    Gauge('after_big', 'a family after the big one', registry=None, multiprocess_mode='sum').set(1)
    H.end_processes()
    u1, u2 = H.used_bytes(ctx.path('counter_1.db')), H.used_bytes(ctx.path('counter_2.db'))
    assert 4096 < u1 < 65536 and u2 > 65536, (u1, u2)
    assert os.path.getsize(ctx.path('counter_2.db')) == 131072
    ctx.notes.append(f'used: counter_1.db {u1}, counter_2.db {u2}')


@case('set_function', 'a set_function gauge stores only its initial 0.0 record')
def _(ctx):
    proc(1)
    Gauge('sf', 'set_function gauge', registry=None).set_function(lambda: 42)
    Gauge('sf_sum', 'set_function gauge, sum', registry=None, multiprocess_mode='sum').set_function(lambda: 7)


@case('counter_unit', 'counter with unit: family with_unit_bytes, no # UNIT line in OpenMetrics; '
      'Counter(requests, unit=total) -> requests_total_total; Counter(foo_total_total) -> family foo_total')
def _(ctx):
    proc(1)
    Counter('with_unit', 'with a unit', unit='bytes', registry=None).inc(3)
    Counter('requests', 'unit total', unit='total', registry=None).inc()
    Counter('foo_total_total', 'double total', registry=None).inc(2)
    Gauge('temp', 'gauge with unit', unit='celsius', registry=None).set(21.5)
    Histogram('lat', 'histogram with unit', unit='seconds', registry=None, buckets=(1,)).observe(0.5)


@case('summary_order', 'summaries: _count before _sum per label set, label sets in first-seen order',
      orders=REVERSED)
def _(ctx):
    proc(1)
    s = Summary('req', 'summary', ['path'], registry=None)
    s.labels('/b').observe(2)
    s.labels('/a').observe(1.5)
    proc(2)
    s = Summary('req', 'summary', ['path'], registry=None)
    s.labels('/c').observe(4)
    s.labels('/a').observe(0.25)
    Summary('req2', 'unlabelled', registry=None).observe(3)


@case('info_enum_absent', 'Info and Enum write nothing; a labelled counter without children is absent')
def _(ctx):
    proc(1)
    Info('build', 'build info', registry=None).info({'version': '1'})
    Enum('state', 'state', states=['a', 'b'], registry=None).state('b')
    Counter('no_children', 'labelled, never .labels()', ['l'], registry=None)
    Counter('present', 'present', registry=None).inc()


@case('first_seen_order', 'families, label sets and samples come out in first-seen order (research note 3.4 '
      'example); the __permuted variant uses [gauge_sum_2, counter_2, counter_1, gauge_sum_1]',
      orders={'__permuted': lambda o: ['gauge_sum_2.db', 'counter_2.db', 'counter_1.db', 'gauge_sum_1.db']})
def _(ctx):
    proc(1)
    c = Counter('c', 'h', ['k'], registry=None)
    g = Gauge('g', 'h', ['k'], registry=None, multiprocess_mode='sum')
    for k in ('b', 'a'):
        c.labels(k).inc()
        g.labels(k).set(1)
    proc(2)
    c = Counter('c', 'h', ['k'], registry=None)
    g = Gauge('g', 'h', ['k'], registry=None, multiprocess_mode='sum')
    for k in ('c', 'a', 'b'):
        c.labels(k).inc()
        g.labels(k).set(2)
    ctx.order = ['counter_1.db', 'counter_2.db', 'gauge_sum_1.db', 'gauge_sum_2.db']


@case('pid_reuse', 'a process re-opening its predecessor\'s file (same id) continues its values')
def _(ctx):
    proc(77)
    Counter('reuse_c', 'h', registry=None).inc(5)
    Gauge('reuse_g', 'h', registry=None, multiprocess_mode='livesum').set(3)
    H.end_processes()
    proc(77)
    Counter('reuse_c', 'h', registry=None).inc(1)
    Gauge('reuse_g', 'h', registry=None, multiprocess_mode='livesum').inc(1)
    Counter('reuse_new', 'new family appended to the old file', registry=None).inc()


@case('type_collision', 'one family name written as counter, gauge and histogram by different processes: the first '
      'file decides the type; other samples are summed (or, in a gauge family, set) as plain samples',
      orders={'__gauge_first': lambda o: ['gauge_all_2.db', 'histogram_3.db', 'counter_1.db'],
              '__histogram_first': lambda o: ['histogram_3.db', 'counter_1.db', 'gauge_all_2.db']})
def _(ctx):
    proc(1)
    Counter('x', 'as counter', ['l'], registry=None).labels('a').inc(1)
    proc(2)
    Gauge('x', 'as gauge', ['l'], registry=None).labels('a').set(2)
    proc(3)
    Histogram('x', 'as histogram', ['l'], registry=None, buckets=(1e6,)).labels('a').observe(3)
    ctx.order = ['counter_1.db', 'gauge_all_2.db', 'histogram_3.db']


@case('empty_help', 'empty help text: "# HELP name " with a trailing space')
def _(ctx):
    proc(1)
    Counter('eh', '', registry=None).inc()
    Gauge('eh_g', '', registry=None).set(1)


@case('odd_process_ids', 'process ids that are not numbers: pid label is basename.split("_")[2][:-3], so '
      '"host_12" gives pid "h" and "" gives pid ""; non-ASCII file name')
def _(ctx):
    for ident in ('A', 'web-1', 'host_12', '', 'ü'):
        proc(ident)
        Gauge('oddpid', 'h', registry=None).set(1)
        Gauge('oddpid_sum', 'h', registry=None, multiprocess_mode='livesum').set(2)
        Counter('oddpid_c', 'h', registry=None).inc()


@case('foreign_type_prefixes', 'file names whose prefix is another valid Metric type (info, unknown, untyped, '
      'stateset, gaugehistogram) holding counter records: Python accepts them (type from the prefix, summed)')
def _(ctx):
    for n, (prefix, fam) in enumerate((('info', 'i'), ('unknown', 'u'), ('untyped', 't'), ('stateset', 's'),
                                        ('gaugehistogram', 'g'))):
        raw_write(ctx.path(f'{prefix}_{n}.db'), [
            (f'["{fam}", "{fam}_total", {{"l": "x"}}, "help {prefix}"]', 2.0 + n, 0.0),
            (f'["{fam}", "{fam}_bucket", {{"le": "1.0"}}, "help {prefix}"]', 1.0, 0.0),
        ])


@case('le_parsing', 'histogram le labels written by other writers are parsed with float() and re-formatted: '
      '"1e+010" (<=0.25 writer) -> 1e+10, "5" -> 5.0, "1E3" -> 1000.0, "-0" and "0.0" are one bucket '
      '(first key -0.0 kept -> le="-0.0")')
def _(ctx):
    def k(le):
        return f'["h", "h_bucket", {{"le": "{le}"}}, "help"]'
    raw_write(ctx.path('histogram_1.db'), [
        ('["h", "h_sum", {}, "help"]', 10.0, 0.0),
        (k('1e+010'), 1.0, 0.0), (k('5'), 2.0, 0.0), (k('1E3'), 3.0, 0.0), (k('-0'), 4.0, 0.0),
        (k('+Inf'), 5.0, 0.0),
    ])
    raw_write(ctx.path('histogram_2.db'), [
        (k('0.0'), 1.0, 0.0), (k('5.0'), 1.0, 0.0), (k('1e+10'), 1.0, 0.0), (k('1000'), 1.0, 0.0),
        (k('-Inf'), 1.0, 0.0), (k('2.50'), 1.0, 0.0),
    ])


@case('le_parsing_exotic', 'le strings that Python float() accepts: "1_0", " 7 ", "infinity", ".5", "5.", '
      '"-INF", "+1.5e-3" -- exotic; written with MmapedDict directly')
def _(ctx):
    def k(le):
        return f'["h", "h_bucket", {{"le": "{le}"}}, "help"]'
    raw_write(ctx.path('histogram_1.db'), [
        ('["h", "h_sum", {}, "help"]', 1.0, 0.0),
        (k('1_0'), 1.0, 0.0), (k(' 7 '), 1.0, 0.0), (k('infinity'), 1.0, 0.0), (k('.5'), 1.0, 0.0),
        (k('5.'), 1.0, 0.0), (k('-INF'), 1.0, 0.0), (k('+1.5e-3'), 1.0, 0.0), (k('\\t2e0\\n'), 1.0, 0.0),
    ])


@case('le_parsing_unicode', 'le strings with non-ASCII that Python float() still accepts: "\\u0663" (Arabic-Indic '
      'digit three) and U+00A0/U+2003 whitespace around a number -- very exotic; written with MmapedDict directly')
def _(ctx):
    def k(le):
        return f'["h", "h_bucket", {{"le": "{le}"}}, "help"]'
    raw_write(ctx.path('histogram_1.db'), [
        ('["h", "h_sum", {}, "help"]', 1.0, 0.0),
        (k('\\u0663'), 1.0, 0.0), (k('\\u00a04.5\\u2003'), 1.0, 0.0), (k('+Inf'), 1.0, 0.0),
    ])


@case('json_key_variants', 'keys not in json.dumps(sort_keys=True) form, written with MmapedDict: raw UTF-8, '
      '\\/ and \\u0041 escapes, extra whitespace, unsorted and duplicate label keys (last wins), and two keys '
      'that only differ in help text (same sample: summed)')
def _(ctx):
    raw_write(ctx.path('counter_1.db'), [
        ('["k", "k_total", {"b": "1", "a": "2"}, "help one"]', 1.0, 0.0),
        ('["k", "k_total", {"a": "2", "b": "1"}, "help two"]', 2.0, 0.0),
        ('[ "k" ,"k_total",{ "a":"x\\/y\\u0041" } , "h" ]', 3.0, 0.0),
        ('["k", "k_total", {"a": "é😀", "dup": "first", "dup": "last"}, "help"]', 4.0, 0.0),
        ('["k\\u00e9", "k\\u00e9_total", {}, "\\ud83d\\ude00 astral via surrogate pair"]', 5.0, 0.0),
        ('["k", "k_total", {"a": "\\"\\\\\\n\\t\\r\\b\\f\\u0000"}, "h"]', 6.0, 0.0),
    ])


@case('bad_zero_byte_file', 'a 0-byte .db (writer killed between create and truncate): Python raises struct.error; '
      'the exporter skips it. expected.* = Python output without the bad file')
def _(ctx):
    for pid in (1, 3):
        proc(pid)
        Counter('c', 'h', ['l'], registry=None).labels(str(pid)).inc(pid)
    H.end_processes()
    open(ctx.path('counter_2.db'), 'wb').close()
    ctx.bad = ['counter_2.db']
    ctx.order = ['counter_1.db', 'counter_2.db', 'counter_3.db']


@case('bad_corrupt_first_record', 'bytes 8..16 overwritten with "somejunk" (test_corruption_detected): '
      'Python raises RuntimeError; the exporter skips the file. expected.* = output without it')
def _(ctx):
    for pid in (1, 2, 3):
        proc(pid)
        Counter('c', 'h', ['l'], registry=None).labels(str(pid)).inc(pid)
        Gauge('g', 'h', registry=None, multiprocess_mode='sum').set(pid)
    H.end_processes()
    p = ctx.path('counter_2.db')
    with open(p, 'r+b') as f:
        f.seek(8)
        f.write(b'somejunk')
    ctx.bad = ['counter_2.db']
    ctx.order = ['counter_1.db', 'gauge_sum_1.db', 'counter_2.db', 'gauge_sum_2.db', 'counter_3.db',
                 'gauge_sum_3.db']


@case('raw_values', 'values only reachable through the value class (as Counter.reset() does): -0.0 and negative '
      'counters/summaries; sums start at 0.0 so a lone -0.0 prints 0.0')
def _(ctx):
    proc(1)
    c = Counter('raw_c', 'h', ['l'], registry=None)
    c.labels('negzero')._value.set(-0.0)
    c.labels('neg')._value.set(-2.5)
    s = Summary('raw_s', 'h', registry=None)
    s._count.set(-0.0)
    s._sum.set(-1e308)
    proc(2)
    s = Summary('raw_s', 'h', registry=None)
    s._sum.set(-1e308)
    Counter('raw_c', 'h', ['l'], registry=None).labels('neg')._value.set(-0.5)


# ============================================================================================
# Generation
# ============================================================================================

def _write_bytes(path, data):
    with open(path, 'wb') as f:
        f.write(data)


def _outputs_for(files_dir, order, bad, accumulate=True):
    """(outputs for order minus bad, python error for the full order or None)."""
    full = [os.path.join(files_dir, n) for n in order]
    good = [os.path.join(files_dir, n) for n in order if n not in bad]
    outs_full, err = H.try_merge_outputs(full, accumulate)
    if bad:
        if err is None:
            raise AssertionError(f'bad files {bad} but Python does not raise')
        outs, err2 = H.try_merge_outputs(good, accumulate)
        if err2:
            raise AssertionError(f'Python raises without the bad files: {err2}')
        return outs, err
    if err:
        raise AssertionError(f'Python raises: {err}')
    return outs_full, None


def build_case(c, dest_root, tmp_root):
    """Build case ``c`` (and its order variants) under dest_root; returns the case names written."""
    work = os.path.join(tmp_root, c.name)
    files_dir = os.path.join(work, 'files')
    os.makedirs(files_dir)
    clock = H.FakeClock(1700000000.0, 0.25)
    ctx = Ctx(files_dir, clock)
    with H.multiproc_env(files_dir, clock):
        c.fn(ctx)
        H.end_processes()
    present = H.listdir_db(files_dir)
    order = ctx.order if ctx.order is not None else present
    stray = set(present) - set(order)
    if stray:
        raise AssertionError(f'{c.name}: files not in the order: {sorted(stray)}')

    variants = [(c.name, order)] + [(c.name + suffix, fn(order)) for suffix, fn in c.orders.items()]
    for _, o in variants:
        assert sorted(o) == sorted(order), (c.name, o)

    if c.truncate:
        before = [_outputs_for(files_dir, o, ctx.bad) for _, o in variants]
        for n in present:
            H.truncate_to_used(os.path.join(files_dir, n))
        after = [_outputs_for(files_dir, o, ctx.bad) for _, o in variants]
        if before != after:
            raise AssertionError(f'{c.name}: Python output changed after truncating the files to `used`')

    written = []
    for name, o in variants:
        out_dir = os.path.join(dest_root, name)
        os.makedirs(out_dir)
        if present:
            shutil.copytree(files_dir, os.path.join(out_dir, 'files'))
        _write_bytes(os.path.join(out_dir, 'order.txt'), ''.join(n + '\n' for n in o).encode('utf-8'))
        outs, err = _outputs_for(files_dir, o, ctx.bad)
        for (fmt, esc), data in outs.items():
            _write_bytes(os.path.join(out_dir, H.expected_name(fmt, esc)), data)
        if c.no_accumulate:
            outs_na, _ = _outputs_for(files_dir, o, ctx.bad, accumulate=False)
            for (fmt, esc), data in outs_na.items():
                _write_bytes(os.path.join(out_dir, H.expected_name(fmt, esc, 'expected-no-accumulate')), data)
        if err:
            _write_bytes(os.path.join(out_dir, 'python_error.txt'), (err + '\n').encode('utf-8'))
            _write_bytes(os.path.join(out_dir, 'bad_files.txt'), ''.join(n + '\n' for n in ctx.bad).encode())
        desc = c.description
        if name != c.name:
            desc += f'\n(variant of {c.name}: files merged in a different order, see order.txt)'
        notes = list(ctx.notes)
        if not c.truncate:
            notes.append('files are at their real size (not truncated).')
        elif present:
            notes.append('files truncated to their `used` bytes; Python output verified unchanged.')
        text = desc + '\n' + ''.join(f'note: {n}\n' for n in notes)
        _write_bytes(os.path.join(out_dir, 'description.txt'), text.encode('utf-8'))
        written.append(name)
    return written


README = """\
Conformance fixtures generated by tests/python/gen_fixtures.py with prometheus_client 0.26.0 -- do not edit by hand.

Each directory is one case: files/*.db (real library bytes, usually truncated to `used`), order.txt (merge order),
expected.<text|openmetrics>.<underscores|allow-utf-8> (Python's exposition for exactly that ordered list),
description.txt, and for bad-file cases python_error.txt + bad_files.txt. See the generator's docstring.
Checked by tests/it/conformance.rs. Regenerate: target/venv/bin/python tests/python/gen_fixtures.py
"""


def generate(dest_root):
    os.makedirs(dest_root, exist_ok=True)
    names = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in CASES:
            names += build_case(c, dest_root, tmp)
    _write_bytes(os.path.join(dest_root, 'README.md'), README.encode())
    if len(set(names)) != len(names):
        raise AssertionError('duplicate case names')
    return names


def _tree(path):
    out = {}
    for dp, _, fns in os.walk(path):
        for fn in fns:
            full = os.path.join(dp, fn)
            out[os.path.relpath(full, path)] = full
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--check', action='store_true', help='regenerate into a temp dir and compare with tests/fixtures')
    ap.add_argument('--list', action='store_true', help='list the cases')
    ap.add_argument('--dest', default=FIXTURES, help='fixtures directory (default: tests/fixtures)')
    args = ap.parse_args()
    H.check_version()

    if args.list:
        for c in CASES:
            print(f'{c.name}: {c.description}')
        return 0

    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = os.path.join(tmp, 'fixtures')
            generate(fresh)
            a, b = _tree(fresh), _tree(args.dest)
            diffs = sorted(set(a) ^ set(b))
            diffs += sorted(k for k in set(a) & set(b) if not filecmp.cmp(a[k], b[k], shallow=False))
            for d in diffs:
                print(f'differs: {d}')
            print(f'gen_fixtures --check: {len(a)} files, {len(diffs)} differences')
            return 1 if diffs else 0

    # Rebuild into a sibling temp dir, then swap in: never leaves a half-written fixtures tree.
    parent = os.path.dirname(os.path.abspath(args.dest))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix='.fixtures-', dir=parent)
    try:
        names = generate(staging)
        if os.path.isdir(args.dest):
            shutil.rmtree(args.dest)
        os.rename(staging, args.dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    total = sum(os.path.getsize(p) for p in _tree(args.dest).values())
    ndb = sum(1 for k in _tree(args.dest) if k.endswith('.db'))
    print(f'gen_fixtures: {len(names)} cases, {ndb} .db files, {total} bytes in {args.dest}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
