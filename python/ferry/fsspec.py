"""`FerryFileSystem`: ferry as an fsspec `AsyncFileSystem`, protocol ``ferry``.

Registered through the ``fsspec.specs`` entry point, so ``ferry://bucket/key`` works
wherever fsspec does (pandas, pyarrow, dask, xarray, zarr) once ferry is installed::

    pandas.read_parquet("ferry://bucket/table.parquet",
                        storage_options={"endpoint_url": "http://127.0.0.1:9000"})

``s3://`` stays with whatever handles it (s3fs) unless `register("s3")` is called.

Paths are ``bucket/key`` (fsspec strips the protocol); each call maps to the
`ferry.Client` one: `_cat_file` to `get` / `get_range`, `_cat_ranges` to one
`get_ranges` per object (the engine coalesces; ``max_gap`` replaces its policy), the
listings to `list`, `_rm` to one batched `delete`. Calls without an asyncio twin run in
the loop's executor (they release the GIL while they wait).

Listings are kept in fsspec's ``dircache``, as s3fs keeps them: a reader that lists a
table's directory and then asks about each file (pandas and pyarrow ask `info` of the
directory five times and `isfile` of every file before reading one) is answered from
the listing, and `open` takes the file's size and ETag from it instead of a HEAD. Every
write through this filesystem drops the cached listings above the path it wrote;
``use_listings_cache=False`` turns the cache off, `invalidate_cache` empties it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import tempfile
from collections import defaultdict

import fsspec
from fsspec.asyn import AsyncFileSystem
from fsspec.spec import AbstractBufferedFile

import ferry

__all__ = ["FerryFileSystem", "register"]


class FerryFileSystem(AsyncFileSystem):
    """fsspec over a `ferry.Client`. Keyword arguments not fsspec's own go to
    `ferry.Client` (``endpoint_url``, ``region``, ``profile``, ``credentials``,
    ``transport``, ``max_connections``); or pass a ready ``client``."""

    protocol = ("ferry",)
    #: The object URLs' scheme behind this filesystem's paths: ``ferry://`` paths are
    #: S3-compatible; `register("gs")` and `register("az")` make filesystems whose paths
    #: are Google Cloud Storage and Azure Blob objects.
    scheme = "s3"
    root_marker = ""
    async_impl = True

    def __init__(self, client: ferry.Client | None = None, asynchronous: bool = False, loop=None,
                 batch_size=None, use_listings_cache: bool = True, **client_kwargs):
        super().__init__(asynchronous=asynchronous, loop=loop, batch_size=batch_size,
                         use_listings_cache=use_listings_cache)
        self.client = client if client is not None else ferry.Client(**client_kwargs)
        # Prefixes `_info` found to be directories (no object of that name, keys under
        # it), beside the listings: the same lifetime, dropped by the same writes.
        self._dirs: set[str] = set()

    # -- paths --------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for proto in (*cls._protocols(), cls.scheme):
            if path.startswith(proto + "://"):
                path = path[len(proto) + 3:]
                break
        return path.rstrip("/") or cls.root_marker

    @classmethod
    def _protocols(cls):
        return (cls.protocol,) if isinstance(cls.protocol, str) else tuple(cls.protocol)

    def _url(self, path: str) -> str:
        return f"{self.scheme}://" + self._strip_protocol(path)

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    async def _call(self, fn, *args, **kwargs):
        call = functools.partial(fn, *args, **kwargs)
        try:
            fut = asyncio.get_running_loop().run_in_executor(None, call)
        except RuntimeError:
            # The interpreter is shutting down: concurrent.futures refuses new work once
            # its exit hook ran, while non-daemon threads (a read still going) finish.
            # Run the call here, the loop waiting for it.
            return call()
        return await fut

    # -- reads ----------------------------------------------------------------------
    async def _cat_file(self, path, start=None, end=None, **kwargs):
        url = self._url(path)
        if start is None and end is None:
            return bytes(await self.client.get_async(url))
        start, end = await self._bounds(path, start, end)
        return bytes(await self.client.get_range_async(url, start, end))

    async def _bounds(self, path, start, end):
        start = 0 if start is None else start
        if end is None or end < 0 or start < 0:
            size = (await self._info(path))["size"]
            if start < 0:
                start = max(0, size + start)
            end = size if end is None else (size + end if end < 0 else end)
        return start, max(start, end)

    async def _cat_ranges(self, paths, starts, ends, max_gap=None, batch_size=None, on_error="return", **kwargs):
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        n = len(paths)
        starts = list(starts) if isinstance(starts, (list, tuple)) else [starts] * n
        ends = list(ends) if isinstance(ends, (list, tuple)) else [ends] * n
        if len(starts) != n or len(ends) != n:
            raise ValueError("paths, starts and ends differ in length")
        by_path = defaultdict(list)
        for i, p in enumerate(paths):
            by_path[self._strip_protocol(p)].append(i)
        out: list = [None] * n

        async def one(path, idx):
            try:
                bounds = [await self._bounds(path, starts[i], ends[i]) for i in idx]
                got = await self.client.get_ranges_async(
                    self._url(path), [b[0] for b in bounds], [b[1] for b in bounds], max_gap=max_gap)
                for i, b in zip(idx, got):
                    out[i] = bytes(b)
            except Exception as e:  # noqa: BLE001 - placed per range, as fsspec's on_error="return"
                if on_error != "return":
                    raise
                for i in idx:
                    out[i] = e

        await asyncio.gather(*(one(p, idx) for p, idx in by_path.items()))
        return out

    async def _get_file(self, rpath, lpath, **kwargs):
        if os.path.isdir(lpath):
            return
        buf = await self.client.get_async(self._url(rpath))
        # Atomic: the final name only ever holds the whole object.
        d = os.path.dirname(os.path.abspath(lpath))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".ferry-get-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(buf)
            os.replace(tmp, lpath)
        except BaseException:
            os.unlink(tmp)
            raise

    # -- writes ---------------------------------------------------------------------
    async def _pipe_file(self, path, value, mode="overwrite", **kwargs):
        self.invalidate_cache(path)
        try:
            await self.client.put_async(self._url(path), value, if_not_exists=(mode == "create"))
        except ferry.Precondition as e:
            raise FileExistsError(path) from e

    async def _put_file(self, lpath, rpath, mode="overwrite", **kwargs):
        if os.path.isdir(lpath):
            return
        self.invalidate_cache(rpath)
        await self.client.put_async(self._url(rpath), os.fspath(lpath))

    async def _cp_file(self, path1, path2, **kwargs):
        self.invalidate_cache(path2)
        await self._call(self.client.copy, self._url(path1), self._url(path2))

    async def _rm_file(self, path, **kwargs):
        self.invalidate_cache(path)
        await self._call(self.client.delete, self._url(path))

    async def _rm(self, path, recursive=False, batch_size=None, maxdepth=None, **kwargs):
        paths = await self._expand_path(path, recursive=recursive, maxdepth=maxdepth)
        files = []
        for p in paths:
            bucket, key = self._split(p)
            if key and await self._isfile(p):
                files.append(f"{self.scheme}://" + p)
        if files:
            await self._call(self.client.delete, files)
        self.invalidate_cache()

    async def _mkdir(self, path, create_parents=True, **kwargs):
        bucket, key = self._split(self._strip_protocol(path))
        if not key and not await self._exists(bucket):
            await self._call(self.client.create_bucket, bucket)
        self.invalidate_cache(path)

    async def _makedirs(self, path, exist_ok=False):
        await self._mkdir(path)

    # -- metadata -------------------------------------------------------------------
    @staticmethod
    def _entry(e: ferry.ObjectInfo) -> dict:
        name = f"{e.bucket}/{e.key}".rstrip("/")
        if e.is_dir:
            return {"name": name, "size": 0, "type": "directory"}
        return {
            "name": name,
            "size": e.size,
            "type": "file",
            "ETag": e.etag,
            "LastModified": e.last_modified,
            "checksum_algorithm": e.checksum_algorithm,
        }

    def invalidate_cache(self, path=None):
        if path is None:
            self.dircache.clear()
            self._dirs.clear()
            return
        path = self._strip_protocol(path).rstrip("/")
        while path:
            self.dircache.pop(path, None)
            self._dirs.discard(path)
            parent = self._parent(path)
            path = parent if parent != path else ""

    def _from_listing(self, path):
        """The entry of `path` from a cached listing: its own, or its parent's line for
        it. None when nothing cached says; FileNotFoundError when the parent's listing
        is cached and has no such name."""
        if path in self.dircache or (self.dircache.use_listings_cache and path in self._dirs):
            return {"name": path, "size": 0, "type": "directory"}
        parent = self._parent(path)
        if parent not in self.dircache:
            return None
        for e in self.dircache[parent]:
            if e["name"] == path:
                return dict(e)
        raise FileNotFoundError(path)

    async def _info(self, path, **kwargs):
        path = self._strip_protocol(path)
        bucket, key = self._split(path)
        if not bucket:
            return {"name": "", "size": 0, "type": "directory"}
        if key and not kwargs.get("refresh"):
            cached = self._from_listing(path.rstrip("/"))
            if cached is not None:
                return cached
        if key:
            try:
                info = await self.client.head_async(f"{self.scheme}://" + path)
            except ferry.NotFound:
                pass
            else:
                out = self._entry(info)
                out["ContentType"] = info.content_type
                return out
        # A bucket (listing a missing one raises NotFound), or a prefix with something under it.
        first = await self._call(lambda: next(iter(self.client.list(f"{self.scheme}://{path}/")), None))
        if first is None and key:
            raise FileNotFoundError(path)
        if key:
            self._dirs.add(path.rstrip("/"))
        return {"name": path, "size": 0, "type": "directory"}

    async def _ls(self, path, detail=True, refresh=False, **kwargs):
        path = self._strip_protocol(path).rstrip("/")
        if not path:
            raise NotImplementedError("listing buckets is not supported; name a bucket")
        if not refresh and path in self.dircache:
            entries = [dict(e) for e in self.dircache[path]]
            return entries if detail else [e["name"] for e in entries]
        entries = await self._call(lambda: [self._entry(e) for e in self.client.list(f"{self.scheme}://{path}/")])
        if entries:
            self.dircache[path] = [dict(e) for e in entries]
        else:
            info = await self._info(path)
            if info["type"] == "file":
                entries = [info]
        return entries if detail else [e["name"] for e in entries]

    async def _find(self, path, maxdepth=None, withdirs=False, **kwargs):
        if maxdepth is not None or withdirs:
            return await super()._find(path, maxdepth=maxdepth, withdirs=withdirs, **kwargs)
        path = self._strip_protocol(path)
        detail = kwargs.pop("detail", False)
        prefix = f"{self.scheme}://{path}/" if "/" in path or path else f"{self.scheme}://"
        entries = await self._call(lambda: [self._entry(e) for e in self.client.list(prefix, recursive=True)])
        out = {e["name"]: e for e in entries}
        if not out and await self._isfile(path):
            out[path] = await self._info(path)
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    async def _exists(self, path, **kwargs):
        try:
            await self._info(path)
            return True
        except FileNotFoundError:
            return False

    # -- files ----------------------------------------------------------------------
    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if mode == "rb":
            from ferry._file import DEFAULT_BLOCK_SIZE, ObjectFile

            try:
                cached = self._from_listing(self._strip_protocol(path).rstrip("/"))
            except FileNotFoundError:
                cached = None  # not in the cached listing (written elsewhere since): ask the store
            if cached is not None and cached["type"] == "file" and cached.get("ETag"):
                # Size and ETag from the listing: no HEAD (the GETs still pin the ETag).
                size = block_size if block_size not in (None, "default") else DEFAULT_BLOCK_SIZE
                return ObjectFile(self.client, self._url(path), size, known=(cached["size"], cached["ETag"]))
            return self.client.open(self._url(path), block_size=block_size if block_size not in (None, "default") else None)
        if mode in ("wb", "xb"):
            if mode == "xb" and self.exists(path):
                raise FileExistsError(path)
            return _Writer(self, path, mode=mode, block_size=block_size or "default", autocommit=autocommit)
        raise ValueError(f"mode {mode!r}: ferry files are 'rb' or 'wb'")


class _Writer(AbstractBufferedFile):
    """A write-only file: the bytes gather in a temporary file and are stored by one
    `put` (multipart when large) on close, so nothing half-written is ever visible."""

    def _initiate_upload(self):
        self._spool = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)

    def _upload_chunk(self, final=False):
        self.buffer.seek(0)
        self._spool.write(self.buffer.read())
        if final:
            self._spool.seek(0)
            self.fs.invalidate_cache(self.path)
            try:
                if self.mode == "xb":
                    self.fs.client.put(self.fs._url(self.path), self._spool.read(), if_not_exists=True)
                else:
                    self.fs.client.put(self.fs._url(self.path), self._spool)
            except ferry.Precondition as e:
                raise FileExistsError(self.path) from e
            finally:
                self._spool.close()
        return True

    def _fetch_range(self, start, end):
        raise ValueError("a file opened for writing cannot be read")


#: The protocols `register` knows, and the scheme of the objects behind each.
_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az"}


def register(protocol: str = "s3") -> None:
    """Makes ferry fsspec's implementation of ``protocol``, only on this explicit call:
    ``"s3"`` (and ``"s3a"``) sends ``s3://`` paths through ferry instead of s3fs;
    ``"gs"``/``"gcs"`` sends them to Google Cloud Storage (found as ferry finds it:
    ``STORAGE_EMULATOR_HOST``, Google's credentials), ``"az"``/``"abfs"`` to Azure Blob
    (``AZURE_STORAGE_CONNECTION_STRING``, the account's settings). Raises ValueError for
    any other protocol."""
    if protocol not in _SCHEMES:
        raise ValueError(f"register({protocol!r}): ferry serves {', '.join(sorted(_SCHEMES))}")

    class _Registered(FerryFileSystem):
        pass

    _Registered.protocol = (protocol,)
    _Registered.scheme = _SCHEMES[protocol]
    _Registered.__name__ = f"FerryFileSystem_{protocol}"
    fsspec.register_implementation(protocol, _Registered, clobber=True)
