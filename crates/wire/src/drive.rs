//! A connection's reading future, polled by its own task and, while a large response body
//! is being read, by the task that consumes that body.
//!
//! Both HTTP/1.1 transports read a connection's socket in a future of their own (hyper's
//! connection future for h1-pool, the pipeline's reader for h1-pipeline) and hand body
//! chunks to the caller through a small channel. With that future's task on one tokio
//! worker and the consumer on another (a `block_on` caller, or another worker), every
//! chunk costs two cross-thread wake-ups, and the consumer's checksum then pulls the
//! just-received bytes from the other core's cache. A [`Driver`] lets the body poll the
//! connection's future itself before it asks its channel for the next chunk, so the
//! socket is read on the task (and usually the CPU) that consumes the bytes
//! (docs/lab/wire-h1-read-path.md has the measurements for both transports).
//!
//! ```text
//!   connection task ── poll_task ──┐
//!                                  ├─► Mutex<Option<future>> ─► socket ─► body channel ─► body
//!   body's task ─────── drive ─────┘        (try_lock only)
//! ```
//!
//! Sharing one future between two tasks is sound because each poll registers the polling
//! task's wakers: while a body drives, socket readiness wakes the body's task; when the
//! body stops driving (its end, its drop, or a transport's own hand-back point) it wakes
//! the connection's task ([`HandBack`], [`Driver::hand_back`]), which polls the future
//! again and so re-registers its own wakers (for the next response, and for a close while
//! idle). A body only `try_lock`s: when the task is polling at that moment the body just
//! waits on its channel as before, which the task fills.

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// The future a connection's task runs; it ends when the connection does.
pub(crate) type ConnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One connection's reading future, shared by its task and the body being read.
pub(crate) struct Driver {
    conn: Mutex<Option<ConnFuture>>,
    task: AtomicWaker,
}

impl Driver {
    pub(crate) fn new(conn: ConnFuture) -> Driver {
        Driver { conn: Mutex::new(Some(conn)), task: AtomicWaker::new() }
    }

    /// Runs the connection on the current task until it ends, sharing it with bodies.
    pub(crate) async fn run(self: Arc<Self>) {
        std::future::poll_fn(|cx| self.poll_task(cx)).await
    }

    /// The connection's own task: ready once the connection has ended.
    fn poll_task(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.task.register(cx.waker());
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let Some(fut) = conn.as_mut() else { return Poll::Ready(()) };
        match fut.as_mut().poll(cx) {
            Poll::Ready(()) => {
                *conn = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Closes the connection now: drops its future (and with it the socket and whatever
    /// it holds) and lets the connection's task end.
    pub(crate) fn close(&self) {
        let dropped = self.conn.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(dropped);
        self.task.wake();
    }

    /// One poll of the connection from a response body's task, unless its own task is
    /// polling it right now.
    pub(crate) fn drive(&self, cx: &mut Context<'_>) {
        let Ok(mut conn) = self.conn.try_lock() else { return };
        let Some(fut) = conn.as_mut() else { return };
        if fut.as_mut().poll(cx).is_ready() {
            *conn = None;
            drop(conn);
            self.task.wake();
        }
    }

    /// The body stops driving: the connection's task takes over again. Call it after the
    /// body's last [`Driver::drive`].
    pub(crate) fn hand_back(&self) {
        self.task.wake();
    }
}

/// Hands the connection back to its task when dropped.
pub(crate) struct HandBack(pub(crate) Arc<Driver>);

impl Drop for HandBack {
    fn drop(&mut self) {
        self.0.hand_back();
    }
}
