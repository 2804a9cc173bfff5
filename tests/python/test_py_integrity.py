"""Bad bytes never come back as good ones: a proxy between the client and `ferry serve`
flips one byte of the body of the first response on every connection, and every read
path must raise ferry.Integrity (the single GET checked by the store against the stored
CRC64NVME; the parallel ranged parts of a large `get` by their CRCs combined)."""

from __future__ import annotations

import random
import socket
import threading

import pytest

import ferry

MIB = 1024 * 1024


class CorruptingProxy:
    """TCP proxy; on each connection, the byte `at` bytes into the first response's
    body (after its head's blank line) is flipped. `corrupt=False` relays faithfully."""

    def __init__(self, upstream: tuple[str, int], at: int = 100):
        self.upstream, self.at, self.corrupt = upstream, at, True
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.flipped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                down, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            threading.Thread(target=self._pipe, args=(down, up, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, down, self.corrupt), daemon=True).start()

    def _pipe(self, src, dst, corrupt):
        seen = bytearray()  # bytes of the first response until the flip
        try:
            while data := src.recv(65536):
                if corrupt:
                    start = len(seen)
                    seen += data
                    head_end = seen.find(b"\r\n\r\n")
                    if head_end >= 0 and len(seen) > head_end + 4 + self.at:
                        i = head_end + 4 + self.at - start
                        data = bytearray(data)
                        data[i] ^= 0xFF
                        corrupt = False
                        self.flipped += 1
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


@pytest.fixture
def proxy(server):
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    p = CorruptingProxy((host, int(port)))
    yield p
    p.close()


def test_corrupted_bytes_raise_integrity(server, client, bucket, proxy):
    small, large = random.Random(50).randbytes(300_000), random.Random(51).randbytes(20 * MIB)
    client.put(f"s3://{bucket}/small", small)
    client.put(f"s3://{bucket}/large", large)

    def fresh():
        # h1-pool and a client of its own: each GET of a call is its connection's first
        # response (a connection kept alive afterwards relays faithfully).
        return ferry.Client(proxy.url, credentials=server.credentials, region="us-east-1", transport="h1-pool")

    with pytest.raises(ferry.Integrity):
        fresh().get(f"s3://{bucket}/small")
    # Into fresh memory the large object splits into ranged parts, whose CRCs combine to
    # the stored one; a pooled buffer left by an earlier test would be read by one stream
    # on loopback, checked whole as the small object is. So the pool is emptied first.
    ferry.set_buffer_pool(ferry.set_buffer_pool(0))
    with pytest.raises(ferry.Integrity, match="parts' CRC64NVME does not match the stored full-object"):
        fresh().get(f"s3://{bucket}/large")
    got = fresh().get_many([f"s3://{bucket}/small"], return_exceptions=True)
    assert isinstance(got[0], ferry.Integrity)
    assert proxy.flipped >= 3
    # The same path relaying faithfully: the same calls succeed.
    proxy.corrupt = False
    good = ferry.Client(proxy.url, credentials=server.credentials, region="us-east-1", transport="h1-pool")
    assert good.get(f"s3://{bucket}/small") == small
    assert good.get(f"s3://{bucket}/large") == large
