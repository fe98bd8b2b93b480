"""Python's exposition for named, ordered lists of files: what prometheus_client 0.26.0's
``MultiProcessCollector.merge`` + ``generate_latest`` (text and OpenMetrics, both escapings) print for exactly those
files in exactly that order. Used by the fault-catalogue tests (tests/it/faults.rs) as the expected output for the good
files of a directory that also holds bad ones.

    merge_files.py OUT SPEC.json

SPEC.json is ``{"name": ["path", ...], ...}``. For each name, writes ``OUT/<name>.<text|openmetrics>.<underscores|
allow-utf-8>``, or ``OUT/<name>.error`` with the exception if Python raises for that list.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcharness as H  # noqa: E402


def main():
    H.check_version()
    out, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path, encoding='utf-8') as f:
        spec = json.load(f)
    for name, files in spec.items():
        outputs, error = H.try_merge_outputs(files)
        if error is not None:
            with open(os.path.join(out, f'{name}.error'), 'w', encoding='utf-8') as f:
                f.write(error)
            continue
        for (fmt, esc), body in outputs.items():
            with open(os.path.join(out, f'{name}.{fmt}.{esc}'), 'wb') as f:
                f.write(body)


if __name__ == '__main__':
    main()
