//! Which hidden units of a compiled SwiGLU layer can change the stream at a position (issue #22,
//! the second machine's speed): most of the machine's channels are 0 at any one position, and a
//! unit whose gate reads only zero channels and the bias has a gate fixed at build time.
//!
//! **Why skipping is exact.** A unit's gate is the fold `((0 + w₁n₁) + w₂n₂) + …` in its terms'
//! order. Where every term but the bias's reads a zero channel, each of those products is ±0,
//! and adding ±0 leaves a nonzero sum as it is: the gate is the fold of the bias terms alone,
//! `g₀`, up to the sign of a zero. If `silu(g₀)` is ±0 (the step units far from threshold: §2's
//! `silu(−128) = −0`), the unit's `h = silu(gate) · up` is ±0 and each `out[c] += v · h` adds
//! ±0, which changes no sum that starts at +0. So the units left out are exactly the ones that
//! add nothing, and the rest are summed in the same order as [`Layer::forward_with`]. A unit
//! that is evaluated but whose `silu(gate)` is ±0 is left out the same way, before its `up`.
//!
//! The bias channel's normed value is the same at every machine position (§2's norm makes it
//! exact) and 0 at a text position; [`Schedule`] is built for a few such values and a position
//! with another runs every unit.

use super::limbs::{rms_norm_into, Layer};
use super::net::silu;
use alloc::vec;
use alloc::vec::Vec;

/// A layer's index (per channel, the units whose gate reads it), and the layer packed for the
/// walk: every unit's gate, up and down entries in one array, `(channel, weight)` in 8 bytes, in
/// unit order. The units as the compiler builds them are three heap vectors each; a position
/// visits a few thousand of them, and loading those vectors' headers and entries from all over
/// the heap was most of a layer's time (perf, 2026-12-07).
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// Per channel `c` (the bias's empty), the units whose gate reads it, ascending:
    /// `readers[reader_at[c]..reader_at[c + 1]]`.
    reader_at: Vec<u32>,
    readers: Vec<u32>,
    /// Per normed bias value (its bits), the units that fire with every other gate input 0
    /// (`silu(g₀) ≠ 0`).
    awake: Vec<(u32, Vec<u32>)>,
    /// The channels the units write, each once.
    written: Vec<usize>,
    bias: usize,
    /// Unit `u`'s gate is `entries[at[3u]..at[3u + 1]]`, its up the next range, its down the one
    /// after.
    at: Vec<u32>,
    entries: Vec<(u32, f32)>,
}

/// The buffers a scheduled layer works in, kept from one layer and position to the next.
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    /// The normed stream.
    pub n: Vec<f32>,
    /// One bit per unit: whether it is evaluated.
    fire: Vec<u64>,
    /// The down projections' sums; all zeros between layers.
    out: Vec<f32>,
    /// The units evaluated, ascending, then those whose `silu(gate)` is not ±0, with it.
    units: Vec<u32>,
    passed: Vec<(u32, f32)>,
    /// Once counting: the gates evaluated whose SiLU calls `exp` (neither ±0 nor |g| ≥ 104,
    /// where `net::silu` is exact by its branches).
    pub gates_outside: Option<u64>,
}

impl Schedule {
    /// The index of `layer` on a stream of `width` channels, for positions whose channel `bias`
    /// is normed to one of `bias_values`.
    pub fn new(layer: &Layer, width: usize, bias: usize, bias_values: &[f32]) -> Schedule {
        let mut by_channel = vec![Vec::new(); width];
        let mut awake: Vec<(u32, Vec<u32>)> = bias_values.iter().map(|b| (b.to_bits(), Vec::new())).collect();
        let mut seen = vec![false; width];
        let (mut written, mut at, mut entries) = (Vec::new(), vec![0u32], Vec::new());
        for (u, unit) in layer.units.iter().enumerate() {
            for &(c, _) in &unit.gate {
                if c != bias && by_channel[c].last() != Some(&(u as u32)) {
                    by_channel[c].push(u as u32);
                }
            }
            for (b, units) in &mut awake {
                let g0 =
                    unit.gate.iter().filter(|&&(c, _)| c == bias).fold(0.0f32, |s, &(_, v)| s + v * f32::from_bits(*b));
                if silu(g0) != 0.0 {
                    units.push(u as u32);
                }
            }
            for &(c, _) in &unit.down {
                if !core::mem::replace(&mut seen[c], true) {
                    written.push(c);
                }
            }
            for part in [&unit.gate, &unit.up, &unit.down] {
                entries.extend(part.iter().map(|&(c, v)| (c as u32, v)));
                at.push(entries.len() as u32);
            }
        }
        let mut reader_at = vec![0u32];
        for list in &by_channel {
            reader_at.push(reader_at[reader_at.len() - 1] + list.len() as u32);
        }
        let readers = by_channel.concat();
        Schedule { reader_at, readers, awake, written, bias, at, entries }
    }

    /// Unit `u`'s gate, up or down entries (`part` 0, 1, 2).
    fn part(&self, u: usize, part: usize) -> &[(u32, f32)] {
        &self.entries[self.at[3 * u + part] as usize..self.at[3 * u + part + 1] as usize]
    }
}

impl Layer {
    /// [`Layer::forward_with`] evaluating only the units `schedule` finds awake at this position:
    /// the same bits (module docs).
    pub fn forward_scheduled(
        &self,
        schedule: &Schedule,
        scratch: &mut Scratch,
        x: &mut [f32],
        w: &[f32],
        eps: f32,
        order: Option<&[usize]>,
    ) {
        rms_norm_into(x, w, eps, order, &mut scratch.n);
        let n = &scratch.n;
        let bits = n.get(schedule.bias).map(|b| b.to_bits());
        let awake = schedule.awake.iter().find(|(b, _)| Some(*b) == bits);
        let fits = schedule.reader_at.len() == x.len() + 1 && schedule.at.len() == 3 * self.units.len() + 1;
        let Some((_, awake)) = awake.filter(|_| fits) else {
            return self.forward_normed(n, x);
        };
        let fire = &mut scratch.fire;
        fire.clear();
        fire.resize(self.units.len().div_ceil(64), 0);
        let mut mark = |u: u32| fire[u as usize / 64] |= 1 << (u % 64);
        awake.iter().for_each(|&u| mark(u));
        for (c, _) in n.iter().enumerate().filter(|(_, &v)| v != 0.0) {
            let readers = &schedule.readers[schedule.reader_at[c] as usize..schedule.reader_at[c + 1] as usize];
            readers.iter().for_each(|&u| mark(u));
        }
        let units = &mut scratch.units;
        units.clear();
        for (word, &bits) in fire.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                units.push((word * 64) as u32 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
        // The gates first, with no branch on their outcome: most of the units evaluated are
        // silent (three in four over the suite), and without a mispredicted branch per unit
        // the core overlaps the next units' loads (their entries lie all over a layer's
        // megabytes). A gate of ±0 after silu sends ±0 down, whatever `up` is (finite: §2's
        // integers), so only the others go on.
        let dot = |w: &[(u32, f32)]| w.iter().fold(0.0f32, |s, &(i, v)| s + v * n[i as usize]);
        let passed = &mut scratch.passed;
        passed.resize(units.len(), (0, 0.0));
        let mut k = 0;
        for &u in units.iter() {
            let gate = dot(schedule.part(u as usize, 0));
            if let Some(outside) = &mut scratch.gates_outside {
                *outside += u64::from(gate != 0.0 && gate.abs() < 104.0);
            }
            let g = silu(gate);
            passed[k] = (u, g);
            k += usize::from(g != 0.0);
        }
        // Ascending unit order, as `forward_with` sums them.
        let out = &mut scratch.out;
        out.resize(x.len(), 0.0);
        for &(u, g) in &passed[..k] {
            let h = g * dot(schedule.part(u as usize, 1));
            for &(c, v) in schedule.part(u as usize, 2) {
                out[c as usize] += v * h;
            }
        }
        // Taking each sum leaves `out` all zeros for the next layer.
        for &c in &schedule.written {
            x[c] += core::mem::take(&mut out[c]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::limbs::{bias, rms_norm, Unit};

    /// A stream of §2's kind: the bias in channel 0, small integers in a few others, zeros.
    fn stream(width: usize, rng: &mut Rng) -> Vec<f32> {
        let mut x = vec![0.0f32; width];
        x[0] = bias(width);
        for _ in 0..rng.next_u64() % 6 {
            x[1 + rng.next_u64() as usize % (width - 1)] = (rng.next_u64() % 4) as f32;
        }
        x
    }

    /// Step units `[a + b ≥ t]` and biased products over random channels, as the compiler
    /// makes them.
    fn layer(width: usize, rng: &mut Rng) -> Layer {
        let mut l = Layer::default();
        let mut channel = || 1 + rng.next_u64() as usize % (width - 1);
        for _ in 0..30 {
            let (a, b, c, t) = (channel(), channel(), channel(), channel() % 4);
            l.step(&[(a, 1.0), (b, 1.0)], t as f32, &[(c, 1.0)]);
            l.units.push(Unit { gate: vec![(0, 3.0), (a, 1.0)], up: vec![(b, 1.0)], down: vec![(a, 0.5)] });
        }
        l
    }

    /// The scheduled layer gives the full layer's bits, over streams with few hot channels.
    #[test]
    fn scheduled_is_forward_with() {
        let width = 64;
        let w = crate::qwengpu::limbs::norm_weights(width);
        let order: Vec<usize> = (0..width).collect();
        let mut rng = Rng::new(7);
        // One scratch for every layer and stream, as a runner keeps it.
        let mut scratch = Scratch::default();
        for _ in 0..200 {
            let l = layer(width, &mut rng);
            let schedule = Schedule::new(&l, width, 0, &[0.0, 1.0]);
            // A third of the positions are text positions: the bias channel 0.
            let mut x = stream(width, &mut rng);
            let text = rng.next_u64().is_multiple_of(3);
            if text {
                x[0] = 0.0;
            }
            assert_eq!(rms_norm(&x, &w, 1e-5, &order)[0], if text { 0.0 } else { 1.0 }, "§2's norm");
            let (mut full, mut fast) = (x.clone(), x);
            l.forward_with(&mut full, &w, 1e-5, &order);
            l.forward_scheduled(&schedule, &mut scratch, &mut fast, &w, 1e-5, None);
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&full), bits(&fast));
        }
    }

    /// Units far from threshold sleep; the sums' and the near ones stay awake.
    #[test]
    fn sleeping_units_are_those_that_add_nothing() {
        let width = 16;
        let mut l = Layer::default();
        l.step(&[(3, 1.0)], 0.0, &[(5, 1.0)]); // [x₃ ≥ 0]: fires at rest
        l.step(&[(3, 1.0)], 2.0, &[(6, 1.0)]); // [x₃ ≥ 2]: silent at rest
        let s = Schedule::new(&l, width, 0, &[1.0, 0.0]);
        assert_eq!(s.awake, vec![(1f32.to_bits(), vec![0, 1]), (0, vec![])]);
        assert_eq!(s.readers[s.reader_at[3] as usize..s.reader_at[4] as usize], [0, 1, 2, 3]);
        assert_eq!(s.written, vec![5, 6]);
    }
}
