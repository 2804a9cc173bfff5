"""ferry's `atexit` handler: no thread may be inside a ferry call, or about to make one
from pyarrow's thread pools, when the interpreter finalizes.

```text
at_exit ─► _refuse_calls (Rust): every ferry call from now on raises at once
        ─► pyarrow imported: wait, GIL released, until its I/O and CPU thread pools
           are idle (a helper thread, at most EXIT_WAIT)
        ─► _at_exit (Rust): wait for ferry calls still blocked in other threads
```

Why (crates/py/src/runtime.rs, module note): pyarrow reads a `ferry://` file (or
`ferry.arrow`'s) from its pools' threads, through Python. A scan left half-read at
exit (an iterator of batches not drained) keeps reading ahead on those threads; a
thread that enters Python once the interpreter finalizes is ended by CPython (or parked
by pyo3) under pyarrow's pool, and the pool's shutdown, a C++ exit handler that runs
after finalizing, waits for it forever. With ferry's calls refused, the scan's reads
fail fast and pyarrow stops scheduling them; once both pools are idle nothing of
pyarrow's is left that could call into Python.

pyarrow has no Python call for "wait until the pools are idle", so this calls Arrow
C++'s own, exported from the libarrow that pyarrow loaded: `GetIOThreadPool()`,
`GetCpuThreadPool()` and `ThreadPool::WaitForIdle()` (arrow/io/interfaces.h,
arrow/util/thread_pool.h), by their Itanium C++ names (Linux and macOS builds). ctypes
releases the GIL during a foreign call, so the pools' threads can finish their Python
calls while we wait. Where the library or a name is not found (another platform,
another build) the drain is skipped and the Rust side's quiet time is all there is.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
import time

from ferry._ferry import _at_exit, _refuse_calls

#: The longest the drain holds the exit: a pool task that never ends (a pyarrow read
#: of another filesystem stuck on its network) must not hang the exit either. 2 s is
#: a bound, not a measured figure; a half-read scan over `ferry://` drains in well
#: under 0.5 s (docs/lab/python-rows.md).
EXIT_WAIT = 2.0

_POOL_SYMBOLS = ("_ZN5arrow2io8internal15GetIOThreadPoolEv", "_ZN5arrow8internal16GetCpuThreadPoolEv")
_WAIT_SYMBOL = "_ZN5arrow8internal10ThreadPool11WaitForIdleEv"


def _libarrow():
    """The libarrow that pyarrow loaded (never a second copy: RTLD_NOLOAD), or None."""
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is None:
        return None
    try:
        dirs = list(pyarrow.get_library_dirs())
    except Exception:  # noqa: BLE001 - an unusual install: no drain
        dirs = [os.path.dirname(pyarrow.__file__)]
    noload = getattr(os, "RTLD_NOLOAD", 0)
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "libarrow.so.*")) + glob.glob(os.path.join(d, "libarrow.*.dylib"))):
            try:
                return ctypes.CDLL(path, mode=noload | getattr(os, "RTLD_LAZY", 1))
            except OSError:
                continue
    return None


def pyarrow_pools():
    """A function that waits until pyarrow's I/O and CPU pools are idle (GIL released),
    or None where it cannot be found (module note)."""
    lib = _libarrow()
    if lib is None:
        return None
    try:
        getters = [getattr(lib, name) for name in _POOL_SYMBOLS]
        wait = getattr(lib, _WAIT_SYMBOL)
    except AttributeError:
        return None
    for g in getters:
        g.restype = ctypes.c_void_p
        g.argtypes = []
    wait.restype = None
    wait.argtypes = [ctypes.c_void_p]
    pools = [g() for g in getters]
    if not all(pools):
        return None

    def wait_idle() -> None:
        # A task that ends on one pool can schedule work on the other (a decode, then
        # its next read): rounds until one finds both idle at once. An idle pool
        # answers in microseconds (a lock and a counter), so a round under 1 ms found
        # nothing to wait for.
        while True:
            t0 = time.perf_counter()
            for p in pools:
                wait(p)
            if time.perf_counter() - t0 < 0.001:
                return

    return wait_idle


def drain_pyarrow(timeout: float = EXIT_WAIT) -> bool:
    """Waits (at most `timeout`) until pyarrow's pools are idle; False when pyarrow is
    not imported, the pools cannot be reached, or they were still busy at the timeout."""
    wait_idle = pyarrow_pools()
    if wait_idle is None:
        return False
    # On a helper thread, so the wait is bounded: one left behind waits in C, GIL
    # released, and is not a pyarrow pool thread, so nothing waits for it at exit.
    t = threading.Thread(target=wait_idle, name="ferry-exit-drain", daemon=True)
    try:
        t.start()
    except RuntimeError:
        # An interpreter that refuses new threads once its exit began: wait here,
        # unbounded, as pyarrow's own pool shutdown would wait for its running tasks.
        wait_idle()
        return True
    t.join(timeout)
    return not t.is_alive()


def at_exit() -> None:
    """ferry's `atexit` handler (module note)."""
    _refuse_calls()
    drain_pyarrow()
    _at_exit()
