//! Fetching: one plain GET into the temp file, or one part of a ranged download, and the
//! checks that make the bytes on disk the object's.
//!
//! ```text
//! single:  GET If-Match ─► chunks gathered into WRITE_BATCH ─► temp file
//!          (ferry-store checks the stored CRC or the MD5 ETag as the body passes)
//! part i:  admission ([engine's parts in flight,] bytes in memory, endpoint's place)
//!          ─► GET Range: bytes=a-b, If-Match: ETag ─► CRC as the bytes pass
//!          ─► PartWriter (writer.rs) at offset a ─► [durable: start writeback]
//!          ─► CRC recorded in the state (state.rs)
//! all parts ─► combine_parts(part CRCs) == the stored FULL_OBJECT CRC?
//!              (none stored: every range was If-Match on one ETag, lengths exact)
//! ```
//!
//! Each part runs as a task of its own (`tokio::spawn`, aborted when the download is
//! dropped, [`Aborting`]): an HTTP/1.1 body reads its socket on the task that polls it
//! (wire's pool.rs), so parts polled as futures of one stream would share one thread for
//! every read and CRC. A part waits for room in the engine's admission, all of whose
//! steps are bounds from above (admission.rs: a place among the parts in flight of all
//! the engine's downloads, when the engine bounds them as `ferry cp` does; the part's
//! bytes in memory; a place under the endpoint's adaptive limit);
//! `DownloadParams::concurrency` caps a file's parts in flight.
//!
//! A part is checked by its length (neither longer nor shorter than planned) and, with
//! the others, by the whole object's CRC, combined from the parts' CRCs without reading
//! the file again ([`combine_parts`]).

use super::plan::part_len;
use super::state::{create_temp, State};
use super::writer::{part_bytes_in_memory, start_writeback, FileWrites, PartWriter, WRITE_BATCH};
use super::{blocking, io, Fetched, ProgressFn, Verified};
use crate::admission::Engine;
use bytes::Bytes;
use ferry_proto::checksum::{base64_decode, base64_encode, crc_combine, gf2_times, ChecksumAlgorithm, Checksummer};
use ferry_store::{Error, GetParams, ObjectInfo, ObjectRef, RangeSpec};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The stored full-object CRC (not a `-N` composite), strongest first.
pub(super) fn full_crc(info: &ObjectInfo) -> Option<(ChecksumAlgorithm, String)> {
    [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32]
        .into_iter()
        .find_map(|a| info.checksums.iter().find(|(b, v)| *b == a && !v.contains('-')).cloned())
}

/// One plain GET, streamed into the temp file (ferry-store verifies the body). The
/// chunks are gathered into batches of up to [`WRITE_BATCH`], and the file is created
/// with the first: a small object costs one trip to the blocking pool for its bytes.
pub(super) async fn single(
    engine: &Engine,
    object: &ObjectRef,
    info: &ObjectInfo,
    tmp: &Path,
    progress: Option<ProgressFn>,
) -> Result<Fetched, Error> {
    let params = GetParams { if_match: info.etag.clone(), ..GetParams::default() };
    let out = engine.get(object, params).await?;
    let verified = match full_crc(&out.meta) {
        Some((a, _)) => Verified::Checksum(a),
        None if out.meta.etag.as_deref().is_some_and(|e| {
            let b = e.trim_matches('"');
            b.len() == 32 && b.bytes().all(|c| c.is_ascii_hexdigit())
        }) =>
        {
            Verified::Md5Etag
        }
        None => Verified::LengthAndEtag,
    };
    let mut body = out.body;
    let mut n = 0u64;
    let mut file: Option<Arc<std::fs::File>> = None;
    let mut left_over = false;
    let mut pending: Vec<Bytes> = Vec::new();
    let mut pending_len = 0usize;
    loop {
        let chunk = body.chunk().await;
        let ended = chunk.is_none();
        if let Some(chunk) = chunk {
            let chunk = chunk?;
            let len = chunk.len();
            n += len as u64;
            pending_len += len;
            pending.push(chunk);
            if let Some(p) = &progress {
                p(len as u64);
            }
        }
        if ended || pending_len >= WRITE_BATCH {
            let (data, open, t) = (std::mem::take(&mut pending), file.clone(), tmp.to_path_buf());
            let (f, existed) = blocking(tmp, move || {
                let (f, existed) = match open {
                    Some(f) => (f, false),
                    None => create_temp(&t).map(|(f, e)| (Arc::new(f), e))?,
                };
                for d in &data {
                    (&*f).write_all(d)?;
                }
                Ok((f, existed))
            })
            .await?;
            file = Some(f);
            left_over |= existed;
            pending_len = 0;
        }
        if ended {
            break;
        }
    }
    if n != info.size {
        return Err(Error::Integrity {
            message: format!("{object}: got {n} bytes, HEAD said {}", info.size),
            request_id: None,
        });
    }
    let file = file.expect("the last batch creates the file");
    Ok(Fetched { verified, resumed: 0, fetched: n, file, state_may_exist: left_over })
}

/// What every part of one ranged download shares.
pub(super) struct PartCtx {
    pub(super) engine: Engine,
    pub(super) object: ObjectRef,
    pub(super) tmp: PathBuf,
    pub(super) writes: FileWrites,
    pub(super) state: Arc<Mutex<State>>,
    pub(super) progress: Option<ProgressFn>,
    pub(super) etag: String,
    pub(super) algo: ChecksumAlgorithm,
    pub(super) part_size: u64,
    pub(super) size: u64,
    pub(super) durable: bool,
}

/// A spawned task aborted when dropped (the download it belongs to failed or was dropped).
pub(super) struct Aborting(pub(super) tokio::task::JoinHandle<Result<(), Error>>);

impl Aborting {
    pub(super) async fn join(mut self, path: &Path) -> Result<(), Error> {
        match (&mut self.0).await {
            Ok(r) => r,
            // A panic in the part is re-raised here, as it would have been when the
            // part ran inside this task; a cancel only comes from our own drop.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(io(path, std::io::Error::other(e))),
        }
    }
}

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Fetches part `i` into the temp file and records its CRC (module note).
pub(super) async fn fetch_part(ctx: Arc<PartCtx>, i: u64) -> Result<(), Error> {
    let PartCtx { engine, object, writes, state, progress, algo, part_size, .. } = &*ctx;
    let (algo, part_size) = (*algo, *part_size);
    let tmp = ctx.tmp.as_path();
    // Admission (admission.rs): a place among the engine's download parts in flight, the
    // part's bytes in memory (`part_bytes_in_memory`), then a place under the endpoint's
    // limit; `concurrency` only caps it from above.
    let _ticket = engine.admission().admit_part(part_bytes_in_memory(part_len(i, part_size, ctx.size))).await;
    let start = i * part_size;
    let len = part_len(i, part_size, ctx.size);
    let params =
        GetParams { if_match: Some(ctx.etag.clone()), ..GetParams::range(RangeSpec::FromTo(start, start + len - 1)) };
    let out = engine.get(object, params).await?;
    let mut body = out.body;
    let mut hasher = Checksummer::new(algo);
    let mut writer = PartWriter::new(writes, tmp, start);
    let mut ended = false;
    while !ended {
        match body.chunk().await {
            Some(chunk) => {
                let chunk = chunk?;
                if writer.received_to() + chunk.len() as u64 > start + len {
                    return Err(Error::Integrity {
                        message: format!("{object}: part {i} is longer than {len} bytes"),
                        request_id: None,
                    });
                }
                hasher.update(&chunk);
                if let Some(p) = progress {
                    p(chunk.len() as u64);
                }
                writer.push(chunk);
            }
            None => ended = true,
        }
        writer.write(ended).await?;
    }
    let off = writer.finish().await?;
    if off != start + len {
        return Err(Error::Integrity {
            message: format!("{object}: part {i} ended after {} of {len} bytes", off - start),
            request_id: None,
        });
    }
    // Start writing the part back now, without waiting, so the fsync before
    // the rename finds little left to do (writer.rs).
    if ctx.durable {
        let f = writes.file.clone();
        blocking(tmp, move || start_writeback(&f, start, len)).await?;
    }
    let sum = base64_encode(&hasher.finish());
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.done.insert(i, sum);
    Ok(())
}

/// Checks the parts recorded in `st` against the object's stored CRC `crc` (if any): the
/// CRC combined from the parts' must be the stored one. On a mismatch the state file is
/// removed, so that a re-run never keeps bytes that are not the object's.
pub(super) fn verify_parts(
    object: &ObjectRef,
    crc: Option<(ChecksumAlgorithm, String)>,
    st: &State,
    parts: u64,
    state_path: &Path,
) -> Result<Verified, Error> {
    let (part_size, size) = (st.part_size, st.size);
    match crc {
        Some((algo, want)) => {
            let mut sums = Vec::with_capacity(parts as usize);
            for i in 0..parts {
                let raw = st.done.get(&i).and_then(|s| base64_decode(s)).ok_or_else(|| Error::Integrity {
                    message: format!("{object}: no checksum recorded for part {i}"),
                    request_id: None,
                })?;
                sums.push(raw);
            }
            let whole = combine_parts(algo, &sums, part_size, size);
            let got = whole.map(|w| base64_encode(&w)).unwrap_or_default();
            if got != want {
                // The bytes on disk are not the object: never keep them for a resume.
                let _ = std::fs::remove_file(state_path);
                return Err(Error::Integrity {
                    message: format!("{object}: {algo} of the parts is {got}, the object's is {want}"),
                    request_id: None,
                });
            }
            Ok(Verified::Checksum(algo))
        }
        None => Ok(Verified::LengthAndEtag),
    }
}

/// The whole object's CRC from its parts' CRCs (`sums[i]` of part `i`), `None` if one
/// does not fit the algorithm. `crc_combine` costs O(W^2 log n) per call (a GF(2) matrix
/// squared per doubling of the length), which over 4 x 128 parts was 2.3% of a 4 x 1 GiB
/// download's CPU (`perf`); but appending `len` zero bytes is one linear map, the same
/// for every full part, so it is built once per (algorithm, part size) from `crc_combine`
/// of the W unit vectors, and each part then costs one W x W product.
pub(super) fn combine_parts(algo: ChecksumAlgorithm, sums: &[Vec<u8>], part_size: u64, size: u64) -> Option<Vec<u8>> {
    /// (algorithm, part size, the columns of its "append part size zeros" map).
    type Shift = (ChecksumAlgorithm, u64, Arc<Vec<u64>>);
    static SHIFTS: Mutex<Vec<Shift>> = Mutex::new(Vec::new());
    let width = sums.first()?.len();
    if width == 0 || width > 8 || sums.iter().any(|s| s.len() != width) {
        return None;
    }
    let read = |b: &[u8]| b.iter().fold(0u64, |acc, x| (acc << 8) | *x as u64);
    let write = |v: u64| v.to_be_bytes()[8 - width..].to_vec();
    let shift = {
        let mut cache = SHIFTS.lock().unwrap_or_else(|p| p.into_inner());
        match cache.iter().find(|(a, n, _)| *a == algo && *n == part_size) {
            Some((_, _, m)) => m.clone(),
            None => {
                let zero = vec![0u8; width];
                let mut cols = Vec::with_capacity(width * 8);
                for bit in 0..width * 8 {
                    cols.push(read(&crc_combine(algo, &write(1u64 << bit), &zero, part_size)?));
                }
                let m = Arc::new(cols);
                cache.push((algo, part_size, m.clone()));
                m
            }
        }
    };
    let mut whole = read(&sums[0]);
    for (i, s) in sums.iter().enumerate().skip(1) {
        let len = part_len(i as u64, part_size, size);
        whole = if len == part_size {
            gf2_times(&shift, whole) ^ read(s)
        } else {
            read(&crc_combine(algo, &write(whole), s, len)?)
        };
    }
    Some(write(whole))
}

#[cfg(test)]
mod tests {
    use super::super::tests::noise;
    use super::*;

    #[test]
    fn combined_parts_are_the_crc_of_the_whole() {
        let data = noise(10_000, 0x9E37_79B9_7F4A_7C15);
        for algo in [ChecksumAlgorithm::Crc64Nvme, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc32] {
            for (size, ps) in [(10_000u64, 1000u64), (10_000, 999), (10_000, 10_000), (7, 3), (1, 1)] {
                let sums: Vec<Vec<u8>> = (0..size.div_ceil(ps))
                    .map(|i| algo.digest(&data[(i * ps) as usize..(i * ps + part_len(i, ps, size)) as usize]))
                    .collect();
                assert_eq!(
                    combine_parts(algo, &sums, ps, size),
                    Some(algo.digest(&data[..size as usize])),
                    "{algo} {size} {ps}"
                );
            }
        }
    }
}
