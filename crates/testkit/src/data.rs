//! Deterministic test bytes.

use bytes::Bytes;

/// `len` bytes of a fixed pattern (the same for every call): position `i` holds
/// `(i * 31) ^ (i >> 8)`, so a shifted or repeated range shows.
pub fn pattern(len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (i.wrapping_mul(31) ^ (i >> 8)) as u8).collect::<Vec<u8>>())
}

/// `len` pseudo-random bytes from `seed` (xorshift64): the same seed gives the same
/// bytes, another seed other bytes, so a part swapped or taken from the wrong object
/// shows.
pub fn seeded(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    Bytes::from(v)
}
