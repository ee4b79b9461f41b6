//! The machine tokens' head, packed for the forward pass: 98,304 rows of five or six entries,
//! all reading the same eight channels (the output fields, the bias, the text flag).
//!
//! As `Splice::head` stores it, each row is its own heap vector of `(channel, weight)` pairs, and
//! a position's machine logits were a sixth of a launch's time (perf, 2026-12-07), most of it
//! loading those vectors. Packed, the channels a row reads become indices into the handful of
//! values the head reads, gathered once a position, and the rows lie one after another at a
//! fixed stride.
//!
//! **The same bits.** A row is still the fold `((0 + w₁n₁) + w₂n₂) + …` in its own order. A
//! short row is padded at its end with weight 0, which adds `0 · n = ±0` (every `n` is finite,
//! a normed stream): a nonzero sum stays as it is, and a sum of `+0` stays `+0` (a fold that
//! starts at `+0` is never `−0`).

use alloc::vec;
use alloc::vec::Vec;

/// Distinct channels a packed head can read: one byte indexes them.
const MAX_CHANNELS: usize = 256;

#[derive(Debug, Clone)]
pub struct PackedHead {
    /// The channels the rows read, in the order the indices name them.
    channels: Vec<usize>,
    /// Entries per row (the longest row's count).
    stride: usize,
    /// Row after row, `stride` entries each: an index into `channels`, and its weight.
    index: Vec<u8>,
    weight: Vec<f32>,
}

impl PackedHead {
    /// `rows` packed, or `None` if they read more channels than a byte can index.
    pub fn new(rows: &[Vec<(usize, f32)>]) -> Option<PackedHead> {
        let mut channels: Vec<usize> = rows.iter().flatten().map(|&(c, _)| c).collect();
        channels.sort_unstable();
        channels.dedup();
        if channels.len() > MAX_CHANNELS {
            return None;
        }
        let stride = rows.iter().map(Vec::len).max().unwrap_or(0);
        let (mut index, mut weight) = (vec![0u8; rows.len() * stride], vec![0.0f32; rows.len() * stride]);
        for (r, row) in rows.iter().enumerate() {
            for (k, &(c, w)) in row.iter().enumerate() {
                // Present: `channels` holds every channel of every row.
                index[r * stride + k] = channels.binary_search(&c).unwrap_or(0) as u8;
                weight[r * stride + k] = w;
            }
        }
        Some(PackedHead { channels, stride, index, weight })
    }

    /// Every row's logit for the normed stream `n`, into `logits` (one per row).
    pub fn logits(&self, n: &[f32], logits: &mut [f32]) {
        let mut values = [0.0f32; MAX_CHANNELS];
        for (v, &c) in values.iter_mut().zip(&self.channels) {
            *v = n[c];
        }
        if self.stride == 0 {
            logits.fill(0.0);
            return;
        }
        let rows = self.index.chunks_exact(self.stride).zip(self.weight.chunks_exact(self.stride));
        for (l, (index, weight)) in logits.iter_mut().zip(rows) {
            *l = index.iter().zip(weight).fold(0.0f32, |s, (&i, &w)| s + w * values[i as usize]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// The packed rows give each row's own fold bit for bit, over rows of every length (empty
    /// ones too), channels in any order, weights and streams of every magnitude and sign, zeros
    /// of both signs included.
    #[test]
    fn packed_rows_are_the_rows_folds() {
        let mut rng = Rng::new(5);
        let value = |rng: &mut Rng| match rng.next_u64() % 5 {
            0 => 0.0,
            1 => -0.0,
            2 => (rng.next_u64() % 512) as f32 - 256.0,
            _ => {
                f32::from_bits(rng.next_u64() as u32 & 0x7fff_ffff).min(1e15)
                    * if rng.next_u64().is_multiple_of(2) { 1.0 } else { -1.0 }
            }
        };
        for _ in 0..50 {
            let width = 1 + (rng.next_u64() % 40) as usize;
            let rows: Vec<Vec<(usize, f32)>> = (0..200)
                .map(|_| {
                    (0..rng.next_u64() % 7)
                        .map(|_| ((rng.next_u64() % width as u64) as usize, value(&mut rng)))
                        .collect()
                })
                .collect();
            let n: Vec<f32> = (0..width).map(|_| value(&mut rng)).collect();
            let head = PackedHead::new(&rows).unwrap();
            let mut got = vec![f32::NAN; rows.len()];
            head.logits(&n, &mut got);
            for (row, got) in rows.iter().zip(&got) {
                let want = row.iter().fold(0.0f32, |s, &(c, w)| s + w * n[c]);
                assert_eq!(want.to_bits(), got.to_bits(), "{row:?}");
            }
        }
    }

    #[test]
    fn too_many_channels_are_not_packed() {
        let rows = vec![(0..MAX_CHANNELS + 1).map(|c| (c, 1.0)).collect()];
        assert!(PackedHead::new(&rows).is_none());
    }
}
