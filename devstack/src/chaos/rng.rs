//! Seeded random streams for a chaos run (docs/harness.md, "Chaos"):
//! everything random derives from the run's seed through forked streams,
//! each named by a label (`node/3`, `workload`, `link/3/up`), so that a
//! stream's draws depend on its label alone: adding a node, a fault kind or
//! a workload step shifts no other stream's draws. A stream is ChaCha8
//! seeded with SHA-256 of its parent's seed and its label.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};

/// One stream.
pub struct Stream {
    seed: [u8; 32],
    rng: ChaCha8Rng,
}

impl Stream {
    /// The root stream of a run's seed.
    pub fn root(seed: &str) -> Stream {
        Stream::from_seed(Sha256::digest([b"bcd-chaos/v1\0".as_slice(), seed.as_bytes()].concat()).into())
    }

    fn from_seed(seed: [u8; 32]) -> Stream {
        Stream { seed, rng: ChaCha8Rng::from_seed(seed) }
    }

    /// The stream named `label` under this one (whatever was drawn here).
    pub fn fork(&self, label: &str) -> Stream {
        Stream::from_seed(Sha256::digest([self.seed.as_slice(), b"\0", label.as_bytes()].concat()).into())
    }

    /// A number in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Whether an event of probability `p` happens.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A number in [0, n) (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.rng.next_u64() % n }
    }

    /// A raw 64-bit draw.
    pub fn next_raw(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// A number in [lo, hi] (lo when hi ≤ lo).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_depends_on_its_label_and_seed_only() {
        let mut a = Stream::root("s");
        let _ = a.unit();
        let mut from_used = a.fork("node/3");
        let mut from_fresh = Stream::root("s").fork("node/3");
        assert_eq!(from_used.below(1 << 40), from_fresh.below(1 << 40), "draws of the parent shift nothing");
        assert_ne!(Stream::root("s").fork("node/3").unit(), Stream::root("s").fork("node/4").unit());
        assert_ne!(Stream::root("s").fork("node/3").unit(), Stream::root("t").fork("node/3").unit());
        let mut r = Stream::root("s");
        assert!((0..1000).map(|_| r.unit()).all(|u| (0.0..1.0).contains(&u)));
        assert!((0..1000).map(|_| r.between(5, 7)).all(|n| (5..=7).contains(&n)));
        assert_eq!(r.below(0), 0);
    }
}
