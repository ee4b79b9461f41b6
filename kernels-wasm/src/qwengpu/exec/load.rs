//! Global loads inside the executor (`docs/qwengpu-second-machine.md` §12): the word index
//! from the address the ALU's adder computes, then a Gated DeltaNet mixer that reads the word's
//! two halves from memory rows the prompt wrote.
//!
//! **The word index** `(addr / 4) mod n` (the interpreter's) is `(addr mod 4n) / 4`, and
//! `addr mod 4n = (Σ_k l_k · (256^k mod 4n)) mod 4n` over the address's limbs `l_k`.
//! - Layer 1: `t_k = (l_k · (256^k mod 4n)) mod 4n` for the three high limbs, each an integer
//!   function of one limb: one step unit per limb value, the differences telescoping.
//! - Layer 2: `s = l_0 + t_1 + t_2 + t_3` is below `256 + 3 · 4n`, and `(s mod 4n) / 4` as
//!   one-hot page and word-in-page groups, one step unit wherever a group's target changes.
//!
//! Every quantity is an integer below 2^11, so each step unit is exact (`limbs`).
//!
//! **The read** (`limb_memory`): rows `page × word × half` hold 16-bit halves as two limbs. The
//! prompt's memory tokens write them (the register file gives their address groups); a load
//! reads both halves where its source flag is 1. Each instruction has a mixer of its own, all
//! written alike, since a layer's state is its own.
//!
//! **Shared memory** (§14) has rows per thread block (`thread block × word × half`) in a second
//! mixer per instruction, after the global one; its word index `(addr / 4) mod 32` needs only
//! the address's lowest limb (one layer of step units beside the first index layer).
//!
//! **Stores** use the same address. The executor keeps each store instruction's word index and
//! word (`b`) in channels of its own for the step's tokens to carry (§12); the mixers write a
//! store's halves where its tokens come (§13: the register file gives their address groups as it
//! does for the prompt's memory tokens).
//!
//! **Atomics** (§16) are a load and a store: `d` gets the word read, and the word kept for the
//! tokens is that word plus `b`, from an adder in the two layers after the shared read. Lanes run
//! in turn and each lane's tokens write memory before the next lane computes, so a later lane's
//! atomic reads an earlier one's sum, as the interpreter's instruction order has it.

use super::super::deltanet::StateRows;
use super::super::limb_memory::{Digit, Head, Layout};
use super::super::limbs::{AdderChannels, Layer, LIMBS};
use super::super::register_file::MEMORY_GROUPS;
use alloc::vec;
use alloc::vec::Vec;

/// The load's channels (relative to the bias, as the executor's layers are built).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadChannels {
    /// The adder's result: the byte address.
    pub address: usize,
    /// `t_1`, `t_2`, `t_3`, then one-hot page and word-in-page, then the word read (four limbs),
    /// a store's word, the shared word one-hot ([`SHARED_WORDS`]), then an atomic's sum (four
    /// limbs) and its adder's scratch.
    pub first: usize,
}

/// Words of a thread block's shared memory as the executor indexes them: `(addr / 4) mod 32` is
/// bits 2–6 of the address's lowest limb, since 256 is a multiple of `4 · 32`.
pub const SHARED_WORDS: usize = 32;

impl LoadChannels {
    /// `t_k`, page, word, the word loaded, a store's word to write, the shared word, the sum.
    pub const LEN: usize = 3 + MEMORY_GROUPS[0] + MEMORY_GROUPS[1] + 2 * LIMBS + SHARED_WORDS + 3 * LIMBS;

    fn page(&self) -> usize {
        self.first + 3
    }
    fn word(&self) -> usize {
        self.page() + MEMORY_GROUPS[0]
    }
    pub fn loaded(&self) -> usize {
        self.word() + MEMORY_GROUPS[1]
    }
    /// A store's word (`v`: `b`'s register or immediate), four limbs.
    pub fn value(&self) -> usize {
        self.loaded() + LIMBS
    }

    /// The shared word one-hot.
    fn shared_word(&self) -> usize {
        self.value() + LIMBS
    }

    /// An atomic's new word: the word loaded plus `value` (`sum` then two layers' scratch).
    pub fn atomic(&self) -> AdderChannels {
        let sum = self.shared_word() + SHARED_WORDS;
        AdderChannels { a: self.loaded(), b: self.value(), r: sum, scratch: sum + LIMBS }
    }

    /// The shared word index as a sum of its one-hot group.
    pub fn shared_index_terms(&self) -> Vec<(usize, f32)> {
        (0..SHARED_WORDS).map(|w| (self.shared_word() + w, w as f32)).collect()
    }

    /// The word index as a sum of the page and word groups: `16·page + word`.
    pub fn index_terms(&self) -> Vec<(usize, f32)> {
        let [pages, per_page, _] = MEMORY_GROUPS;
        let page = (0..pages).map(|p| (self.page() + p, (per_page * p) as f32));
        page.chain((0..per_page).map(|w| (self.word() + w, w as f32))).collect()
    }

    /// The two index layers' units, for a memory of `words` words.
    pub fn index(&self, words: usize) -> [Layer; 2] {
        let m = 4 * words;
        let mut first = Layer::default();
        let mut weight = 1;
        for k in 1..LIMBS {
            weight = weight * 256 % m;
            let f = |v: usize| (v * weight % m) as f32;
            for v in 1..256 {
                first.step(&[(self.address + k, 1.0)], v as f32, &[(self.first + k - 1, f(v) - f(v - 1))]);
            }
        }
        // The shared word from the lowest limb alone.
        let shared: Vec<Option<usize>> =
            (0..256).map(|v| Some(self.shared_word() + v % (4 * SHARED_WORDS) / 4)).chain([None]).collect();
        first.one_hot(&[(self.address, 1.0)], &shared);
        let mut second = Layer::default();
        let terms = [(self.address, 1.0), (self.first, 1.0), (self.first + 1, 1.0), (self.first + 2, 1.0)];
        let span = 256 + 3 * m;
        // Page and word in the page of `(s mod 4n) / 4`.
        let per_page = MEMORY_GROUPS[1];
        for (at, page) in [(self.page(), true), (self.word(), false)] {
            let digit = |index: usize| if page { index / per_page } else { index % per_page };
            let targets: Vec<Option<usize>> = (0..span).map(|s| Some(at + digit(s % m / 4))).collect();
            second.one_hot(&terms, &targets);
        }
        [first, second]
    }

    /// Every channel an instruction leaves here (the next clears them).
    pub fn used(&self) -> core::ops::Range<usize> {
        self.first..self.first + Self::LEN
    }

    /// The mixer's layout: written at the prompt's memory tokens and a store's halves
    /// (`memory`: the register file's groups, `val`: the token's limbs), read where `flag` is 1;
    /// all absolute channels (bias `one`).
    pub fn layout(&self, d_model: usize, one: usize, memory: usize, val: [usize; 2], flag: usize) -> Layout {
        let [pages, per_page, _] = MEMORY_GROUPS;
        let write = [memory, memory + pages, memory + pages + per_page];
        let heads = (0..2)
            .map(|half| {
                let read = vec![Digit::Stream(one + self.page()), Digit::Stream(one + self.word()), Digit::Fixed(half)];
                let mut h = Head::new(&write, &[], read, one + self.loaded() + 2 * half);
                h.read_when = vec![flag];
                h
            })
            .collect();
        Layout { groups: MEMORY_GROUPS.to_vec(), d_model, one, value: val.to_vec(), heads }
    }

    /// The shared mixer's layout: rows `thread block × word × half` (`groups`, from `shared`,
    /// the register file's; the thread block one-hot is set at every position of a step, word
    /// and half at a shared store's halves), read at the step's thread block and the access's
    /// word where `flag` (a shared load) is 1.
    pub fn shared_layout(
        &self,
        d_model: usize,
        one: usize,
        (shared, groups): (usize, [usize; 3]),
        val: [usize; 2],
        flag: usize,
    ) -> Layout {
        let write = [shared, shared + groups[0], shared + groups[0] + groups[1]];
        let heads = (0..2)
            .map(|half| {
                let read = vec![Digit::Stream(shared), Digit::Stream(one + self.shared_word()), Digit::Fixed(half)];
                let mut h = Head::new(&write, &[], read, one + self.loaded() + 2 * half);
                h.read_when = vec![flag];
                h
            })
            .collect();
        Layout { groups: groups.to_vec(), d_model, one, value: val.to_vec(), heads }
    }
}

/// The first `words` words of global memory as a load mixer's state holds them (0 where a row
/// was never written; `None` where a row is not an exact limb row).
#[cfg(test)]
pub(crate) fn memory_words(net: &impl StateRows, layout: &Layout, words: usize) -> Option<Vec<u32>> {
    (0..words).map(|w| memory_word(net, layout, w)).collect()
}

/// Global word `w` as a load mixer's state holds it.
pub(crate) fn memory_word(net: &impl StateRows, layout: &Layout, w: usize) -> Option<u32> {
    let per_page = MEMORY_GROUPS[1];
    read_word(net, layout, [w / per_page, w % per_page])
}

/// Thread block `cta`'s shared words as a shared mixer's state holds them.
#[cfg(test)]
pub(crate) fn shared_words(net: &impl StateRows, layout: &Layout, cta: usize) -> Option<Vec<u32>> {
    read_words(net, layout, layout.groups[1], |w| [cta, w])
}

/// Word `k` from the rows `[address(k), half]` of head 0.
#[cfg(test)]
fn read_words(
    net: &impl StateRows,
    layout: &Layout,
    n: usize,
    address: impl Fn(usize) -> [usize; 2],
) -> Option<Vec<u32>> {
    (0..n).map(|w| read_word(net, layout, address(w))).collect()
}

/// The word in the rows `[a, b, half]` of head 0.
fn read_word(net: &impl StateRows, layout: &Layout, [a, b]: [usize; 2]) -> Option<u32> {
    super::super::limb_memory::word(net, layout, [0, 1].map(|half| layout.row(&[a, b, half])))
}
