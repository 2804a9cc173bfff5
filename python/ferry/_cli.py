"""The ``ferry`` command on PATH after ``pip install``: the console script
``ferry = "ferry._cli:main"`` runs ferry's command line (the Rust ferry-cli library,
linked into ``ferry._ferry``) in this process, exactly as the cargo-built binary runs
it: the same verbs, flags, output and exit codes.

Why an entry point and not a binary in the wheel, in short: pip writes console scripts
from the package's metadata in every install (``pip install .``, ``pip install -e .``,
``maturin develop``), while maturin builds only the extension crate (crates/py/src/cli.rs
has the longer note).

Signals: the interpreter turns SIGINT into ``KeyboardInterrupt``, which only Python code
can see; the command line runs in Rust for its whole life, so SIGINT and SIGTERM get
their default action back first, and Ctrl-C stops ``ferry cp`` or ``ferry serve`` as it
stops the binary (an interrupted download leaves its ``.ferry-part`` to resume from,
never a partial file under the final name).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    """Runs ``ferry ARGS...`` in this process; returns (and, as a script, exits with)
    its exit code: 0 success, 1 an operation failed, 2 usage."""
    from ferry._ferry import _cli_main

    args = list(sys.argv if argv is None else argv)
    if not args:
        args = ["ferry"]
    program = shutil.which(args[0]) or (os.path.abspath(args[0]) if os.sep in args[0] else None)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    return _cli_main(args, program)


if __name__ == "__main__":
    sys.exit(main())
