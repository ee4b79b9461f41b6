//! The next record, named by the spliced model's own argmax (issue #22,
//! `docs/qwengpu-second-machine.md` §26): [`sequencer`](super::sequencer)'s rule computed by
//! the layers from the PC rows (`pc_rows`), at a step's last position, so that the model chooses
//! every record of a launch as it chooses the VAL tokens.
//!
//! The PC rows' heads read every lane's PC of every warp of the step's thread block: `p_{j,l}`,
//! 8 warps × 4 lanes, each an integer in `0..=64` (64 an exited lane, and an unwritten row 0).
//! At the step's last position they hold the step's own writes. Three SwiGLU layers:
//! 1. [`NextRecord::minima`] (the PC rows' MLP): per warp the two pairs' minima, `min(a, b) = a −
//!    relu(a − b)` (`relu` exact on integers: `silu(256·s)/256` is `s` from `s = 1` on, and ±0
//!    at and below 0), and its exited lanes `x_j = Σ_l [p_{j,l} ≥ 64]`, plus 4 for a warp past
//!    the thread block's (`ntid ≤ 4j`: its rows are never written and read 0). Beside them the
//!    flags `last` (an executed step's position with no next slot, `run − next ≥ 1`) and
//!    `first` (the prompt's last position: the launch part's last word, the 18th VAL token after
//!    the launch record, `register_file::RegisterFile::prompt_tokens`). The exited lanes and the flags reuse channels that the
//!    PC rows' layer has spent (`PcRows::scratch`): the stream has 1,728 machine channels.
//! 2. [`NextRecord::choose`]: each warp's lowest PC `m_j`, written over its first pair's minimum,
//!    and `sel_j`, the warp that runs next, over the second's (a channel is rewritten by adding
//!    the new value minus the old, both exact integers). With `D_j = 4 − x_j` (0 for a finished
//!    warp, at least 1 for a live one), every case of the rule is one threshold: for the warp
//!    `i` that ran and a candidate `j = i + k` (mod 8), the conditions that must hold (the
//!    position is `last`, `i` is the step's warp, the block ended in `bar` or not) and the warps
//!    that must be finished (those between `i` and `j`, and `i` itself when the switch is an
//!    exit) give `s = D_j − 5·Σ D_dead + 5·(Σ conditions − count) ≥ 1`, because `D_j ≤ 4`: one
//!    unfinished warp or one failed condition takes at least 5. Likewise `next_cta` (no warp
//!    left and `grid − cta ≥ 2`) and `done` (none left, the last thread block).
//! 3. [`NextRecord::output`] (in the final layer, beside the results' output): where `last` or
//!    `first` holds, the kind channel goes to 1 and the record's fields to the chosen record's:
//!    warp `warp − place + j` and block `m_j` for the `j` with `sel_j`, the mask `Σ_l 2^l·[sel_j
//!    ∧ p_{j,l} ≤ m_j]`; the next thread block's first warp at block 0 with every lane; the
//!    launch's end, [`END`]; or after the prompt warp 0 at block 0 with every lane. Each
//!    product with a flag is a gated unit (`exec::and_unit`), exact for the integers here.
//!
//! Warps past the thread block count as finished, so the cyclic search over 8 warps is the
//! interpreter's over the block's `ntid / 4`.

use super::exec::and_unit;
use super::limbs::{Layer, Unit};
use super::machine_tokens::Token;
use super::pc_rows::PcRows;
use super::register_file::LAUNCH_WORDS;
use super::sequencer::EXITED;
use alloc::vec;
use alloc::vec::Vec;

/// The record the model names after a launch's last step: a mask of no lanes in a warp that
/// no prompt record uses (0 to 4 are the image's, the launch's, memory's and the reset's).
pub const END: Token = Token::Record { warp: END_WARP, block: 0, mask: 0 };
const END_WARP: u32 = 5;

/// The next record's channels, after the PC rows'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NextRecord {
    pub pcs: PcRows,
    /// `results::Results::next`: 1 where the step has a next slot.
    pub next: usize,
    /// The vocabulary's record fields (warp, block, mask), which the head reads.
    pub fields: [usize; 3],
    /// Its own channels from here ([`Self::len`]).
    pub first: usize,
}

impl NextRecord {
    fn warps(&self) -> usize {
        self.pcs.warps()
    }
    fn lanes(&self) -> usize {
        self.pcs.registers.shape.lanes
    }
    /// Per warp two channels: the pairs' minima, then `m_j` and `sel_j`.
    fn pair(&self, j: usize, k: usize) -> usize {
        self.first + 2 * j + k
    }
    fn low(&self, j: usize) -> usize {
        self.pair(j, 0)
    }
    fn sel(&self, j: usize) -> usize {
        self.pair(j, 1)
    }
    /// Exited lanes per warp, then the flags, in the PC rows' spent channels
    /// ([`PcRows::scratch`]): each is rewritten (its old value taken away) where it is set.
    fn exited(&self, j: usize) -> usize {
        self.pcs.scratch().start + j
    }
    fn last(&self) -> usize {
        self.exited(self.warps())
    }
    fn first_record(&self) -> usize {
        self.last() + 1
    }
    fn next_cta(&self) -> usize {
        self.last() + 2
    }
    fn done(&self) -> usize {
        self.last() + 3
    }
    /// The spent channels it takes.
    pub fn scratch(&self) -> core::ops::Range<usize> {
        self.exited(0)..self.done() + 1
    }
    pub fn len(&self) -> usize {
        2 * self.warps()
    }
    pub fn is_empty(&self) -> bool {
        false
    }

    fn at(&self, c: usize) -> usize {
        c - self.pcs.registers.one
    }
    fn p(&self, j: usize, l: usize) -> usize {
        self.at(self.pcs.read() + self.lanes() * j + l)
    }
    /// `ntid`, the grid, the step's thread block and its warp's first thread index.
    fn launch(&self) -> [usize; 4] {
        let rf = &self.pcs.registers;
        [rf.launch(), rf.launch() + 3, rf.thread() + 1, rf.thread()].map(|c| self.at(c))
    }

    /// Layer 1: the pairs' minima, the exited lanes, `last` and `first`.
    pub fn minima(&self) -> Layer {
        assert_eq!(self.lanes(), 4, "the record's mask field has four lane bits");
        let rf = &self.pcs.registers;
        let mut l = Layer::default();
        for c in self.exited(0)..self.next_cta() {
            rewrite(&mut l, self.at(c));
        }
        let [ntid, ..] = self.launch();
        for j in 0..self.warps() {
            for k in 0..2 {
                let (a, b, to) = (self.p(j, 2 * k), self.p(j, 2 * k + 1), self.at(self.pair(j, k)));
                l.pass(&[(a, 1.0)], &[(to, 1.0)]);
                relu(&mut l, &[(a, 1.0), (b, -1.0)], to, -1.0);
            }
            let x = self.at(self.exited(j));
            for lane in 0..4 {
                l.step(&[(self.p(j, lane), 1.0)], f32::from(EXITED), &[(x, 1.0)]);
            }
            l.step(&[(ntid, -1.0)], -((4 * j) as f32), &[(x, 4.0)]);
        }
        let last = self.at(self.last());
        l.step(&[(self.at(rf.run_flag()), 1.0), (self.at(self.next), -1.0)], 1.0, &[(last, 1.0)]);
        // The prompt's last token: the launch part's last word (`RegisterFile::prompt_tokens`),
        // the only VAL token in that slot after a launch record `(warp 2, block 0, mask 0)` (not
        // a step of warp 2, which runs).
        let mut end = [rf.warp() + 2, rf.slot + LAUNCH_WORDS].map(|c| (self.at(c), 1.0)).to_vec();
        end.push((self.at(rf.run_flag()), -2.0));
        l.step(&end, 2.0, &[(self.at(self.first_record()), 1.0)]);
        l.shifted(rf.one)
    }

    /// Layer 2: each warp's lowest PC, the warp that runs next, and the launch's flags.
    pub fn choose(&self) -> Layer {
        let rf = &self.pcs.registers;
        let n = self.warps();
        let mut l = Layer::default();
        for j in 0..n {
            relu(&mut l, &[(self.at(self.low(j)), 1.0), (self.at(self.pair(j, 1)), -1.0)], self.at(self.low(j)), -1.0);
            l.pass(&[(self.at(self.sel(j)), -1.0)], &[(self.at(self.sel(j)), 1.0)]);
        }
        // `D_a = 4 − x_a`, weighted.
        let d = |a: usize, w: f32| [(self.at(self.exited(a)), -w), (0, 4.0 * w)];
        let (last, bar) = (self.at(self.last()), self.at(self.pcs.bar()));
        let place = |i: usize| self.at(self.pcs.warp_in_cta() + i);
        // `sel_j += [D_j − 5·Σ D_dead + 5·(Σ on − |on|) − 5·Σ off ≥ 1]`.
        let mut select = |j: usize, dead: &[usize], on: &[usize], off: &[usize]| {
            let mut terms: Vec<(usize, f32)> = d(j, 1.0).to_vec();
            terms.extend(dead.iter().flat_map(|&a| d(a, -5.0)));
            terms.extend(on.iter().map(|&c| (c, 5.0)));
            terms.extend(off.iter().map(|&c| (c, -5.0)));
            terms.push((0, -5.0 * on.len() as f32));
            l.step(&terms, 1.0, &[(self.at(self.sel(j)), 1.0)]);
        };
        for i in 0..n {
            // The same warp again: its block did not end in `bar`.
            select(i, &[], &[last, place(i)], &[bar]);
            for k in 1..=n {
                let j = (i + k) % n;
                // The warps between `i` and `j` going round (at `k = n`, every other warp).
                let between: Vec<usize> = (1..k).map(|b| (i + b) % n).collect();
                // After `bar`, the next unfinished warp, wrapping round to this one.
                select(j, &between, &[last, place(i), bar], &[]);
                // After this warp's last exit, the next unfinished one.
                if k < n {
                    let mut dead = between;
                    dead.push(i);
                    select(j, &dead, &[last, place(i)], &[bar]);
                }
            }
        }
        // No warp of the block left: the next thread block, or the end of the launch.
        let [_, grid, cta, _] = self.launch();
        rewrite(&mut l, self.at(self.next_cta()));
        rewrite(&mut l, self.at(self.done()));
        let none: Vec<(usize, f32)> = (0..n).flat_map(|a| d(a, -32.0)).chain([(last, 64.0), (0, -64.0)]).collect();
        let with = |extra: [(usize, f32); 3]| none.iter().copied().chain(extra).collect::<Vec<_>>();
        l.step(&with([(grid, 1.0), (cta, -1.0), (0, -2.0)]), 0.0, &[(self.at(self.next_cta()), 1.0)]);
        l.step(&with([(grid, -1.0), (cta, 1.0), (0, 1.0)]), 0.0, &[(self.at(self.done()), 1.0)]);
        l.shifted(rf.one)
    }

    /// Layer 3 (units for the final layer): the chosen record in the kind and record channels.
    pub fn output(&self) -> Layer {
        let rf = &self.pcs.registers;
        let mut l = Layer::default();
        let [warp, block, mask] = self.fields.map(|c| self.at(c));
        let kind = self.at(rf.kind);
        let all = f32::from((1u8 << self.lanes()) - 1);
        let (last, first) = (self.at(self.last()), self.at(self.first_record()));
        for flag in [last, first] {
            and_unit(&mut l, &[flag], &[], vec![(0, 1.0), (kind, -1.0)], kind, 1.0);
            for field in [warp, block, mask] {
                and_unit(&mut l, &[flag], &[], vec![(field, -1.0)], field, 1.0);
            }
        }
        and_unit(&mut l, &[first], &[], vec![(0, all)], mask, 1.0);
        let [ntid, _, _, tid] = self.launch();
        let quarter = 1.0 / self.lanes() as f32;
        // The block's first warp: the step's warp less its place.
        let base = [(self.at(rf.record), 1.0), (tid, -quarter)];
        for j in 0..self.warps() {
            let sel = self.at(self.sel(j));
            and_unit(&mut l, &[sel], &[], base.iter().copied().chain([(0, j as f32)]).collect(), warp, 1.0);
            and_unit(&mut l, &[sel], &[], vec![(self.at(self.low(j)), 1.0)], block, 1.0);
            for lane in 0..self.lanes() {
                let on = [(self.at(self.low(j)), 1.0), (self.p(j, lane), -1.0), (sel, 128.0), (0, -128.0)];
                l.step(&on, 0.0, &[(mask, f32::from(1u8 << lane))]);
            }
        }
        let next_cta = self.at(self.next_cta());
        and_unit(&mut l, &[next_cta], &[], base.iter().copied().chain([(ntid, quarter)]).collect(), warp, 1.0);
        and_unit(&mut l, &[next_cta], &[], vec![(0, all)], mask, 1.0);
        and_unit(&mut l, &[self.at(self.done())], &[], vec![(0, END_WARP as f32)], warp, 1.0);
        l.shifted(rf.one)
    }
}

/// Takes a spent channel's value `v` away (`|v| < 8000`, an integer): `silu(8192 − v) −
/// silu(8192)`, both on silu's identity range.
fn rewrite(l: &mut Layer, c: usize) {
    for (gate, sign) in [(vec![(c, -1.0), (0, 8192.0)], 1.0), (vec![(0, 8192.0)], -1.0)] {
        l.units.push(Unit { gate, up: vec![(0, 1.0)], down: vec![(c, sign)] });
    }
}

/// `relu(Σ terms)` times `k` into `to`, for an integer sum: `silu(256·s)/256` is `s` for `s ≥ 1`
/// (sigmoid rounds to 1 there) and ±0 for `s ≤ 0`.
fn relu(l: &mut Layer, terms: &[(usize, f32)], to: usize, k: f32) {
    let gate = terms.iter().map(|&(c, w)| (c, 256.0 * w)).collect();
    l.units.push(Unit { gate, up: vec![(0, 1.0 / 256.0)], down: vec![(to, k)] });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bitnet::random::Rng;
    use crate::qwengpu::isa::Inst;
    use crate::qwengpu::limbs::bias;
    use crate::qwengpu::sequencer::{Next, Sequencer};
    use crate::qwengpu::splice::{Splice, TINY_TEXT};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// What the stream holds at a position, as the layers below the decoder leave it.
    struct At {
        pcs: Vec<Vec<u8>>,
        place: usize,
        bar: bool,
        ntid: usize,
        grid: usize,
        cta: usize,
        /// `last`'s inputs: an executed step, and a next slot.
        run: bool,
        next: bool,
        token: Token,
    }

    /// The decoder's three layers on a stream set up as `at` says (the spent channels holding
    /// small garbage, as the PC rows' layer leaves them); the token its fields then name.
    fn decoded(s: &Splice, at: &At, rng: &mut Rng) -> Option<Token> {
        let (n, rf, p) = (&s.next, &s.registers, &s.pcs);
        let mut x = vec![0.0f32; s.width];
        x[s.bias] = bias(s.width);
        for c in p.scratch() {
            x[c] = (rng.next_u64() % 130) as f32 - 64.0;
        }
        for (j, lanes) in at.pcs.iter().enumerate() {
            for (l, &pc) in lanes.iter().enumerate() {
                x[p.read() + 4 * j + l] = f32::from(pc);
            }
        }
        x[p.warp_in_cta() + at.place] = 1.0;
        x[p.bar()] = f32::from(u8::from(at.bar));
        x[rf.run_flag()] = f32::from(u8::from(at.run));
        x[n.next] = f32::from(u8::from(at.next));
        (x[rf.launch()], x[rf.launch() + 3]) = (at.ntid as f32, at.grid as f32);
        let warps = at.ntid / 4;
        (x[rf.thread()], x[rf.thread() + 1]) = ((4 * at.place) as f32, at.cta as f32);
        x[rf.record] = (at.cta * warps + at.place) as f32;
        let (kind, fields) = match at.token {
            Token::Val(_) => (0.0, [0.0; 3]),
            Token::Record { warp, block, mask } => (1.0, [warp, block, mask].map(|v| v as f32)),
        };
        x[rf.kind] = kind;
        for (&c, v) in n.fields.iter().zip(fields) {
            x[c] = v;
        }
        let w = s.machine_norm();
        let order: Vec<usize> = (0..s.width).collect();
        for layer in [n.minima(), n.choose(), n.output()] {
            layer.forward_with(&mut x, &w, 1e-6, &order);
        }
        let f = n.fields.map(|c| x[c]);
        if f.iter().chain([&x[rf.kind]]).any(|v| v.fract() != 0.0 || *v < 0.0) {
            return None;
        }
        (x[rf.kind] == 1.0).then(|| Token::Record { warp: f[0] as u32, block: f[1] as u32, mask: f[2] as u32 })
    }

    /// A random thread block's PCs: most lanes running, some exited, some warps finished.
    fn block_pcs(rng: &mut Rng, warps: usize) -> Vec<Vec<u8>> {
        let mut pcs = vec![vec![0u8; 4]; 8];
        for lanes in pcs.iter_mut().take(warps) {
            let finished = rng.next_u64().is_multiple_of(3);
            let base = (rng.next_u64() % 60) as u8;
            for pc in lanes.iter_mut() {
                *pc = match rng.next_u64() % 5 {
                    _ if finished => EXITED,
                    0 => EXITED,
                    1 | 2 => base,
                    _ => (rng.next_u64() % 64) as u8,
                };
            }
        }
        pcs
    }

    /// On random thread blocks (1 to 8 warps, any PCs, any place, barrier or not, any thread
    /// block of any grid), the layers name at a step's last position the record that
    /// `Sequencer::next` (plain Rust, itself checked against the interpreter) names, or `END`.
    #[test]
    fn the_layers_name_the_sequencers_next_record() {
        let s = Splice::new(TINY_TEXT).unwrap();
        let mut rng = Rng::new(21);
        let (mut switches, mut ends, mut next_ctas) = (0, 0, 0);
        for case in 0..3000 {
            let warps = 1 + (rng.next_u64() % 8) as usize;
            let grid = 1 + (rng.next_u64() % (32 / warps) as u64) as usize;
            let cta = (rng.next_u64() % grid as u64) as usize;
            let place = (rng.next_u64() % warps as u64) as usize;
            let bar = rng.next_u64().is_multiple_of(3);
            let pcs = block_pcs(&mut rng, warps);
            let token = if rng.next_u64().is_multiple_of(2) {
                Token::Val(rng.next_u64() as u16)
            } else {
                Token::Record { warp: (cta * warps + place) as u32, block: 3, mask: 5 }
            };
            let at = At { pcs: pcs.clone(), place, bar, ntid: 4 * warps, grid, cta, run: true, next: false, token };
            let mut seq = Sequencer::launch(4, warps, grid);
            for (j, lanes) in pcs.iter().enumerate().take(warps) {
                seq.pcs[cta * warps + j] = lanes.clone();
            }
            // Thread blocks after this one have not started: every lane at block 0.
            let warp = cta * warps + place;
            let want = match seq.next(warp, bar.then_some(&Inst::Bar)) {
                Next::Step(r) => {
                    switches += usize::from(r.warp != warp);
                    next_ctas += usize::from(r.warp >= (cta + 1) * warps);
                    Token::Record { warp: r.warp as u32, block: r.block as u32, mask: r.mask }
                }
                Next::Done => {
                    ends += 1;
                    END
                }
            };
            assert_eq!(
                decoded(&s, &at, &mut rng),
                Some(want),
                "case {case}: {warps} warps, place {place}, bar {bar}, block {cta} of {grid}, {pcs:?}"
            );
            // Where the step has a next slot, nothing of this is written: the token stays.
            let at = At { next: true, ..at };
            let held = match token {
                Token::Val(_) => None,
                t => Some(t),
            };
            assert_eq!(decoded(&s, &at, &mut rng), held, "case {case}: not the last position");
        }
        assert!(
            switches > 300 && ends > 10 && next_ctas > 50,
            "{switches} switches, {ends} ends, {next_ctas} next blocks"
        );
    }
}
