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
//!
//! Across layers the executor follows the hot channels instead of the layers ([`Schedule`]): a
//! group turning hot wakes the later MLP layers that file units under it (see `mlp`), and a
//! layer nothing woke has no unit that can fire, so it is skipped whole. A token makes about a
//! hundred groups hot and the layers file units under about 2,200, so this is most of a scan
//! saved, with the same units evaluated.

use super::alu::A;
pub use super::head::MemLayer;
pub use super::mlp::MlpLayer;
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

    /// The groups made hot since the last `reset`, in order (a group may repeat only after a
    /// failed write).
    pub fn touched(&self) -> &[u32] {
        &self.touched
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

    /// Adds `add` to a channel (its group and offset known: the layers store them), which must
    /// turn it from −A to +A in a cold group.
    pub(super) fn write(&mut self, s: &Stream, p: Place, add: f32, layer: usize) -> Result<(), StreamError> {
        let (ch, g) = (p.ch as usize, p.group as usize);
        self.x[ch] += add;
        self.touched.push(g as u32);
        if self.x[ch] != A || self.hot[g].is_some() {
            self.dirty = true;
            return Err(StreamError {
                layer,
                what: alloc::format!("a second value written into {} (channel now {})", s.name(ch), self.x[ch]),
            });
        }
        self.hot[g] = Some(p.offset as u16);
        Ok(())
    }
}

/// A channel with its group and its offset in the group, as the layers store what they write
/// (the executor then needs no lookup to mark the group hot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub ch: u32,
    pub group: u32,
    pub offset: u32,
}

impl Place {
    pub fn of(s: &Stream, ch: usize) -> Place {
        let g = s.group_of[ch] as usize;
        Place { ch: ch as u32, group: g as u32, offset: (ch - s.groups[g].1) as u32 }
    }
}

/// SiLU, `x / (1 + exp(−x))` in f32. For |x| ≥ 104 the result is known without `exp`: for
/// x ≥ 104, `exp(−x)` is below half the smallest subnormal step of 1, so `1 + exp(−x)` rounds to
/// 1 and the result is x; for x ≤ −104, `exp(−x)` overflows to +inf and `x / inf` is −0. The
/// gates here are ±128 and beyond, so this skips nearly every `exp` and changes no bit (the tests
/// compare against `alu::Mlp`, which always calls `exp`).
pub(crate) fn silu(x: f32) -> f32 {
    if x >= 104.0 {
        x
    } else if x <= -104.0 {
        -0.0
    } else {
        x / (1.0 + (-x).exp())
    }
}

#[derive(Debug, Clone)]
pub enum Layer {
    Mlp(MlpLayer),
    Mem(MemLayer),
}

impl Layer {
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

/// Which MLP layers a token's hot groups reach, found by following each group as it turns hot
/// rather than by scanning every layer's pivot groups (see the module comment).
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Per group: the layers that file units under it, each with where the group's entries
    /// start in that layer (`watch[watch_at[g]..watch_at[g + 1]]`, by layer).
    watch_at: Vec<u32>,
    watch: Vec<(u32, u32)>,
    /// Per layer: the entries of the hot channels woken in this token.
    woken: Vec<Vec<u32>>,
    /// Whether a layer has units that fire with every channel cold (run whatever is woken).
    always: Vec<bool>,
}

impl Schedule {
    pub fn new(s: &Stream, layers: &[Layer]) -> Schedule {
        let mut pairs: Vec<(u32, u32, u32)> = Vec::new();
        for (l, layer) in layers.iter().enumerate() {
            if let Layer::Mlp(m) = layer {
                pairs.extend(m.pivot_groups().map(|(g, at)| (g as u32, l as u32, at)));
            }
        }
        pairs.sort_unstable();
        let mut watch_at = vec![0u32; s.groups.len() + 1];
        for &(g, _, _) in &pairs {
            watch_at[g as usize + 1] += 1;
        }
        for g in 0..s.groups.len() {
            watch_at[g + 1] += watch_at[g];
        }
        Schedule {
            watch_at,
            watch: pairs.iter().map(|&(_, l, p)| (l, p)).collect(),
            woken: vec![Vec::new(); layers.len()],
            always: layers.iter().map(|l| matches!(l, Layer::Mlp(m) if m.has_always())).collect(),
        }
    }

    /// Wakes, for each group made hot since `touched[*seen]`, the layers after `after` that
    /// file units under it.
    fn wake(&mut self, st: &State, seen: &mut usize, after: Option<usize>) {
        for &g in &st.touched()[*seen..] {
            let Some(h) = st.hot[g as usize] else { continue };
            let watchers = &self.watch[self.watch_at[g as usize] as usize..self.watch_at[g as usize + 1] as usize];
            // Watchers are in layer order: the layers at or before `after` have run.
            let first = after.map_or(0, |a| watchers.partition_point(|&(l, _)| l as usize <= a));
            for &(l, at) in &watchers[first..] {
                self.woken[l as usize].push(at + h as u32);
            }
        }
        *seen = st.touched().len();
    }

    /// One token through every layer: the stream `st` holds its input record.
    pub fn forward(&mut self, s: &Stream, st: &mut State, layers: &mut [Layer]) -> Result<(), StreamError> {
        self.woken.iter_mut().for_each(Vec::clear);
        let mut seen = 0;
        self.wake(st, &mut seen, None);
        for (i, layer) in layers.iter_mut().enumerate() {
            match layer {
                Layer::Mlp(m) => {
                    let woken = core::mem::take(&mut self.woken[i]);
                    #[cfg(test)]
                    self.check(m, st, &woken, i);
                    let result = match woken.is_empty() && !self.always[i] {
                        true => Ok(()),
                        false => m.forward_hot(s, st, i, &woken),
                    };
                    self.woken[i] = woken;
                    result?;
                }
                Layer::Mem(h) => h.forward(s, st, i)?,
            }
            self.wake(st, &mut seen, Some(i));
        }
        Ok(())
    }

    /// Tests: the woken entries are exactly those of the pivot groups' hot channels (what a
    /// scan of the layer finds), each once.
    #[cfg(test)]
    fn check(&self, m: &MlpLayer, st: &State, woken: &[u32], layer: usize) {
        let mut got = woken.to_vec();
        got.sort_unstable();
        let want: Vec<u32> = m.pivot_groups().filter_map(|(g, at)| st.hot[g].map(|h| at + h as u32)).collect();
        assert_eq!(got, want, "layer {layer}: woken entries");
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
