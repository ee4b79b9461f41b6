//! Shuffles inside the executor (`docs/qwengpu-second-machine.md` §18): `d = a` of another lane
//! of the warp, that lane chosen by the mode, the lane itself and `k` (the `b` operand).
//!
//! **Why the register rows hold the right word.** The model runs a block lane by lane; the
//! interpreter runs it instruction by instruction across the lanes. On a machine whose lanes
//! run in turn no block writes a register that a shuffle in it reads (`Inst::conflicts`, and
//! the lowering moves `x = shfl(x)` through the scratch register), so every lane's `a` is the
//! same before, during and after the block: what the register rows hold for it when the
//! shuffling lane runs, written by the VAL tokens of the steps before (and this step's earlier
//! lanes, which leave `a` alone). So a shuffle is a read of the register file at
//! `(warp, source lane, a)`, by a Gated DeltaNet mixer that holds the same rows as the file
//! (written by the same VAL tokens; a mixer's state is its own).
//!
//! **The source lane** (two layers beside the ALU's first two, on `B`'s limbs `k_0 … k_3`):
//! 1. `k_0 mod 4` one-hot (`idx` needs no more: `k mod 4` is the lowest limb's), `k_0` one-hot
//!    for `k_0 < 4`, and `hi = [k_1 + k_2 + k_3 ≥ 1]`.
//! 2. Per mode, lane and small `k` one AND unit sends 1 to the source's `(lane, half)` channel in
//!    each half's group: `up` reads `l − k` when `k ≤ l`, `down` `l + k` when below the lanes,
//!    `bfly` `l ^ k` when below the lanes, and each reads its own lane otherwise (`k` of 4 or
//!    more, `hi` among it), as the interpreter does.
//!
//! Every channel is a small integer, so every unit is exact (`limbs`).

use super::super::isa::Shfl;
use super::super::limbs::Layer;
use super::and_unit;
use alloc::vec;
use alloc::vec::Vec;

/// The offsets `k` below which a mode may read another lane: the machine's 4 lanes (and `idx`'s
/// `k mod 4` is the lowest limb's because 4 divides 256).
pub(crate) const SMALL: usize = 4;

/// A shuffle's channels (relative to the bias).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShuffleChannels {
    /// `B`'s lowest limb (the rest follow).
    pub b: usize,
    pub lanes: usize,
    /// `k_0 mod 4` one-hot, `k_0` one-hot below [`SMALL`], `hi`, then per half a `(lane, half)`
    /// group of `2 · lanes` with the source's channel set.
    pub first: usize,
}

impl ShuffleChannels {
    fn modulo(&self) -> usize {
        self.first
    }
    fn small(&self) -> usize {
        self.first + SMALL
    }
    fn hi(&self) -> usize {
        self.small() + SMALL
    }

    /// The source's `(lane, half)` group read by half `half`'s head.
    pub fn src(&self, half: usize) -> usize {
        self.hi() + 1 + 2 * self.lanes * half
    }

    /// Every channel an instruction leaves here (the next clears them).
    pub fn used(&self) -> core::ops::Range<usize> {
        self.first..self.src(2)
    }

    /// Layer 1: `k_0 mod 4`, `k_0` below 4, `hi`.
    pub fn offset(&self) -> Layer {
        let mut l = Layer::default();
        let modulo: Vec<Option<usize>> = (0..256).map(|v| Some(self.modulo() + v % SMALL)).chain([None]).collect();
        l.one_hot(&[(self.b, 1.0)], &modulo);
        let small: Vec<Option<usize>> = (0..SMALL).map(|v| Some(self.small() + v)).chain([None]).collect();
        l.one_hot(&[(self.b, 1.0)], &small);
        l.step(&[(self.b + 1, 1.0), (self.b + 2, 1.0), (self.b + 3, 1.0)], 1.0, &[(self.hi(), 1.0)]);
        l
    }

    /// Layer 2: the source lane in both halves' groups, from the mode flags (`modes[m]` for
    /// `SHFLS[m]`, the decoded source flags) and the lane one-hot (`lane(l)`).
    pub fn source(&self, modes: [usize; 4], lane: impl Fn(usize) -> usize) -> Layer {
        let mut l = Layer::default();
        let send = |l: &mut Layer, on: &[usize], off: &[usize], src: usize| {
            for half in 0..2 {
                and_unit(l, on, off, vec![(0, 1.0)], self.src(half) + 2 * src + half, 1.0);
            }
        };
        let n = self.lanes;
        for (m, &flag) in super::super::isa::SHFLS.iter().zip(&modes) {
            if *m == Shfl::Idx {
                for v in 0..SMALL {
                    send(&mut l, &[flag, self.modulo() + v], &[], v % n);
                }
                continue;
            }
            for me in 0..n {
                for k in 0..SMALL {
                    let from = match m {
                        Shfl::Up => me.checked_sub(k),
                        Shfl::Down => Some(me + k).filter(|&s| s < n),
                        _ => Some(me ^ k).filter(|&s| s < n),
                    };
                    send(&mut l, &[flag, lane(me), self.small() + k], &[self.hi()], from.unwrap_or(me));
                }
                // `k` of 4 or more (a high limb set, or the lowest limb 4 or more): the lane's
                // own register. Exactly one unit of the lane fires.
                send(&mut l, &[flag, lane(me), self.hi()], &[], me);
                let small: Vec<usize> = (0..SMALL).map(|k| self.small() + k).collect();
                send(&mut l, &[flag, lane(me)], &[&small[..], &[self.hi()]].concat(), me);
            }
        }
        l
    }
}
