//! Write batching for HTTP/2 connections: many small frames, one `writev`.
//!
//! The `h2` crate writes a DATA frame of 256 bytes or more by chaining its payload after
//! the frame head, and it must flush that chain before it can encode the next frame
//! (`FramedWrite::poll_ready`). Served straight to a socket, every 16 KiB response thus
//! cost its own `writev` (and on loopback, the peer's whole receive path run inside that
//! syscall), a third of the server's CPU under `h2load` (docs/lab/server-write-path.md),
//! where nghttpd writes many frames per call.
//!
//! [`Batched`] sits between `h2` and the socket and makes the frames of one connection
//! poll go out together:
//!
//! ```text
//!   h2 write ──► small?  ──yes──► copy into `held` (up to HELD_LIMIT)
//!                 │no (a large DATA frame: 1 MiB pieces of a big GET)
//!                 └──────────────► one writev of `held` + the caller's slices, no copy
//!   h2 flush ──► bytes were added since the last deferred flush: wake this task and
//!                 report done (deferred)
//!                 nothing added since (the task went round once with nothing new to
//!                 send), or held >= HELD_LIMIT: write it all
//! ```
//!
//! The deferral is the point: `h2` flushes after every chained frame and once more when
//! it has nothing left to send, so a flush cannot tell "more is coming" from "done". A
//! deferred flush wakes its own task, which runs again after what is already queued. The
//! connection's streams answer within those rounds (h2.rs polls them on the connection's
//! task), and each answer needs a round or two (headers, then DATA once h2 grants send
//! capacity). When a round adds no byte, the connection has nothing more to say for now,
//! and that flush writes everything in one call. So bytes wait at most one idle round
//! (no syscall, no timer), shutdown writes what is held before it shuts the socket, and no
//! byte is lost or reordered.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes held for one write: 256 KiB, sixteen 16 KiB responses (the rate bench's
/// object). Writes that would pass it go out at once, together with what is held.
/// `scripts/bench-serve.sh --only rate` measures its effect. The buffer keeps its
/// capacity between bursts (freeing it per burst would cost an allocation and fresh pages
/// per ten responses), so an h2 connection that was once busy holds up to this much.
const HELD_LIMIT: usize = 256 * 1024;

/// Most slices passed to one `writev`: the held bytes plus the caller's (tokio-util's
/// `poll_write_buf`, which `h2` uses, passes at most 64).
const MAX_SLICES: usize = 65;

/// An `AsyncWrite` that holds small writes and defers one flush per batch; reads pass
/// through. See the module doc.
pub(crate) struct Batched<IO> {
    io: IO,
    held: Vec<u8>,
    /// Bytes of `held` already written.
    written: usize,
    /// `held.len()` at the last deferred flush (0: none deferred since the last write).
    held_at_defer: usize,
}

impl<IO> Batched<IO> {
    pub(crate) fn new(io: IO) -> Batched<IO> {
        Batched { io, held: Vec::new(), written: 0, held_at_defer: 0 }
    }

    fn pending(&self) -> usize {
        self.held.len() - self.written
    }
}

impl<IO: AsyncWrite + Unpin> Batched<IO> {
    /// Writes every held byte; `Pending` (with the waker registered by the socket) until
    /// done.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.pending() > 0 {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.held[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.held.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Writes the held bytes and `bufs` in one vectored call, without copying `bufs`;
    /// returns how many bytes of `bufs` were taken.
    fn poll_write_through(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        loop {
            let held = self.pending();
            if held == 0 {
                return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
            }
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            slices[0] = IoSlice::new(&self.held[self.written..]);
            let mut n_slices = 1;
            for b in bufs.iter().filter(|b| !b.is_empty()).take(MAX_SLICES - 1) {
                slices[n_slices] = IoSlice::new(b);
                n_slices += 1;
            }
            let n = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..n_slices]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n >= held {
                self.held.clear();
                self.written = 0;
                if n > held {
                    return Poll::Ready(Ok(n - held));
                }
                // Exactly the held bytes went out: try the caller's again (or register
                // the waker), since Ok(0) would read as "the socket is closed".
            } else {
                self.written += n;
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Batched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Batched<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if self.held.len() + total <= HELD_LIMIT {
            for b in bufs {
                self.held.extend_from_slice(b);
            }
            return Poll::Ready(Ok(total));
        }
        self.poll_write_through(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending() == 0 {
            self.held_at_defer = 0;
            return Pin::new(&mut self.io).poll_flush(cx);
        }
        if self.held.len() > self.held_at_defer && self.held.len() < HELD_LIMIT {
            self.held_at_defer = self.held.len();
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        ready!(self.poll_drain(cx))?;
        self.held_at_defer = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A socket pair's far end sees every byte, in order, whatever mix of small held
    /// writes, large written-through writes and deferred flushes produced them.
    #[tokio::test]
    async fn bytes_arrive_whole_and_in_order_across_held_and_large_writes() {
        let (near, mut far) = tokio::io::duplex(64 * 1024);
        let mut w = Batched::new(near);
        let mut expect = Vec::new();
        let sizes = [10usize, 300, 16 * 1024, 5, 300 * 1024, 7, 1024 * 1024, 3, HELD_LIMIT, 1];
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            far.read_to_end(&mut got).await.unwrap();
            got
        });
        for (i, n) in sizes.iter().enumerate() {
            let chunk: Vec<u8> = (0..*n).map(|j| (i * 31 + j) as u8).collect();
            expect.extend_from_slice(&chunk);
            let half = chunk.len() / 2;
            let slices = [IoSlice::new(&chunk[..half]), IoSlice::new(&chunk[half..])];
            let mut done = 0;
            while done < chunk.len() {
                // write_vectored with what is left, as h2's poll_write_buf would.
                let rest: Vec<IoSlice<'_>> = if done < half {
                    vec![IoSlice::new(&chunk[done..half]), slices[1]]
                } else {
                    vec![IoSlice::new(&chunk[done..])]
                };
                done += w.write_vectored(&rest).await.unwrap();
            }
            w.flush().await.unwrap();
        }
        w.shutdown().await.unwrap();
        let got = reader.await.unwrap();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "bytes differ");
    }

    /// A flush with nothing added since the last deferred one puts the bytes on the
    /// wire, so nothing waits for a write that may never come.
    #[tokio::test]
    async fn the_second_flush_writes_what_the_first_deferred() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut w = Batched::new(near);
        w.write_all(b"hello").await.unwrap();
        w.flush().await.unwrap();
        assert_eq!(w.pending(), 5, "the first flush holds the bytes for the next poll");
        w.write_all(b", world").await.unwrap();
        w.flush().await.unwrap();
        assert_eq!(w.pending(), 12, "bytes were added: held for one more round");
        w.flush().await.unwrap();
        assert_eq!(w.pending(), 0, "a round with nothing new writes");
        let mut got = [0u8; 12];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello, world");
    }
}
