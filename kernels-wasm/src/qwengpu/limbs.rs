//! The second machine's arithmetic (issue #22; `docs/qwengpu-second-machine.md` §2 and step 2 of
//! §4): words as four 8-bit limbs in plain scalar channels of a pre-norm residual stream, and
//! SwiGLU MLP layers that add and subtract them exactly in f32.
//!
//! **The norm.** Channel 0 is a bias `B = 2^M · √d` (`d` a power of four, so `√d` is a power of
//! two) and every other channel is an integer below 2^16. Then `Σ x² = B² + r` with `r < d · 2^32`,
//! and `r` is below half an ulp of `B² = 2^(2M) · d` once `M ≥ 28` (29 leaves a bit to spare):
//! the f32 sum is exactly `B²`
//! in any order (the data's partial sums vanish whether added before or after `B²`), the RMS is
//! exactly `2^M` (ε is below the ulp too), and a norm weight of `2^M` gives each data channel back
//! as it was, while a weight of `1/√d` turns the bias into the constant 1 the MLPs use as a bias.
//!
//! **The step unit.** For an integer `s`, `silu(257(s − T) + 129) − silu(257(s − T) + 128)` is
//! exactly `[s ≥ T]`: for `s ≥ T` both arguments are at least 128, where `exp(−x)` underflows and
//! silu is the identity, so the difference is 1; for `s < T` both are at most −128, where
//! `exp(−x)` overflows and silu is −0. Every pre-activation is an integer below 2^24 (limb sums
//! are at most 511), so the matrix products are exact in any order too.
//! A unit's output times its down weight is summed into its channel and must stay below 2^24
//! as well, so a step far from its threshold only gets small output weights (`limb_mul`).
//!
//! **The adder** (two layers; subtraction is `a + ¬b + 1`, `¬b` limb by limb `255 − b`):
//! 1. per limb `i`, `s = a_i + b_i (+ carry-in at limb 0)`; generate `G_i = [s ≥ 256]` and
//!    propagate `P_i = [s ≥ 255] − [s ≥ 256]` go to scratch channels;
//! 2. carries by look-ahead, `c_{i+1} = G_i + P_i G_{i−1} + P_i P_{i−1} G_{i−2} + …` (the terms
//!    exclude each other; an AND of `k` bits is the step `[Σ bits ≥ k]`), and each result limb
//!    `r_i = s_i + c_i − 256 c_{i+1}`, the sum passed through as `silu(s + 256) − silu(256)`.
//!    The carry out of limb 3 is dropped: words wrap.
//!
//! Comparisons are three layers on the subtraction ([`compare`]); the bitwise operations and
//! shifts, which need the words' bits, are in `limb_bits`.

use super::net::silu;
use alloc::vec;
use alloc::vec::Vec;

/// Limbs per 32-bit word, and their width.
pub const LIMBS: usize = 4;
pub const LIMB: u32 = 256;
/// The bias channel is `2^M · √d`.
pub const M: i32 = 29;

/// RMSNorm as the text model computes it, `x · w / √(Σx²/d + ε)`, its sum of squares taken in
/// the order `order` (a permutation of the channels).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, order: &[usize]) -> Vec<f32> {
    let mut n = Vec::new();
    rms_norm_into(x, w, eps, Some(order), &mut n);
    n
}

/// [`rms_norm`] into `n`'s allocation, its sum of squares in `order` or (`None`) in the
/// channels' own order, as the spliced model's runner takes it. The sum leaves out the zero
/// channels (most of a machine position's): each would add `+0` to a sum that starts at `+0` and
/// so is never `−0`, which changes no bit. In the channels' own order, chunks of 16 with no value
/// are passed over after one vectorised test, so the serial chain of adds runs over the chunks
/// that hold a value.
pub fn rms_norm_into(x: &[f32], w: &[f32], eps: f32, order: Option<&[usize]>, n: &mut Vec<f32>) {
    let add = |ss: f32, v: &f32| if *v != 0.0 { ss + v * v } else { ss };
    let ss = match order {
        Some(order) => order.iter().map(|&i| x[i]).fold(0.0f32, |ss, v| add(ss, &v)),
        None => x
            .chunks(16)
            .filter(|c| c.iter().fold(false, |any, &v| any | (v != 0.0)))
            .fold(0.0f32, |ss, c| c.iter().fold(ss, add)),
    };
    let rms = (ss / x.len() as f32 + eps).sqrt();
    n.clear();
    n.extend(x.iter().zip(w).map(|(v, w)| v / rms * w));
}

/// The norm weights of a `d`-channel stream: `1/√d` for the bias channel, `2^M` for the data.
pub fn norm_weights(d: usize) -> Vec<f32> {
    let mut w = vec![2f32.powi(M); d];
    w[0] = 1.0 / (d as f32).sqrt();
    w
}

/// The bias channel's value for `d` channels.
pub fn bias(d: usize) -> f32 {
    2f32.powi(M) * (d as f32).sqrt()
}

/// One hidden unit of a SwiGLU MLP, sparse: `silu(gate·x) · (up·x)`, sent to `down`.
#[derive(Debug, Clone, Default)]
pub struct Unit {
    pub gate: Vec<(usize, f32)>,
    pub up: Vec<(usize, f32)>,
    pub down: Vec<(usize, f32)>,
}

/// A pre-norm MLP sublayer: `x += W_down (silu(W_gate n) ⊙ W_up n)`, `n = RMSNorm(x)`.
#[derive(Debug, Clone, Default)]
pub struct Layer {
    pub units: Vec<Unit>,
}

impl Layer {
    pub fn forward(&self, x: &mut [f32], eps: f32, order: &[usize]) {
        self.forward_with(x, &norm_weights(x.len()), eps, order);
    }

    /// [`Self::forward`] with the norm weights `w`: on a stream the machine shares with a text
    /// model (`splice`), where only the machine's channels have §2's weights. Only the channels
    /// the units write change.
    pub fn forward_with(&self, x: &mut [f32], w: &[f32], eps: f32, order: &[usize]) {
        self.forward_normed(&rms_norm(x, w, eps, order), x);
    }

    /// [`Self::forward_with`] on the stream `x` already normed to `n`.
    pub(super) fn forward_normed(&self, n: &[f32], x: &mut [f32]) {
        let dot = |w: &[(usize, f32)]| w.iter().fold(0.0f32, |s, &(i, v)| s + v * n[i]);
        let mut out = vec![0.0f32; x.len()];
        for u in &self.units {
            let h = silu(dot(&u.gate)) * dot(&u.up);
            for &(c, v) in &u.down {
                out[c] += v * h;
            }
        }
        for c in self.units.iter().flat_map(|u| &u.down).map(|&(c, _)| c) {
            x[c] += core::mem::take(&mut out[c]);
        }
    }

    /// The same layer with every channel (the bias too) moved up by `offset`.
    pub fn shifted(&self, offset: usize) -> Layer {
        self.mapped(|c| c + offset)
    }

    /// The same layer with every channel `c` moved to `to(c)`.
    pub fn mapped(&self, to: impl Fn(usize) -> usize) -> Layer {
        let map = |w: &[(usize, f32)]| w.iter().map(|&(c, v)| (to(c), v)).collect();
        let units =
            self.units.iter().map(|u| Unit { gate: map(&u.gate), up: map(&u.up), down: map(&u.down) }).collect();
        Layer { units }
    }

    /// Hidden units and nonzero weights.
    pub fn size(&self) -> (usize, usize) {
        (self.units.len(), self.units.iter().map(|u| u.gate.len() + u.up.len() + u.down.len()).sum())
    }

    /// `[Σ terms ≥ t]` (terms over normed channels, integers) added to `down` (two units).
    pub(super) fn step(&mut self, terms: &[(usize, f32)], t: f32, down: &[(usize, f32)]) {
        let gate = |offset: f32| {
            let mut g: Vec<(usize, f32)> = terms.iter().map(|&(c, v)| (c, 257.0 * v)).collect();
            g.push((0, offset - 257.0 * t));
            g
        };
        self.difference([gate(129.0), gate(128.0)], down);
    }

    /// `targets[v]` gets 1 for the integer `v = Σ terms` in `0..targets.len()` (nothing where it
    /// is `None`): the step `[v ≥ t]` adds 1 to `targets[t]` and takes 1 from `targets[t − 1]`,
    /// so a target's sum telescopes to `[v ≥ t] − [v ≥ t + 1]` (over each run of equal targets,
    /// its first `t` and one past its last). A `v` past the end lights the last target unless it
    /// is `None`.
    pub(super) fn one_hot(&mut self, terms: &[(usize, f32)], targets: &[Option<usize>]) {
        for (t, &target) in targets.iter().enumerate() {
            let below = t.checked_sub(1).and_then(|b| targets[b]);
            if target == below {
                continue;
            }
            let down: Vec<(usize, f32)> =
                target.map(|c| (c, 1.0)).into_iter().chain(below.map(|c| (c, -1.0))).collect();
            self.step(terms, t as f32, &down);
        }
    }

    /// `Σ terms` (an integer above −128) added to `down`: `silu(s + 256) − silu(256)`.
    pub(super) fn pass(&mut self, terms: &[(usize, f32)], down: &[(usize, f32)]) {
        let mut with = terms.to_vec();
        with.push((0, 256.0));
        self.difference([with, vec![(0, 256.0)]], down);
    }

    /// `silu(first·n) − silu(second·n)` added to `down` (two units whose `up` is the constant 1).
    fn difference(&mut self, [first, second]: [Vec<(usize, f32)>; 2], down: &[(usize, f32)]) {
        for (gate, sign) in [(first, 1.0), (second, -1.0)] {
            let down = down.iter().map(|&(c, v)| (c, sign * v)).collect();
            self.units.push(Unit { gate, up: vec![(0, 1.0)], down });
        }
    }

    /// `c ? Σ k·w : 0` limb by limb into `to`, for a 0/1 channel `c` and `words` of (limbs `w`,
    /// weight `k`): one unit a limb, `silu(512c − 256) · Σ k·w_i/256`, which is the sum when `c`
    /// is 1 (silu(256) is 256) and 0 when it is 0 (silu(−256) is −0); dividing by 256 is exact.
    pub(super) fn gated(&mut self, c: usize, words: &[(usize, f32)], to: usize) {
        for i in 0..LIMBS {
            let up = words.iter().map(|&(w, k)| (w + i, k / 256.0)).collect();
            self.units.push(Unit { gate: vec![(c, 512.0), (0, -256.0)], up, down: vec![(to + i, 1.0)] });
        }
    }
}

/// Where an adder's operands, result and scratch live in the stream (channel 0 is the bias).
#[derive(Debug, Clone, Copy)]
pub struct AdderChannels {
    pub a: usize,
    pub b: usize,
    pub r: usize,
    /// `2 · LIMBS` channels: G then P.
    pub scratch: usize,
}

/// The two layers computing `r = a + b` (`subtract`: `a − b`), wrapping, on 8-bit limbs.
pub fn adder(ch: AdderChannels, subtract: bool) -> [Layer; 2] {
    adder_with(ch, subtract, true, None)
}

/// [`adder`]'s layers, writing the result limbs only if `result`, and the carry out of the top
/// limb (dropped by `add`, "no borrow" for `sub`) to `carry_out`.
fn adder_with(ch: AdderChannels, subtract: bool, result: bool, carry_out: Option<usize>) -> [Layer; 2] {
    // Limb i of the sum's operands, as terms over the normed stream (1 is channel 0).
    let sum = |i: usize| -> Vec<(usize, f32)> {
        let mut t = vec![(ch.a + i, 1.0)];
        if subtract {
            t.extend([(ch.b + i, -1.0), (0, 255.0)]);
        } else {
            t.push((ch.b + i, 1.0));
        }
        if i == 0 && subtract {
            t.push((0, 1.0));
        }
        t
    };
    let (g, p) = (|i: usize| ch.scratch + i, |i: usize| ch.scratch + LIMBS + i);
    let mut first = Layer::default();
    for i in 0..LIMBS {
        first.step(&sum(i), 256.0, &[(g(i), 1.0), (p(i), -1.0)]);
        first.step(&sum(i), 255.0, &[(p(i), 1.0)]);
    }
    let mut second = Layer::default();
    for i in 0..LIMBS {
        if result {
            second.pass(&sum(i), &[(ch.r + i, 1.0)]);
        }
        // c_{i+1}: one term per j ≤ i, P_i … P_{j+1} G_j; it adds to limb i + 1 and takes 256
        // from limb i.
        for j in 0..=i {
            let mut bits: Vec<(usize, f32)> = (j + 1..=i).map(|k| (p(k), 1.0)).collect();
            bits.push((g(j), 1.0));
            let k = bits.len() as f32;
            let mut down = Vec::new();
            if result {
                down.push((ch.r + i, -(LIMB as f32)));
            }
            match (i + 1 < LIMBS, result, carry_out) {
                (true, true, _) => down.push((ch.r + i + 1, 1.0)),
                (false, _, Some(c)) => down.push((c, 1.0)),
                _ => {}
            }
            if !down.is_empty() {
                second.step(&bits, k, &down);
            }
        }
    }
    [first, second]
}

/// Where a comparison reads its words and writes its 0/1 result (limb 0 of `d`), with the
/// subtraction's scratch and 5 more channels.
#[derive(Debug, Clone, Copy)]
pub struct CompareChannels {
    pub adder: AdderChannels,
    pub extra: usize,
    pub d: usize,
}

/// The three layers computing `d = (a cmp b) ? 1 : 0`:
/// 1. the subtraction's generate/propagate; the signs `sa = [a₃ ≥ 128]`, `sb = [b₃ ≥ 128]`; and
///    `E = Σ_i ([a_i ≥ b_i] + [b_i ≥ a_i])`, which is 8 exactly when every limb is equal;
/// 2. `C`, the carry out of `a + ¬b + 1` (1 when `a ≥ b` unsigned), and `Q = [E ≥ 8]`;
/// 3. the result: unsigned `a < b` is `1 − C`; signed `a < b` is `(1 − C) ⊕ sa ⊕ sb` (the order
///    of `a ⊕ 2³¹` and `b ⊕ 2³¹`), a parity `[t ≥ 1] − [t ≥ 2] + [t ≥ 3]` of `t = 1 − C + sa + sb`;
///    `≤` adds `Q`, `>` and `≥` are the complements.
pub fn compare(cmp: super::isa::Cmp, ch: CompareChannels) -> [Layer; 3] {
    use super::isa::Cmp::*;
    let (sa, sb, e, c, q) = (ch.extra, ch.extra + 1, ch.extra + 2, ch.extra + 3, ch.extra + 4);
    let [mut first, mut second] = adder_with(ch.adder, true, false, Some(c));
    let top = LIMBS - 1;
    first.step(&[(ch.adder.a + top, 1.0)], 128.0, &[(sa, 1.0)]);
    first.step(&[(ch.adder.b + top, 1.0)], 128.0, &[(sb, 1.0)]);
    for i in 0..LIMBS {
        let (a, b) = (ch.adder.a + i, ch.adder.b + i);
        first.step(&[(a, 1.0), (b, -1.0)], 0.0, &[(e, 1.0)]);
        first.step(&[(b, 1.0), (a, -1.0)], 0.0, &[(e, 1.0)]);
    }
    second.step(&[(e, 1.0)], 2.0 * LIMBS as f32, &[(q, 1.0)]);
    let mut third = Layer::default();
    let d = ch.d;
    // A linear result `k·1 + Σ w·channel`, written through one pass pair.
    let mut linear = |terms: &[(usize, f32)]| third.pass(terms, &[(d, 1.0)]);
    let signed_lt = |layer: &mut Layer, sign: f32| {
        let t = [(0, 1.0), (c, -1.0), (sa, 1.0), (sb, 1.0)];
        for (threshold, w) in [(1.0, 1.0), (2.0, -1.0), (3.0, 1.0)] {
            layer.step(&t, threshold, &[(d, sign * w)]);
        }
    };
    match cmp {
        Eq => linear(&[(q, 1.0)]),
        Ne => linear(&[(0, 1.0), (q, -1.0)]),
        LtU => linear(&[(0, 1.0), (c, -1.0)]),
        GeU => linear(&[(c, 1.0)]),
        LeU => linear(&[(0, 1.0), (c, -1.0), (q, 1.0)]),
        GtU => linear(&[(c, 1.0), (q, -1.0)]),
        LtS => signed_lt(&mut third, 1.0),
        LeS => {
            linear(&[(q, 1.0)]);
            signed_lt(&mut third, 1.0);
        }
        GeS => {
            linear(&[(0, 1.0)]);
            signed_lt(&mut third, -1.0);
        }
        GtS => {
            linear(&[(0, 1.0), (q, -1.0)]);
            signed_lt(&mut third, -1.0);
        }
    }
    [first, second, third]
}

/// The layer writing `d = c ? a : b` limb by limb, for a 0/1 channel `c`: `b` passed through,
/// plus `c ? a − b : 0` ([`Layer::gated`]).
pub fn select(c: usize, a: usize, b: usize, d: usize) -> Layer {
    let mut layer = Layer::default();
    for i in 0..LIMBS {
        layer.pass(&[(b + i, 1.0)], &[(d + i, 1.0)]);
    }
    layer.gated(c, &[(a, 1.0), (b, -1.0)], d);
    layer
}

/// The four layers of `min`/`max` (signed or not, as `Alu`): the comparison that picks `a`
/// ([`compare`] into `ch.d`'s first channel), then [`select`] into `r`.
pub fn min_max(op: super::isa::Alu, ch: CompareChannels, r: usize) -> Option<[Layer; 4]> {
    use super::isa::{Alu, Cmp};
    let pick_a = match op {
        Alu::MinS => Cmp::LtS,
        Alu::MaxS => Cmp::GtS,
        Alu::MinU => Cmp::LtU,
        Alu::MaxU => Cmp::GtU,
        _ => return None,
    };
    let [first, second, third] = compare(pick_a, ch);
    Some([first, second, third, select(ch.d, ch.adder.a, ch.adder.b, r)])
}

/// A `d`-channel stream holding the bias, `a` at channel `a_at` and `b` at `b_at`, after
/// `layers` (sums in channel order).
pub fn run_on(layers: &[Layer], d: usize, (a_at, a): (usize, u32), (b_at, b): (usize, u32)) -> Vec<f32> {
    let order: Vec<usize> = (0..d).collect();
    let mut x = vec![0.0f32; d];
    x[0] = bias(d);
    x[a_at..a_at + LIMBS].copy_from_slice(&limbs(a));
    x[b_at..b_at + LIMBS].copy_from_slice(&limbs(b));
    for layer in layers {
        layer.forward(&mut x, 1e-6, &order);
    }
    x
}

/// A word's limbs, low first.
pub fn limbs(w: u32) -> [f32; LIMBS] {
    core::array::from_fn(|i| ((w >> (8 * i)) & 0xff) as f32)
}

/// The word in limbs that must be integers in 0..256.
pub fn word(l: &[f32]) -> Option<u32> {
    l.iter()
        .enumerate()
        .try_fold(0u32, |w, (i, &v)| (v >= 0.0 && v < LIMB as f32 && v == v.trunc()).then(|| w | (v as u32) << (8 * i)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::isa::Alu;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn shuffled(d: usize, rng: &mut Rng) -> Vec<usize> {
        let mut o: Vec<usize> = (0..d).collect();
        for i in (1..d).rev() {
            o.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        o
    }

    #[test]
    fn the_norm_gives_the_data_back_in_any_summation_order() {
        let d = 4096;
        let mut rng = Rng::new(7);
        for trial in 0..20 {
            let mut x: Vec<f32> = (0..d).map(|_| (rng.next_u64() % 65_536) as f32).collect();
            if trial == 0 {
                x.iter_mut().for_each(|v| *v = 65_535.0); // the largest remainder
            }
            x[0] = bias(d);
            let orders = [(0..d).collect(), (0..d).rev().collect(), shuffled(d, &mut rng), shuffled(d, &mut rng)];
            for order in &orders {
                let n = rms_norm(&x, &norm_weights(d), 1e-6, order);
                assert_eq!(n[0], 1.0, "trial {trial}");
                assert!(n[1..].iter().zip(&x[1..]).all(|(a, b)| a == b), "trial {trial}");
            }
        }
    }

    /// The norm that leaves out zero channels gives the plain formula's bits (every square added
    /// in `order`), over streams of text-like floats, integers and zeros of both signs, in the
    /// channels' own order (the chunked path) and shuffled.
    #[test]
    fn skipping_zero_channels_keeps_the_norms_bits() {
        let mut rng = Rng::new(12);
        for trial in 0..300 {
            let d = 1 + (rng.next_u64() % 80) as usize;
            let x: Vec<f32> = (0..d)
                .map(|_| match rng.next_u64() % 5 {
                    0 | 1 => 0.0,
                    2 => -0.0,
                    3 => (rng.next_u64() % 512) as f32,
                    _ => (rng.next_u64() % 100_000) as f32 * 1.37e-3 - 60.0,
                })
                .collect();
            let w: Vec<f32> = (0..d).map(|i| 0.5 + i as f32 * 0.25).collect();
            let own: Vec<usize> = (0..d).collect();
            let shuffled = shuffled(d, &mut rng);
            for given in [None, Some(&own[..]), Some(&shuffled[..])] {
                let ss = given.unwrap_or(&own).iter().fold(0.0f32, |s, &i| s + x[i] * x[i]);
                let rms = (ss / d as f32 + 1e-5).sqrt();
                let want: Vec<u32> = x.iter().zip(&w).map(|(v, w)| (v / rms * w).to_bits()).collect();
                let mut got = Vec::new();
                rms_norm_into(&x, &w, 1e-5, given, &mut got);
                assert_eq!(want, got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "trial {trial}");
            }
        }
    }

    #[test]
    fn step_units_are_exact_on_integers() {
        for t in [0.0f32, 1.0, 2.0, 255.0, 256.0] {
            let mut layer = Layer::default();
            layer.step(&[(1, 1.0)], t, &[(2, 1.0)]);
            for s in -600..600 {
                let d = 64;
                let mut x = vec![0.0f32; d];
                x[0] = bias(d);
                x[1] = s as f32;
                layer.forward(&mut x, 1e-6, &(0..d).collect::<Vec<_>>());
                assert_eq!(x[2], f32::from(s as f32 >= t), "s {s}, t {t}");
            }
        }
    }

    const CH: AdderChannels = AdderChannels { a: 1, b: 5, r: 9, scratch: 13 };

    /// Runs an adder's layers on a 64-channel stream, its sums in channel order or reversed.
    fn run(layers: &[Layer; 2], a: u32, b: u32, reverse: bool) -> u32 {
        let d = 64;
        let mut x = vec![0.0f32; d];
        x[0] = bias(d);
        x[CH.a..CH.a + LIMBS].copy_from_slice(&limbs(a));
        x[CH.b..CH.b + LIMBS].copy_from_slice(&limbs(b));
        let order: Vec<usize> = if reverse { (0..d).rev().collect() } else { (0..d).collect() };
        for layer in layers {
            layer.forward(&mut x, 1e-6, &order);
        }
        let r = &x[CH.r..CH.r + LIMBS];
        word(r).unwrap_or_else(|| panic!("{a:#x} ± {b:#x}: limbs {r:?}"))
    }

    #[test]
    fn add_and_subtract_match_the_isa_on_every_limb_pair() {
        // Every pair of limb values in every limb at once, with the carries that a byte pattern
        // in the other limbs sends in: the same pair in all four limbs, and beside a 0xff run.
        let (add, sub) = (adder(CH, false), adder(CH, true));
        for x in 0..256u32 {
            for y in 0..256u32 {
                for (a, b) in [(x * 0x0101_0101, y * 0x0101_0101), (x * 0x0101_0101, (y * 0x0101_0101) ^ 0x00ff_00ff)] {
                    assert_eq!(run(&add, a, b, false), Alu::Add.eval(a, b), "{a:#x} + {b:#x}");
                    assert_eq!(run(&sub, a, b, false), Alu::Sub.eval(a, b), "{a:#x} - {b:#x}");
                }
            }
        }
    }

    #[test]
    fn comparisons_match_the_isa_on_every_limb_pair_and_at_the_edges() {
        use crate::qwengpu::isa::Cmp;
        let d = 64;
        let ch = CompareChannels { adder: CH, extra: 21, d: 26 };
        let all = [Cmp::Eq, Cmp::Ne, Cmp::LtS, Cmp::LeS, Cmp::GtS, Cmp::GeS, Cmp::LtU, Cmp::LeU, Cmp::GtU, Cmp::GeU];
        let layers: Vec<(Cmp, [Layer; 3])> = all.iter().map(|&c| (c, compare(c, ch))).collect();
        let edges = [0u32, 1, 0x7f, 0x80, 0xff, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, 0xffff_fffe, 0xffff_ffff];
        let limb_pairs = (0..256u32).flat_map(|x| {
            (0..256u32).flat_map(move |y| {
                let (a, b) = (x * 0x0101_0101, y * 0x0101_0101);
                [(a, b), (a, b ^ 0x00ff_00ff), (a ^ 0x8000_0000, b)]
            })
        });
        let pairs = edges.iter().flat_map(|&a| edges.iter().map(move |&b| (a, b)));
        for (a, b) in pairs.chain(limb_pairs) {
            for (cmp, layers) in &layers {
                let x = run_on(layers, d, (CH.a, a), (CH.b, b));
                assert_eq!(x[ch.d], cmp.eval(a, b) as f32, "{cmp:?} {a:#x} {b:#x}");
            }
        }
    }

    #[test]
    fn select_and_min_max_match_the_isa() {
        use crate::qwengpu::isa::Alu;
        let d = 64;
        let ch = CompareChannels { adder: CH, extra: 21, d: 26 };
        let (r, order): (usize, Vec<usize>) = (27, (0..d).collect());
        let stream = |a: u32, b: u32| {
            let mut x = vec![0.0f32; d];
            x[0] = bias(d);
            x[CH.a..CH.a + LIMBS].copy_from_slice(&limbs(a));
            x[CH.b..CH.b + LIMBS].copy_from_slice(&limbs(b));
            x
        };
        // Select on its own, the condition given as 0/1 in channel 26.
        let sel = select(ch.d, CH.a, CH.b, r);
        for (a, b) in [(0, u32::MAX), (0x1234_5678, 0x8765_4321), (u32::MAX, 0), (7, 7)] {
            for c in [0u32, 1] {
                let mut x = stream(a, b);
                x[ch.d] = c as f32;
                sel.forward(&mut x, 1e-6, &order);
                assert_eq!(word(&x[r..r + LIMBS]), Some(if c == 1 { a } else { b }), "{c} ? {a:#x} : {b:#x}");
            }
        }
        let ops = [Alu::MinS, Alu::MaxS, Alu::MinU, Alu::MaxU];
        let layers: Vec<(Alu, [Layer; 4])> = ops.iter().map(|&op| (op, min_max(op, ch, r).unwrap())).collect();
        assert!(min_max(Alu::Add, ch, r).is_none());
        for x in 0..256u32 {
            for y in 0..256u32 {
                let (a, b) = (x * 0x0101_0101, (y * 0x0101_0101) ^ 0x8000_ff00);
                for (op, layers) in &layers {
                    let mut s = stream(a, b);
                    for layer in layers {
                        layer.forward(&mut s, 1e-6, &order);
                    }
                    assert_eq!(word(&s[r..r + LIMBS]), Some(op.eval(a, b)), "{op:?} {a:#x} {b:#x}");
                }
            }
        }
    }

    #[test]
    fn words_at_random_and_at_the_edges() {
        let mut rng = Rng::new(99);
        let (add, sub) = (adder(CH, false), adder(CH, true));
        let edges = [0, 1, 0xff, 0x100, 0xffff, 0x0001_0000, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, 0xffff_ffff];
        let pairs = edges.iter().flat_map(|&a| edges.iter().map(move |&b| (a, b)));
        let random: Vec<(u32, u32)> =
            (0..20_000).map(|_| (rng.next_u64() as u32, (rng.next_u64() >> 32) as u32)).collect();
        for (i, (a, b)) in pairs.chain(random.iter().copied()).enumerate() {
            let reverse = i % 2 == 1;
            assert_eq!(run(&add, a, b, reverse), a.wrapping_add(b), "{a:#x} + {b:#x}");
            assert_eq!(run(&sub, a, b, reverse), a.wrapping_sub(b), "{a:#x} - {b:#x}");
        }
    }
}
