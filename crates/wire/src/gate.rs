//! The connection gate: how a lane (pool.rs, pipeline.rs) asks for a place under a
//! connection cap it shares with another lane (auto/lanes.rs implements the gate), and the
//! [`Place`] a socket holds until it closes.
//!
//! ```text
//!   Place::take ── try_open() yes ──► Taken ── connected: Place::hold(io) ──► Held by the socket
//!       │ no: the lane waits,           │ connect failed: dropped             │ socket dropped
//!       ▼ or places elsewhere           ▼                                     ▼
//!     (none)                          closed()                     socket(-1), then closed()
//! ```
//!
//! A place comes back only once the socket itself is closed, so the other lane's next
//! connection never overlaps it and the sockets open never exceed the shared cap. Without
//! a gate (a transport used on its own) a place is free and counts nothing.
//!
//! Calls come with the lane's own lock held: a gate takes no lock of a lane, and wakes
//! lanes only from spawned tasks.

use crate::conn::Io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The hook through which a lane (pool.rs, pipeline.rs) asks for connections of a cap it
/// shares with another lane. Calls come with the lane's own lock held: implementations
/// take no lock of a lane, and wake lanes only from spawned tasks.
pub(crate) trait ConnectionGate: Send + Sync {
    /// Takes a place for one more connection of this lane, if its share and the total allow.
    fn try_open(&self) -> bool;
    /// A place of this lane was given back (its socket closed, or it never opened one):
    /// called by [`Place`]'s drop, never directly.
    fn closed(&self);
    /// Sockets holding a place of this lane: `+1` when one is connected, `-1` once it is
    /// closed (counts what is really open, for [`crate::auto::AutoTransport::sockets_open`]).
    fn socket(&self, _delta: isize) {}
    /// Connections this lane must give back now (it gives them back as they free):
    /// those above its share that the cap or the other lane needs.
    fn excess(&self) -> usize;
    /// Requests in flight per pipelined connection now, at most the configured depth.
    fn depth(&self) -> usize {
        usize::MAX
    }
    /// This lane is closing `n` connections because it holds more than its share: their
    /// places go to the other lane (counted, see [`crate::auto::AutoTransport::handovers`]).
    fn handed_over(&self, _n: usize) {}
}

/// A connection's place under a gate's shared cap, given back when dropped. A lane takes
/// one before it opens a connection ([`ConnectionGate::try_open`] said yes) and moves it
/// into the socket once connected ([`PlacedIo`]), so the place is free again only once the
/// socket itself is closed: the other lane's next connection never overlaps it.
pub(crate) struct Place {
    gate: Option<Arc<dyn ConnectionGate>>,
    /// Held by a socket (counted in [`ConnectionGate::socket`]).
    socket: bool,
}

impl Place {
    /// A place from `gate`, or `None` when the gate has no room; always a place without one.
    pub(crate) fn take(gate: Option<&Arc<dyn ConnectionGate>>) -> Option<Place> {
        match gate {
            None => Some(Place { gate: None, socket: false }),
            Some(g) => g.try_open().then(|| Place { gate: Some(g.clone()), socket: false }),
        }
    }

    /// Wraps `io` so that this place is given back once the socket is dropped.
    pub(crate) fn hold(mut self, io: Box<dyn Io>) -> Box<dyn Io> {
        match &self.gate {
            None => io,
            Some(g) => {
                g.socket(1);
                self.socket = true;
                Box::new(PlacedIo { io, _place: self })
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(g) = self.gate.take() {
            if self.socket {
                g.socket(-1);
            }
            g.closed();
        }
    }
}

/// A socket holding its [`Place`]. Fields drop in order: the socket closes, then the
/// place is given back. Reads and writes go straight through.
struct PlacedIo {
    io: Box<dyn Io>,
    _place: Place,
}

impl AsyncRead for PlacedIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for PlacedIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
