//! S3 checksum algorithms, ETags and multipart composite checksums.
//!
//! Design note: S3 names five "flexible checksum" algorithms
//! (<https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html>).
//! Each appears on the wire in three spellings: a header
//! (`x-amz-checksum-crc32`), an algorithm name (`CRC32`, used in
//! `x-amz-checksum-algorithm` / `x-amz-sdk-checksum-algorithm`) and an XML tag
//! (`ChecksumCRC32`). `ChecksumAlgorithm` maps between them.
//!
//! `Checksummer` is an incremental hasher over any of the five; its raw
//! output is the big-endian digest (4 bytes for CRC32/CRC32C, 8 for
//! CRC64NVME, 20 for SHA1, 32 for SHA256), and the header value is the
//! standard base64 of those bytes.
//!
//! Multipart objects carry derived values:
//! - ETag = `"hex(md5(md5_1 || .. || md5_n))-n"`;
//! - COMPOSITE checksum = `base64(H(raw_1 || .. || raw_n))-n` with H the
//!   part algorithm;
//! - FULL_OBJECT checksum = the CRC of the whole object, combined from the parts' CRCs
//!   and lengths ([`full_object_crc`], over [`crc_combine`]); the client and the server
//!   both call it.

use base64::Engine as _;
use md5::{Digest as _, Md5};
use sha1::Sha1;
use sha2::Sha256;

/// One of S3's flexible checksum algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChecksumAlgorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl ChecksumAlgorithm {
    pub const ALL: [Self; 5] = [Self::Crc32, Self::Crc32c, Self::Crc64Nvme, Self::Sha1, Self::Sha256];

    /// `x-amz-checksum-*` header name (lower case).
    pub fn header_name(self) -> &'static str {
        match self {
            Self::Crc32 => "x-amz-checksum-crc32",
            Self::Crc32c => "x-amz-checksum-crc32c",
            Self::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Self::Sha1 => "x-amz-checksum-sha1",
            Self::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// Inverse of [`header_name`](Self::header_name), case-insensitive.
    pub fn from_header_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.header_name().eq_ignore_ascii_case(name))
    }

    /// Algorithm name as in `x-amz-checksum-algorithm`: `CRC32`, `CRC32C`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Crc32 => "CRC32",
            Self::Crc32c => "CRC32C",
            Self::Crc64Nvme => "CRC64NVME",
            Self::Sha1 => "SHA1",
            Self::Sha256 => "SHA256",
        }
    }

    /// Inverse of [`as_str`](Self::as_str), case-insensitive.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str().eq_ignore_ascii_case(s))
    }

    /// XML element name: `ChecksumCRC32`, ...
    pub fn xml_tag(self) -> &'static str {
        match self {
            Self::Crc32 => "ChecksumCRC32",
            Self::Crc32c => "ChecksumCRC32C",
            Self::Crc64Nvme => "ChecksumCRC64NVME",
            Self::Sha1 => "ChecksumSHA1",
            Self::Sha256 => "ChecksumSHA256",
        }
    }

    /// Inverse of [`xml_tag`](Self::xml_tag) (exact match).
    pub fn from_xml_tag(tag: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.xml_tag() == tag)
    }

    /// Length of the raw digest in bytes.
    pub fn digest_len_bytes(self) -> usize {
        match self {
            Self::Crc32 | Self::Crc32c => 4,
            Self::Crc64Nvme => 8,
            Self::Sha1 => 20,
            Self::Sha256 => 32,
        }
    }

    /// One-shot raw digest.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        let mut c = Checksummer::new(self);
        c.update(data);
        c.finish()
    }
}

impl std::fmt::Display for ChecksumAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone)]
enum State {
    /// The three CRCs use crc-fast: VPCLMULQDQ/AVX-512 folding where the CPU has it (these
    /// machines do), PCLMULQDQ or tables elsewhere. Verifying a 1 GiB GET with crc32c's
    /// SSE4.2 loop took ~40% of the reading thread (`perf record` on `ferry bench
    /// bulk-get`); see the measurement in `crc_speed` below.
    Crc(crc_fast::Digest),
    Sha1(Sha1),
    Sha256(Sha256),
}

/// Incremental hasher for any [`ChecksumAlgorithm`].
#[derive(Clone)]
pub struct Checksummer {
    algorithm: ChecksumAlgorithm,
    state: State,
}

impl std::fmt::Debug for Checksummer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checksummer").field("algorithm", &self.algorithm).finish_non_exhaustive()
    }
}

impl Checksummer {
    pub fn new(algorithm: ChecksumAlgorithm) -> Self {
        let state = match algorithm {
            ChecksumAlgorithm::Crc32 => State::Crc(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32IsoHdlc)),
            ChecksumAlgorithm::Crc32c => State::Crc(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi)),
            ChecksumAlgorithm::Crc64Nvme => State::Crc(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme)),
            ChecksumAlgorithm::Sha1 => State::Sha1(Sha1::new()),
            ChecksumAlgorithm::Sha256 => State::Sha256(Sha256::new()),
        };
        Self { algorithm, state }
    }

    pub fn algorithm(&self) -> ChecksumAlgorithm {
        self.algorithm
    }

    pub fn update(&mut self, data: &[u8]) {
        match &mut self.state {
            State::Crc(d) => d.update(data),
            State::Sha1(h) => h.update(data),
            State::Sha256(h) => h.update(data),
        }
    }

    /// Raw digest, big-endian for the CRCs. Does not consume or reset the state.
    pub fn finish(&self) -> Vec<u8> {
        match &self.state {
            State::Crc(d) => {
                let v = d.finalize();
                match self.algorithm {
                    ChecksumAlgorithm::Crc64Nvme => v.to_be_bytes().to_vec(),
                    _ => (v as u32).to_be_bytes().to_vec(),
                }
            }
            State::Sha1(h) => h.clone().finalize().to_vec(),
            State::Sha256(h) => h.clone().finalize().to_vec(),
        }
    }

    /// Standard base64 of [`finish`](Self::finish): the `x-amz-checksum-*` header value.
    pub fn finish_base64(&self) -> String {
        base64_encode(&self.finish())
    }

    /// The checksum (base64) of everything `r` yields, read 1 MiB at a time: a local
    /// file's, to compare with an object's (the CLI's sync, the bench's copy checks).
    pub fn of_reader(algorithm: ChecksumAlgorithm, mut r: impl std::io::Read) -> std::io::Result<String> {
        let mut h = Checksummer::new(algorithm);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match r.read(&mut buf) {
                Ok(0) => return Ok(h.finish_base64()),
                Ok(n) => h.update(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Standard (padded) base64.
pub fn base64_encode(raw: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(raw)
}

/// Standard base64 decode; `None` if malformed.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s.trim()).ok()
}

/// `"hex(md5)"`, quotes included, as S3 sends it in `ETag`.
pub fn md5_etag(digest: &[u8; 16]) -> String {
    format!("\"{}\"", hex::encode(digest))
}

/// ETag of a multipart object: `"hex(md5(md5_1 || .. || md5_n))-n"`.
pub fn multipart_etag(part_md5s: &[[u8; 16]]) -> String {
    let mut h = Md5::new();
    for p in part_md5s {
        h.update(p);
    }
    format!("\"{}-{}\"", hex::encode(h.finalize()), part_md5s.len())
}

/// S3's COMPOSITE multipart checksum: `base64(H(raw_1 || .. || raw_n))-n`.
pub fn composite_checksum(algo: ChecksumAlgorithm, part_checksums_raw: &[Vec<u8>]) -> String {
    let mut c = Checksummer::new(algo);
    for p in part_checksums_raw {
        c.update(p);
    }
    format!("{}-{}", c.finish_base64(), part_checksums_raw.len())
}

/// The CRC of `a || b` from `crc(a)`, `crc(b)` and `len(b)`: what S3's FULL_OBJECT
/// multipart checksum needs, without reading the parts again. `None` for the SHA
/// algorithms, which cannot be combined.
///
/// All three CRCs here are reflected with all-ones initial value and final xor, so the
/// conditioning cancels and `crc(a || b) = shift(crc(a), len(b)) ^ crc(b)`, where `shift`
/// appends `len(b)` zero bytes through the CRC's linear map. The map for 2^k zero bits is
/// built by repeated squaring of the one-bit GF(2) matrix (the method of zlib's
/// `crc32_combine`), so the cost is O(W^2 log n) for width W, independent of the data.
pub fn crc_combine(algo: ChecksumAlgorithm, crc_a: &[u8], crc_b: &[u8], len_b: u64) -> Option<Vec<u8>> {
    let (poly, width) = match algo {
        ChecksumAlgorithm::Crc32 => (0xEDB8_8320u64, 32),
        ChecksumAlgorithm::Crc32c => (0x82F6_3B78u64, 32),
        ChecksumAlgorithm::Crc64Nvme => (0x9A6C_9329_AC4B_C9B5u64, 64),
        _ => return None,
    };
    let bytes = width / 8;
    if crc_a.len() != bytes || crc_b.len() != bytes {
        return None;
    }
    let read = |b: &[u8]| b.iter().fold(0u64, |acc, x| (acc << 8) | *x as u64);
    let combined = gf2_combine(read(crc_a), read(crc_b), len_b, poly, width);
    Some(combined.to_be_bytes()[8 - bytes..].to_vec())
}

/// S3's FULL_OBJECT multipart checksum: the CRC of the whole object from each part's raw
/// CRC and byte length, in part order, with [`crc_combine`] (the parts are not read
/// again). The client checks a multipart download or upload with it, and the server
/// computes it on CompleteMultipartUpload, so both sides combine the same way.
///
/// The first part's CRC is the start value as given; `None` when there are no parts, or
/// when a later part cannot be combined (a SHA algorithm, a CRC of the wrong width).
pub fn full_object_crc<'a>(
    algo: ChecksumAlgorithm,
    parts: impl IntoIterator<Item = (&'a [u8], u64)>,
) -> Option<Vec<u8>> {
    let mut parts = parts.into_iter();
    let (first, _) = parts.next()?;
    parts.try_fold(first.to_vec(), |whole, (crc, len)| crc_combine(algo, &whole, crc, len))
}

/// [`full_object_crc`] over base64 values, as headers and XML carry them; `None` also
/// when a value is not base64.
pub fn full_object_crc_base64<'a>(
    algo: ChecksumAlgorithm,
    parts: impl IntoIterator<Item = (&'a str, u64)>,
) -> Option<String> {
    let raw: Vec<(Vec<u8>, u64)> =
        parts.into_iter().map(|(b64, len)| base64_decode(b64).map(|r| (r, len))).collect::<Option<_>>()?;
    full_object_crc(algo, raw.iter().map(|(r, len)| (r.as_slice(), *len))).map(|w| base64_encode(&w))
}

/// The product of a GF(2) matrix (`mat[i]`: the column for bit `i`) and a vector: the
/// XOR of the columns whose bits are set. Also used by callers that cache a matrix
/// (ferry-engine's part CRC combine).
pub fn gf2_times(mat: &[u64], mut vec: u64) -> u64 {
    let mut sum = 0;
    let mut i = 0;
    while vec != 0 {
        if vec & 1 == 1 {
            sum ^= mat[i];
        }
        vec >>= 1;
        i += 1;
    }
    sum
}

fn gf2_square(mat: &[u64]) -> Vec<u64> {
    mat.iter().map(|row| gf2_times(mat, *row)).collect()
}

fn gf2_combine(mut crc_a: u64, crc_b: u64, mut len_b: u64, poly: u64, width: usize) -> u64 {
    if len_b == 0 {
        return crc_a;
    }
    // The operator for one zero bit: row 0 is the polynomial, row n shifts bit n to n-1.
    let mut odd: Vec<u64> = (0..width).map(|n| if n == 0 { poly } else { 1u64 << (n - 1) }).collect();
    let mut even = gf2_square(&odd); // two zero bits
    odd = gf2_square(&even); // four zero bits
    loop {
        // Each pass doubles the zero run: the first applies 8 bits, i.e. one byte.
        even = gf2_square(&odd);
        if len_b & 1 == 1 {
            crc_a = gf2_times(&even, crc_a);
        }
        len_b >>= 1;
        if len_b == 0 {
            break;
        }
        odd = gf2_square(&even);
        if len_b & 1 == 1 {
            crc_a = gf2_times(&odd, crc_a);
        }
        len_b >>= 1;
        if len_b == 0 {
            break;
        }
    }
    crc_a ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn crc_combine_equals_crc_of_the_concatenation(a in proptest::collection::vec(any::<u8>(), 0..3000), b in proptest::collection::vec(any::<u8>(), 0..3000)) {
            for algo in [ChecksumAlgorithm::Crc32, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc64Nvme] {
                let whole = algo.digest(&[a.clone(), b.clone()].concat());
                let combined = crc_combine(algo, &algo.digest(&a), &algo.digest(&b), b.len() as u64).unwrap();
                prop_assert_eq!(combined, whole, "{}", algo);
            }
        }
    }

    /// `cargo test --release -p ferry-proto crc_speed -- --ignored --nocapture`: GB/s
    /// of each CRC over 256 MiB in 64 KiB updates (how bodies arrive).
    #[test]
    #[ignore = "a measurement, not a test"]
    fn crc_speed() {
        let data = vec![0x5au8; 64 * 1024];
        for algo in [ChecksumAlgorithm::Crc32, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc64Nvme] {
            let mut c = Checksummer::new(algo);
            let t = std::time::Instant::now();
            for _ in 0..4096 {
                c.update(&data);
            }
            let _ = c.finish();
            println!("{algo}: {:.1} GB/s", (256u64 << 20) as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
    }

    #[test]
    fn full_object_crc_of_parts_is_the_crc_of_the_whole() {
        let parts: [&[u8]; 4] = [b"hello ", b"", b"wor", b"ld, and more"];
        let whole: Vec<u8> = parts.concat();
        for algo in [ChecksumAlgorithm::Crc32, ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc64Nvme] {
            let raw: Vec<Vec<u8>> = parts.iter().map(|p| algo.digest(p)).collect();
            let combined = full_object_crc(algo, raw.iter().zip(parts).map(|(c, p)| (c.as_slice(), p.len() as u64)));
            assert_eq!(combined, Some(algo.digest(&whole)), "{algo}");
            let b64: Vec<String> = raw.iter().map(|c| base64_encode(c)).collect();
            let combined =
                full_object_crc_base64(algo, b64.iter().zip(parts).map(|(c, p)| (c.as_str(), p.len() as u64)));
            assert_eq!(combined, Some(base64_encode(&algo.digest(&whole))), "{algo}");
        }
        let one = ChecksumAlgorithm::Crc32c.digest(b"x");
        assert_eq!(full_object_crc(ChecksumAlgorithm::Crc32c, [(one.as_slice(), 1)]), Some(one.clone()));
        assert_eq!(full_object_crc(ChecksumAlgorithm::Crc32c, []), None);
        assert_eq!(full_object_crc(ChecksumAlgorithm::Crc32c, [(one.as_slice(), 1), (&[1u8, 2][..], 2)]), None);
        assert_eq!(full_object_crc_base64(ChecksumAlgorithm::Crc32c, [("AAAAAA==", 1), ("not base64!", 2)]), None);
        assert_eq!(full_object_crc(ChecksumAlgorithm::Sha256, [(&[0u8; 32][..], 1), (&[0u8; 32][..], 1)]), None);
    }

    #[test]
    fn crc_combine_refuses_sha() {
        assert!(crc_combine(ChecksumAlgorithm::Sha256, &[0; 32], &[0; 32], 1).is_none());
    }

    const CHECK: &[u8] = b"123456789";

    #[test]
    fn known_vectors() {
        assert_eq!(ChecksumAlgorithm::Crc32.digest(CHECK), 0xCBF43926u32.to_be_bytes());
        assert_eq!(ChecksumAlgorithm::Crc32c.digest(CHECK), 0xE3069283u32.to_be_bytes());
        assert_eq!(ChecksumAlgorithm::Crc64Nvme.digest(CHECK), 0xAE8B14860A799888u64.to_be_bytes());
        assert_eq!(hex::encode(ChecksumAlgorithm::Sha1.digest(b"abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            hex::encode(ChecksumAlgorithm::Sha256.digest(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn base64_of_empty() {
        let b64 = |a: ChecksumAlgorithm| {
            let c = Checksummer::new(a);
            c.finish_base64()
        };
        assert_eq!(b64(ChecksumAlgorithm::Crc32), "AAAAAA==");
        assert_eq!(b64(ChecksumAlgorithm::Crc32c), "AAAAAA==");
        assert_eq!(b64(ChecksumAlgorithm::Crc64Nvme), "AAAAAAAAAAA=");
        assert_eq!(b64(ChecksumAlgorithm::Sha1), "2jmj7l5rSw0yVb/vlWAYkK/YBwk=");
        assert_eq!(b64(ChecksumAlgorithm::Sha256), "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
        // The AWS streaming-trailer example: CRC32C of 65 KiB... is not reproduced;
        // "Hello world" CRC32 is a widely published value.
        let mut c = Checksummer::new(ChecksumAlgorithm::Crc32);
        c.update(b"Hello world");
        assert_eq!(c.finish(), 0x8BD69E52u32.to_be_bytes());
        assert_eq!(c.finish_base64(), "i9aeUg==");
    }

    #[test]
    fn names() {
        for a in ChecksumAlgorithm::ALL {
            assert_eq!(ChecksumAlgorithm::from_header_name(&a.header_name().to_uppercase()), Some(a));
            assert_eq!(ChecksumAlgorithm::parse(&a.as_str().to_lowercase()), Some(a));
            assert_eq!(ChecksumAlgorithm::from_xml_tag(a.xml_tag()), Some(a));
            assert_eq!(a.digest(b"x").len(), a.digest_len_bytes());
        }
        assert_eq!(ChecksumAlgorithm::parse("md5"), None);
        assert_eq!(ChecksumAlgorithm::from_header_name("x-amz-checksum-type"), None);
    }

    #[test]
    fn etags() {
        let d: [u8; 16] = Md5::digest(b"").into();
        assert_eq!(md5_etag(&d), "\"d41d8cd98f00b204e9800998ecf8427e\"");
        let p1: [u8; 16] = Md5::digest(b"a").into();
        let p2: [u8; 16] = Md5::digest(b"b").into();
        let mut cat = p1.to_vec();
        cat.extend_from_slice(&p2);
        let expect = format!("\"{}-2\"", hex::encode(Md5::digest(&cat)));
        assert_eq!(multipart_etag(&[p1, p2]), expect);
    }

    #[test]
    fn composite() {
        let parts = vec![ChecksumAlgorithm::Crc32.digest(b"part one"), ChecksumAlgorithm::Crc32.digest(b"part two")];
        let cat = [parts[0].clone(), parts[1].clone()].concat();
        let expect = format!("{}-2", base64_encode(&ChecksumAlgorithm::Crc32.digest(&cat)));
        assert_eq!(composite_checksum(ChecksumAlgorithm::Crc32, &parts), expect);
    }

    proptest! {
        #[test]
        fn incremental_equals_oneshot(data in proptest::collection::vec(any::<u8>(), 0..2048), split in 0usize..2048) {
            let split = split.min(data.len());
            for a in ChecksumAlgorithm::ALL {
                let mut c = Checksummer::new(a);
                c.update(&data[..split]);
                c.update(&data[split..]);
                prop_assert_eq!(c.finish(), a.digest(&data));
                prop_assert_eq!(base64_decode(&c.finish_base64()).unwrap(), c.finish());
            }
        }
    }
}
