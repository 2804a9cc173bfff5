"""Type stubs of ferry's Rust extension (crates/py). Every call has a sync form that
releases the GIL while it waits, and most an ``*_async`` twin awaitable on asyncio
(call it inside a running event loop)."""

from __future__ import annotations

import datetime
import os
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Literal, Mapping, Sequence, overload

import pyarrow

from typing_extensions import Buffer as _BufferLike

__version__: str

Transport = Literal["auto", "h1-pool", "h1-pipeline", "h2"]
Credentials = Mapping[str, str | None] | tuple[str, str] | tuple[str, str, str | None] | Literal["anonymous"] | bool

class Buffer:
    """Bytes received by Rust, exposed through the buffer protocol without a copy.

    Read-only, one-dimensional, format ``B``. ``memoryview(buf)``,
    ``numpy.frombuffer(buf, dtype=numpy.uint8)``, ``pyarrow.py_buffer(buf)``,
    ``hashlib.sha256(buf)`` and ``file.write(buf)`` all read the same memory;
    ``bytes(buf)`` copies.

    Example::

        buf = client.get("s3://bucket/array.bin")
        arr = numpy.frombuffer(buf, dtype=numpy.float32)   # no copy
    """

    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __eq__(self, other: object) -> bool:
        """Equal to another Buffer or any bytes-like object with the same bytes."""
    def to_bytes(self) -> bytes:
        """A copy as ``bytes`` (the same as ``bytes(buf)``)."""

class ObjectInfo:
    """What the store says about an object (`Client.head`), or one entry of
    `Client.list` (where ``content_type``, ``metadata`` and ``checksum`` are not known,
    and a "directory" of a non-recursive listing has ``is_dir=True``)."""

    url: str
    bucket: str
    key: str
    size: int
    etag: str | None
    content_type: str | None
    metadata: dict[str, str]
    #: The stored full-object checksum (base64), from HEAD.
    checksum: str | None
    #: ``"CRC64NVME"``, ``"CRC32C"``, ...
    checksum_algorithm: str | None
    is_dir: bool
    @property
    def last_modified(self) -> datetime.datetime | None:
        """Last-Modified, timezone-aware (UTC)."""

class PutResult:
    """What `Client.put` stored."""

    etag: str | None
    size: int
    #: Parts of a multipart upload; 0 for a single PUT.
    parts: int

class ListIterator(Iterator[ObjectInfo], AsyncIterator[ObjectInfo]):
    """Entries of `Client.list` in key order, fetched a page at a time as you iterate
    (``for`` or ``async for``), or all at once as Arrow (`to_arrow`). One call at a
    time; an iterator made before a ``fork`` raises `RuntimeError` in the child."""

    def __iter__(self) -> ListIterator: ...
    def __next__(self) -> ObjectInfo: ...
    def __aiter__(self) -> ListIterator: ...
    def __anext__(self) -> Awaitable[ObjectInfo]: ...
    def to_arrow(self) -> pyarrow.Table:
        """The rest of the listing as a ``pyarrow.Table`` with columns ``key``
        (string), ``size`` (uint64), ``last_modified`` (timestamp[us, UTC], null for a
        directory), ``etag`` (string, null for a directory) and ``is_dir`` (bool),
        built in Arrow memory through the Arrow C stream interface: a million keys make
        no Python objects. Uses the iterator up; a listing error raises ``OSError``
        with the store's message.

        Example::

            table = client.list("s3://bucket/logs/", recursive=True).to_arrow()
            big = table.filter(pyarrow.compute.greater(table["size"], 1 << 30))
        """
    def to_arrow_reader(self) -> pyarrow.RecordBatchReader:
        """`to_arrow` as a ``pyarrow.RecordBatchReader``: batches of up to 16,384
        entries, each fetched as it is read.

        Example::

            for batch in client.list("s3://bucket/", recursive=True).to_arrow_reader():
                total += pyarrow.compute.sum(batch["size"]).as_py()
        """
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule interface (``pyarrow.table(it)``, polars, duckdb, ...):
        a capsule of an ``ArrowArrayStream`` over the rest of the listing, with the
        schema of `to_arrow` (``requested_schema`` is not honoured)."""

class TransferSummary:
    """What `Client.cp` or `Client.sync` did; on failure, the raised exception's
    ``summary``."""

    #: Objects or files transferred.
    objects: int
    #: Their bytes (including any an interrupted earlier run had moved).
    bytes: int
    #: Bytes reused from an interrupted earlier transfer instead of sent again.
    resumed_bytes: int
    #: `sync`: items already alike at the destination.
    skipped: int
    #: `sync(delete=True)`: extras removed from the destination.
    deleted: int
    #: ``(source, reason)`` of each failure.
    failed: list[tuple[str, str]]
    #: `sync(dry_run=True)`: ``(op, source, dest, reason)`` of each action it would take
    #: (``op`` is ``"cp"`` or ``"rm"``).
    planned: list[tuple[str, str, str, str]]

class GetIterator(Iterator[Buffer], AsyncIterator[Buffer]):
    """The objects of `Client.iter_get`, in order, the next ones opened ahead (``for``
    or ``async for``)."""

    def __iter__(self) -> GetIterator: ...
    def __next__(self) -> Buffer: ...
    def __aiter__(self) -> GetIterator: ...
    def __anext__(self) -> Awaitable[Buffer]: ...

class PendingRange:
    """A range fetched in the background (`Client._get_range_ahead`: the read-ahead of
    `Client.open`'s files); dropping it aborts the fetch."""

    start: int
    end: int
    def result(self) -> Buffer:
        """The bytes, waiting for them with the GIL released (once)."""

class Client:
    """A client of one endpoint, over ferry's Rust engine.

    Settings not given are found as the AWS SDKs and the ``ferry`` command line find
    them: ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` / the profile's
    ``endpoint_url``; ``AWS_REGION`` / the profile's ``region``; credentials, first
    found, from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (+``AWS_SESSION_TOKEN``),
    web identity (``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN``), the profile of
    ``~/.aws/credentials`` and ``~/.aws/config`` (``AWS_PROFILE`` or ``profile``: a
    ``role_arn`` with ``source_profile`` or ``credential_source``, SSO, keys,
    ``credential_process``, web identity), container credentials, then EC2 instance
    metadata (asked only for AWS's own endpoints). Temporary keys are fetched again
    before they expire. The README's credentials paragraph has the details.

    Args:
        endpoint_url: ``http://127.0.0.1:9000``, ``https://s3.eu-west-1.amazonaws.com``.
        region: the region requests are signed for.
        profile: a profile of the shared AWS files.
        credentials: ``{"access_key_id": ..., "secret_access_key": ..., "session_token": ...}``,
            a ``(key, secret)`` tuple, or ``"anonymous"`` for unsigned requests.
        transport: ``"auto"`` (default), ``"h1-pool"``, ``"h1-pipeline"`` or ``"h2"``.
        max_connections: a cap on the transport's connections.
        timeout: seconds a request may go without progress (no response, no body byte
            either way) before that attempt ends and is retried (default 60); a stalled
            GET resumes where it stopped.
        connect_timeout: seconds a connection may take to come up (default 10).
        retries: attempts per request, the first included (default ``AWS_MAX_ATTEMPTS``,
            else 5). A dead endpoint fails a call after about ``retries x
            (connect_timeout + timeout)``, raising `ferry.exceptions.Transport`.

    URLs name their provider: ``s3://`` goes to the endpoint above; ``gs://`` and
    ``az://`` each get an engine of their own, built on first use of the scheme with
    that provider's own settings lookup (its environment variables and credential
    files, not the AWS ones). Of this client's arguments, ``endpoint_url`` (when
    given), ``transport``, ``max_connections``, the time-outs and ``retries``, and
    ``credentials="anonymous"`` apply to them too; ``region``, ``profile``, explicit keys and ``AWS_*`` variables are
    S3's. A provider this ferry does not have yet raises `ConfigError` at the first
    call that uses its scheme. A client for two providers at once (``cp`` from
    ``s3://`` to ``gs://``) leaves ``endpoint_url`` unset and lets each provider find
    its own (``AWS_ENDPOINT_URL``, ``STORAGE_EMULATOR_HOST``).

    The client is safe to share between threads, survives ``fork`` (a child builds its
    own runtime and connections on first use, e.g. in PyTorch DataLoader workers) and
    pickles as its settings (explicit credentials included), so ``spawn`` workers and
    Dask tasks rebuild it.

    Example::

        import ferry
        client = ferry.Client("http://127.0.0.1:9000",
                              credentials={"access_key_id": "ferry", "secret_access_key": "ferry-secret"})
        client.put("s3://bucket/hello.txt", b"hello")
        assert bytes(client.get("s3://bucket/hello.txt")) == b"hello"
    """

    def __init__(
        self,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        credentials: Credentials | None = None,
        transport: Transport = "auto",
        max_connections: int | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        retries: int | None = None,
    ) -> None: ...
    @property
    def endpoint_url(self) -> str:
        """The endpoint in force."""
    def get(self, url: str, callback: Callable[[int, int | None], object] | None = None) -> Buffer:
        """The whole object. Objects above 16 MiB are read in 8 MiB parts, pinned to one
        ETag and checked against the stored full-object CRC: into a new buffer, the first
        GET and up to 7 parallel ranged GETs from its response on (the kernel's first
        touch of the new pages then spreads over the cores); into a buffer from the pool
        (already touched), the first GET alone while it keeps 250 MB/s or more (loopback,
        a fast link), the ranged GETs added when it is slower (a store that caps each
        connection, as S3 does at ~90 MB/s). Smaller objects come in one GET, checked by
        the store. Large buffers come from, and go back to, the buffer pool
        (`set_buffer_pool`). ``callback(bytes_done,
        bytes_total)`` is called from this thread as bytes arrive (every 100 ms at
        most) and at the end; an exception it raises stops the call.

        Example::

            buf = client.get("s3://bucket/table.parquet")
            table = pyarrow.parquet.read_table(pyarrow.BufferReader(buf))
        """
    def get_async(self, url: str, callback: Callable[[int, int | None], object] | None = None) -> Awaitable[Buffer]:
        """`get`, awaitable. ``callback(bytes_done, bytes_total)`` is called on the
        event loop's thread every 100 ms while bytes arrive and once before the await
        returns; an exception it raises goes to the loop's exception handler and does
        not stop the call.

        Example::

            buf = await client.get_async("s3://bucket/key")
        """
    def get_into(self, url: str, buffer: _BufferLike,
                 callback: Callable[[int, int | None], object] | None = None) -> int:
        """The whole object written into ``buffer``; returns the bytes written (the
        object's size). ``buffer`` is any writable, contiguous buffer-protocol object
        (``bytearray``, a numpy array of any dtype, a writable ``memoryview``, an
        ``mmap``) of exactly the object's size: any other size raises ``ValueError``
        (ferry.ConfigError) before a byte is written, a read-only one ``TypeError``. The
        same parts and checks as `get`; the buffer is held (a ``bytearray`` cannot be
        resized, an ``mmap`` not closed) until the read ends. A read that fails part-way
        raises and leaves the buffer's contents unspecified. Reusing one buffer across
        reads skips the kernel's zeroing of fresh pages that every `get` pays.

        Example::

            buf = numpy.empty(size, dtype=numpy.uint8)
            for url in urls:                 # objects of one size
                client.get_into(url, buf)
                train_step(buf)
        """
    def get_into_async(self, url: str, buffer: _BufferLike,
                       callback: Callable[[int, int | None], object] | None = None) -> Awaitable[int]:
        """`get_into`, awaitable. The buffer is held until the read ends, even when the
        await is cancelled (parts already in flight still land in it).

        Example::

            n = await client.get_into_async("s3://bucket/key", buf)
        """
    def get_range(self, url: str, start: int, end: int) -> Buffer:
        """Bytes ``start`` to ``end`` (exclusive, as Python slices count) of an object.

        Example::

            header = client.get_range("s3://bucket/file.bin", 0, 4096)
        """
    def get_range_async(self, url: str, start: int, end: int) -> Awaitable[Buffer]:
        """`get_range`, awaitable.

        Example::

            header = await client.get_range_async("s3://bucket/file.bin", 0, 4096)
        """
    def get_ranges(
        self, url_or_urls: str | Sequence[str], starts: Sequence[int], ends: Sequence[int], max_gap: int | None = None
    ) -> list[Buffer]:
        """Many ranges (``end`` exclusive) of one object, or of several (one URL per
        range), in the order asked. Nearby ranges of an object are coalesced into fewer
        GETs by the engine: it reads through holes smaller than the measured first-byte
        time x bandwidth, or than ``max_gap`` bytes when given (0: only touching ranges
        merge). The result holds exactly the bytes asked for; all ranges of an object
        come from one version (If-Match on its ETag).

        Example::

            a, b = client.get_ranges("s3://bucket/table.hfile", [0, 1_000_000], [64, 1_000_100])
            x, y = client.get_ranges(["s3://b/f1", "s3://b/f2"], [0, 0], [100, 100])
        """
    def get_ranges_async(
        self, url_or_urls: str | Sequence[str], starts: Sequence[int], ends: Sequence[int], max_gap: int | None = None
    ) -> Awaitable[list[Buffer]]:
        """`get_ranges`, awaitable.

        Example::

            parts = await client.get_ranges_async("s3://bucket/f", [0, 100], [10, 200])
        """
    @overload
    def get_many(
        self,
        urls: Iterable[str | ObjectInfo],
        max_bytes_in_flight: int | None = None,
        concurrency: int | None = None,
        return_exceptions: Literal[False] = False,
        callback: Callable[[int, int | None], object] | None = None,
        sizes: Sequence[int | None] | None = None,
    ) -> list[Buffer]: ...
    @overload
    def get_many(
        self,
        urls: Iterable[str | ObjectInfo],
        max_bytes_in_flight: int | None = None,
        concurrency: int | None = None,
        return_exceptions: bool = ...,
        callback: Callable[[int, int | None], object] | None = None,
        sizes: Sequence[int | None] | None = None,
    ) -> list[Buffer | Exception]: ...
    def get_many(self, urls, max_bytes_in_flight=None, concurrency=None, return_exceptions=False, callback=None, sizes=None):
        """Many objects at once, scheduled in Rust (large ones split as in `get`), results
        in input order. In flight by default: objects known to be small (at most 1 MiB,
        from an entry or ``sizes``) as many as the connections' pipelines carry (the
        endpoint's adaptive limit x 32 on HTTP/1.1 with pipelining, h2 likewise; one per
        connection otherwise), other objects 64 at once, all below the endpoint's
        adaptive limit; ``concurrency`` sets the objects in flight instead. ``max_bytes_in_flight`` bounds the bytes being received at once. With
        ``return_exceptions=True`` a failed object's place holds its exception (as
        ``asyncio.gather``); otherwise the first failure raises. ``callback`` as in
        `get` (the total grows as the objects' sizes become known).

        Each item is a URL or an `ObjectInfo` entry of `list` (or `head`): an entry's
        size goes with its GET, so that small objects take the ``auto`` transport's
        pipelined lane from the first request; ``sizes`` (one per item, ``None`` where
        unknown) does the same for URLs. A wrong size costs speed, never bytes (the
        length each response announces is still checked). ``concurrency`` is also where
        the endpoint's adaptive limit starts, instead of climbing from 4.

        Example::

            bufs = client.get_many([f"s3://bucket/shard-{i}.bin" for i in range(1000)])
            bufs = client.get_many(list(client.list("s3://bucket/shards/")))
        """
    def get_many_async(
        self,
        urls: Iterable[str | ObjectInfo],
        max_bytes_in_flight: int | None = None,
        concurrency: int | None = None,
        return_exceptions: bool = False,
        callback: Callable[[int, int | None], object] | None = None,
        sizes: Sequence[int | None] | None = None,
    ) -> Awaitable[list[Any]]:
        """`get_many`, awaitable; ``callback`` as in `get_async`.

        Example::

            bufs = await client.get_many_async(urls)
        """
    def iter_get(self, urls: Iterable[str]) -> GetIterator:
        """The objects one at a time, in order, with the next ones opened ahead (the
        engine's open-ahead: a window that grows from 8 to 32 while first bytes are
        still waited for) and bounded read-ahead memory. A failed object raises in its
        place; iterating on continues with the next.

        Example::

            for buf in client.iter_get(urls):
                consume(buf)
        """
    def put(
        self,
        url: str,
        data: _BufferLike | str | os.PathLike[str] | Any | Iterable[_BufferLike],
        if_not_exists: bool = False,
        callback: Callable[[int, int | None], object] | None = None,
    ) -> PutResult:
        """Stores ``data``: bytes-like (``bytes``, ``bytearray``, ``memoryview``, a
        `Buffer`, a numpy array), a local path (``str`` or ``os.PathLike``), a binary
        file object (read in 1 MiB chunks), or an iterable of bytes-like chunks. One PUT
        up to 8 MiB, else a multipart upload in 8 MiB parts (CRC64NVME checked by the
        server); a failure aborts the upload, so nothing half-written is ever visible.
        ``if_not_exists=True`` raises `Precondition` if the key exists (atomically for a
        single PUT, ``If-None-Match: *``; by a HEAD before a multipart upload).
        Contiguous bytes-like data is sent from its own memory (no copy). ``callback``
        as in `get` (``bytes_total`` is ``None`` for file objects and iterables).

        Example::

            client.put("s3://bucket/data.bin", numpy_array)
            client.put("s3://bucket/model.pt", "/tmp/model.pt")
            with open("big.tar", "rb") as f:
                client.put("s3://bucket/big.tar", f)
        """
    def put_async(
        self,
        url: str,
        data: _BufferLike | str | os.PathLike[str] | Any | Iterable[_BufferLike],
        if_not_exists: bool = False,
        callback: Callable[[int, int | None], object] | None = None,
    ) -> Awaitable[PutResult]:
        """`put`, awaitable: the same sources; a file object or an iterable is read on
        the runtime's threads (one 1 MiB ``read`` or one ``next`` at a time, the GIL
        taken there), so the event loop is not blocked by the reads. ``if_not_exists``
        takes bytes-like data and paths only. ``callback`` as in `get_async`.

        Example::

            await client.put_async("s3://bucket/k", b"bytes")
            with open("big.tar", "rb") as f:
                await client.put_async("s3://bucket/big.tar", f)
        """
    def head(self, url: str) -> ObjectInfo:
        """Size, ETag, Last-Modified, content type, metadata and stored checksum.

        Example::

            size = client.head("s3://bucket/key").size
        """
    def head_async(self, url: str) -> Awaitable[ObjectInfo]:
        """`head`, awaitable.

        Example::

            info = await client.head_async("s3://bucket/key")
        """
    def list(self, url_prefix: str, recursive: bool = False) -> ListIterator:
        """Entries under ``url_prefix`` in key order, streamed page by page. Not
        recursive: one level, common prefixes as ``is_dir`` entries (``s3://b/dir/``
        lists the children of ``dir/``); recursive: every object, listed in parallel
        key ranges by the engine.

        Example::

            total = sum(e.size for e in client.list("s3://bucket/table/", recursive=True))
        """
    def delete(self, url_or_urls: str | Iterable[str]) -> None:
        """Deletes an object, or many in batches of 1,000 sent in parallel. Deleting a
        missing object succeeds; keys the service refused raise `ServiceError`.

        Example::

            client.delete([e.url for e in client.list("s3://bucket/tmp/", recursive=True)])
        """
    def copy(self, src: str, dst: str) -> None:
        """Copies on the server, in parallel part copies above 8 MiB.

        Example::

            client.copy("s3://bucket/a", "s3://bucket/b")
        """
    def presign(self, url: str, expires: float = 3600) -> str:
        """A URL that lets anyone GET the object for ``expires`` seconds (up to 7 days).

        Example::

            url = client.presign("s3://bucket/report.pdf", expires=600)
        """
    def open(self, url: str, block_size: int | None = None) -> Any:
        """A read-only, seekable binary file object (``read``, ``readinto``, ``seek``,
        ``tell``, a context manager), pinned to the version it opened (a change raises
        `Precondition`). Reads that go on in order come from ``block_size`` blocks
        (4 MiB), the next one read ahead; a read after a seek fetches what it asks for
        (at least 256 KiB), so a column reader fetches its columns and not the blocks
        around them.

        Example::

            with client.open("s3://bucket/table.parquet") as f:
                table = pyarrow.parquet.read_table(f, columns=["a", "b"])
        """
    def cp(
        self,
        src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        dst: str | os.PathLike[str],
        recursive: bool = False,
        resume: bool = True,
        content_type: str | None = None,
        concurrency: int | None = None,
        part_size: int | None = None,
        callback: Callable[[int, int | None], object] | None = None,
    ) -> TransferSummary:
        """Copies as ``ferry cp`` does, with this client's settings: a local file or
        directory to objects (one PUT, or parallel 8 MiB parts), objects to local files
        (parallel ranged GETs into ``.NAME.ferry-part``, verified, renamed into place:
        never a partial file under the final name), or objects to objects (server
        side; between providers, ``s3://`` to ``gs://`` say, each object's GET is
        streamed into the other's upload through this machine). Names follow the AWS
        CLI: a ``dst`` ending in ``/`` (or an existing directory, or several sources)
        receives each source's base name; with
        ``recursive`` what is under a directory or prefix is copied below ``dst``. A
        wildcard (``*`` in a segment, ``**`` across) in a source selects what matches.
        An interrupted transfer run again continues (``resume=False`` starts over).
        ``concurrency`` objects at once (64), ``part_size`` for parts (8 MiB).
        ``callback(bytes_done, bytes_total)`` as in `get` (the total grows as
        listings stream).

        Each item fails alone and the others go on; then the call raises the first
        failure's exception (`NotFound`, `Auth`, ..., ``OSError`` for a local file)
        with ``N of M failed`` in its message and the `TransferSummary` as its
        ``summary``. Usage mistakes (two local paths, a directory without
        ``recursive``, a bucket without a key) raise ``ValueError`` before anything is
        sent.

        Example::

            client.cp("./photos", "s3://bucket/photos/", recursive=True)
            client.cp("s3://bucket/model.pt", "/tmp/")
            s = client.cp("s3://bucket/logs/**.gz", "./logs/")
            print(s.objects, s.bytes)
        """
    def sync(
        self,
        src: str | os.PathLike[str],
        dst: str | os.PathLike[str],
        delete: bool = False,
        checksum: bool = False,
        dry_run: bool = False,
        size_only: bool = False,
        concurrency: int | None = None,
        part_size: int | None = None,
        callback: Callable[[int, int | None], object] | None = None,
    ) -> TransferSummary:
        """Makes the directory or prefix ``dst`` like ``src``, as ``ferry sync``:
        copies (as `cp`) what ``dst`` lacks, what differs in size, or what is newer at
        the source (whole seconds; downloads carry the object's Last-Modified, so a
        second sync copies nothing). ``checksum=True`` compares the stored
        CRC64NVME/CRC32C with the same CRC of the local bytes when sizes are equal;
        ``size_only=True`` compares sizes only. ``delete=True`` removes what the source
        lacks (objects in batches of 1,000). ``dry_run=True`` does nothing and lists
        the actions in ``summary.planned``. Items alike are counted in ``skipped``.
        Failures and ``callback`` as in `cp`.

        Example::

            s = client.sync("./site", "s3://bucket/site/", delete=True)
            print(f"{s.objects} copied, {s.skipped} unchanged, {s.deleted} removed")
        """
    def cp_async(
        self,
        src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        dst: str | os.PathLike[str],
        recursive: bool = False,
        resume: bool = True,
        content_type: str | None = None,
        concurrency: int | None = None,
        part_size: int | None = None,
        callback: Callable[[int, int | None], object] | None = None,
    ) -> Awaitable[TransferSummary]:
        """`cp`, awaitable: mistakes in the arguments themselves raise at the call,
        those found on the paths (a directory without ``recursive``, two local paths)
        and failures at the await; ``callback`` as in `get_async`.

        Example::

            s = await client.cp_async("s3://bucket/data/", "./data/", recursive=True)
        """
    def sync_async(
        self,
        src: str | os.PathLike[str],
        dst: str | os.PathLike[str],
        delete: bool = False,
        checksum: bool = False,
        dry_run: bool = False,
        size_only: bool = False,
        concurrency: int | None = None,
        part_size: int | None = None,
        callback: Callable[[int, int | None], object] | None = None,
    ) -> Awaitable[TransferSummary]:
        """`sync`, awaitable; as `cp_async`.

        Example::

            s = await client.sync_async("./site", "s3://bucket/site/", delete=True)
        """
    def stats(self) -> dict[str, Any]:
        """Counters of this process's client (its S3 engine), cumulative since it was
        made in this process:

        - ``requests``: a dict of requests sent by S3 operation, every attempt counted
          (retries included): ``GET``, ``HEAD``, ``PUT``, ``LIST`` (objects, buckets,
          uploads or parts), ``DELETE``, ``DELETE_BATCH`` (DeleteObjects), ``COPY``,
          ``CREATE_UPLOAD``, ``UPLOAD_PART``, ``COMPLETE_UPLOAD``, ``ABORT_UPLOAD``,
          ``OTHER``.
        - ``retries``: attempts that failed in a way the client retries when the
          operation and its attempts allow (429, 5xx, a transport error), so about one
          retry each.
        - ``bytes_out`` (request bodies) and ``bytes_in`` (response bodies as read).
        - ``first_byte_p50_s``, ``first_byte_p95_s``: time from sending a request to its
          response head, in seconds (within 4.5%: a log histogram), ``None`` before
          any response.
        - the transport's ``transport``, ``connections_opened``, ``connections_open``,
          ``requests_sent``, ``requests_resent``, ``hedges_sent``, ``hedges_won``;
        - the endpoint controller's ``concurrency_limit``, ``in_flight``,
          ``throttles``, ``head_latency_median_s``, ``goodput_best_bytes_per_s``.

        Example::

            s = client.stats()
            print(s["requests"]["GET"], s["first_byte_p95_s"], s["bytes_in"])
        """
    def create_bucket(self, name: str) -> None:
        """Creates a bucket.

        Example::

            client.create_bucket("scratch")
        """
    def delete_bucket(self, name: str) -> None:
        """Deletes an empty bucket.

        Example::

            client.delete_bucket("scratch")
        """
    def _get_range_if_match(self, url: str, start: int, end: int, etag: str | None = None) -> Buffer: ...
    def _get_range_ahead(self, url: str, start: int, end: int, etag: str | None = None) -> PendingRange: ...
    def __reduce__(self) -> tuple[Any, ...]: ...

def set_buffer_pool(max_bytes: int) -> int:
    """Set how many bytes of dropped `Buffer`s this process keeps for the next `get`;
    return the limit before.

    A `Buffer` of 4 MiB or more that `get` (or `get_many`, `iter_get`) returned gives its
    memory back to the pool when it and every view of it are dropped; the next `get` of
    a similar size (up to a quarter larger) lands in that memory, already touched, and
    skips the kernel's first touch of fresh pages. The pool keeps at most `max_bytes` of
    idle memory (oldest dropped first): RSS the process holds after it dropped every
    buffer. The default is the environment's `FERRY_BUFFER_POOL` (bytes) or 1 GiB;
    `0` turns the pool off and frees what it keeps.

        ferry.set_buffer_pool(0)            # every get in fresh memory, nothing kept
        ferry.set_buffer_pool(4 << 30)      # keep up to 4 GiB for a loader's next batch
    """

def buffer_pool() -> tuple[int, int, int]:
    """The buffer pool now: `(limit, bytes kept, buffers kept)`."""

def _cli_main(argv: Sequence[str], program: str | None = None) -> int:
    """The ``ferry`` command line in this process (``ferry._cli.main``): its exit code."""

def _at_exit() -> None:
    """The last step of ferry's ``atexit`` handler (``ferry._exit``): refuses new calls and waits
    (at most 2 s) until calls blocked in other threads are back in Python, so none is
    left waiting for the GIL while the interpreter finalizes."""

def _refuse_calls() -> None:
    """The first step of ferry's ``atexit`` handler (``ferry._exit``): every ferry call
    from now on raises at once, without releasing the GIL."""
