//! The synthetic bucket: read-only objects of any size whose bytes are computed, not
//! stored, so benchmarks can GET terabytes without a disk or RAM to hold them.
//!
//! # Keys
//!
//! A key names its size: the first `/`-separated segment if it parses as a size
//! (`1GiB`, `64MiB`, `16KiB`, `100MB`, `1000B`, `12345`; units `B KB MB GB TB KiB MiB GiB
//! TiB`, case-insensitive), else any segment `size=<size>`. Any other key is `NoSuchKey`.
//! Listing the bucket gives an empty page; every write is `ReadOnly`.
//!
//! # Bytes
//!
//! Content is position-addressable: the object is cut into blocks of
//! [`SYNTHETIC_BLOCK_BYTES`], and block `i` is a copy of one block of a 16 MiB pool of
//! pseudo-random bytes made once per process, chosen by `mix(key_hash ^ mix(i + GOLDEN))`
//! (`mix` is the SplitMix64 finaliser; `key_hash` the first 8 bytes of SHA-256(key)). The
//! pool's `j`-th little-endian u64 word of block `b` is wyrand's output for the counter
//! state `seed_b + (j + 1) * WY_INC`. A GET hands out slices of the pool without copying,
//! so serving synthetic bytes costs what sending from memory costs (generating every
//! byte per request held the 1 GiB GET to ~64% of iperf3; docs/lab/backend-synthetic.md).
//! The bytes are not cryptographically random and not meant to be.
//!
//! # Metadata
//!
//! * ETag: quoted hex of the first 16 bytes of SHA-256(key || size as u64 LE). It looks
//!   like an MD5 but is **not** the MD5 of the content (computing one would cost a full
//!   pass over the object per key).
//! * CRC32C of the whole content, in S3's `x-amz-checksum-crc32c` form (base64 of the
//!   big-endian 4 bytes), computed once per key on a blocking thread and cached in a
//!   FIFO-bounded map of [`CRC_CACHE_ENTRIES`]. Objects larger than the CRC limit
//!   (default [`DEFAULT_CRC_LIMIT_BYTES`]) carry no checksum, since the first HEAD would
//!   otherwise take a full pass over the content.
//! * Last-Modified: a fixed instant ([`created`]) so conditional requests are stable.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::{BackendError, ObjectMeta, Result};

/// Block size of the position-addressable generator: the unit a GET slices out of the
/// pool (docs/lab/backend-synthetic.md).
pub const SYNTHETIC_BLOCK_BYTES: usize = 64 * 1024;

/// Bound on the CRC cache: < 4 MiB even with 1 KiB keys.
pub const CRC_CACHE_ENTRIES: usize = 4096;

/// Largest object that gets a CRC32C: 4 GiB. Generation plus CRC32C runs at 3.4-4.4 GB/s
/// on the lab machine (docs/lab/backend-synthetic.md; re-measure with the
/// `synthetic_speed` test below), so the first HEAD of a 4 GiB key takes about 1 s;
/// larger ones would make TTFB of a cold key grow unbounded.
pub const DEFAULT_CRC_LIMIT_BYTES: u64 = 4 << 30;

/// SplitMix64's increment (2^64 / golden ratio).
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
/// wyrand's increment and xor constant (from wyhash's reference implementation).
const WY_INC: u64 = 0xa076_1d64_78bd_642f;
const WY_XOR: u64 = 0xe703_7ed1_a0b4_28db;

/// The SplitMix64 output function (Steele, Lea, Flood 2014; constants from Stafford's
/// "Mix13").
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Creation / last-modified time of the synthetic bucket and its objects:
/// 2024-01-01T00:00:00Z, fixed so that ETag and Last-Modified never change.
pub fn created() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_067_200)
}

pub(crate) fn key_hash(key: &str) -> u64 {
    let d = Sha256::digest(key.as_bytes());
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

#[inline(always)]
fn block_seed(key_hash: u64, block: u64) -> u64 {
    mix(key_hash ^ mix(block.wrapping_add(GOLDEN)))
}

/// Word `j` of a block: wyrand's output function (Wang Yi, wyhash) on the counter state
/// `seed + (j + 1) * WY_INC`: one 64x64->128 multiply per 8 bytes, ~1.6x faster on the
/// lab machine than SplitMix64's two (docs/lab/backend-synthetic.md; `synthetic_speed`).
#[inline(always)]
fn word(seed: u64, j: u64) -> u64 {
    let x = seed.wrapping_add((j + 1).wrapping_mul(WY_INC));
    let t = (x as u128).wrapping_mul((x ^ WY_XOR) as u128);
    (t >> 64) as u64 ^ t as u64
}

/// Blocks in the shared pool that synthetic content is drawn from: 256 x 64 KiB =
/// 16 MiB, allocated on first use. With 256 choices, two given blocks of one object are
/// the same pool block with probability 1/256, so a client that reorders or repeats
/// blocks is caught almost always by the CRC or a byte comparison.
const POOL_BLOCKS: u64 = 256;

/// The pool: pseudo-random bytes from the generator below, made once per process.
fn pool() -> &'static bytes::Bytes {
    static POOL: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let mut buf = vec![0u8; POOL_BLOCKS as usize * SYNTHETIC_BLOCK_BYTES];
        for (b, block) in buf.chunks_exact_mut(SYNTHETIC_BLOCK_BYTES).enumerate() {
            let seed = block_seed(POOL_SEED, b as u64);
            for (j, c) in block.chunks_exact_mut(8).enumerate() {
                c.copy_from_slice(&word(seed, j as u64).to_le_bytes());
            }
        }
        bytes::Bytes::from(buf)
    })
}

/// Seed of the pool generator (any constant: it fixes the content of every object).
const POOL_SEED: u64 = 0x6665_7272_795f_706f;

/// Where block `block` of an object starts in the pool.
#[inline(always)]
fn pool_offset(key_hash: u64, block: u64) -> usize {
    (block_seed(key_hash, block) % POOL_BLOCKS) as usize * SYNTHETIC_BLOCK_BYTES
}

/// Up to `max` content bytes at `pos`, without copying: a slice of the pool that ends at
/// most at the end of the block holding `pos`. This is what makes a synthetic GET cost
/// no more than sending bytes from memory, like iperf3's fixed buffer.
pub(crate) fn slice(key_hash: u64, pos: u64, max: usize) -> bytes::Bytes {
    let block = pos / SYNTHETIC_BLOCK_BYTES as u64;
    let off = (pos % SYNTHETIC_BLOCK_BYTES as u64) as usize;
    let n = (SYNTHETIC_BLOCK_BYTES - off).min(max);
    let start = pool_offset(key_hash, block) + off;
    pool().slice(start..start + n)
}

/// Fills `out` with the content bytes starting at byte `start`.
pub(crate) fn fill(key_hash: u64, start: u64, mut out: &mut [u8]) {
    let mut pos = start;
    while !out.is_empty() {
        let piece = slice(key_hash, pos, out.len());
        let (head, rest) = out.split_at_mut(piece.len());
        head.copy_from_slice(&piece);
        pos += piece.len() as u64;
        out = rest;
    }
}

/// `len` content bytes of synthetic key `key` starting at byte `start` (independent of
/// whether the key names a valid size), for tests that check served bytes.
pub fn synthetic_bytes(key: &str, start: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    fill(key_hash(key), start, &mut out);
    out
}

/// Parses one size token: digits plus an optional unit.
fn parse_size_token(s: &str) -> Option<u64> {
    let digits_end = s.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(s.len());
    if digits_end == 0 {
        return None;
    }
    let n: u64 = s[..digits_end].parse().ok()?;
    let mult: u64 = match s[digits_end..].to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The size a synthetic key names, if any (see the module note).
pub fn parse_synthetic_size(key: &str) -> Option<u64> {
    let first = key.split('/').next().unwrap_or("");
    if let Some(n) = parse_size_token(first) {
        return Some(n);
    }
    key.split('/').find_map(|seg| {
        let (name, value) = seg.split_once('=')?;
        name.eq_ignore_ascii_case("size").then(|| parse_size_token(value)).flatten()
    })
}

/// CRC32C of the whole content of `key` (`size` bytes), straight from the pool's slices
/// (no copy) with crc-fast (~50 GB/s on the lab machine, `synthetic_speed`), so the first
/// HEAD of a 1 GiB key costs ~20 ms.
pub(crate) fn content_crc32c(key: &str, size: u64) -> u32 {
    let kh = key_hash(key);
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    let mut pos = 0u64;
    while pos < size {
        let piece = slice(kh, pos, (size - pos).min(SYNTHETIC_BLOCK_BYTES as u64) as usize);
        digest.update(&piece);
        pos += piece.len() as u64;
    }
    digest.finalize() as u32
}

/// ETag of a synthetic object (not an MD5; see the module note).
pub fn synthetic_etag(key: &str, size: u64) -> String {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update(size.to_le_bytes());
    // The "-1" suffix marks it as a multipart-style ETag, which clients (rclone, s5cmd)
    // know not to check as an MD5 of the content: it is not one.
    format!("\"{}-1\"", hex::encode(&h.finalize()[..16]))
}

#[derive(Default)]
struct CrcCache {
    map: HashMap<String, u32>,
    order: VecDeque<String>,
}

pub(crate) struct Synthetic {
    name: String,
    crc_limit_bytes: u64,
    crcs: Mutex<CrcCache>,
}

impl Synthetic {
    pub(crate) fn new(name: &str) -> Synthetic {
        Synthetic {
            name: name.to_string(),
            crc_limit_bytes: DEFAULT_CRC_LIMIT_BYTES,
            crcs: Mutex::new(CrcCache::default()),
        }
    }

    pub(crate) fn with_crc_limit(mut self, bytes: u64) -> Synthetic {
        self.crc_limit_bytes = bytes;
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    async fn crc(&self, key: &str, size: u64) -> Result<u32> {
        if let Some(c) = self.crcs.lock().unwrap_or_else(|e| e.into_inner()).map.get(key) {
            return Ok(*c);
        }
        let k = key.to_string();
        let crc = tokio::task::spawn_blocking(move || content_crc32c(&k, size))
            .await
            .map_err(|e| BackendError::Io(std::io::Error::other(e)))?;
        let mut cache = self.crcs.lock().unwrap_or_else(|e| e.into_inner());
        if cache.map.insert(key.to_string(), crc).is_none() {
            cache.order.push_back(key.to_string());
            while cache.order.len() > CRC_CACHE_ENTRIES {
                if let Some(old) = cache.order.pop_front() {
                    cache.map.remove(&old);
                }
            }
        }
        Ok(crc)
    }

    pub(crate) async fn meta(&self, key: &str) -> Result<ObjectMeta> {
        let size = parse_synthetic_size(key).ok_or(BackendError::NoSuchKey)?;
        let mut checksums = Vec::new();
        if size <= self.crc_limit_bytes {
            let crc = self.crc(key, size).await?;
            checksums.push(("CRC32C".to_string(), base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())));
        }
        Ok(ObjectMeta {
            key: key.to_string(),
            size,
            etag: synthetic_etag(key, size),
            last_modified: created(),
            content_type: Some("application/octet-stream".to_string()),
            headers: Vec::new(),
            user_meta: Vec::new(),
            checksums,
            parts_count: None,
            part_sizes: Vec::new(),
        })
    }

    #[cfg(test)]
    pub(crate) fn cached_crcs(&self) -> usize {
        self.crcs.lock().unwrap().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        let cases: &[(&str, Option<u64>)] = &[
            ("1GiB", Some(1 << 30)),
            ("64mib/x", Some(64 << 20)),
            ("16KiB", Some(16 << 10)),
            ("100MB", Some(100_000_000)),
            ("1000B", Some(1000)),
            ("12345", Some(12345)),
            ("0", Some(0)),
            ("2TiB/a/b", Some(2 << 40)),
            ("bench/size=4KiB/obj", Some(4096)),
            ("bench/SIZE=77", Some(77)),
            ("a/1GiB", None),
            ("GiB", None),
            ("12XB", None),
            ("99999999999999999999", None),
            ("20000000TiB", None),
            ("x/size=", None),
        ];
        for (k, want) in cases {
            assert_eq!(parse_synthetic_size(k), *want, "{k}");
        }
    }

    #[test]
    fn deterministic_and_key_dependent() {
        assert_eq!(synthetic_bytes("1MiB/a", 0, 1000), synthetic_bytes("1MiB/a", 0, 1000));
        assert_ne!(synthetic_bytes("1MiB/a", 0, 1000), synthetic_bytes("1MiB/b", 0, 1000));
        // Blocks differ from each other.
        let b = synthetic_bytes("1MiB/a", 0, 2 * SYNTHETIC_BLOCK_BYTES);
        assert_ne!(b[..SYNTHETIC_BLOCK_BYTES], b[SYNTHETIC_BLOCK_BYTES..]);
    }

    #[test]
    fn ranges_are_slices_of_the_whole() {
        let key = "300000/k";
        let all = synthetic_bytes(key, 0, 300_000);
        for &(s, l) in &[
            (0usize, 1usize),
            (1, 7),
            (3, 8),
            (7, 9),
            (65_530, 20),
            (65_536, 65_536),
            (131_071, 100_000),
            (299_999, 1),
            (12_345, 0),
        ] {
            assert_eq!(synthetic_bytes(key, s as u64, l), all[s..s + l], "range {s}+{l}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_range_matches(start in 0usize..200_000, len in 0usize..100_000) {
            let all = synthetic_bytes("k", 0, 300_000);
            proptest::prop_assert_eq!(synthetic_bytes("k", start as u64, len), &all[start..start + len]);
        }
    }

    /// Cheap sanity check that the bytes look random (benchmarks rely on them not
    /// compressing): byte histogram of 4 MiB within 5% of uniform, no repeated words.
    #[test]
    fn bytes_look_random() {
        let b = synthetic_bytes("4MiB", 0, 4 << 20);
        let mut hist = [0u64; 256];
        for &x in &b {
            hist[x as usize] += 1;
        }
        let expect = (4u64 << 20) / 256;
        assert!(hist.iter().all(|&c| c.abs_diff(expect) < expect / 20), "{hist:?}");
        // The pool itself never repeats a word...
        let mut words: Vec<u64> = pool().chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let n = words.len();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), n);
        // ...and an object's 64 blocks are drawn from it nearly without repeats
        // (64 draws from 256: about 57 distinct expected).
        let mut blocks: Vec<&[u8]> = b.chunks_exact(SYNTHETIC_BLOCK_BYTES).collect();
        blocks.sort_unstable();
        blocks.dedup();
        assert!(blocks.len() >= 48, "{} distinct blocks of 64", blocks.len());
    }

    #[test]
    fn crc_matches_fresh_computation() {
        let key = "1000001/x";
        let all = synthetic_bytes(key, 0, 1_000_001);
        assert_eq!(content_crc32c(key, 1_000_001), crc32c::crc32c(&all));
        assert_eq!(content_crc32c(key, 0), 0);
    }

    #[test]
    fn etag_is_stable_and_quoted() {
        let e = synthetic_etag("1KiB", 1024);
        assert_eq!(e, synthetic_etag("1KiB", 1024));
        assert_ne!(e, synthetic_etag("1KiB/b", 1024));
        assert!(e.starts_with('"') && e.ends_with("-1\"") && e.len() == 36);
    }

    #[tokio::test]
    async fn crc_cache_is_bounded() {
        let s = Synthetic::new("synthetic");
        for i in 0..(CRC_CACHE_ENTRIES + 10) {
            s.meta(&format!("1/{i}")).await.unwrap();
        }
        assert_eq!(s.cached_crcs(), CRC_CACHE_ENTRIES);
    }

    /// Generation speed. Meaningful only in release mode:
    /// `cargo test -p ferry-backend --release -- --ignored --nocapture synthetic_speed`.
    #[test]
    #[ignore = "a measurement, not a test"]
    fn synthetic_speed() {
        let kh = key_hash("speed");
        let mut buf = vec![0u8; crate::MAX_CHUNK_BYTES];
        let total: u64 = 4 << 30;
        let t = std::time::Instant::now();
        let mut pos = 0;
        while pos < total {
            fill(kh, pos, &mut buf);
            pos += buf.len() as u64;
        }
        std::hint::black_box(&buf);
        let gen = t.elapsed();
        let t = std::time::Instant::now();
        let crc = content_crc32c("speed", 1 << 30);
        let with_crc = t.elapsed();
        std::hint::black_box(crc);
        println!(
            "generate: {:.2} GB/s; generate+crc32c: {:.2} GB/s",
            total as f64 / gen.as_secs_f64() / 1e9,
            (1u64 << 30) as f64 / with_crc.as_secs_f64() / 1e9
        );
    }
}
