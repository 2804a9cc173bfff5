"""ferry: a fast object-storage client (S3 and the services that speak its API).

Rust does the work (ferry's engine: parallel ranged GETs, coalesced ranges, open-ahead,
parallel listing, batch deletes, end-to-end checksums); Python gets `ferry.Buffer`s it
can read without a copy, iterators, file objects, and asyncio twins of the calls.

    import ferry
    client = ferry.Client(endpoint_url="http://127.0.0.1:9000")
    client.put("s3://bucket/hello.txt", b"hello")
    assert bytes(client.get("s3://bucket/hello.txt")) == b"hello"
"""

from __future__ import annotations

import atexit

from ferry._ferry import (
    Buffer,
    Client,
    GetIterator,
    ListIterator,
    ObjectInfo,
    PutResult,
    TransferSummary,
    __version__,
    buffer_pool,
    set_buffer_pool,
)
from ferry.exceptions import (
    Auth,
    ConfigError,
    Error,
    Integrity,
    NotFound,
    Precondition,
    Protocol,
    ServiceError,
    Throttled,
    Transport,
)
from ferry._exit import at_exit as _at_exit

# Before the interpreter finalizes: calls still waiting in other threads (pyarrow's I/O
# threads reading a ferry:// file) are ended and back in Python, and pyarrow's pools
# idle, or a thread could never return and the process would hang at exit
# (ferry/_exit.py, crates/py/src/runtime.rs).
atexit.register(_at_exit)

__all__ = [
    "Client",
    "Buffer",
    "ObjectInfo",
    "PutResult",
    "TransferSummary",
    "ListIterator",
    "GetIterator",
    "Error",
    "NotFound",
    "Precondition",
    "Throttled",
    "Auth",
    "Transport",
    "Protocol",
    "Integrity",
    "ServiceError",
    "ConfigError",
    "__version__",
    "set_buffer_pool",
    "buffer_pool",
]
