//! The compiled machine's layers and the executor that runs them.
//!
//! The residual stream is a set of *groups*: each group is one-hot (one channel +A, the rest
//! −A) or cold (all −A, "no value"). A word is eight nibble groups of 16 channels. Because every
//! channel is ±A the mean square is A² whatever the data, so each layer's RMSNorm multiplies by
//! exactly 1/A and the normalised stream `n` is ±1 (see `alu`).
//!
//! Two layer types, both Qwen3.5's own, with computed weights:
//! - [`MlpLayer`], a SwiGLU MLP `x += W_down·(silu(W_gate·n) ⊙ W_up·n)` whose hidden units are
//!   AND gates: a [`Unit`] fires (`gate = 128`, `silu(128) = 128`) when each of its conditions
//!   holds and is silent otherwise (`gate ≤ −128`, `silu = −0` exactly, since `exp(128)`
//!   overflows); `W_up` is the constant channel (1) and `W_down` adds 128 to the channels it
//!   writes, turning a cold channel hot.
//! - [`MemLayer`], a Gated DeltaNet head whose state rows are words (`memory`): q, k and v are
//!   `(M/2)·(n + 1)` of one channel each (M where the channel is hot, 0 where cold), so a hot
//!   key channel writes its row and a hot query channel reads one.
//!
//! The executor computes exactly these formulas but skips terms that are zero: a cold channel
//! contributes a constant to every gate (folded into `base`), so only hot channels are visited;
//! a unit no hot channel reaches keeps `gate = base ≤ −128` and contributes `−0`. Every value in
//! play is an integer far below 2^24, so the order of the sums does not matter: the sparse
//! result is bit-identical to the dense one (`tests` check it against `alu::Mlp` and
//! `deltanet::DeltaNet`).

use super::alu::{Mlp, A};
pub use super::head::MemLayer;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// A one-hot run of channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub id: usize,
    pub at: usize,
    pub len: usize,
}

impl Group {
    pub fn ch(&self, i: usize) -> usize {
        debug_assert!(i < self.len);
        self.at + i
    }
    pub fn all(&self) -> Vec<usize> {
        (self.at..self.at + self.len).collect()
    }
}

/// A word of one-hot nibbles (groups `first .. first + nibbles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Word {
    pub first: usize,
    pub at: usize,
    pub nibbles: usize,
}

impl Word {
    pub fn digit(&self, k: usize, d: usize) -> usize {
        debug_assert!(k < self.nibbles && d < 16);
        self.at + 16 * k + d
    }
    pub fn nibble(&self, k: usize) -> Group {
        Group { id: self.first + k, at: self.at + 16 * k, len: 16 }
    }
}

/// The stream's layout: named groups in channel order.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    pub d: usize,
    /// Each group: name, first channel, length.
    pub groups: Vec<(String, usize, usize)>,
    /// The group of each channel.
    pub group_of: Vec<u32>,
}

impl Stream {
    /// A stream whose group 0 is the constant channel.
    pub fn new() -> Stream {
        let mut s = Stream::default();
        s.group("one", 1);
        s
    }
    pub const ONE: usize = 0;

    pub fn group(&mut self, name: &str, len: usize) -> Group {
        let g = Group { id: self.groups.len(), at: self.d, len };
        self.groups.push((name.into(), self.d, len));
        self.group_of.extend(core::iter::repeat_n(g.id as u32, len));
        self.d += len;
        g
    }

    pub fn word(&mut self, name: &str, nibbles: usize) -> Word {
        let first = self.groups.len();
        let at = self.d;
        for k in 0..nibbles {
            self.group(&alloc::format!("{name}.{k}"), 16);
        }
        Word { first, at, nibbles }
    }

    /// The name of a channel's group, for error messages.
    pub fn name(&self, ch: usize) -> &str {
        self.group_of.get(ch).map(|&g| self.groups[g as usize].0.as_str()).unwrap_or("?")
    }
}

/// A hidden unit's condition: one of the channels is hot, or none is. Each list lies in one
/// group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    Any(Vec<usize>),
    None(Vec<usize>),
}

/// An AND gate: fires when every condition holds, and then turns the `writes` channels hot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub conds: Vec<Cond>,
    pub writes: Vec<usize>,
}

/// What went wrong inside the layers (a compiler bug, never the program's fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("layer {layer}: {what}")]
pub struct StreamError {
    pub layer: usize,
    pub what: String,
}

/// The stream's state as the executor tracks it: the channels and, per group, its hot channel.
#[derive(Debug, Clone)]
pub struct State {
    pub x: Vec<f32>,
    pub hot: Vec<Option<u16>>,
    /// Groups made hot since the last `reset`.
    touched: Vec<u32>,
    /// A write failed part-way: the next reset clears every channel.
    dirty: bool,
}

impl State {
    /// Everything cold except the constant.
    pub fn new(s: &Stream) -> State {
        let mut st = State { x: vec![-A; s.d], hot: vec![None; s.groups.len()], touched: Vec::new(), dirty: false };
        st.set(s, 0);
        st
    }

    /// Back to `State::new` by undoing only what changed.
    pub fn reset(&mut self, s: &Stream) {
        if core::mem::take(&mut self.dirty) {
            self.touched.clear();
            self.x.iter_mut().for_each(|v| *v = -A);
            self.hot.iter_mut().for_each(|h| *h = None);
        }
        // A group holds −A everywhere but its hot channel: only that one goes back.
        for g in self.touched.drain(..) {
            if let Some(h) = self.hot[g as usize].take() {
                self.x[s.groups[g as usize].1 + h as usize] = -A;
            }
        }
        self.set(s, 0);
    }

    /// Turns channel `ch` hot (its group must be cold).
    pub fn set(&mut self, s: &Stream, ch: usize) {
        let g = s.group_of[ch] as usize;
        self.x[ch] = A;
        self.hot[g] = Some((ch - s.groups[g].1) as u16);
        self.touched.push(g as u32);
    }

    pub fn put(&mut self, s: &Stream, g: Group, i: usize) {
        self.set(s, g.ch(i))
    }

    pub fn put_word(&mut self, s: &Stream, w: Word, value: u64) {
        for k in 0..w.nibbles {
            self.set(s, w.digit(k, ((value >> (4 * k)) & 15) as usize));
        }
    }

    pub fn get(&self, g: Group) -> Option<usize> {
        self.hot[g.id].map(usize::from)
    }

    pub fn get_word(&self, w: Word) -> Option<u64> {
        (0..w.nibbles).try_fold(0u64, |acc, k| Some(acc | (self.hot[w.first + k]? as u64) << (4 * k)))
    }

    /// Checks that the tracked hot channels are the stream's: every channel ±A, one +A per hot
    /// group and none in a cold one.
    pub fn check(&self, s: &Stream, layer: usize) -> Result<(), StreamError> {
        let bad = |what: String| Err(StreamError { layer, what });
        for (g, (name, at, len)) in s.groups.iter().enumerate() {
            for i in 0..*len {
                let v = self.x[at + i];
                let want = if self.hot[g] == Some(i as u16) { A } else { -A };
                if v != want {
                    return bad(alloc::format!("channel {i} of {name} is {v}, expected {want}"));
                }
            }
        }
        Ok(())
    }

    pub(super) fn write(&mut self, s: &Stream, ch: usize, add: f32, layer: usize) -> Result<(), StreamError> {
        let g = s.group_of[ch] as usize;
        self.x[ch] += add;
        self.touched.push(g as u32);
        if self.x[ch] != A || self.hot[g].is_some() {
            self.dirty = true;
            return Err(StreamError {
                layer,
                what: alloc::format!("a second value written into {} (channel now {})", s.name(ch), self.x[ch]),
            });
        }
        self.hot[g] = Some((ch - s.groups[g].1) as u16);
        Ok(())
    }
}

/// SiLU, `x / (1 + exp(−x))` in f32. For |x| ≥ 104 the result is known without `exp`: for
/// x ≥ 104, `exp(−x)` is below half the smallest subnormal step of 1, so `1 + exp(−x)` rounds to
/// 1 and the result is x; for x ≤ −104, `exp(−x)` overflows to +inf and `x / inf` is −0. The
/// gates here are ±128 and beyond, so this skips nearly every `exp` and changes no bit (the tests
/// compare against `alu::Mlp`, which always calls `exp`).
pub(super) fn silu(x: f32) -> f32 {
    if x >= 104.0 {
        x
    } else if x <= -104.0 {
        -0.0
    } else {
        x / (1.0 + (-x).exp())
    }
}

/// One condition of a unit as the executor tests it: its group, the listed channels (a range
/// of `MlpLayer::offsets`, sorted offsets in the group) and their `W_gate` weight.
#[derive(Debug, Clone, Copy)]
struct Term {
    group: u32,
    first: u32,
    len: u32,
    w: f32,
}

/// An MLP sublayer of AND units. Each unit is filed under its most selective `Any` condition
/// (the pivot) and, within it, under the next most selective one in another group. A unit whose
/// pivot or second condition is cold misses a condition, so its gate is at most −128 and it
/// contributes `silu = −0`: the executor evaluates only the units filed under the hot channel of
/// both (and those with no `Any` condition), each with its full gate. Units are stored in that
/// order (a unit whose conditions list several channels once under each pair, at most 16), so
/// the units one token reaches lie side by side in memory.
#[derive(Debug, Clone)]
pub struct MlpLayer {
    pub units: usize,
    /// Per stored unit: its original index, all-cold gate, conditions
    /// (`terms[unit_terms[i]..unit_terms[i + 1]]`) and written channels.
    orig: Vec<u32>,
    base: Vec<f32>,
    unit_terms: Vec<u32>,
    terms: Vec<Term>,
    offsets: Vec<u16>,
    write_at: Vec<u32>,
    writes: Vec<u32>,
    /// Per pivot group: its id and where its channels start in `starts`; channel o's units are
    /// the buckets `starts[at + o]..starts[at + o + 1]`. A bucket is a second condition's group
    /// and where its channels start in `sstarts` (channel h's units: `sstarts[at2 + h]..
    /// sstarts[at2 + h + 1]`), or `NO_SECOND` and one range `sstarts[at2]..sstarts[at2 + 1]`.
    pivot: Vec<(u32, u32)>,
    starts: Vec<u32>,
    buckets: Vec<(u32, u32)>,
    sstarts: Vec<u32>,
    /// Stored units with no `Any` condition (they fire with every channel cold): the tail.
    always: u32,
    /// The weight on the constant channel, per original unit.
    bias: Vec<f32>,
    /// Units evaluated so far (for profiling).
    pub evaluated: u64,
    /// Scratch: the units that fired in this token.
    fired: Vec<(u32, f32)>,
}

struct Prepared {
    terms: Vec<(Term, Vec<u16>)>,
    pivot: Option<usize>,
    second: Option<usize>,
    base: f32,
}

const NO_SECOND: u32 = u32::MAX;

impl MlpLayer {
    pub fn new(s: &Stream, units: &[Unit]) -> MlpLayer {
        let mut prepared = Vec::with_capacity(units.len());
        let mut bias = Vec::with_capacity(units.len());
        for unit in units {
            // Weight ±128 on each listed channel; the constant puts the all-hit gate at 128.
            let (mut all_cold, mut any) = (0.0f32, 0usize);
            let mut terms: Vec<(Term, Vec<u16>)> = Vec::new();
            let mut ranked: Vec<(f32, usize)> = Vec::new();
            for c in &unit.conds {
                let (chans, w) = match c {
                    Cond::Any(ch) => (ch, 128.0),
                    Cond::None(ch) => (ch, -128.0),
                };
                let g = chans.first().map(|&ch| s.group_of[ch] as usize).unwrap_or(0);
                assert!(chans.iter().all(|&ch| s.group_of[ch] as usize == g), "a condition spans groups");
                let at = s.groups[g].1;
                let mut offsets: Vec<u16> = chans.iter().map(|&ch| (ch - at) as u16).collect();
                offsets.sort_unstable();
                all_cold -= w * chans.len() as f32;
                if matches!(c, Cond::Any(_)) {
                    any += 1;
                    ranked.push((chans.len() as f32 / s.groups[g].2 as f32, terms.len()));
                }
                terms.push((Term { group: g as u32, first: 0, len: offsets.len() as u32, w }, offsets));
            }
            // All hit: every Any list has one hot channel (+256 each from all cold).
            let b = 128.0 - 256.0 * any as f32 - all_cold;
            bias.push(b);
            // The most selective condition files the unit; the next one (in another group)
            // narrows the bucket, unless filing under every pair of their channels would copy
            // the unit more than 16 times.
            ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
            let pivot = ranked.first().map(|r| r.1);
            let second =
                pivot.and_then(|p| ranked.iter().skip(1).map(|r| r.1).find(|&t| terms[t].0.group != terms[p].0.group));
            let second = second.filter(|&t| pivot.is_some_and(|p| terms[p].1.len() * terms[t].1.len() <= 16));
            prepared.push(Prepared { terms, pivot, second, base: b + all_cold });
        }
        // Pivot order: (group, channel, second group, its channel) → units.
        let mut filed: Vec<(u32, u16, u32, u16, u32)> = Vec::new();
        let mut always = Vec::new();
        for (u, p) in prepared.iter().enumerate() {
            let Some(t) = p.pivot else {
                always.push(u as u32);
                continue;
            };
            let (pt, po) = (&p.terms[t].0, &p.terms[t].1);
            for &o in po {
                match p.second {
                    Some(t2) => {
                        filed.extend(p.terms[t2].1.iter().map(|&o2| (pt.group, o, p.terms[t2].0.group, o2, u as u32)))
                    }
                    None => filed.push((pt.group, o, NO_SECOND, 0, u as u32)),
                }
            }
        }
        filed.sort_unstable();
        let mut layer = MlpLayer {
            units: units.len(),
            orig: vec![],
            base: vec![],
            unit_terms: vec![0],
            terms: vec![],
            offsets: vec![],
            write_at: vec![0],
            writes: vec![],
            pivot: vec![],
            starts: vec![],
            buckets: vec![],
            sstarts: vec![],
            always: 0,
            bias,
            evaluated: 0,
            fired: Vec::new(),
        };
        let mut i = 0;
        while i < filed.len() {
            let g = filed[i].0;
            let at = layer.starts.len() as u32;
            layer.pivot.push((g, at));
            for o in 0..s.groups[g as usize].2 as u16 {
                layer.starts.push(layer.buckets.len() as u32);
                while i < filed.len() && filed[i].0 == g && filed[i].1 == o {
                    let g2 = filed[i].2;
                    layer.buckets.push((g2, layer.sstarts.len() as u32));
                    let same = |f: &(u32, u16, u32, u16, u32)| f.0 == g && f.1 == o && f.2 == g2;
                    let channels = if g2 == NO_SECOND { 1 } else { s.groups[g2 as usize].2 as u16 };
                    for o2 in 0..channels {
                        layer.sstarts.push(layer.orig.len() as u32);
                        while i < filed.len() && same(&filed[i]) && filed[i].3 == o2 {
                            layer.store(&prepared[filed[i].4 as usize], &units[filed[i].4 as usize], filed[i].4);
                            i += 1;
                        }
                    }
                    layer.sstarts.push(layer.orig.len() as u32);
                }
            }
            layer.starts.push(layer.buckets.len() as u32);
        }
        layer.always = layer.orig.len() as u32;
        for u in always {
            layer.store(&prepared[u as usize], &units[u as usize], u);
        }
        layer
    }

    fn store(&mut self, p: &Prepared, unit: &Unit, u: u32) {
        self.orig.push(u);
        self.base.push(p.base);
        for (t, o) in &p.terms {
            self.terms.push(Term { first: self.offsets.len() as u32, ..*t });
            self.offsets.extend(o);
        }
        self.unit_terms.push(self.terms.len() as u32);
        self.writes.extend(unit.writes.iter().map(|&c| c as u32));
        self.write_at.push(self.writes.len() as u32);
    }

    /// Nonzero weights: each unit's listed gate channels and constant, its up weight and the
    /// channels it writes.
    pub fn nonzero(&self) -> usize {
        let mut done = vec![false; self.units];
        let mut n = 0;
        for (i, &u) in self.orig.iter().enumerate() {
            if !core::mem::replace(&mut done[u as usize], true) {
                let terms = &self.terms[self.unit_terms[i] as usize..self.unit_terms[i + 1] as usize];
                n += terms.iter().map(|t| t.len as usize).sum::<usize>() + 2;
                n += (self.write_at[i + 1] - self.write_at[i]) as usize;
            }
        }
        n
    }

    /// Per pivot group: its id and how many units are filed under each of its channels.
    pub fn pivot_sizes(&self, s: &Stream) -> Vec<(usize, Vec<u32>)> {
        self.pivot
            .iter()
            .map(|&(g, at)| {
                let len = s.groups[g as usize].2;
                let units = |o: usize| -> u32 {
                    let k = at as usize + o;
                    (self.starts[k]..self.starts[k + 1])
                        .map(|b| {
                            let (g2, at2) = self.buckets[b as usize];
                            let n = if g2 == NO_SECOND { 1 } else { s.groups[g2 as usize].2 };
                            self.sstarts[at2 as usize + n] - self.sstarts[at2 as usize]
                        })
                        .sum()
                };
                (g as usize, (0..len).map(units).collect())
            })
            .collect()
    }

    /// `W_gate·n` of stored unit `i`: the all-cold gate plus 2w for each listed channel that is hot.
    fn gate(&self, i: usize, st: &State) -> f32 {
        let terms = &self.terms[self.unit_terms[i] as usize..self.unit_terms[i + 1] as usize];
        terms.iter().fold(self.base[i], |g, t| match st.hot[t.group as usize] {
            Some(h) if self.offsets[t.first as usize..(t.first + t.len) as usize].binary_search(&h).is_ok() => {
                g + 2.0 * t.w
            }
            _ => g,
        })
    }

    pub fn forward(&mut self, s: &Stream, st: &mut State, layer: usize) -> Result<(), StreamError> {
        let mut fired = core::mem::take(&mut self.fired);
        fired.clear();
        let mut eval = |range: core::ops::Range<usize>, st: &State| {
            for i in range {
                // W_up is the constant channel: up = 1.
                let h = silu(self.gate(i, st)) * 1.0;
                if h != 0.0 {
                    fired.push((i as u32, h));
                }
            }
        };
        let mut n = self.orig.len() - self.always as usize;
        for &(g, at) in &self.pivot {
            if let Some(h) = st.hot[g as usize] {
                let k = (at + h as u32) as usize;
                for &(g2, at2) in &self.buckets[self.starts[k] as usize..self.starts[k + 1] as usize] {
                    // A unit whose second condition is cold misses it: gate ≤ −128, silu = −0.
                    let j = match g2 {
                        NO_SECOND => at2 as usize,
                        _ => match st.hot[g2 as usize] {
                            Some(h2) => at2 as usize + h2 as usize,
                            None => continue,
                        },
                    };
                    let range = self.sstarts[j] as usize..self.sstarts[j + 1] as usize;
                    n += range.len();
                    eval(range, st);
                }
            }
        }
        eval(self.always as usize..self.orig.len(), st);
        self.evaluated += n as u64;
        let mut result = Ok(());
        for &(i, h) in &fired {
            for &c in &self.writes[self.write_at[i as usize] as usize..self.write_at[i as usize + 1] as usize] {
                if result.is_ok() {
                    result = st.write(s, c as usize, h, layer);
                }
            }
        }
        self.fired = fired;
        result
    }

    /// The same layer as dense matrices (for tests on small streams).
    pub fn dense(&self, s: &Stream) -> Mlp {
        let (d, hidden) = (s.d, self.units);
        let (mut gate, mut up, mut down) = (vec![0.0; hidden * d], vec![0.0; hidden * d], vec![0.0; d * hidden]);
        let mut done = vec![false; hidden];
        for (i, &u) in self.orig.iter().enumerate() {
            let u = u as usize;
            if core::mem::replace(&mut done[u], true) {
                continue;
            }
            for t in &self.terms[self.unit_terms[i] as usize..self.unit_terms[i + 1] as usize] {
                for &o in &self.offsets[t.first as usize..(t.first + t.len) as usize] {
                    gate[u * d + s.groups[t.group as usize].1 + o as usize] += t.w;
                }
            }
            gate[u * d] += self.bias[u];
            up[u * d] = 1.0;
            for &c in &self.writes[self.write_at[i] as usize..self.write_at[i + 1] as usize] {
                down[c as usize * hidden + u] = 1.0;
            }
        }
        Mlp { d_model: d, hidden, norm: vec![1.0; d], eps: 1e-6, gate, up, down }
    }
}

#[derive(Debug, Clone)]
pub enum Layer {
    Mlp(MlpLayer),
    Mem(MemLayer),
}

impl Layer {
    pub fn forward(&mut self, s: &Stream, st: &mut State, layer: usize) -> Result<(), StreamError> {
        match self {
            Layer::Mlp(l) => l.forward(s, st, layer),
            Layer::Mem(l) => l.forward(s, st, layer),
        }
    }

    pub fn nonzero(&self) -> usize {
        match self {
            Layer::Mlp(l) => l.nonzero(),
            Layer::Mem(l) => l.nonzero(),
        }
    }

    /// Parameters as a model card counts them (dense matrices).
    pub fn parameters(&self, d_model: usize) -> u64 {
        match self {
            Layer::Mlp(l) => d_model as u64 * (1 + 3 * l.units as u64),
            Layer::Mem(l) => l.parameters(d_model),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn dense_step(x: &mut [f32], f: impl FnOnce(&[f32]) -> Vec<f32>) {
        let ms = x.iter().fold(0.0, |a, v| a + v * v) / x.len() as f32;
        let r = 1.0 / (ms + 1e-6).sqrt();
        let n: Vec<f32> = x.iter().map(|v| v * r).collect();
        for (xi, yi) in x.iter_mut().zip(f(&n)) {
            *xi += yi;
        }
    }

    /// The shortcut SiLU is bit-for-bit the formula, across and around its cut-offs.
    #[test]
    fn silu_without_exp_is_the_formula() {
        let formula = |x: f32| x / (1.0 + (-x).exp());
        let mut x = -300.0f32;
        while x <= 300.0 {
            assert_eq!(silu(x).to_bits(), formula(x).to_bits(), "{x}");
            x += 0.125;
        }
        for x in [103.99f32, 104.0, 104.01, -103.99, -104.0, -104.01, 128.0, -128.0, 4096.0, -4096.0, 1e30, -1e30] {
            assert_eq!(silu(x).to_bits(), formula(x).to_bits(), "{x}");
        }
    }

    /// Random AND/NOR units over random one-hot inputs: the sparse executor equals the dense
    /// Qwen3.5 MLP (`alu::Mlp`) channel for channel.
    #[test]
    fn the_sparse_mlp_is_the_dense_mlp() {
        let mut rng = Rng::new(3);
        let mut s = Stream::new();
        let ins: Vec<Group> = (0..4).map(|i| s.group(&alloc::format!("in{i}"), 5)).collect();
        let outs: Vec<Group> = (0..40).map(|i| s.group(&alloc::format!("out{i}"), 3)).collect();
        let mut units = Vec::new();
        for (o, out) in outs.iter().enumerate() {
            // Unit o fires on a pattern that no other unit writing the same group shares.
            let (a, b) = (&ins[o % 4], &ins[(o + 1) % 4]);
            for (i, pick) in [(o % 5, 0), ((o + 2) % 5, 1)] {
                let conds = vec![Cond::Any(vec![a.ch(i)]), Cond::None(vec![b.ch(o % 5), b.ch((o + 1) % 5)])];
                units.push(Unit { conds, writes: vec![out.ch(pick)] });
            }
        }
        // Units with two `Any` conditions (filed by pivot and second condition): one fires per pair.
        for (p, (x, y)) in [(0, 1), (2, 3), (1, 3)].into_iter().enumerate() {
            let out = s.group(&alloc::format!("pair{p}"), 25);
            for i in 0..5 {
                for (j, set) in [vec![0, 1], vec![2, 3], vec![4]].into_iter().enumerate() {
                    let conds =
                        vec![Cond::Any(vec![ins[x].ch(i)]), Cond::Any(set.iter().map(|&c| ins[y].ch(c)).collect())];
                    units.push(Unit { conds, writes: vec![out.ch(i * 5 + j)] });
                }
            }
        }
        let mut layer = MlpLayer::new(&s, &units);
        let dense = layer.dense(&s);
        let fresh = State::new(&s);
        let mut reused = State::new(&s);
        for _ in 0..200 {
            // A reset state is a fresh one, channel for channel (the executor reuses one state).
            reused.reset(&s);
            assert_eq!((&reused.x, &reused.hot), (&fresh.x, &fresh.hot));
            let mut st = State::new(&s);
            for g in &ins {
                if !rng.next_u64().is_multiple_of(5) {
                    st.put(&s, *g, (rng.next_u64() % 5) as usize);
                }
            }
            let mut x = st.x.clone();
            dense.forward(&mut x);
            layer.forward(&s, &mut st, 0).unwrap();
            st.check(&s, 0).unwrap();
            assert_eq!(st.x, x);
            for (g, h) in st.hot.iter().enumerate().skip(1) {
                if let Some(h) = h {
                    reused.put(&s, Group { id: g, at: s.groups[g].1, len: s.groups[g].2 }, *h as usize);
                }
            }
            assert_eq!(reused.x, st.x);
        }
    }

    /// Writes and reads through the sparse head equal the dense Qwen3.5 Gated DeltaNet
    /// (`deltanet::DeltaNet`), state and output, step after step.
    #[test]
    fn the_sparse_head_is_the_dense_deltanet() {
        let mut rng = Rng::new(4);
        let mut s = Stream::new();
        let (wa, ra) = (s.group("write", 16), s.group("read", 16));
        let value = s.word("value", 4);
        let out = s.word("out", 4);
        let chans = |w: Word| (0..64).map(|j| w.at + j).collect::<Vec<_>>();
        let mut head = MemLayer::new(&s, 16, &ra.all(), &wa.all(), &chans(value), &chans(out), 4);
        let mut dense = head.dense(&s);
        let mut plain = [None::<u64>; 16];
        for _ in 0..300 {
            let mut st = State::new(&s);
            let write =
                (!rng.next_u64().is_multiple_of(3)).then(|| ((rng.next_u64() % 16) as usize, rng.next_u64() & 0xffff));
            if let Some((at, v)) = write {
                st.put(&s, wa, at);
                st.put_word(&s, value, v);
                plain[at] = Some(v);
            }
            let read = (rng.next_u64() % 4) as usize;
            st.put(&s, ra, read);
            let mut x = st.x.clone();
            dense_step(&mut x, |n| dense.step(n));
            head.forward(&s, &mut st, 0).unwrap();
            assert_eq!(st.x, x);
            assert_eq!(head.state, dense.state);
            // An unwritten row reads as nothing (cold), a written one as its word.
            assert_eq!(st.get_word(out), plain[read]);
        }
    }
}
