//! Admission: the one place a request of the engine waits before it is sent.
//!
//! Every fan-out of the engine (ranged download parts, `get_ranges` spans, upload
//! parts, open-ahead read-ahead, batch deletes, listing pages) asks an [`Admission`]
//! before it sends. Admission combines the limits that matter above the transport:
//!
//! ```text
//! download part ─► Admission::admit_part(bytes) ─► download parts in flight, when the
//!                                     │              engine bounds them (all its downloads
//!                                     │              together; `ferry cp`: 16 a command)
//! fan-out ─► Admission::admit(bytes) ─┴► ByteBudget: bytes in flight (memory)
//!                                    └─► Controller: requests in flight (the endpoint's
//!                                        AIMD limit, learned by the transport from every
//!                                        response's status and first-byte latency)
//!          ◄─ Ticket (all held; dropped when the bytes have left memory)
//!
//! small GET ─► Admission::small_room ─► Controller::acquire_small: a share of a place,
//!   (size known <= 1 MiB)               limit x Transport::small_depth in flight (the
//!                                       pipeline's depth, h2's streams; 1 on a pool)
//! ```
//!
//! Why small GETs share places: on HTTP/1.1 the controller's limit is also auto's
//! connection count, so one request per place would keep a pipelined connection one deep
//! and a batch of small objects would wait a first byte per object per connection. A
//! share lets as many through as the connections carry at once; the caller's memory
//! budget (if any) still bounds their bytes, and the transport's per-connection depth
//! bounds the rest.
//!
//! Bytes first, then room: a request waits for memory before it takes one of the
//! endpoint's places, so a place is never held by a request that cannot buffer its
//! answer. The controller is fed in one place, by whoever sees the responses (auto's
//! transport, or the store's own request loop for a forced transport); a ticket carries
//! no signal of its own, so dropping it is enough. Below admission only the transport
//! queues (auto's lanes, the pool's cap), which no caller sees.
//!
//! An [`Engine`] is a store plus its admission: cheap to clone, clones share both, and
//! every entry point of this crate takes one.

use ferry_store::{DynObjectStore, ObjectStore};
use ferry_wire::controller::{Controller, Permit};
use ferry_wire::Transport;
use std::sync::Arc;

/// A store and the admission every request to it goes through. Derefs to the store, so
/// `engine.head(&object)` is the store's call.
#[derive(Clone)]
pub struct Engine {
    store: DynObjectStore,
    admission: Arc<Admission>,
}

impl Engine {
    /// The engine over `store`, with the default budget of bytes in flight for its
    /// endpoint's connection cap ([`default_memory_budget`]).
    pub fn new(store: impl Into<DynObjectStore>) -> Engine {
        let store = store.into();
        let controller = store.controller();
        let bytes = ByteBudget::new(default_memory_budget(controller.max()));
        let transport = Some(store.transport().clone());
        Engine { store, admission: Arc::new(Admission { bytes, controller, parts: None, transport }) }
    }

    /// The same store and controller, drawing bytes in flight from a budget of `bytes`
    /// of its own (at least [`MIN_MEMORY_BUDGET`]): an expert's override. Clones of the
    /// result share the new budget; the download parts limit, if any, stays shared with
    /// `self`.
    pub fn with_memory_budget(&self, bytes: u64) -> Engine {
        let admission = Admission {
            bytes: ByteBudget::new(bytes.max(MIN_MEMORY_BUDGET)),
            controller: self.admission.controller.clone(),
            parts: self.admission.parts.clone(),
            transport: self.admission.transport.clone(),
        };
        Engine { store: self.store.clone(), admission: Arc::new(admission) }
    }

    /// The same store, memory budget and controller, with at most `parts` ranged-download
    /// parts in flight across all the downloads made through the result and its clones
    /// (each part holds its place from its request to its last byte written). Without it
    /// only each download's own `DownloadParams::concurrency` bounds its parts.
    pub fn with_download_parts(&self, parts: usize) -> Engine {
        let admission = Admission {
            bytes: self.admission.bytes.clone(),
            controller: self.admission.controller.clone(),
            parts: Some((Arc::new(tokio::sync::Semaphore::new(parts.max(1))), parts.max(1))),
            transport: self.admission.transport.clone(),
        };
        Engine { store: self.store.clone(), admission: Arc::new(admission) }
    }

    /// The store itself.
    pub fn store(&self) -> &DynObjectStore {
        &self.store
    }

    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// The budget of bytes in flight that every fan-out draws from.
    pub fn memory_budget(&self) -> Arc<ByteBudget> {
        self.admission.bytes.clone()
    }

    /// The endpoint's concurrency controller.
    pub fn controller(&self) -> Arc<Controller> {
        self.admission.controller.clone()
    }
}

impl std::ops::Deref for Engine {
    type Target = dyn ObjectStore;
    fn deref(&self) -> &(dyn ObjectStore + 'static) {
        &*self.store
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("store", &self.store).field("budget", &self.admission.bytes.total()).finish()
    }
}

/// Bytes in flight and the endpoint's requests in flight, taken together, and the
/// download parts in flight when the engine bounds them.
pub struct Admission {
    bytes: Arc<ByteBudget>,
    controller: Arc<Controller>,
    /// Ranged-download parts in flight across the engine's downloads
    /// ([`Engine::with_download_parts`]); `None`: no limit across downloads.
    parts: Option<(Arc<tokio::sync::Semaphore>, usize)>,
    /// The store's transport, asked how many small requests share a place
    /// ([`Transport::small_depth`]); `None`: one each.
    transport: Option<Arc<dyn Transport>>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("bytes", &self.bytes)
            .field("controller", &self.controller)
            .field("parts", &self.parts)
            .field("transport", &self.transport.as_ref().map(|t| t.name()))
            .finish()
    }
}

/// What an admitted request holds: its bytes and its place (and a download part's place
/// among the parts in flight); all go back on drop.
#[derive(Debug)]
pub struct Ticket {
    pub bytes: BudgetPermit,
    pub room: Permit,
    _part: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Admission {
    /// Waits for `bytes` of memory, then for a place under the endpoint's limit.
    pub async fn admit(&self, bytes: u64) -> Ticket {
        let bytes = self.bytes.acquire(bytes).await;
        let room = self.controller.acquire().await;
        Ticket { bytes, room, _part: None }
    }

    /// A ranged download's part: a place among the engine's parts in flight (when it
    /// bounds them), then [`Admission::admit`].
    pub async fn admit_part(&self, bytes: u64) -> Ticket {
        let part = match &self.parts {
            Some((parts, _)) => {
                Some(parts.clone().acquire_owned().await.expect("the parts' semaphore is never closed"))
            }
            None => None,
        };
        Ticket { _part: part, ..self.admit(bytes).await }
    }

    /// The most ranged-download parts in flight across the engine's downloads, if bounded.
    pub fn download_parts(&self) -> Option<usize> {
        self.parts.as_ref().map(|(_, total)| *total)
    }

    /// Memory only: for bytes held outside a request (a part waiting for its disk write,
    /// an open-ahead slot's buffered body).
    pub async fn bytes(&self, bytes: u64) -> BudgetPermit {
        self.bytes.acquire(bytes).await
    }

    /// A place only: for requests whose answers are small (deletes, listing pages).
    pub async fn room(&self) -> Permit {
        self.controller.acquire().await
    }

    /// A share of a place for a GET known to bring at most `ferry_wire::lane::SMALL_GET_BYTES`
    /// (its size from a listing or a HEAD, sent as its `size_hint` so the transport sees
    /// it small too): as many in flight per place as the transport carries on one
    /// connection (module note). A plain [`Admission::room`] on a transport that does
    /// not pipeline.
    pub async fn small_room(&self) -> Permit {
        match &self.transport {
            Some(t) => self.controller.acquire_small(|| t.small_depth()).await,
            None => self.controller.acquire().await,
        }
    }

    /// Whether a GET whose response is known to carry `len` bytes is small (module note):
    /// the transport's own rule (`ferry_wire::lane::is_small`).
    pub fn is_small(len: Option<u64>) -> bool {
        len.is_some_and(|n| n <= ferry_wire::lane::SMALL_GET_BYTES)
    }

    pub fn budget(&self) -> &Arc<ByteBudget> {
        &self.bytes
    }

    pub fn controller(&self) -> &Arc<Controller> {
        &self.controller
    }
}

/// Smallest [`ByteBudget`]: 1 MiB, room for a download part's two write batches or an
/// upload part's two file chunks, so no single part runs alone by default.
pub const MIN_MEMORY_BUDGET: u64 = 1 << 20;

/// Part size the default budget is reckoned in: 8 MiB, the engine's default part (the
/// cost-optimal request size on S3, docs/lab/store-s3-facts.md).
pub const BUDGET_PART_BYTES: u64 = 8 << 20;

/// Bounds of the default budget: 64 MiB at least (8 parts), 1 GiB at most.
pub const DEFAULT_MEMORY_BUDGET_RANGE: (u64, u64) = (64 << 20, 1 << 30);

/// The default budget of bytes in flight for a connection cap: two 8 MiB parts per
/// connection (one being received, one waiting for its consumer or its disk write), so
/// that the budget never idles a connection the controller allows, within
/// [`DEFAULT_MEMORY_BUDGET_RANGE`] (the AWS SDKs' 50 connections: 800 MiB; auto's 64:
/// 1 GiB).
pub fn default_memory_budget(max_connections: usize) -> u64 {
    let (lo, hi) = DEFAULT_MEMORY_BUDGET_RANGE;
    (2 * max_connections.max(1) as u64).saturating_mul(BUDGET_PART_BYTES).clamp(lo, hi)
}

/// Bytes in flight for one client, shared by every fan-out of the engine: a hard cap on
/// memory in flight, as the connection cap is on connections. A fan-out takes a [`BudgetPermit`]
/// for the bytes a request will bring into memory (a ranged part, a span, an upload
/// part, an open-ahead slot's read-ahead) before sending it, and drops it once those
/// bytes have left memory (written, handed over, sent). When the budget is spent the
/// next fan-out waits: a slow consumer holds its bytes, so the fetches slow down with
/// it instead of buffers growing (backpressure).
///
/// A tokio [`Semaphore`] counted in KiB (its permits are `u32` per acquisition): waiters
/// are served in order, so a large part is not starved by a stream of small ones. A
/// request larger than the whole budget takes all of it (it runs alone rather than
/// never).
#[derive(Debug)]
pub struct ByteBudget {
    sem: Arc<tokio::sync::Semaphore>,
    total: u64,
    /// Bytes held now, and the most held at once.
    held: std::sync::Mutex<(u64, u64)>,
}

/// Bytes taken from a [`ByteBudget`]; given back on drop.
#[derive(Debug)]
pub struct BudgetPermit {
    budget: Arc<ByteBudget>,
    _permit: tokio::sync::OwnedSemaphorePermit,
    bytes: u64,
}

impl ByteBudget {
    pub fn new(total: u64) -> Arc<ByteBudget> {
        let total = total.max(1024);
        Arc::new(ByteBudget {
            sem: Arc::new(tokio::sync::Semaphore::new(Self::kib(total) as usize)),
            total,
            held: std::sync::Mutex::new((0, 0)),
        })
    }

    fn kib(bytes: u64) -> u32 {
        bytes.div_ceil(1024).min(u32::MAX as u64) as u32
    }

    /// Waits until `bytes` (at most the whole budget) are free, and takes them.
    pub async fn acquire(self: &Arc<Self>, bytes: u64) -> BudgetPermit {
        let bytes = bytes.min(self.total);
        let permit = self
            .sem
            .clone()
            .acquire_many_owned(Self::kib(bytes))
            .await
            .expect("the budget's semaphore is never closed");
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        h.0 += bytes;
        h.1 = h.1.max(h.0);
        drop(h);
        BudgetPermit { budget: self.clone(), _permit: permit, bytes }
    }

    /// The budget's size in bytes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// The most bytes held at once so far.
    pub fn peak(&self) -> u64 {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}

impl BudgetPermit {
    /// Bytes this permit holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        let mut h = self.budget.held.lock().unwrap_or_else(|p| p.into_inner());
        h.0 -= self.bytes;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[tokio::test]
    async fn byte_budget_waits_when_spent_and_never_exceeds_its_size() {
        let b = ByteBudget::new(10 << 20);
        let a = b.acquire(6 << 20).await;
        let c = b.acquire(4 << 20).await;
        assert_eq!(b.held(), 10 << 20);
        // Spent: the next acquisition waits until bytes come back.
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.acquire(3 << 20).await.bytes() }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "acquired past the budget");
        drop(a);
        assert_eq!(waiting.await.unwrap(), 3 << 20);
        drop(c);
        assert_eq!(b.held(), 0);
        // Larger than the budget: takes all of it, alone.
        let all = b.acquire(1 << 40).await;
        assert_eq!((all.bytes(), b.held(), b.peak()), (10 << 20, 10 << 20, 10 << 20));
        assert_eq!(default_memory_budget(64), DEFAULT_MEMORY_BUDGET_RANGE.1);
        assert_eq!(default_memory_budget(1), DEFAULT_MEMORY_BUDGET_RANGE.0);
        assert_eq!(default_memory_budget(50), 800 << 20);
    }

    /// An engine over an S3 client of a local address that nothing here sends to.
    pub(crate) fn idle_engine() -> Engine {
        let c = ferry_store::S3Client::builder("http://127.0.0.1:9000")
            .credentials(ferry_store::CredentialsSource::Anonymous)
            .build()
            .unwrap();
        Engine::new(c)
    }

    #[test]
    fn an_expert_sets_the_memory_budget() {
        let e = idle_engine();
        assert_eq!(e.memory_budget().total(), default_memory_budget(e.controller().max()));
        let small = e.with_memory_budget(32 << 20);
        assert_eq!(small.memory_budget().total(), 32 << 20);
        assert!(Arc::ptr_eq(&small.controller(), &e.controller()), "the same endpoint's controller");
        assert!(Arc::ptr_eq(small.store(), e.store()), "the same store");
    }

    #[tokio::test]
    async fn admission_takes_bytes_then_a_place() {
        let controller = Controller::new(ferry_wire::controller::ControllerOptions {
            initial: 1,
            min: 1,
            max: 1,
            ..Default::default()
        });
        let a = Admission { bytes: ByteBudget::new(4 << 20), controller, parts: None, transport: None };
        let t = a.admit(1 << 20).await;
        assert_eq!(a.budget().held(), 1 << 20);
        // The one place is taken: the next admission holds its bytes and waits for room.
        let waiting = tokio::spawn(async move {
            let t2 = a.admit(1 << 20).await;
            t2.bytes.bytes()
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "admitted past the endpoint's limit");
        drop(t);
        assert_eq!(waiting.await.unwrap(), 1 << 20);
    }

    #[tokio::test]
    async fn download_parts_are_shared_by_every_clone_of_the_engine() {
        let plain = idle_engine();
        assert_eq!(plain.admission().download_parts(), None, "no limit across downloads by default");
        let e = plain.with_download_parts(2);
        assert_eq!(e.admission().download_parts(), Some(2));
        assert!(Arc::ptr_eq(&e.memory_budget(), &plain.memory_budget()), "the same memory budget");
        // An expert's memory budget keeps the parts limit, and shares it.
        let small = e.with_memory_budget(32 << 20);
        let (a, b) = (e.admission().admit_part(1024).await, small.admission().admit_part(1024).await);
        let waiting = tokio::spawn({
            let e = e.clone();
            async move { e.admission().admit_part(1024).await.bytes.bytes() }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "a third part in flight past a limit of two");
        // A request that is not a download part does not wait for one.
        drop(plain.admission().admit(1024).await);
        drop(e.admission().admit(1024).await);
        drop(b);
        assert_eq!(waiting.await.unwrap(), 1024);
        drop(a);
    }
}
