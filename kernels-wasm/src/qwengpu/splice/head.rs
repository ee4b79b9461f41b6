//! The machine tokens' head, packed for the forward pass: 98,304 rows of five or six entries,
//! all reading the same eight channels (the output fields, the bias, the text flag).
//!
//! As `Splice::head` stores it, each row is its own heap vector of `(channel, weight)` pairs, and
//! a position's machine logits were a sixth of a launch's time (perf, 2026-12-07), most of it
//! loading those vectors. But the rows of one kind of token read the same channels in the same
//! order (a VAL token's fields, then the bias, then the flag), and such tokens have consecutive
//! ids. So the head is cut into runs of consecutive rows with one channel sequence, and each run
//! keeps its weights column by column: its `k`-th terms are one weight vector times one stream
//! value, a loop the compiler vectorises.
//!
//! **The same bits.** A row is still the fold `((0 + w₁n₁) + w₂n₂) + …` in its own order:
//! the run adds its rows' first terms, then their second terms, and so on.

use alloc::vec;
use alloc::vec::Vec;

/// Consecutive rows that read the same channels in the same order.
#[derive(Debug, Clone)]
struct Run {
    /// The first row, and the channels every row reads, in its order.
    first: usize,
    channels: Vec<usize>,
    /// The rows' weights, term by term: term `k` of row `first + i` is `weights[k][i]`.
    weights: Vec<Vec<f32>>,
}

#[derive(Debug, Clone)]
pub struct PackedHead {
    rows: usize,
    runs: Vec<Run>,
}

impl PackedHead {
    pub fn new(rows: &[Vec<(usize, f32)>]) -> PackedHead {
        let mut runs: Vec<Run> = Vec::new();
        for (r, row) in rows.iter().enumerate() {
            let same = |run: &Run| run.channels.iter().copied().eq(row.iter().map(|&(c, _)| c));
            match runs.last_mut() {
                Some(run) if same(run) => run.weights.iter_mut().zip(row).for_each(|(w, &(_, v))| w.push(v)),
                _ => runs.push(Run {
                    first: r,
                    channels: row.iter().map(|&(c, _)| c).collect(),
                    weights: row.iter().map(|&(_, v)| vec![v]).collect(),
                }),
            }
        }
        PackedHead { rows: rows.len(), runs }
    }

    /// Runs of rows with one channel sequence.
    #[cfg(test)]
    fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Every row's logit for the normed stream `n`, into `logits` (one per row).
    pub fn logits(&self, n: &[f32], logits: &mut [f32]) {
        let logits = &mut logits[..self.rows];
        logits.fill(0.0);
        for run in &self.runs {
            let len = run.weights.first().map_or(0, Vec::len);
            let out = &mut logits[run.first..run.first + len];
            for (&c, weights) in run.channels.iter().zip(&run.weights) {
                let v = n[c];
                out.iter_mut().zip(weights).for_each(|(l, &w)| *l += w * v);
            }
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
            // Half the rows read the channels of the row before them (a run), with their own weights.
            let mut rows: Vec<Vec<(usize, f32)>> = Vec::new();
            for _ in 0..200 {
                let row = match rows.last() {
                    Some(last) if rng.next_u64().is_multiple_of(2) => {
                        last.iter().map(|&(c, _)| (c, value(&mut rng))).collect()
                    }
                    _ => (0..rng.next_u64() % 7)
                        .map(|_| ((rng.next_u64() % width as u64) as usize, value(&mut rng)))
                        .collect(),
                };
                rows.push(row);
            }
            let n: Vec<f32> = (0..width).map(|_| value(&mut rng)).collect();
            let head = PackedHead::new(&rows);
            assert!(head.runs() < 150, "{} runs", head.runs());
            let mut got = vec![f32::NAN; rows.len()];
            head.logits(&n, &mut got);
            for (row, got) in rows.iter().zip(&got) {
                let want = row.iter().fold(0.0f32, |s, &(c, w)| s + w * n[c]);
                assert_eq!(want.to_bits(), got.to_bits(), "{row:?}");
            }
        }
    }

    /// The spliced model's head is a few runs, so its logits are the vectorised loops.
    #[test]
    fn the_spliced_heads_rows_are_a_few_runs() {
        let splice = crate::qwengpu::splice::Splice::new(crate::qwengpu::splice::TINY_TEXT).unwrap();
        let head = PackedHead::new(&splice.head);
        // Two today: the step records, then the VAL tokens.
        assert!(head.runs() <= 8, "{} rows in {} runs", splice.head.len(), head.runs());
    }
}
