//! The files a download keeps beside its target, and what lets a re-run resume.
//!
//! ```text
//! dir/NAME                   the target: appears only complete and verified (rename)
//! dir/.NAME.ferry-part       the temp file the bytes are written into
//! dir/.NAME.ferry-state      JSON: algorithm, ETag, size, part size, part -> CRC
//! dir/.NAME.ferry-state-new  the next state, renamed over the last one
//! ```
//!
//! The state file is rewritten by write-then-rename as parts finish, at most every
//! [`STATE_EVERY`], and once more when a download fails. It holds each finished part's
//! CRC (the object's stored CRC algorithm, else CRC64NVME). A re-run with the same ETag,
//! size, part size and algorithm re-reads each kept part from the temp file and keeps it
//! only if its CRC still matches ([`kept_parts`]), then fetches the rest; another ETag
//! means the object changed, and the download starts over.
//!
//! Reading back instead of an fsync per part: an fsync per part pushes every byte to the
//! disk synchronously and halved large downloads, while the read-back costs only on
//! resume and also catches a temp file damaged between runs (by a crash, say).
//!
//! One invariant lets a finished download skip looking for a state file: a state file is
//! written only while its temp file exists, and is removed before it ([`remove_partial`]).
//! So a single GET that created its temp file fresh ([`create_temp`]) knows there is no
//! state to remove.

use super::plan::{part_count, part_len};
use super::{blocking, io};
use ferry_proto::checksum::{base64_encode, ChecksumAlgorithm};
use ferry_store::Error;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// How often at most the state file is rewritten while parts finish: a killed run loses
/// at most the parts of the last 100 ms (they are fetched again), and a 4 x 1 GiB
/// download does not write and rename a state file per part (512 renames, counted with
/// `strace -c -f`; docs/lab/engine-download.md, "The state file").
pub(super) const STATE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The temp file and the state file for a target.
pub fn temp_paths(dest: &Path) -> (PathBuf, PathBuf) {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "download".into());
    let dir = dest.parent().map(Path::to_path_buf).unwrap_or_default();
    (dir.join(format!(".{name}.ferry-part")), dir.join(format!(".{name}.ferry-state")))
}

/// What the state file holds.
#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
pub(super) struct State {
    /// The algorithm of the part CRCs in `done`.
    pub(super) algo: String,
    pub(super) etag: String,
    pub(super) size: u64,
    pub(super) part_size: u64,
    /// Part index -> that part's CRC (base64), or "" when no CRC is stored for the object.
    pub(super) done: BTreeMap<u64, String>,
}

pub(super) fn write_state(path: &Path, st: &State) -> Result<(), Error> {
    let tmp = path.with_extension("ferry-state-new");
    let text = serde_json::to_vec(st).map_err(|e| io(path, std::io::Error::other(e)))?;
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

fn read_state(path: &Path) -> Option<State> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The parts an earlier run left that this one keeps: those of a state file that matches
/// `fresh` in everything (algorithm, ETag, size, part size, and a temp file of the full
/// size) and whose bytes in the temp file still have the recorded CRC. Empty if there is
/// no such state.
pub(super) async fn kept_parts(
    fresh: &State,
    algo: ChecksumAlgorithm,
    tmp: &Path,
    state_path: &Path,
) -> Result<BTreeMap<u64, String>, Error> {
    let Some(old) = read_state(state_path) else {
        return Ok(BTreeMap::new());
    };
    let tmp_len = std::fs::metadata(tmp).map(|m| m.len()).ok();
    if !(old.algo == fresh.algo
        && old.etag == fresh.etag
        && old.size == fresh.size
        && old.part_size == fresh.part_size
        && tmp_len == Some(fresh.size))
    {
        return Ok(BTreeMap::new());
    }
    let (size, part_size) = (fresh.size, fresh.part_size);
    let parts = part_count(size, part_size);
    let candidates: Vec<(u64, String)> = old.done.into_iter().filter(|(i, _)| *i < parts).collect();
    let t = tmp.to_path_buf();
    blocking(tmp, move || {
        let f = std::fs::File::open(&t)?;
        let mut buf = Vec::new();
        let mut kept = BTreeMap::new();
        for (i, sum) in candidates {
            buf.resize(part_len(i, part_size, size) as usize, 0);
            f.read_exact_at(&mut buf, i * part_size)?;
            if base64_encode(&algo.digest(&buf)) == sum {
                kept.insert(i, sum);
            }
        }
        Ok(kept)
    })
    .await
}

/// Removes a temp file and state left by an earlier run for `dest` (if any).
pub fn discard_partial(dest: &Path) {
    let (tmp, state) = temp_paths(dest);
    remove_partial(&tmp, &state);
}

/// Removes the state before the temp file: a state file then never outlives its temp
/// file, which lets a finished download skip looking for one when it found no temp
/// file (module note).
pub(super) fn remove_partial(tmp: &Path, state: &Path) {
    let _ = std::fs::remove_file(state);
    let _ = std::fs::remove_file(tmp);
}

/// Creates the temp file; `true` if one was there already (left by an earlier run), in
/// which case it is truncated and used. `create_new` first costs nothing in the usual
/// case (one `openat` either way) and tells whether a state file may be left too.
pub(super) fn create_temp(path: &Path) -> std::io::Result<(std::fs::File, bool)> {
    match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(f) => Ok((f, false)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok((std::fs::File::create(path)?, true)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_files_sit_beside_the_target() {
        let (t, s) = temp_paths(Path::new("/a/b/file.bin"));
        assert_eq!(t, Path::new("/a/b/.file.bin.ferry-part"));
        assert_eq!(s, Path::new("/a/b/.file.bin.ferry-state"));
    }
}
