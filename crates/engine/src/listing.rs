//! Listing planner: fewer LIST calls, and LIST calls in parallel, with entries always
//! delivered in key order and memory bounded however many keys there are.
//!
//! Three ways to list, all returning a [`Listing`] (a stream of [`ObjectEntry`], with
//! request counters):
//!
//! - [`list_per_directory`]: the naive baseline (Hive and Presto did this; Qubole
//!   measured 17,520 calls for a table of 17,520 partitions): one ListObjectsV2 with
//!   delimiter `/` per directory of interest.
//! - [`list_flat_pruned`]: one flat (recursive, no delimiter) listing of the parent
//!   prefix, merge-joined in key order against the sorted directories of interest
//!   (partition pruning). 1,000 keys per call instead of one directory per call: the
//!   17,520 x 6 layout takes 106 calls. Both sides are in byte order (S3 lists keys in
//!   UTF-8 byte order, which Rust's `str` ordering is), so one forward pass decides
//!   every key; the listing starts just before the first directory of interest and
//!   stops as soon as the last one is passed.
//! - [`list_parallel`]: one flat prefix split into key ranges listed concurrently.
//!
//! ## Key-range parallel listing
//!
//! S3 cannot tell how many keys a prefix holds or where they lie, so ranges are found
//! from the keys themselves, by recursive splitting (the idea behind `s3p`'s bisection,
//! with boundaries guessed per character position instead of string midpoints):
//!
//! ```text
//! range (lo, hi] ── LIST start-after=lo ──► page of keys (send it on)
//!        │ truncated, and fewer than min(max_ranges, full pages so far) ranges alive?
//!        ├─ no ─► next page (continuation token), same range
//!        └─ yes ─► boundaries b1 < .. < bk between the page's last key L and hi:
//!                  children (L,b1] (b1,b2] .. (bk,hi], each a range like this one,
//!                  spawned at once; the parent sends Child(rx) markers in order, ends
//! ```
//!
//! Boundaries come from the last key `L` of the page: at the position where the page's
//! keys vary (first vs last key), one boundary per character of the observed character
//! class above `L`'s (`part=00166` varies at the hundreds digit: `part=002`, `part=003`,
//! ...); at the shallower positions, which the page did not see vary, digits get one
//! boundary per greater digit (numbered partitions, dates) and other characters one
//! boundary, the next character (everything above at that position). Shallow boundaries
//! are kept first when there are more than the room left, since their ranges are the
//! coarse ones and split again themselves. A wrong guess costs an empty range (one LIST
//! call) or a range that splits again; it never costs correctness, because ranges
//! partition the key space exactly: `(lo, hi]` is `start-after = lo` and stop after `hi`.
//!
//! **Splitting follows the evidence.** Every range costs at least one LIST, and a
//! guessed boundary may make an empty range, so splitting a listing that turns out to be
//! small costs more calls than the flat walk it was meant to beat. Ranges alive are
//! therefore capped by the full (truncated) pages seen so far, over all ranges, as TCP's
//! slow start caps a window by the acknowledgements seen: the first two pages are the
//! flat walk's own (a listing of up to three pages costs exactly the flat walk's calls),
//! the third full page allows a first split in two, and since every range alive adds
//! its full pages, the cap doubles about every round until `max_ranges`. The calls spent
//! on guesses (empty or short ranges) thus grow with the pages already listed instead of
//! ahead of them, while a large listing still reaches `max_ranges` ranges within a few
//! round trips
//! (`parallel_listing_costs_no_more_lists_than_the_flat_walk_when_small` in
//! tests/sched_listing.rs counts the calls).
//!
//! Order and memory: each range writes into its own channel of `buffer_pages` pages; the
//! consumer reads channels depth-first (a Child marker means "read that range to its end
//! first"), so entries come out in key order. Every range holds one of `max_ranges`
//! places until the consumer has drained it (or at once if it ended without a key: the
//! guessed boundaries make empty ranges, often at the end of the key order); a range
//! splits only into places it claims atomically, so at most
//! `max_ranges x (buffer_pages + 1)` pages are held at once, for any number of keys.
//! LIST calls in flight are capped by `concurrency`.
//!
//! `cargo run --release -p ferry-engine --example sched_figures -- listing-full` and
//! `ferry bench listing` compare the three (docs/lab/engine-listing.md has the figures).

use crate::admission::Engine;
use ferry_store::{Error, ListParams, ObjectEntry};
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{mpsc, Semaphore};

/// Options of the listing functions.
#[derive(Clone, Debug)]
pub struct ListOptions {
    /// Keys per LIST call (S3's maximum and default, 1,000).
    pub page_size: u32,
    /// LIST calls in flight: directories at once for [`list_per_directory`], ranges
    /// listing at once for [`list_parallel`]. 16: S3 serves thousands of LISTs per
    /// second per prefix, and 16 x 1,000 keys per 60 ms round trip (the `s3`
    /// profile of `ferry serve`) is ~250,000 keys/s, more than one consumer usually parses
    /// (docs/lab/engine-listing.md; `ferry bench listing --quick` re-measures).
    pub concurrency: usize,
    /// [`list_parallel`]: most key ranges undrained at once (module note).
    pub max_ranges: usize,
    /// [`list_parallel`]: pages each range may hold ahead of the consumer.
    pub buffer_pages: usize,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions { page_size: 1000, concurrency: 16, max_ranges: 64, buffer_pages: 1 }
    }
}

/// Counters of a listing, readable while it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListStats {
    /// ListObjectsV2 calls answered (one page each; the client's retries not counted).
    pub requests: u64,
    /// Keys received from the server (before pruning).
    pub keys_seen: u64,
    /// Keys delivered to the caller.
    pub keys_returned: u64,
    /// Key ranges listed ([`list_parallel`]; 1 for the others).
    pub ranges: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    keys_seen: AtomicU64,
    keys_returned: AtomicU64,
    ranges: AtomicU64,
}

/// Entries of a listing in key order, as a stream; [`Listing::stats`] counts requests.
pub struct Listing {
    entries: BoxStream<'static, Result<ObjectEntry, Error>>,
    counters: Arc<Counters>,
}

impl Listing {
    fn new(entries: BoxStream<'static, Result<ObjectEntry, Error>>, counters: Arc<Counters>) -> Listing {
        let c = counters.clone();
        let entries = entries
            .inspect(move |e| {
                if e.is_ok() {
                    c.keys_returned.fetch_add(1, Relaxed);
                }
            })
            .boxed();
        Listing { entries, counters }
    }

    /// The counters so far.
    pub fn stats(&self) -> ListStats {
        let c = &self.counters;
        ListStats {
            requests: c.requests.load(Relaxed),
            keys_seen: c.keys_seen.load(Relaxed),
            keys_returned: c.keys_returned.load(Relaxed),
            ranges: c.ranges.load(Relaxed),
        }
    }

    /// Every entry (for listings that fit in memory) and the final counters.
    pub async fn collect_all(mut self) -> Result<(Vec<ObjectEntry>, ListStats), Error> {
        let mut out = Vec::new();
        while let Some(e) = self.entries.next().await {
            out.push(e?);
        }
        Ok((out, self.stats()))
    }
}

impl Stream for Listing {
    type Item = Result<ObjectEntry, Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.entries.poll_next_unpin(cx)
    }
}

/// The directory of a key: up to and including its last `/` (`""` at the root).
pub fn dir_of(key: &str) -> &str {
    match key.rfind('/') {
        Some(i) => &key[..=i],
        None => "",
    }
}

/// Directories sorted, deduplicated, each ending with `/` (except the root `""`).
fn normalise_dirs(dirs: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut d: Vec<String> =
        dirs.into_iter().map(|d| if d.is_empty() || d.ends_with('/') { d } else { d + "/" }).collect();
    d.sort_unstable();
    d.dedup();
    d
}

/// The naive baseline: one ListObjectsV2 (delimiter `/`) per directory, `concurrency`
/// directories at once; yields the objects directly in each directory, directory by
/// directory (directories sorted, keys sorted within each; nested directories such as
/// `a/` and `a//` therefore do not interleave in global key order).
///
/// ```no_run
/// # async fn example(engine: &ferry_engine::Engine) -> Result<(), ferry_store::Error> {
/// use ferry_engine::listing::{list_per_directory, ListOptions};
/// let dirs = vec!["table/part=00001/".to_string(), "table/part=00002/".to_string()];
/// let (entries, stats) = list_per_directory(engine, "bucket", dirs, &ListOptions::default()).collect_all().await?;
/// println!("{} keys in {} calls", entries.len(), stats.requests);
/// # Ok(()) }
/// ```
pub fn list_per_directory(
    engine: &Engine,
    bucket: &str,
    dirs: impl IntoIterator<Item = String>,
    opts: &ListOptions,
) -> Listing {
    let counters = Arc::new(Counters::default());
    counters.ranges.store(1, Relaxed);
    let (engine, bucket, page_size) = (engine.clone(), bucket.to_owned(), opts.page_size);
    let c = counters.clone();
    // `concurrency` LISTs in flight, over a window 4x wider so that one slow directory
    // does not stall the others while its results are awaited in order.
    let concurrency = opts.concurrency.max(1);
    let permits = Arc::new(Semaphore::new(concurrency));
    let per_dir = stream::iter(normalise_dirs(dirs))
        .map(move |dir| {
            let (engine, bucket, c, permits) = (engine.clone(), bucket.clone(), c.clone(), permits.clone());
            async move {
                let _permit = permits.acquire_owned().await.map_err(|e| Error::Config(e.to_string()))?;
                let params = ListParams {
                    prefix: Some(dir),
                    delimiter: Some("/".into()),
                    max_keys: Some(page_size),
                    ..ListParams::default()
                };
                let mut pages = engine.list(&bucket, params);
                let mut entries = Vec::new();
                while let Some(p) = pages.next().await {
                    let p = p?;
                    c.requests.fetch_add(1, Relaxed);
                    c.keys_seen.fetch_add(p.objects.len() as u64, Relaxed);
                    entries.extend(p.objects);
                }
                Ok::<_, Error>(entries)
            }
        })
        .buffered(4 * concurrency)
        .flat_map(|r: Result<Vec<ObjectEntry>, Error>| match r {
            Ok(v) => stream::iter(v.into_iter().map(Ok).collect::<Vec<_>>()).boxed(),
            Err(e) => stream::iter(vec![Err(e)]).boxed(),
        });
    Listing::new(per_dir.boxed(), counters)
}

/// One flat listing of `parent_prefix`, merge-joined against `dirs_of_interest`: yields
/// the objects whose directory ([`dir_of`]) is one of them, in key order, holding one
/// page at a time. Directories without a trailing `/` get one.
///
/// ```no_run
/// # async fn example(engine: &ferry_engine::Engine) -> Result<(), ferry_store::Error> {
/// use ferry_engine::listing::{list_flat_pruned, ListOptions};
/// let dirs = (0..17_520).step_by(10).map(|d| format!("table/part={d:05}/"));
/// let listing = list_flat_pruned(engine, "bucket", "table/", dirs, &ListOptions::default());
/// let (entries, stats) = listing.collect_all().await?;
/// println!("{} keys in {} calls", entries.len(), stats.requests);
/// # Ok(()) }
/// ```
pub fn list_flat_pruned(
    engine: &Engine,
    bucket: &str,
    parent_prefix: &str,
    dirs_of_interest: impl IntoIterator<Item = String>,
    opts: &ListOptions,
) -> Listing {
    let counters = Arc::new(Counters::default());
    counters.ranges.store(1, Relaxed);
    let parent = parent_prefix.to_owned();
    // Only directories that keys under the parent can have.
    let dirs: Vec<String> = normalise_dirs(dirs_of_interest)
        .into_iter()
        .filter(|d| d.starts_with(&parent) || parent.starts_with(d.as_str()))
        .collect();
    // Keys in the first directory are >= it, so listing may start just below it.
    let start_after = dirs.first().filter(|d| d.len() > parent.len()).map(|d| {
        let mut s = d.clone();
        s.pop();
        s
    });
    let params =
        ListParams { prefix: Some(parent), start_after, max_keys: Some(opts.page_size), ..ListParams::default() };
    struct St {
        pages: Option<BoxStream<'static, Result<ferry_store::ListPage, Error>>>,
        pruner: Pruner,
        counters: Arc<Counters>,
    }
    let pages = (!dirs.is_empty()).then(|| engine.list(bucket, params));
    let st = St { pages, pruner: Pruner::new(dirs), counters: counters.clone() };
    let s = stream::unfold(st, |mut st| async move {
        let pages = st.pages.as_mut()?;
        let page = match pages.next().await? {
            Ok(p) => p,
            Err(e) => {
                st.pages = None;
                return Some((vec![Err(e)], st));
            }
        };
        st.counters.requests.fetch_add(1, Relaxed);
        st.counters.keys_seen.fetch_add(page.objects.len() as u64, Relaxed);
        let mut keep = Vec::new();
        for o in page.objects {
            match st.pruner.judge(&o.key) {
                Verdict::Keep => keep.push(Ok(o)),
                Verdict::Skip => {}
                Verdict::Done => {
                    st.pages = None; // every directory is behind us: stop listing
                    break;
                }
            }
        }
        Some((keep, st))
    })
    .flat_map(stream::iter);
    Listing::new(s.boxed(), counters)
}

/// The merge join of [`list_flat_pruned`]: keys in ascending order against sorted
/// directories.
struct Pruner {
    dirs: Vec<String>,
    /// Directories before this index can match no later key.
    next: usize,
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Keep,
    Skip,
    /// No later key can match.
    Done,
}

impl Pruner {
    fn new(dirs: Vec<String>) -> Pruner {
        Pruner { dirs, next: 0 }
    }

    /// Whether `key` (greater than every key judged before) lies directly in one of
    /// the directories.
    fn judge(&mut self, key: &str) -> Verdict {
        let d = &self.dirs;
        // A directory below the key that is not a prefix of it is below every later
        // key too: keys with a given prefix form one contiguous run in key order.
        while self.next < d.len() && d[self.next].as_str() < key && !key.starts_with(d[self.next].as_str()) {
            self.next += 1;
        }
        if self.next == d.len() {
            return Verdict::Done;
        }
        // The key's own directory is a prefix of it, so it is at or after `next`.
        if d[self.next..].binary_search_by(|x| x.as_str().cmp(dir_of(key))).is_ok() {
            Verdict::Keep
        } else {
            Verdict::Skip
        }
    }
}

/// Lists every key under `prefix` with key ranges listed concurrently (module note);
/// yields them in key order, exactly as one plain listing would.
///
/// ```no_run
/// # async fn example(engine: &ferry_engine::Engine) -> Result<(), ferry_store::Error> {
/// use ferry_engine::listing::{list_parallel, ListOptions};
/// use futures_util::StreamExt;
/// let mut listing = list_parallel(engine, "bucket", "table/", &ListOptions::default());
/// while let Some(entry) = listing.next().await {
///     let entry = entry?;
///     println!("{} {}", entry.key, entry.size);
/// }
/// println!("{:?}", listing.stats());
/// # Ok(()) }
/// ```
pub fn list_parallel(engine: &Engine, bucket: &str, prefix: &str, opts: &ListOptions) -> Listing {
    let counters = Arc::new(Counters::default());
    let shared = Arc::new(Shared {
        engine: engine.clone(),
        bucket: bucket.to_owned(),
        prefix: prefix.to_owned(),
        page_size: opts.page_size,
        max_ranges: opts.max_ranges.max(1),
        buffer_pages: opts.buffer_pages.max(1),
        requests: Semaphore::new(opts.concurrency.max(1)),
        live: AtomicUsize::new(0),
        full_pages: AtomicUsize::new(0),
        counters: counters.clone(),
    });
    struct St {
        shared: Arc<Shared>,
        /// Channels being read, the current one last; `None` before the first poll.
        stack: Option<Vec<(mpsc::Receiver<Msg>, Place)>>,
    }
    let st = St { shared, stack: None };
    let s = stream::unfold(st, |mut st| async move {
        // Started on the first poll, so that tasks are spawned inside the caller's runtime.
        let stack = st.stack.get_or_insert_with(|| vec![spawn_range(&st.shared, None, None)]);
        loop {
            let (top, _) = stack.last_mut()?;
            match top.recv().await {
                Some(Msg::Page(entries)) => return Some((entries.into_iter().map(Ok).collect::<Vec<_>>(), st)),
                Some(Msg::Child(rx, place)) => stack.push((rx, place)),
                Some(Msg::Failed(e)) => {
                    stack.clear();
                    return Some((vec![Err(e)], st));
                }
                None => {
                    if let Some((_, place)) = stack.pop() {
                        place.release(&st.shared.live);
                    }
                }
            }
        }
    })
    .flat_map(stream::iter);
    Listing::new(s.boxed(), counters)
}

enum Msg {
    Page(Vec<ObjectEntry>),
    /// Read this range to its end before the next message.
    Child(mpsc::Receiver<Msg>, Place),
    Failed(Error),
}

struct Shared {
    engine: Engine,
    bucket: String,
    prefix: String,
    page_size: u32,
    max_ranges: usize,
    buffer_pages: usize,
    /// `ListOptions::concurrency`: a cap; the endpoint's controller decides below it.
    requests: Semaphore,
    /// Channels not yet drained by the consumer.
    live: AtomicUsize,
    /// Pages answered as truncated (more keys follow), over all ranges: the evidence
    /// that bounds how many ranges may be alive (module note).
    full_pages: AtomicUsize,
    counters: Arc<Counters>,
}

/// Starts listing the keys in `(lo, hi]` (`None`: unbounded).
fn spawn_range(shared: &Arc<Shared>, lo: Option<String>, hi: Option<String>) -> (mpsc::Receiver<Msg>, Place) {
    shared.live.fetch_add(1, Relaxed);
    spawn_claimed(shared, lo, hi)
}

/// [`spawn_range`] for a range whose place in `live` is already counted.
fn spawn_claimed(shared: &Arc<Shared>, lo: Option<String>, hi: Option<String>) -> (mpsc::Receiver<Msg>, Place) {
    let (tx, rx) = mpsc::channel(shared.buffer_pages);
    shared.counters.ranges.fetch_add(1, Relaxed);
    let place = Place(Arc::new(AtomicBool::new(true)));
    let (shared, task_place) = (shared.clone(), place.clone());
    tokio::spawn(async move {
        // A range that ends without sending a page holds nothing: its place is free at
        // once, not only when the consumer reaches it (guessed boundaries make empty
        // ranges, often at the end of the key order).
        if !list_range(&shared, lo, hi, tx).await {
            task_place.release(&shared.live);
        }
    });
    (rx, place)
}

/// A range's place among the `max_ranges`, given back once: when the consumer has
/// drained the range, or when the range ends without sending a page.
#[derive(Clone)]
struct Place(Arc<AtomicBool>);

impl Place {
    fn release(&self, live: &AtomicUsize) {
        if self.0.swap(false, Relaxed) {
            live.fetch_sub(1, Relaxed);
        }
    }
}

/// Lists `(lo, hi]`; returns whether it sent any page.
async fn list_range(shared: &Arc<Shared>, lo: Option<String>, hi: Option<String>, tx: mpsc::Sender<Msg>) -> bool {
    let params = ListParams {
        prefix: Some(shared.prefix.clone()),
        start_after: lo,
        max_keys: Some(shared.page_size),
        ..ListParams::default()
    };
    let mut pages = shared.engine.list(&shared.bucket, params);
    let mut sent = false;
    loop {
        let page = {
            let Ok(_permit) = shared.requests.acquire().await else { return sent };
            // And room under the endpoint's adaptive limit (admission.rs).
            let _room = shared.engine.admission().room().await;
            pages.next().await
        };
        let page = match page {
            None => return sent,
            Some(Err(e)) => {
                let _ = tx.send(Msg::Failed(e)).await;
                return true;
            }
            Some(Ok(p)) => p,
        };
        shared.counters.requests.fetch_add(1, Relaxed);
        shared.counters.keys_seen.fetch_add(page.objects.len() as u64, Relaxed);
        let mut more = page.next_continuation_token.is_some();
        if more {
            shared.full_pages.fetch_add(1, Relaxed);
        }
        let mut objects = page.objects;
        if let Some(hi) = &hi {
            if let Some(end) = objects.iter().position(|o| o.key.as_str() > hi.as_str()) {
                objects.truncate(end);
                more = false;
            }
        }
        let first_last = objects.first().zip(objects.last()).map(|(f, l)| (f.key.clone(), l.key.clone()));
        // Claim all the room left for children at once (so that ranges splitting at the
        // same time cannot overshoot max_ranges together), then give back what is unused.
        let mut claimed = 0;
        let bounds = match (&first_last, more) {
            (Some((first, last)), true) => {
                // Ranges alive at most: one per full page seen so far (module note,
                // "Splitting follows the evidence").
                let max = shared.max_ranges.min(shared.full_pages.load(Relaxed));
                claimed = shared
                    .live
                    .fetch_update(Relaxed, Relaxed, |l| (l + 2 <= max).then_some(max))
                    .map_or(0, |l| max - l);
                let bounds = if claimed >= 2 {
                    boundaries(&shared.prefix, &objects, first, last, hi.as_deref(), claimed - 1)
                } else {
                    Vec::new()
                };
                let used = if bounds.is_empty() { 0 } else { bounds.len() + 1 };
                shared.live.fetch_sub(claimed - used, Relaxed);
                claimed = used;
                bounds
            }
            _ => Vec::new(),
        };
        if !objects.is_empty() {
            if tx.send(Msg::Page(objects)).await.is_err() {
                shared.live.fetch_sub(claimed, Relaxed);
                return true; // the consumer is gone
            }
            sent = true;
        }
        if !more {
            return sent;
        }
        if let (false, Some((_, last))) = (bounds.is_empty(), first_last) {
            // Hand the rest of (last, hi] to children (their room is claimed) and end.
            let mut lo = last;
            let mut children = Vec::with_capacity(bounds.len() + 1);
            for b in bounds {
                children.push(spawn_claimed(shared, Some(lo), Some(b.clone())));
                lo = b;
            }
            children.push(spawn_claimed(shared, Some(lo), hi.clone()));
            for (rx, place) in children {
                if tx.send(Msg::Child(rx, place)).await.is_err() {
                    return true;
                }
            }
            return true;
        }
    }
}

/// Split points strictly between `last` and `hi`, at most `max` (module note). `page`
/// holds the keys just listed, `first..=last`.
fn boundaries(
    prefix: &str,
    page: &[ObjectEntry],
    first: &str,
    last: &str,
    hi: Option<&str>,
    max: usize,
) -> Vec<String> {
    let last_c: Vec<char> = last.chars().collect();
    let p0 = prefix.chars().count();
    let common = |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    // Positions shallower than where `last` and `hi` part are fixed inside this range.
    let base = hi.map(|h| common(last, h)).unwrap_or(0).max(p0);
    // Where the page's keys vary.
    let varying = common(first, last).min(last_c.len().saturating_sub(1));
    let mut out: Vec<String> = Vec::new();
    let push = |out: &mut Vec<String>, q: usize, c: char| {
        let mut s: String = last_c[..q].iter().collect();
        s.push(c);
        if s.as_str() > last && !matches!(hi, Some(h) if s.as_str() >= h) && out.len() < max {
            out.push(s);
        }
    };
    for q in base..=varying {
        if q >= last_c.len() {
            break;
        }
        let at = last_c[q];
        if q == varying {
            // The characters this page shows at the varying position, widened to their class.
            let mut seen: Vec<char> = page.iter().filter_map(|o| o.key.chars().nth(q)).collect();
            seen.sort_unstable();
            seen.dedup();
            for c in widen(&seen) {
                if c > at {
                    push(&mut out, q, c);
                }
            }
        } else if at.is_ascii_digit() {
            for c in (at as u8 + 1)..=b'9' {
                push(&mut out, q, c as char);
            }
        } else if let Some(next) = next_char(at) {
            push(&mut out, q, next);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The characters seen, plus the rest of each ASCII class they belong to (digits,
/// lower case, upper case).
fn widen(seen: &[char]) -> Vec<char> {
    let mut out: Vec<char> = seen.to_vec();
    let classes: [fn(&char) -> bool; 3] = [char::is_ascii_digit, char::is_ascii_lowercase, char::is_ascii_uppercase];
    let ranges = [('0', '9'), ('a', 'z'), ('A', 'Z')];
    for (is, (a, z)) in classes.iter().zip(ranges) {
        if seen.iter().any(is) {
            out.extend(a..=z);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The next Unicode scalar value.
fn next_char(c: char) -> Option<char> {
    match c {
        '\u{D7FF}' => Some('\u{E000}'),
        char::MAX => None,
        c => char::from_u32(c as u32 + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::SystemTime;

    fn entry(k: &str) -> ObjectEntry {
        ObjectEntry {
            key: k.into(),
            last_modified: SystemTime::UNIX_EPOCH,
            etag: String::new(),
            size: 0,
            storage_class: String::new(),
            checksum_algorithm: None,
        }
    }

    #[test]
    fn boundaries_follow_numbered_partitions() {
        let page: Vec<ObjectEntry> = (0..167).map(|d| entry(&format!("listing/part={d:05}/file-0.parquet"))).collect();
        let (first, last) = (&page[0].key, &page[166].key);
        let b = boundaries("listing/", &page, first, last, None, 100);
        for want in [
            "listing/part=002",
            "listing/part=009",
            "listing/part=01",
            "listing/part=09",
            "listing/part=1",
            "listing/q",
        ] {
            assert!(b.contains(&want.to_string()), "{want} missing from {b:?}");
        }
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(b.iter().all(|s| s.as_str() > last.as_str() && s.starts_with("listing/")));
        // Capped, and never at or past the upper bound.
        let b = boundaries("listing/", &page, first, last, Some("listing/part=01"), 3);
        assert_eq!(b.len(), 3);
        assert!(b.iter().all(|s| s.as_str() < "listing/part=01"), "{b:?}");
    }

    proptest! {
        /// The merge join keeps exactly the keys a brute-force filter keeps, and stops
        /// only when no later key could be kept.
        #[test]
        fn pruning_equals_brute_force(
            keys in prop::collection::btree_set("[ab/é]{0,6}", 0..60),
            dirs in prop::collection::vec("[ab/é]{0,4}", 0..8),
        ) {
            let dirs = normalise_dirs(dirs);
            let mut pruner = Pruner::new(dirs.clone());
            let mut kept = Vec::new();
            let mut stopped_at = None;
            for (i, k) in keys.iter().enumerate() {
                match pruner.judge(k) {
                    Verdict::Keep => kept.push(k.clone()),
                    Verdict::Skip => {}
                    Verdict::Done => {
                        stopped_at = Some(i);
                        break;
                    }
                }
            }
            let brute: Vec<String> = keys.iter().filter(|k| dirs.iter().any(|d| d == dir_of(k))).cloned().collect();
            prop_assert_eq!(&kept, &brute);
            if let Some(i) = stopped_at {
                prop_assert!(keys.iter().skip(i).all(|k| !dirs.iter().any(|d| d == dir_of(k))));
            }
        }

        /// Split points are sorted, unique, strictly between the page's last key and
        /// the range's upper bound, and under the prefix: the child ranges partition
        /// the rest of the range exactly.
        #[test]
        fn boundaries_partition_the_rest(
            mut page in prop::collection::btree_set("p/[a-c0-9é/]{1,6}", 1..30).prop_map(|s| s.into_iter().collect::<Vec<_>>()),
            hi in prop::option::of("p/[a-c0-9é/~]{1,6}"),
            max in 1usize..40,
        ) {
            if let Some(h) = &hi {
                page.retain(|k| k.as_str() <= h.as_str());
            }
            prop_assume!(!page.is_empty());
            let entries: Vec<ObjectEntry> = page.iter().map(|k| entry(k)).collect();
            let (first, last) = (&page[0], &page[page.len() - 1]);
            let b = boundaries("p/", &entries, first, last, hi.as_deref(), max);
            prop_assert!(b.len() <= max);
            prop_assert!(b.windows(2).all(|w| w[0] < w[1]));
            for s in &b {
                prop_assert!(s.as_str() > last.as_str() && s.starts_with("p/"));
                if let Some(h) = &hi {
                    prop_assert!(s.as_str() < h.as_str());
                }
            }
        }
    }

    #[test]
    fn next_char_skips_surrogates() {
        assert_eq!(next_char('a'), Some('b'));
        assert_eq!(next_char('\u{D7FF}'), Some('\u{E000}'));
        assert_eq!(next_char(char::MAX), None);
        assert_eq!(dir_of("a/b/c"), "a/b/");
        assert_eq!(dir_of("c"), "");
        assert_eq!(
            normalise_dirs(vec!["b".into(), "a/".into(), "b/".into()]),
            vec!["a/".to_string(), "b/".to_string()]
        );
    }
}
