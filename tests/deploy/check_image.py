"""HTTP checks of a running exporter container, for scripts/test-image.

    check_image.py ready URL [--timeout SECONDS]
        Waits until URL/-/healthy answers 200, then requires 200 from URL/-/ready.

    check_image.py compare URL DIR --python PYTHON
        Scrapes URL/metrics as Prometheus 2.x does (text 0.0.4 comes back) and
        as Prometheus 3.x does (OpenMetrics with UTF-8 names) and compares the
        merged part of each body (everything before the exporter's own
        `multiproc_exporter_` families) byte for byte with what
        prometheus_client 0.26.0 prints in that format for the `.db` files of
        DIR, listed in readdir order as both the exporter and
        prometheus_client's glob read them. The expected bytes come from
        tests/python/merge_files.py, run by PYTHON (target/venv), as in the
        Rust tests (tests/it/support).

    check_image.py value URL SERIES --want VALUE [--timeout SECONDS]
        Waits until the series (`name{labels}` as written) of URL/metrics has
        the value VALUE.

Exits 1 with a diff on a mismatch.
"""

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MERGE_FILES = ROOT / "tests" / "python" / "merge_files.py"
# The Accept headers of Prometheus 2.x and 3.x (as in tests/it/http.rs), the
# Content-Type the exporter answers each with by default (docs/configuration.md,
# "Content negotiation") and the output of merge_files.py with those bytes.
SCRAPERS = (
    (
        "Prometheus 2.x",
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        "text/plain; version=0.0.4; charset=utf-8",
        "text.underscores",
    ),
    (
        "Prometheus 3.x",
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
        "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
        "text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8",
        "openmetrics.allow-utf-8",
    ),
)


def get(url, accept=None, timeout=10, content_type=False):
    """(status, body bytes[, Content-Type]) of a GET; the status of an HTTP error too."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            reply = response.status, response.read(), response.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        reply = e.code, e.read(), e.headers.get("Content-Type")
    return reply if content_type else reply[:2]


def merged_part(body):
    """The merged families: everything before the exporter's own metrics (and `# EOF`)."""
    for marker in (b"# HELP multiproc_exporter_build_info ", b"# EOF\n"):
        at = body.find(marker)
        if at >= 0:
            return body[:at]
    return body


def python_expositions(python, directory):
    """({"<format>.<escaping>": bytes}, file names) of prometheus_client's output for DIR now."""
    names = [n for n in os.listdir(directory) if n.endswith(".db") and not n.startswith(".")]
    if not names:
        sys.exit(f"check_image: no .db files in {directory}")
    with tempfile.TemporaryDirectory() as out:
        spec = Path(out, "spec.json")
        spec.write_text(json.dumps({"dir": [os.path.join(directory, n) for n in names]}))
        subprocess.run([python, str(MERGE_FILES), out, str(spec)], check=True)
        error = Path(out, "dir.error")
        if error.exists():
            sys.exit(f"check_image: prometheus_client failed on {directory}: {error.read_text()}")
        return {p.name[len("dir."):]: p.read_bytes() for p in Path(out).glob("dir.*")}, names


def show_diff(expected, actual):
    lines = difflib.unified_diff(
        expected.decode(errors="replace").splitlines(keepends=True),
        actual.decode(errors="replace").splitlines(keepends=True),
        f"prometheus_client ({len(expected)} bytes)",
        f"exporter ({len(actual)} bytes)",
    )
    return "".join(list(lines)[:80])


def ready(args):
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            status, _ = get(args.url + "/-/healthy", timeout=2)
            if status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"check_image: {args.url}/-/healthy not 200 within {args.timeout} s")
        time.sleep(0.1)
    status, body = get(args.url + "/-/ready")
    if status != 200:
        sys.exit(f"check_image: {args.url}/-/ready answered {status}: {body[:200]!r}")
    print(f"check_image: /-/healthy and /-/ready answer 200")


def compare(args):
    expected, names = python_expositions(args.python, args.dir)
    failed = False
    for scraper, accept, want_type, output in SCRAPERS:
        want = expected[output].removesuffix(b"# EOF\n")
        status, body, content_type = get(args.url + "/metrics", accept=accept, content_type=True)
        got = merged_part(body)
        what = f"/metrics for {scraper} ({content_type})"
        if status != 200:
            print(f"check_image: {what} answered {status}: {body[:300]!r}")
            failed = True
        elif content_type != want_type:
            print(f"check_image: {what}: expected Content-Type {want_type}")
            failed = True
        elif got != want:
            print(f"check_image: {what} differs from prometheus_client's {output} for {len(names)} files:")
            print(show_diff(want, got))
            failed = True
        elif b"# HELP multiproc_exporter_build_info " not in body:
            print(f"check_image: {what} lacks the exporter's own metrics")
            failed = True
        else:
            print(f"check_image: {what}: {len(got)} bytes, those of prometheus_client ({output}) for {len(names)} files")
    if failed:
        sys.exit(1)


def value(args):
    prefix = args.series + " "
    deadline = time.monotonic() + args.timeout
    while True:
        status, body = get(args.url + "/metrics")
        if status != 200:
            sys.exit(f"check_image: /metrics answered {status}")
        have = [float(line[len(prefix):]) for line in body.decode().splitlines() if line.startswith(prefix)]
        if have == [args.want]:
            print(f"check_image: {args.series} {args.want}")
            return
        if time.monotonic() > deadline:
            sys.exit(f"check_image: {args.series} is {have or 'absent'}, not {args.want}, after {args.timeout} s")
        time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ready")
    p.add_argument("url")
    p.add_argument("--timeout", type=float, default=30)
    p.set_defaults(run=ready)
    p = sub.add_parser("compare")
    p.add_argument("url")
    p.add_argument("dir")
    p.add_argument("--python", required=True)
    p.set_defaults(run=compare)
    p = sub.add_parser("value")
    p.add_argument("url")
    p.add_argument("series")
    p.add_argument("--want", type=float, required=True)
    p.add_argument("--timeout", type=float, default=10)
    p.set_defaults(run=value)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
