//! Word-level circuits built from AND units (`net::Unit`), placed at given layer depths so that
//! independent circuits share layers. A word here is a list of nibble groups (least significant
//! first), so shifting by whole nibbles is only a different list.
//!
//! A circuit is *gated* by its inputs: a unit fires only when all its inputs are hot, so a
//! circuit whose operands were not routed to it (cold) leaves its outputs cold. That is how one
//! token's instruction selects its functional unit: the routing layer copies the operands into
//! that unit's inputs only, and the result multiplexer sums the one output that is hot.

use super::net::{Cond, Group, Layer, MemLayer, MlpLayer, Stream, Unit, Word};
use alloc::vec;
use alloc::vec::Vec;

/// Nibble groups, least significant first.
pub type Nibs = Vec<Group>;

pub fn nibs(w: Word) -> Nibs {
    (0..w.nibbles).map(|k| w.nibble(k)).collect()
}

pub fn is(g: Group, i: usize) -> Cond {
    Cond::Any(vec![g.ch(i)])
}

pub fn any_of(g: Group, which: impl Fn(usize) -> bool) -> Cond {
    Cond::Any((0..g.len).filter(|&i| which(i)).map(|i| g.ch(i)).collect())
}

/// Holds when the group has a value (it is hot iff its circuit is active).
pub fn active(g: Group) -> Cond {
    Cond::Any(g.all())
}

/// Every channel of the groups, in order (a word's, or a state row's value channels).
pub fn channels(groups: &[Group]) -> Vec<usize> {
    groups.iter().flat_map(|g| g.all()).collect()
}

/// What makes a state row's RMSNormGated scale exact for every row: one-channel groups that are
/// always hot, bringing the row's hot count to its `hot`, and a never-hot spare bringing its
/// width to `d_v`.
#[derive(Debug, Clone)]
pub struct Padding {
    pub hot: Vec<Group>,
    pub spare: Group,
}

impl Padding {
    pub fn groups(&self) -> Vec<Group> {
        self.hot.iter().copied().chain([self.spare]).collect()
    }
}

/// One condition holding when any of several `Any` conditions (on the same group) holds.
pub fn union(conds: &[Cond]) -> Cond {
    Cond::Any(conds.iter().flat_map(|c| if let Cond::Any(ch) = c { ch.clone() } else { vec![] }).collect())
}

/// One decoder layer: an optional DeltaNet token mixer, then an MLP (Qwen3.5's layer shape;
/// an empty sublayer is the identity).
#[derive(Default)]
struct Slot {
    mem: Option<MemLayer>,
    units: Vec<Unit>,
}

/// Layers under construction.
pub struct Builder {
    pub s: Stream,
    slots: Vec<Slot>,
    /// Added to every depth given (so a prologue can sit in front of a finished plan).
    pub offset: usize,
}

impl Builder {
    pub fn new() -> Builder {
        Builder { s: Stream::new(), slots: Vec::new(), offset: 0 }
    }

    /// Decoder layers so far.
    pub fn depth(&self) -> usize {
        self.slots.len().saturating_sub(self.offset)
    }

    fn slot(&mut self, at: usize) -> &mut Slot {
        let at = at + self.offset;
        while self.slots.len() <= at {
            self.slots.push(Slot::default());
        }
        &mut self.slots[at]
    }

    pub fn unit(&mut self, at: usize, conds: Vec<Cond>, writes: Vec<usize>) {
        self.slot(at).units.push(Unit { conds, writes });
    }

    /// Places a DeltaNet head as the token mixer of decoder layer `at` (before its MLP).
    pub fn mem(&mut self, at: usize, layer: MemLayer) {
        let slot = self.slot(at);
        assert!(slot.mem.is_none(), "decoder layer {at} already has a DeltaNet");
        slot.mem = Some(layer);
    }

    /// The finished sublayers in order (empty ones dropped) and the decoder-layer count.
    pub fn finish(self) -> (Stream, Vec<Layer>, usize) {
        let s = self.s;
        let depth = self.slots.len();
        let mut layers = Vec::new();
        for slot in self.slots {
            if let Some(m) = slot.mem {
                layers.push(Layer::Mem(m));
            }
            if !slot.units.is_empty() {
                layers.push(Layer::Mlp(MlpLayer::new(&s, &slot.units)));
            }
        }
        (s, layers, depth)
    }

    pub fn word(&mut self, name: &str, nibbles: usize) -> Nibs {
        nibs(self.s.word(name, nibbles))
    }

    /// `dst = src` group by group when `when` holds (one layer).
    pub fn copy(&mut self, at: usize, when: &[Cond], src: &[Group], dst: &[Group]) {
        for (sg, dg) in src.iter().zip(dst) {
            for d in 0..sg.len.min(dg.len) {
                let mut conds = when.to_vec();
                conds.push(is(*sg, d));
                self.unit(at, conds, vec![dg.ch(d)]);
            }
        }
    }

    /// `dst = value` when `when` holds (one layer).
    pub fn constant(&mut self, at: usize, when: &[Cond], value: u64, dst: &[Group]) {
        let writes = dst.iter().enumerate().map(|(k, g)| g.ch(((value >> (4 * k)) & 15) as usize)).collect();
        self.unit(at, when.to_vec(), writes);
    }

    /// A nibble-serial transducer, one layer per nibble from `at`: nibble k of `a` (and `b`)
    /// with state `states[k]` gives nibble k of `out` and `states[k + 1]`
    /// (`table(a, b, state) → (digit, state)`). `states[0]` must be set by the caller.
    pub fn chain(
        &mut self,
        at: usize,
        a: &[Group],
        b: Option<&[Group]>,
        states: &[Group],
        out: Option<&[Group]>,
        table: &dyn Fn(usize, usize, usize) -> (usize, usize),
    ) -> usize {
        for k in 0..a.len() {
            for i in 0..16 {
                for j in 0..if b.is_some() { 16 } else { 1 } {
                    for c in 0..states[k].len {
                        let mut conds = vec![is(a[k], i), is(states[k], c)];
                        if let Some(b) = b {
                            conds.push(is(b[k], j));
                        }
                        let (digit, next) = table(i, j, c);
                        let mut writes = vec![states[k + 1].ch(next)];
                        if let Some(out) = out {
                            writes.push(out[k].ch(digit));
                        }
                        self.unit(at + k, conds, writes);
                    }
                }
            }
        }
        at + a.len()
    }

    /// Padding for a state row whose value groups are `used`: see [`Padding`].
    pub fn padding(&mut self, prefix: &str, used: &[Group], hot: usize, d_v: usize) -> Padding {
        let pads: Vec<Group> = (used.len()..hot).map(|i| self.s.group(&alloc::format!("{prefix}pad{i}"), 1)).collect();
        let width = used.iter().chain(&pads).map(|g| g.len).sum::<usize>();
        let spare = self.s.group(&alloc::format!("{prefix}spare"), d_v - width);
        Padding { hot: pads, spare }
    }

    /// Carry groups for a chain over `n` nibbles.
    fn states(&mut self, name: &str, n: usize, len: usize) -> Vec<Group> {
        (0..=n).map(|k| self.s.group(&alloc::format!("{name}.{k}"), len)).collect()
    }

    /// A [`Builder::chain`] with its own state groups (`states` states at each nibble boundary),
    /// started in state 0 at depth `at − 1` when `when` holds. Returns the depth after it and the
    /// final state group.
    #[allow(clippy::too_many_arguments)]
    pub fn transducer(
        &mut self,
        at: usize,
        when: &[Cond],
        a: &[Group],
        b: Option<&[Group]>,
        out: Option<&[Group]>,
        states: usize,
        name: &str,
        table: &dyn Fn(usize, usize, usize) -> (usize, usize),
    ) -> (usize, Group) {
        let st = self.states(name, a.len(), states);
        self.unit(at - 1, when.to_vec(), vec![st[0].ch(0)]);
        (self.chain(at, a, b, &st, out, table), st[a.len()])
    }

    /// `out = a + b` (mod 16^n), the carry in set hot at depth `at − 1` when `when` holds.
    pub fn add(&mut self, at: usize, when: &[Cond], a: &[Group], b: &[Group], out: &[Group], name: &str) -> usize {
        self.transducer(at, when, a, Some(b), Some(out), 2, name, &|x, y, c| ((x + y + c) % 16, (x + y + c) / 16)).0
    }

    /// `out = a − b` (mod 16^n) and the final borrow (`a < b`), like [`Builder::add`].
    pub fn sub(
        &mut self,
        at: usize,
        when: &[Cond],
        a: &[Group],
        b: &[Group],
        out: &[Group],
        name: &str,
    ) -> (usize, Group) {
        self.transducer(at, when, a, Some(b), Some(out), 2, name, &|x, y, c| {
            if x >= y + c {
                (x - y - c, 0)
            } else {
                (x + 16 - y - c, 1)
            }
        })
    }

    /// Sets `flag[1]` when every nibble of `a` is 0, else `flag[0]` (two layers from `at`, the
    /// second only when `when` holds).
    pub fn is_zero(&mut self, at: usize, when: &[Cond], a: &[Group], flag: Group) -> usize {
        self.unit(at, a.iter().map(|g| is(*g, 0)).collect(), vec![flag.ch(1)]);
        let mut conds = when.to_vec();
        conds.push(Cond::None(vec![flag.ch(1)]));
        self.unit(at + 1, conds, vec![flag.ch(0)]);
        at + 2
    }

    /// Gives each cold nibble of `a` the digit 0 when `when` holds (a DeltaNet read of a row
    /// never written is cold: unwritten words read as 0).
    pub fn zero_if_cold(&mut self, at: usize, when: &[Cond], a: &[Group]) {
        for g in a {
            let mut conds = when.to_vec();
            conds.push(Cond::None(g.all()));
            self.unit(at, conds, vec![g.ch(0)]);
        }
    }

    /// `out = a · b` over `n = out.len()` nibbles (a and b zero-extended): one layer of nibble
    /// products (lo and hi digits as two words per digit of b), then a tree of adders.
    pub fn mul(&mut self, at: usize, a: &[Group], b: &[Group], out: &[Group], name: &str) -> usize {
        let n = out.len();
        let on = active(a[0]);
        let mut terms: Vec<Nibs> = Vec::new();
        for (j, bj) in b.iter().enumerate() {
            let lo = self.word(&alloc::format!("{name}.lo{j}"), n);
            let hi = self.word(&alloc::format!("{name}.hi{j}"), n);
            for k in 0..n {
                // Nibble k of lo_j is a_{k−j}·b_j mod 16, of hi_j is a_{k−j−1}·b_j / 16.
                for (word, i, part) in [(&lo, k.checked_sub(j), 0), (&hi, k.checked_sub(j + 1), 1)] {
                    match i.filter(|&i| i < a.len()) {
                        Some(i) => {
                            for x in 0..16 {
                                for y in 0..16 {
                                    let p = x * y;
                                    let digit = if part == 0 { p % 16 } else { p / 16 };
                                    self.unit(at, vec![is(a[i], x), is(*bj, y)], vec![word[k].ch(digit)]);
                                }
                            }
                        }
                        None => self.unit(at, vec![on.clone()], vec![word[k].ch(0)]),
                    }
                }
            }
            terms.push(lo);
            terms.push(hi);
        }
        self.sum_tree(at + 1, &on, terms, out, name)
    }

    /// Adds words pairwise until one is left, written to `out` (a power of two of them).
    pub fn sum_tree(&mut self, at: usize, on: &Cond, mut terms: Vec<Nibs>, out: &[Group], name: &str) -> usize {
        assert!(terms.len().is_power_of_two(), "{} terms", terms.len());
        let mut at = at;
        let mut level = 0;
        while terms.len() > 1 {
            let mut next = Vec::new();
            let pairs = terms.len() / 2;
            let mut end = at;
            for p in 0..pairs {
                let dst = if terms.len() == 2 {
                    out.to_vec()
                } else {
                    self.word(&alloc::format!("{name}.s{level}.{p}"), out.len())
                };
                end = self.add(
                    at,
                    core::slice::from_ref(on),
                    &terms[2 * p],
                    &terms[2 * p + 1],
                    &dst,
                    &alloc::format!("{name}.c{level}.{p}"),
                );
                next.push(dst);
            }
            terms = next;
            at = end;
            level += 1;
        }
        at
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}
