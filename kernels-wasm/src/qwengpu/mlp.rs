//! The AND-unit SwiGLU MLP sublayer (`net` gives the encoding) and how the executor evaluates
//! it without touching the units no hot channel reaches.
//!
//! Each unit is filed under its most selective `Any` condition (the *pivot*) and, within it,
//! under the next most selective one in another group (the *second*). A unit whose pivot or
//! second condition is cold misses a condition, so its gate is at most −128 and it contributes
//! `silu = −0`: only the units filed under the hot channel of both are evaluated (and those with
//! no `Any` condition), each with its full gate. A unit whose conditions list several channels
//! is stored once under each pair (at most 16 copies); one hot channel per group means at most
//! one copy is evaluated per token. A stored copy knows its pivot and second hold, so their
//! `+2w` is folded into its base and only its other conditions are tested: the gate is the same
//! sum of the same integers (all far below 2^24), so it is bit-identical to the dense product.

use super::alu::Mlp;
use super::net::{silu, Cond, Place, State, Stream, StreamError, Unit};
use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

/// One condition as the executor tests it: its group, the listed channels (a range of
/// `MlpLayer::offsets`, sorted offsets in the group) and their `W_gate` weight.
#[derive(Debug, Clone, Copy)]
struct Term {
    group: u32,
    first: u32,
    len: u32,
    w: f32,
}

/// A stored copy of a unit is a record of `u32` words in `MlpLayer::code`, laid out so that a
/// bucket's units, their conditions and their writes are read front to back:
/// `base (f32 bits) | conditions left | writes | per condition: group·2 + (w < 0), channel
/// count, the channels (offsets in the group) | per written channel: channel, group, offset`.
/// The base is the gate with the conditions the filing guarantees already added.
const HEAD: usize = 3;

/// An MLP sublayer of AND units, filed for the executor (see the module comment).
#[derive(Debug, Clone)]
pub struct MlpLayer {
    pub units: usize,
    pub(crate) code: Vec<u32>,
    /// The channel offsets of every unit's conditions (`terms` index them).
    offsets: Vec<u16>,
    /// Per original unit: every condition (`terms[unit_terms[u]..unit_terms[u + 1]]`), the
    /// weight on the constant channel, and the channels it writes.
    unit_terms: Vec<u32>,
    terms: Vec<Term>,
    bias: Vec<f32>,
    write_at: Vec<u32>,
    writes: Vec<u32>,
    /// Per pivot group: its id and where its channels start in `starts`; channel o's units are
    /// the buckets `starts[at + o]..starts[at + o + 1]`. A bucket is a second condition's group
    /// and where its channels start in `sstarts` (channel h's units: `sstarts[at2 + h]..
    /// sstarts[at2 + h + 1]`), or `NO_SECOND` and one range `sstarts[at2]..sstarts[at2 + 1]`.
    pub(crate) pivot: Vec<(u32, u32)>,
    pub(crate) starts: Vec<u32>,
    pub(crate) buckets: Vec<(u32, u32)>,
    pub(crate) sstarts: Vec<u32>,
    /// Stored units with no `Any` condition (they fire with every channel cold): the tail.
    pub(crate) always: u32,
    /// Units evaluated so far (for profiling).
    pub evaluated: u64,
    /// Scratch: the units that fired in this token, and the hot pivot entries.
    fired: Vec<(u32, u32, f32)>,
    hot: Vec<u32>,
}

struct Prepared {
    pivot: Option<usize>,
    second: Option<usize>,
}

pub(crate) const NO_SECOND: u32 = u32::MAX;

impl MlpLayer {
    pub fn new(s: &Stream, units: &[Unit]) -> MlpLayer {
        let mut layer = MlpLayer {
            units: units.len(),
            code: vec![],
            offsets: vec![],
            unit_terms: vec![0],
            terms: vec![],
            bias: vec![],
            write_at: vec![0],
            writes: vec![],
            pivot: vec![],
            starts: vec![],
            buckets: vec![],
            sstarts: vec![],
            always: 0,
            evaluated: 0,
            fired: Vec::new(),
            hot: Vec::new(),
        };
        // How many units list each channel in an `Any` condition: per channel of its group, a
        // condition shares a bucket with that many units (one every unit lists, like "an EXEC
        // token", separates nothing).
        let mut listed: BTreeMap<usize, u32> = BTreeMap::new();
        for unit in units {
            for c in &unit.conds {
                if let Cond::Any(chans) = c {
                    chans.iter().for_each(|&ch| *listed.entry(ch).or_default() += 1);
                }
            }
        }
        let mut prepared = Vec::with_capacity(units.len());
        for unit in units {
            // Weight ±128 on each listed channel; the constant puts the all-hit gate at 128.
            let (mut all_cold, mut any) = (0.0f32, 0usize);
            let mut ranked: Vec<(f32, f32, usize)> = Vec::new();
            for (i, c) in unit.conds.iter().enumerate() {
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
                    let shared: u32 = chans.iter().map(|ch| listed.get(ch).copied().unwrap_or(0)).sum();
                    ranked.push((shared as f32 / s.groups[g].2 as f32, chans.len() as f32 / s.groups[g].2 as f32, i));
                }
                let first = layer.offsets.len() as u32;
                layer.offsets.extend(offsets);
                layer.terms.push(Term { group: g as u32, first, len: chans.len() as u32, w });
            }
            layer.unit_terms.push(layer.terms.len() as u32);
            // All hit: every Any list has one hot channel (+256 each from all cold).
            layer.bias.push(128.0 - 256.0 * any as f32 - all_cold);
            layer.writes.extend(unit.writes.iter().map(|&c| c as u32));
            layer.write_at.push(layer.writes.len() as u32);
            // The pivot files the unit and decides which tokens wake the layer: the condition
            // least likely to hold (the fewest of its group's channels). A second condition in
            // another group narrows the bucket (unless filing under every pair of their channels
            // would copy the unit more than 16 times): the one that separates the most of this
            // layer's units.
            let terms = layer.unit_terms(prepared.len());
            ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)));
            let pivot = ranked.first().map(|r| r.2);
            ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            let second = pivot.and_then(|p| ranked.iter().map(|r| r.2).find(|&t| terms[t].group != terms[p].group));
            let second = second.filter(|&t| pivot.is_some_and(|p| terms[p].len * terms[t].len <= 16));
            prepared.push(Prepared { pivot, second });
        }
        // Pivot order: (group, channel, second group, its channel) → units.
        let mut filed: Vec<(u32, u16, u32, u16, u32)> = Vec::new();
        let mut always = Vec::new();
        for (u, p) in prepared.iter().enumerate() {
            let terms = layer.unit_terms(u);
            let Some(t) = p.pivot else {
                always.push(u as u32);
                continue;
            };
            for &o in layer.channels(&terms[t]) {
                match p.second {
                    Some(t2) => filed.extend(
                        layer.channels(&terms[t2]).iter().map(|&o2| (terms[t].group, o, terms[t2].group, o2, u as u32)),
                    ),
                    None => filed.push((terms[t].group, o, NO_SECOND, 0, u as u32)),
                }
            }
        }
        filed.sort_unstable();
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
                        layer.sstarts.push(layer.code.len() as u32);
                        while i < filed.len() && same(&filed[i]) && filed[i].3 == o2 {
                            let u = filed[i].4 as usize;
                            layer.store(s, u, [prepared[u].pivot, prepared[u].second]);
                            i += 1;
                        }
                    }
                    layer.sstarts.push(layer.code.len() as u32);
                }
            }
            layer.starts.push(layer.buckets.len() as u32);
        }
        layer.always = layer.code.len() as u32;
        for u in always {
            layer.store(s, u as usize, [None, None]);
        }
        layer
    }

    fn unit_terms(&self, u: usize) -> &[Term] {
        &self.terms[self.unit_terms[u] as usize..self.unit_terms[u + 1] as usize]
    }

    fn channels(&self, t: &Term) -> &[u16] {
        &self.offsets[t.first as usize..(t.first + t.len) as usize]
    }

    /// Stores a copy of unit `u` whose filing guarantees the conditions `held` (their `+2w`
    /// goes into the base).
    fn store(&mut self, s: &Stream, u: usize, held: [Option<usize>; 2]) {
        let writes = self.write_at[u] as usize..self.write_at[u + 1] as usize;
        let mut record = vec![0, 0, writes.len() as u32];
        let mut base = self.bias[u];
        for (i, t) in self.unit_terms(u).iter().enumerate() {
            // The all-cold gate: every listed channel at −1.
            base -= t.w * t.len as f32;
            if held.contains(&Some(i)) {
                base += 2.0 * t.w;
            } else {
                record[1] += 1;
                record.extend([t.group * 2 + u32::from(t.w < 0.0), t.len]);
                record.extend(self.channels(t).iter().map(|&o| o as u32));
            }
        }
        record[0] = base.to_bits();
        for &c in &self.writes[writes] {
            let p = Place::of(s, c as usize);
            record.extend([p.ch, p.group, p.offset]);
        }
        self.code.extend(record);
    }

    /// Nonzero weights: each unit's listed gate channels and constant, its up weight and the
    /// channels it writes.
    pub fn nonzero(&self) -> usize {
        (0..self.units)
            .map(|u| {
                let listed: usize = self.unit_terms(u).iter().map(|t| t.len as usize).sum();
                listed + 2 + (self.write_at[u + 1] - self.write_at[u]) as usize
            })
            .sum()
    }

    /// The groups units are filed under, each with where its channels' entries start: the
    /// entry of channel h is `at + h` (what [`MlpLayer::forward_hot`] takes).
    pub fn pivot_groups(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.pivot.iter().map(|&(g, at)| (g as usize, at))
    }

    /// Whether the layer has units that fire with every channel cold (it must always run).
    pub fn has_always(&self) -> bool {
        (self.always as usize) < self.code.len()
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

    /// Evaluates the records in `code[range]`: `W_gate·n` is a record's base plus 2w for each
    /// condition left whose listed channel is hot; a unit that fires is noted with where its
    /// writes are. Returns how many records it read.
    fn eval(&self, range: core::ops::Range<usize>, st: &State, fired: &mut Vec<(u32, u32, f32)>) -> usize {
        let (code, mut i, mut n) = (&self.code, range.start, 0);
        while i < range.end {
            let (mut gate, left, writes) = (f32::from_bits(code[i]), code[i + 1], code[i + 2]);
            i += HEAD;
            for _ in 0..left {
                let (gw, len) = (code[i], code[i + 1] as usize);
                let chans = &code[i + 2..i + 2 + len];
                if let Some(h) = st.hot[(gw >> 1) as usize] {
                    if chans.contains(&(h as u32)) {
                        gate += if gw & 1 == 0 { 256.0 } else { -256.0 };
                    }
                }
                i += 2 + len;
            }
            // W_up is the constant channel: up = 1.
            let h = silu(gate) * 1.0;
            if h != 0.0 {
                fired.push((i as u32, writes, h));
            }
            i += 3 * writes as usize;
            n += 1;
        }
        n
    }

    /// The layer, scanning every pivot group for a hot channel.
    pub fn forward(&mut self, s: &Stream, st: &mut State, layer: usize) -> Result<(), StreamError> {
        let mut hot = core::mem::take(&mut self.hot);
        hot.clear();
        hot.extend(self.pivot.iter().filter_map(|&(g, at)| st.hot[g as usize].map(|h| at + h as u32)));
        let result = self.forward_hot(s, st, layer, &hot);
        self.hot = hot;
        result
    }

    /// The layer, given the entries of the pivot groups' hot channels (each once, any order;
    /// `Schedule` knows them without a scan). Missing one would skip units that fire: the
    /// caller's promise.
    pub fn forward_hot(&mut self, s: &Stream, st: &mut State, layer: usize, hot: &[u32]) -> Result<(), StreamError> {
        let mut fired = core::mem::take(&mut self.fired);
        fired.clear();
        let mut n = 0;
        for &k in hot {
            let k = k as usize;
            for &(g2, at2) in &self.buckets[self.starts[k] as usize..self.starts[k + 1] as usize] {
                // A unit whose second condition is cold misses it: gate ≤ −128, silu = −0.
                let j = match g2 {
                    NO_SECOND => at2 as usize,
                    _ => match st.hot[g2 as usize] {
                        Some(h2) => at2 as usize + h2 as usize,
                        None => continue,
                    },
                };
                n += self.eval(self.sstarts[j] as usize..self.sstarts[j + 1] as usize, st, &mut fired);
            }
        }
        n += self.eval(self.always as usize..self.code.len(), st, &mut fired);
        self.evaluated += n as u64;
        let mut result = Ok(());
        for &(at, len, h) in &fired {
            for p in self.code[at as usize..(at + 3 * len) as usize].chunks_exact(3) {
                if result.is_ok() {
                    result = st.write(s, Place { ch: p[0], group: p[1], offset: p[2] }, h, layer);
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
        for u in 0..hidden {
            for t in self.unit_terms(u) {
                for &o in self.channels(t) {
                    gate[u * d + s.groups[t.group as usize].1 + o as usize] += t.w;
                }
            }
            gate[u * d] += self.bias[u];
            up[u * d] = 1.0;
            for &c in &self.writes[self.write_at[u] as usize..self.write_at[u + 1] as usize] {
                down[c as usize * hidden + u] = 1.0;
            }
        }
        Mlp { d_model: d, hidden, norm: vec![1.0; d], eps: 1e-6, gate, up, down }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::net::Group;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

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
            // The pivot entries handed over in another order (as `Schedule` does) change nothing.
            let mut scheduled = st.clone();
            let mut hot: Vec<u32> =
                layer.pivot_groups().filter_map(|(g, at)| st.hot[g].map(|h| at + h as u32)).collect();
            hot.reverse();
            layer.forward(&s, &mut st, 0).unwrap();
            st.check(&s, 0).unwrap();
            assert_eq!(st.x, x);
            layer.forward_hot(&s, &mut scheduled, 0, &hot).unwrap();
            assert_eq!(scheduled.x, x);
            for (g, h) in st.hot.iter().enumerate().skip(1) {
                if let Some(h) = h {
                    reused.put(&s, Group { id: g, at: s.groups[g].1, len: s.groups[g].2 }, *h as usize);
                }
            }
            assert_eq!(reused.x, st.x);
        }
    }
}
