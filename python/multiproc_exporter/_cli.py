"""The ``multiproc-exporter`` command: the binary's command line, run by the
extension module in this process (``multiproc-exporter --help``)."""

import sys

from . import _native


def main():
    """Runs the command line with ``sys.argv`` and exits with its status."""
    args = ["multiproc-exporter"] + sys.argv[1:]
    sys.exit(_native.run_cli(args))


if __name__ == "__main__":
    main()
