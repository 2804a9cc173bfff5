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
their default action back while it runs (called from the main thread), and Ctrl-C
stops ``ferry cp`` or ``ferry serve`` as it stops the binary (an interrupted download
leaves its ``.ferry-part`` to resume from, never a partial file under the final name).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    """Runs ``ferry ARGS...`` in this process; returns (and, as a script, exits with)
    its exit code: 0 success, 1 an operation failed, 2 usage."""
    from ferry._ferry import _cli_main

    args = list(sys.argv if argv is None else argv)
    if not args:
        args = ["ferry"]
    program = shutil.which(args[0]) or (os.path.abspath(args[0]) if os.sep in args[0] else None)
    sys.stdout.flush()
    sys.stderr.flush()
    if threading.current_thread() is not threading.main_thread():
        return _cli_main(args, program)
    saved = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _cli_main(args, program)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
