//! The fuzz targets' properties, one module per target, and what they share.
//!
//! Each module's `check(input)` parses one input the way ferry meets it on the network or
//! the command line and asserts properties of the result (each module's note lists them);
//! it panics where one fails. Two callers drive the same functions: libFuzzer, through the
//! thin entry points in `fuzz_targets/` (`scripts/fuzz.sh`, nightly), and the workspace's
//! stable test build, which runs every checked-in seed (`corpus/TARGET/*`) through its
//! target (crates/cli/tests/fuzz_seeds.rs includes this file by path). So the properties
//! compile and hold on real traffic in every test run, and coverage-guided search for new
//! inputs is a run of its own.
//!
//! The helpers below draw split points and sizes deterministically from the input
//! itself, so that every corpus file stays a raw sample of real traffic (a request, a
//! response, a body) with no framing of the fuzzer's own in front of it.

pub mod aws_chunked;
pub mod chunked;
pub mod cli_args;
pub mod range;
pub mod server_h1;
pub mod sigv4;
pub mod wire_h1;
pub mod xml;

/// A small deterministic generator seeded from the input's bytes (FNV-1a, then
/// xorshift64*), so the same input always gives the same splits.
pub struct Dice(u64);

impl Dice {
    pub fn new(input: &[u8]) -> Dice {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in input {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        Dice(h | 1)
    }

    pub fn roll(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.roll() % n as u64) as usize
    }
}

/// Up to `max` sorted cut points in `0..=len`, among them the byte-at-a-time edges that
/// catch most state-machine slips: 1 and `len - 1`.
pub fn cuts(input: &[u8], max: usize) -> Vec<usize> {
    let len = input.len();
    let mut dice = Dice::new(input);
    let mut cuts: Vec<usize> = (0..max.saturating_sub(2)).map(|_| dice.below(len + 1)).collect();
    cuts.push(1.min(len));
    cuts.push(len.saturating_sub(1));
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// `input` cut into pieces at `cuts` (sorted, each `<= input.len()`).
pub fn pieces<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut prev = 0;
    for &c in cuts {
        out.push(&input[prev..c]);
        prev = c;
    }
    out.push(&input[prev..]);
    out
}
