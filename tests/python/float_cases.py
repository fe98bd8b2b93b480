"""Prints test cases for the exporter's floatToGoString port: N lines `<16 hex digits of the f64 bits> <output>`,
where output is the real `prometheus_client.utils.floatToGoString(x)` (0.26.0).

    target/venv/bin/python tests/python/float_cases.py --seed 1 --count 20000 > tests/data/float_cases.txt

The inputs mix: specials (+-0, +-inf, NaNs with payloads) first, then, chosen at random per line, systematic values
(every power of two and every decade, each -1 ulp / exact / +1 ulp, both signs, in shuffled order), uniformly random
bit patterns, quarter-integers up to 2^56 (repr round-half-even ties), values near the 1e6 and 1e16 switches of the
format, short decimals (few significant digits, any exponent), and subnormals. Deterministic for a given seed and
count (a longer count extends the same sequence).
"""

import argparse
import math
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcharness as H  # noqa: E402

from prometheus_client.utils import floatToGoString  # noqa: E402


def bits(x):
    return struct.unpack('<Q', struct.pack('<d', x))[0]


def from_bits(b):
    return struct.unpack('<d', struct.pack('<Q', b))[0]


def specials():
    yield from (0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan)
    for payload in (1, 0x8000000000000, 0xFFFFFFFFFFFFF, 0x123456789ABCD):
        yield from_bits(0x7FF0000000000000 | payload)
        yield from_bits(0xFFF0000000000000 | payload)
    yield from (5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
                -1.7976931348623157e308, 1e6, 999999.0, 999999.9999999999, 1000000.0000000001, 1e16,
                9999999999999998.0, 1e15, 1e10, 1.5e10, 1234567.0, 1000000.5, 12345678.9, 123456789.123,
                1.234567890123e12, 1.5e21, -1000000.0, -1e16, 0.30000000000000004, 15.299999999999999, 0.1,
                0.0001, 1e-05, 1.5e-07, 42.0, -1113178120592002.25, 111659285584252.12)


def ulp_neighbours(x):
    return (math.nextafter(x, -math.inf), x, math.nextafter(x, math.inf))


def systematic():
    out = []
    for e in range(-1074, 1024):
        for v in ulp_neighbours(math.ldexp(1.0, e)):
            out += [v, -v]
    for d in range(-323, 309):
        for v in ulp_neighbours(float(f'1e{d}')):
            out += [v, -v]
    return [v for v in out if math.isfinite(v)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seed', type=int, required=True)
    ap.add_argument('--count', type=int, required=True)
    args = ap.parse_args()
    H.check_version()

    rng = random.Random(args.seed)
    sysvals = systematic()
    rng.shuffle(sysvals)
    sys_iter = iter(sysvals)

    def one():
        r = rng.random()
        if r < 0.25:
            v = next(sys_iter, None)
            if v is not None:
                return v
            r = 0.3
        if r < 0.45:
            return from_bits(rng.getrandbits(64))
        if r < 0.57:
            k = rng.getrandbits(rng.randint(1, 58))
            return (k / 4) * rng.choice((1, -1))
        if r < 0.69:
            base = rng.choice((1e6, 1e16, 1e15, 1e7, 1e17))
            if rng.random() < 0.5:
                v = base
                for _ in range(rng.randint(0, 8)):
                    v = math.nextafter(v, math.inf if rng.random() < 0.5 else -math.inf)
                return v
            return base * rng.uniform(0.9, 1.1)
        if r < 0.85:
            digits = rng.randint(1, 17)
            mant = rng.randrange(10 ** (digits - 1), 10 ** digits)
            return float(f'{"-" if rng.random() < 0.3 else ""}{mant}e{rng.randint(-330, 310)}')
        if r < 0.93:
            return from_bits(rng.getrandbits(52) | (rng.getrandbits(1) << 63))
        return rng.uniform(-1, 1) * 10.0 ** rng.randint(-20, 25)

    out = sys.stdout
    buf = []
    n = 0
    for v in specials():
        if n >= args.count:
            break
        buf.append(f'{bits(v):016x} {floatToGoString(v)}\n')
        n += 1
    while n < args.count:
        v = one()
        buf.append(f'{bits(v):016x} {floatToGoString(v)}\n')
        n += 1
        if len(buf) >= 8192:
            out.write(''.join(buf))
            buf.clear()
    out.write(''.join(buf))
    out.flush()


if __name__ == '__main__':
    try:
        main()
    except BrokenPipeError:
        # The reader stopped early (e.g. `| head`): not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
