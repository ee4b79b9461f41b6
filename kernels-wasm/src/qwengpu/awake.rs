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

use super::limbs::{rms_norm, Layer};
use super::net::silu;
use alloc::vec;
use alloc::vec::Vec;

/// A layer's index: per channel, the units whose gate reads it.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    /// Per channel (the bias's empty), the units whose gate reads it, ascending.
    readers: Vec<Vec<u32>>,
    /// Per normed bias value (its bits), the units that fire with every other gate input 0
    /// (`silu(g₀) ≠ 0`).
    awake: Vec<(u32, Vec<u32>)>,
    /// The channels the units write, each once.
    written: Vec<usize>,
    bias: usize,
}

impl Schedule {
    /// The index of `layer` on a stream of `width` channels, for positions whose channel `bias`
    /// is normed to one of `bias_values`.
    pub fn new(layer: &Layer, width: usize, bias: usize, bias_values: &[f32]) -> Schedule {
        let mut readers = vec![Vec::new(); width];
        let mut awake: Vec<(u32, Vec<u32>)> = bias_values.iter().map(|b| (b.to_bits(), Vec::new())).collect();
        let mut seen = vec![false; width];
        let mut written = Vec::new();
        for (u, unit) in layer.units.iter().enumerate() {
            for &(c, _) in &unit.gate {
                if c != bias && readers[c].last() != Some(&(u as u32)) {
                    readers[c].push(u as u32);
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
        }
        Schedule { readers, awake, written, bias }
    }
}

impl Layer {
    /// [`Layer::forward_with`] evaluating only the units `schedule` finds awake at this position:
    /// the same bits (module docs).
    pub fn forward_scheduled(&self, schedule: &Schedule, x: &mut [f32], w: &[f32], eps: f32, order: &[usize]) {
        let n = rms_norm(x, w, eps, order);
        let bits = n.get(schedule.bias).map(|b| b.to_bits());
        let awake = schedule.awake.iter().find(|(b, _)| Some(*b) == bits);
        let Some((_, awake)) = awake.filter(|_| schedule.readers.len() == x.len()) else {
            return self.forward_normed(&n, x);
        };
        let mut fire = vec![false; self.units.len()];
        for &u in awake {
            fire[u as usize] = true;
        }
        for (readers, _) in schedule.readers.iter().zip(&n).filter(|(_, &v)| v != 0.0) {
            for &u in readers {
                fire[u as usize] = true;
            }
        }
        let dot = |w: &[(usize, f32)]| w.iter().fold(0.0f32, |s, &(i, v)| s + v * n[i]);
        let mut out = vec![0.0f32; x.len()];
        for (u, _) in self.units.iter().zip(&fire).filter(|(_, &f)| f) {
            // A gate of ±0 after silu sends ±0 down, whatever `up` is (finite: §2's integers).
            let g = silu(dot(&u.gate));
            if g == 0.0 {
                continue;
            }
            let h = g * dot(&u.up);
            for &(c, v) in &u.down {
                out[c] += v * h;
            }
        }
        for &c in &schedule.written {
            x[c] += out[c];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::limbs::{bias, Unit};

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
            l.forward_scheduled(&schedule, &mut fast, &w, 1e-5, &order);
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
        assert_eq!(s.readers[3], vec![0, 1, 2, 3]);
        assert_eq!(s.written, vec![5, 6]);
    }
}
