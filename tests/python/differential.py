"""Differential test: random multiprocess scenarios written by the real prometheus_client, merged by Python and by
the exporter's `dump` command, compared byte for byte (text and OpenMetrics, escaping underscores and allow-utf-8).
Each scenario is also dumped as a view of a random subset of its families (`dump --view`, which reads only those
families' records) and compared with Python's exposition of those families alone.

    target/venv/bin/python tests/python/differential.py --binary target/debug/multiproc-exporter --seed 1 --count 500

Each scenario: 1-6 simulated processes (pcharness.use_process, sequential, in-process: fast) write random families:
counters, gauges in all ten modes (incl. never-set and equal-timestamp mostrecent series), histograms with default,
custom and per-process mismatched bucket sets, summaries; names and label names with dots, dashes, colons, leading
digits, non-ASCII; label values and help with quotes, backslashes, newlines, controls, non-ASCII and astral
characters; values incl. NaN, +-Inf, +-0.0, subnormals and huge numbers; occasional pid reuse, mark_process_dead,
family-name collisions across types and raw value-class writes. The files are merged in a random permutation.
Scenario i of seed S is generated from random.Random(f'{S}:{i}:{attempt}') only, so `--only i` reproduces it.
If Python itself raises on a scenario, it is regenerated (next attempt).

On mismatch: prints seed, scenario index, file list and a unified diff for the first mismatch, a line for each further
one, and keeps the scenario directory (files/, order.txt, expected.*, actual.*, repro.sh). Last line:
`differential: N passed, M failed`; exit status 1 if M > 0 or N < count.
"""

import argparse
import difflib
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcharness as H  # noqa: E402

from prometheus_client import Counter, Gauge, Histogram, Summary  # noqa: E402

# The names a view may list (the exporter's `views` take legacy metric names).
LEGACY_NAME = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*$')

MODES = ('all', 'liveall', 'min', 'livemin', 'max', 'livemax', 'sum', 'livesum', 'mostrecent', 'livemostrecent')
MOSTRECENT = ('mostrecent', 'livemostrecent')
ODD_IDS = ('A', 'web-1', 'host_12', 'host_34', '', 'ü', '0', '007', '7')
DEFAULT_BUCKETS = Histogram.DEFAULT_BUCKETS

# --------------------------------------------------------------------------------------------
# Random text
# --------------------------------------------------------------------------------------------

LEGACY_START = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_'
LEGACY_REST = LEGACY_START + '0123456789'
NAME_ODD = '.-: /0123456789'  # needs escaping in some position
NON_ASCII = 'éüßøñçåЖжд名前字中😀🎉𝄞ﬁ\u00a0\u200b\u2028\u0663'
VALUE_SPECIAL = '"\\\n\t\r\x00\x01\x1f\x7f\x85/{}=,# '
WORDS = ('req', 'http', 'latency', 'vllm', 'gpu', 'cache', 'tokens', 'queue', 'db', 'ok', 'x', 'a1', 'total',
         'seconds', 'bytes', 'count', 'sum', 'bucket', 'info', 'created')


def rand_codepoint(rng):
    """A random non-surrogate code point (mostly BMP)."""
    while True:
        cp = rng.randrange(0x80, 0x3000) if rng.random() < 0.8 else rng.randrange(0x10000, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def rand_word(rng):
    r = rng.random()
    if r < 0.6:
        return rng.choice(WORDS)
    n = rng.randint(1, 6)
    return rng.choice(LEGACY_START) + ''.join(rng.choice(LEGACY_REST) for _ in range(n - 1))


def rand_name(rng, odd=0.3):
    """A metric name: mostly legacy words joined by _, sometimes with odd characters."""
    parts = [rand_word(rng) for _ in range(rng.randint(1, 3))]
    name = '_'.join(parts)
    if rng.random() < odd:
        kind = rng.randrange(7)
        if kind == 0:
            name = name.replace('_', '.', 1) if '_' in name else name + '.x'
        elif kind == 1:
            name = name + '-' + rand_word(rng)
        elif kind == 2:
            name = str(rng.randrange(10)) + name
        elif kind == 3:
            name = rng.choice(('vllm:', 'ns:', ':')) + name
        elif kind == 4:
            name = name + rng.choice(NON_ASCII)
        elif kind == 5:
            name = ''.join(rng.choice(NON_ASCII + NAME_ODD + LEGACY_REST) for _ in range(rng.randint(1, 6)))
        else:
            name = name + rng.choice(('"', '\\', '\n', ' ', '{', '='))
    return name


def rand_labelname(rng):
    r = rng.random()
    if r < 0.55:
        return rand_word(rng)
    if r < 0.62:
        return 'pid'
    if r < 0.66:
        return rng.choice(('le', 'quantile'))
    if r < 0.68:
        return ''
    name = rand_name(rng, odd=1.0)
    while name.startswith('__'):
        name = name[1:]
    return name


def rand_text(rng, maxlen=12):
    """Label value / help text: any mix of ASCII, specials, non-ASCII (never a lone surrogate)."""
    r = rng.random()
    if r < 0.3:
        return rand_word(rng)
    if r < 0.35:
        return ''
    out = []
    for _ in range(rng.randint(1, maxlen)):
        k = rng.random()
        if k < 0.45:
            out.append(rng.choice(LEGACY_REST))
        elif k < 0.7:
            out.append(rng.choice(VALUE_SPECIAL))
        elif k < 0.85:
            out.append(rng.choice(NON_ASCII))
        else:
            out.append(rand_codepoint(rng))
    return ''.join(out)


# --------------------------------------------------------------------------------------------
# Random numbers
# --------------------------------------------------------------------------------------------

SPECIAL_FLOATS = [
    0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 1e6, 999999.0, 1234567.0, 1000000.5, 1e10, 1e15, 1e16, 1e21, 1e22,
    9999999999999998.0, 5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
    -1.7976931348623157e308, 0.30000000000000004, 15.299999999999999, 2.0 ** 53, 2.0 ** 53 + 2, 1e300, 1e-300,
    -1113178120592002.25, 111659285584252.12, math.inf, -math.inf, math.nan, 1e-05, 0.0001, 123456789.123,
]


def rand_float(rng):
    r = rng.random()
    if r < 0.25:
        return float(rng.randint(0, 20))
    if r < 0.35:
        return rng.randint(-40, 400) / 4
    if r < 0.55:
        return rng.choice(SPECIAL_FLOATS)
    if r < 0.75:
        return rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30)
    if r < 0.85:
        return rng.uniform(0, 1) * 10.0 ** rng.randint(5, 17)  # around the 1e6..1e16 formatting switch
    if r < 0.92:  # subnormal
        return struct.unpack('<d', struct.pack('<Q', rng.getrandbits(52) | (rng.getrandbits(1) << 63)))[0]
    return struct.unpack('<d', struct.pack('<Q', rng.getrandbits(64)))[0]  # any bit pattern, incl. NaN payloads


def rand_nonneg(rng):
    v = rand_float(rng)
    return v if math.isnan(v) else abs(v)


def rand_buckets(rng):
    r = rng.random()
    if r < 0.3:
        return DEFAULT_BUCKETS
    n = rng.randint(1, 6)
    pool = set()
    while len(pool) < n:
        v = rand_float(rng)
        if math.isnan(v):
            continue
        pool.add(v)
    if rng.random() < 0.1:
        pool.add(-0.0 if rng.random() < 0.5 else 0.0)
    if rng.random() < 0.05:
        pool.add(-math.inf)
    b = sorted(pool)
    if b == [math.inf]:
        b = [1.0, math.inf]
    return tuple(b)


# --------------------------------------------------------------------------------------------
# Scenario
# --------------------------------------------------------------------------------------------

class Family:
    def __init__(self, rng, name=None, kind=None):
        self.kind = kind or rng.choice(('counter', 'gauge', 'gauge', 'histogram', 'summary'))
        self.name = name or rand_name(rng)
        if self.kind == 'counter' and self.name in ('_total',):
            self.name = 'c'
        self.help = rand_text(rng, 20) if rng.random() < 0.8 else rand_word(rng)
        reserved = {'histogram': {'le'}, 'summary': {'quantile'}}.get(self.kind, set())
        names = []
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
            ln = rand_labelname(rng)
            if ln not in reserved and ln not in names:
                names.append(ln)
        self.labelnames = tuple(names)
        self.mode = rng.choice(MODES)
        self.buckets = rand_buckets(rng) if self.kind == 'histogram' else None
        self.namespace = rand_word(rng) if rng.random() < 0.1 else ''
        self.subsystem = rand_word(rng) if rng.random() < 0.1 else ''
        self.unit = rng.choice(('seconds', 'bytes', 'total', 'ü')) if rng.random() < 0.1 else ''
        n_series = rng.randint(1, 4) if self.labelnames else 1
        self.series = [tuple(rand_text(rng) for _ in self.labelnames) for _ in range(n_series)]

    def create(self, rng, features):
        """Instantiate in the current simulated process, with occasional per-process variations."""
        helptext = self.help
        if rng.random() < 0.1:
            helptext = rand_text(rng, 8)
            features.add('help-variant')
        labelnames = self.labelnames
        series = self.series
        if labelnames and rng.random() < 0.05:
            labelnames = tuple(reversed(labelnames))
            series = [tuple(reversed(s)) for s in series]
            features.add('labelnames-variant')
        kw = dict(registry=None, namespace=self.namespace, subsystem=self.subsystem, unit=self.unit)
        if self.kind == 'counter':
            m = Counter(self.name, helptext, labelnames, **kw)
        elif self.kind == 'gauge':
            mode = self.mode
            if rng.random() < 0.1:
                mode = rng.choice(MODES)
                features.add('mode-variant')
            m = Gauge(self.name, helptext, labelnames, multiprocess_mode=mode, **kw)
        elif self.kind == 'histogram':
            buckets = self.buckets
            if rng.random() < 0.2:
                buckets = rand_buckets(rng)
                features.add('bucket-variant')
            m = Histogram(self.name, helptext, labelnames, buckets=buckets, **kw)
        else:
            m = Summary(self.name, helptext, labelnames, **kw)
        return m, series


def operate(rng, fam, metric, series, features):
    if metric._labelnames:
        k = rng.randint(0, len(series))
        children = [metric.labels(*s) for s in rng.sample(series, k)]
    else:
        children = [metric]
    for child in children:
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            r = rng.random()
            if fam.kind == 'counter':
                if r < 0.08:
                    child._value.set(rand_float(rng))  # raw value-class write (as Counter.reset does)
                    features.add('raw-write')
                else:
                    child.inc(rand_nonneg(rng))
            elif fam.kind == 'gauge':
                if child._is_most_recent:
                    child.set(rand_float(rng))
                elif r < 0.5:
                    child.set(rand_float(rng))
                elif r < 0.7:
                    child.inc(rand_float(rng))
                elif r < 0.9:
                    child.dec(rand_float(rng))
                else:
                    child.set_function(lambda: 1.0)
                    features.add('set_function')
            elif fam.kind == 'histogram':
                if r < 0.05:
                    child._sum.set(rand_float(rng))
                    features.add('raw-write')
                else:
                    child.observe(rand_float(rng))
            else:
                if r < 0.05:
                    child._count.set(rand_float(rng))
                    features.add('raw-write')
                else:
                    child.observe(rand_float(rng))


class ScenarioClock:
    """time.time for a scenario: values from a small pool, so mostrecent ties are frequent."""

    def __init__(self, rng):
        self.rng = rng
        base = rng.choice((1000.0, 1700000000.0, 1.5))
        self.pool = [base + rng.randint(0, 3) * 0.5 for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.15:
            self.pool.append(rng.choice((0.0, -5.0, math.inf, math.nan, 1e300, 5e-324)))

    def __call__(self):
        return self.rng.choice(self.pool)


def write_scenario(rng, files_dir):
    """Write one random scenario into files_dir; returns the set of feature tags it used."""
    features = set()
    fams = [Family(rng) for _ in range(rng.randint(1, 5))]
    if rng.random() < 0.06:
        # Many series and/or long label values: files with used > 4096, sometimes grown past 64 KiB.
        big = Family(rng, kind=rng.choice(('counter', 'gauge')))
        big.labelnames = ('i', 'blob')
        width = rng.choice((20, 200, 2000)) if rng.random() < 0.9 else 70000
        big.series = [(str(i), rand_text(rng, 8) * (width // 8)) for i in range(rng.randint(5, 120))]
        fams.append(big)
        features.add('bulk')
    if rng.random() < 0.07 and fams:
        other = rng.choice(fams)
        fams.append(Family(rng, name=other.name, kind=rng.choice(('counter', 'gauge', 'histogram', 'summary'))))
        features.add('name-collision')
    n_proc = rng.randint(1, 6)
    pids = []
    for _ in range(n_proc):
        if pids and rng.random() < 0.1:
            pids.append(rng.choice(pids))
            features.add('pid-reuse')
        elif rng.random() < 0.08:
            pids.append(rng.choice(ODD_IDS))  # gauge pid label = basename.split('_')[2][:-3]
            features.add('odd-id')
        else:
            pids.append(rng.randrange(1, 100000))
    clock = ScenarioClock(rng)
    with H.multiproc_env(files_dir, clock):
        for pid in pids:
            H.use_process(pid)
            for fam in rng.sample(fams, len(fams)):
                if rng.random() < 0.8:
                    metric, series = fam.create(rng, features)
                    operate(rng, fam, metric, series, features)
            H.end_processes()
        for pid in set(pids):
            if rng.random() < 0.2:
                H.mark_process_dead(pid, files_dir)
                features.add('dead')
    for fam in fams:
        features.add(fam.kind if fam.kind != 'gauge' else 'gauge-' + fam.mode)
    return features


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------

def run_binary(binary, fmt, esc, paths, *flags):
    try:
        p = subprocess.run([binary, 'dump', '--format', fmt, '--escaping', esc, *flags, *paths],
                           capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, b'timeout after 120 s', 'timeout'
    return p.stdout, p.stderr, p.returncode


def show(b):
    """Bytes -> printable lines for the diff (invisible characters escaped)."""
    out = []
    for line in b.decode('utf-8', 'replace').split('\n'):
        out.append(''.join(c if c.isprintable() or c == ' ' else repr(c)[1:-1] for c in line))
    return out


def unified(expected, actual, name):
    return '\n'.join(difflib.unified_diff(show(expected), show(actual), f'expected ({name})', f'actual ({name})',
                                          lineterm='', n=2))


def generate_ok(seed, index, files_dir):
    """Write scenario (seed, index), regenerating while Python raises. Returns (order, outputs, features, attempts)."""
    def merged(rng, features, attempt):
        order = H.listdir_db(files_dir)
        rng.shuffle(order)
        outs, err = H.try_merge_outputs([os.path.join(files_dir, n) for n in order])
        if err is not None:
            raise RuntimeError(err)
        return order, outs, features, attempt
    return generate_until(seed, index, files_dir, merged)


def generate_until(seed, index, files_dir, accept):
    """Write scenario (seed, index) into files_dir, regenerating (next attempt) while the writer or
    ``accept(rng, features, attempt)`` raises; returns what ``accept`` returns."""
    for attempt in range(50):
        if os.path.isdir(files_dir):
            shutil.rmtree(files_dir)
        os.makedirs(files_dir)
        rng = random.Random(f'{seed}:{index}:{attempt}')
        try:
            features = write_scenario(rng, files_dir)
        except Exception as e:  # noqa: BLE001 -- the library refused this random input (e.g. a name)
            err = f'writer: {type(e).__name__}: {e}'
            continue
        try:
            return accept(rng, features, attempt)
        except Exception as e:  # noqa: BLE001 -- Python's merge raised on this scenario
            err = f'{type(e).__name__}: {e}'
    raise RuntimeError(f'scenario {index}: Python raised on 50 attempts (last: {err})')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--binary', required=True, help='the multiproc-exporter binary')
    ap.add_argument('--seed', type=int, required=True)
    ap.add_argument('--count', type=int, default=500)
    ap.add_argument('--workdir', help='where scenario directories go (default: a new temp dir, '
                                      'removed at the end unless something failed)')
    ap.add_argument('--only', type=int, action='append', help='run only this scenario index (repeatable)')
    ap.add_argument('--keep', action='store_true', help='keep every scenario directory, not only failures')
    ap.add_argument('--quiet', action='store_true', help='no progress lines')
    ap.add_argument('--no-view-mode', action='store_true',
                    help='skip the extra check of `dump --view` on a random subset of the families')
    ap.add_argument('--no-dir-mode', action='store_true',
                    help='skip the extra check that passes the scenario directory itself to dump')
    args = ap.parse_args()
    H.check_version()
    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        sys.exit(f'differential: {binary} is not executable')

    own_workdir = args.workdir is None
    workdir = tempfile.mkdtemp(prefix='mpe-differential-') if own_workdir else os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    indices = args.only if args.only else list(range(args.count))
    expected_count = len(indices)
    print(f'differential: seed {args.seed}, {expected_count} scenarios, binary {binary}, workdir {workdir}',
          flush=True)

    passed = failed = regenerated = 0
    feature_counts = {}
    t0 = time.monotonic()
    t_py = t_bin = 0.0
    first_failure_shown = False
    for n, index in enumerate(indices):
        sdir = os.path.join(workdir, f'scenario-{args.seed}-{index}')
        files_dir = os.path.join(sdir, 'files')
        ta = time.monotonic()
        order, outs, features, attempts = generate_ok(args.seed, index, files_dir)
        t_py += time.monotonic() - ta
        regenerated += attempts
        for f in features:
            feature_counts[f] = feature_counts.get(f, 0) + 1
        paths = [os.path.join(files_dir, name) for name in order] or [files_dir]
        problems = []
        tb = time.monotonic()
        for (fmt, esc), expected in outs.items():
            actual, stderr, code = run_binary(binary, fmt, esc, paths)
            if code != 0 or actual != expected:
                problems.append((fmt, esc, expected, actual or b'', stderr, code))
            elif stderr:
                problems.append((fmt, esc, expected, actual, stderr, 'stderr-not-empty'))
        # Directory mode: dump DIR must read the *.db entries in readdir order like Python's glob, ignoring
        # hidden and non-*.db entries. One (format, escaping) per scenario, rotating.
        if not args.no_dir_mode:
            with open(os.path.join(files_dir, 'notes.txt'), 'w') as f:
                f.write('not a metrics file\n')
            if order:
                shutil.copy(os.path.join(files_dir, order[0]), os.path.join(files_dir, '.hidden.db'))
                shutil.copy(os.path.join(files_dir, order[0]), os.path.join(files_dir, 'upper.DB'))
            try:
                dir_outs, glob_order = H.dir_outputs(files_dir)
            except Exception:  # noqa: BLE001
                # The merge depends on file order (a family's type comes from the first file that has it):
                # in readdir order Python may raise where the shuffled order did not (e.g. a histogram
                # bucket whose `le` is not a float). Nothing to compare then; the exporter skips such files.
                dir_outs = None
                features.add('dir-mode skipped: python raised in readdir order')
            fmt, esc = H.COMBOS[index % len(H.COMBOS)]
            actual, stderr, code = run_binary(binary, fmt, esc, [files_dir]) if dir_outs else (b'', b'', 0)
            if dir_outs and (code != 0 or actual != dir_outs[(fmt, esc)] or stderr):
                problems.append(('dir-' + fmt, esc, dir_outs[(fmt, esc)], actual or b'', stderr,
                                 code if code != 0 or actual != dir_outs[(fmt, esc)] else 'stderr-not-empty'))
                features.add('dir-order: ' + ' '.join(glob_order))
        # View mode: `dump --view` reads only a random subset of the families (the records of the others are
        # never loaded nor merged) and must print exactly those families of the whole exposition.
        if not args.no_view_mode and order:
            file_paths = [os.path.join(files_dir, name) for name in order]
            names = sorted({m.name for m in H.MultiProcessCollector.merge(file_paths)
                            if LEGACY_NAME.match(m.name)})
            if names:
                vrng = random.Random(f'{args.seed}:{index}:view')
                chosen = vrng.sample(names, vrng.randint(1, len(names)))
                config = os.path.join(sdir, 'view.yaml')
                with open(config, 'w') as f:
                    json.dump({'views': {'differential': chosen}}, f)
                fmt, esc = H.COMBOS[(index + 1) % len(H.COMBOS)]
                expected = H.merge_outputs(file_paths, view=set(chosen))[(fmt, esc)]
                actual, stderr, code = run_binary(binary, fmt, esc, file_paths,
                                                  '--config', config, '--view', 'differential')
                if code != 0 or actual != expected or stderr:
                    problems.append(('view-' + fmt, esc, expected, actual or b'', stderr,
                                     code if code != 0 or actual != expected else 'stderr-not-empty'))
                    features.add('view: ' + ' '.join(chosen))
                feature_counts['view'] = feature_counts.get('view', 0) + 1
        t_bin += time.monotonic() - tb
        if not problems:
            passed += 1
            if not args.keep:
                shutil.rmtree(sdir)
        else:
            failed += 1
            with open(os.path.join(sdir, 'order.txt'), 'w', encoding='utf-8') as f:
                f.write(''.join(o + '\n' for o in order))
            for (fmt, esc), expected in outs.items():
                with open(os.path.join(sdir, H.expected_name(fmt, esc)), 'wb') as f:
                    f.write(expected)
            for fmt, esc, expected, actual, stderr, code in problems:
                if fmt.startswith('dir-') or fmt.startswith('view-'):
                    with open(os.path.join(sdir, H.expected_name(fmt, esc)), 'wb') as f:
                        f.write(expected)
                with open(os.path.join(sdir, H.expected_name(fmt, esc, 'actual')), 'wb') as f:
                    f.write(actual)
                with open(os.path.join(sdir, H.expected_name(fmt, esc, 'stderr')), 'wb') as f:
                    f.write(stderr)
            with open(os.path.join(sdir, 'repro.sh'), 'w') as f:
                f.write('#!/bin/sh\n# rerun the exporter on this scenario (text, underscores)\ncd "$(dirname "$0")"\n')
                f.write(f'{binary} dump --format text --escaping underscores ' +
                        ' '.join("'files/" + o.replace("'", "'\\''") + "'" for o in order) + '\n')
            combos = ', '.join(f'{p[0]}/{p[1]}' + (f' (exit {p[5]})' if p[5] not in (0,) else '') for p in problems)
            if not first_failure_shown:
                first_failure_shown = True
                fmt, esc, expected, actual, stderr, code = problems[0]
                print(f'\nMISMATCH seed {args.seed} scenario {index} (rerun: --seed {args.seed} --only {index})')
                print(f'  features: {", ".join(sorted(features))}')
                print(f'  files in merge order ({len(order)}): {" ".join(order)}')
                print(f'  failing combinations: {combos}')
                print(f'  kept in: {sdir}')
                print(f'  first failing: --format {fmt} --escaping {esc}, exit {code}')
                if stderr:
                    print('  stderr: ' + stderr.decode('utf-8', 'replace').rstrip().replace('\n', '\n          '))
                print(unified(expected, actual, f'{fmt}/{esc}'), flush=True)
            else:
                print(f'MISMATCH seed {args.seed} scenario {index}: {combos}; kept in {sdir}', flush=True)
        if not args.quiet and (n + 1) % 100 == 0:
            print(f'  ... {n + 1}/{expected_count} scenarios, {failed} failed, {time.monotonic() - t0:.1f} s',
                  flush=True)

    elapsed = time.monotonic() - t0
    feats = ', '.join(f'{k} {v}' for k, v in sorted(feature_counts.items()))
    print(f'scenario features: {feats}')
    print(f'time: {elapsed:.1f} s (python writers+merge {t_py:.1f} s, exporter {t_bin:.1f} s); '
          f'{regenerated} regenerations because Python raised')
    if own_workdir and failed == 0 and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    elif failed:
        print(f'failing scenarios kept in {workdir}')
    print(f'differential: {passed} passed, {failed} failed')
    return 0 if failed == 0 and passed >= expected_count else 1


if __name__ == '__main__':
    sys.exit(main())
