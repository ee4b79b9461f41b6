//! One lane's block on the second machine (issue #22, `docs/qwengpu-second-machine.md` §9): the
//! held block's instructions, decoded from their ROM words (`program_image`), run one after the
//! other on the lane's registers in the stream, by SwiGLU layers only.
//!
//! Inputs, as the register file leaves them at a position (`register_file`): the block's ROM
//! words (per word its two limbs and the set limb), a lane's registers, four limbs each, and
//! the launch context (§11): the launch words, the warp's first thread index and thread block,
//! and the lane as a one-hot group. The executor rewrites the register channels in place: after
//! its layers they hold the registers after the block, for every instruction it computes.
//!
//! 1. **Decode** (from the ROM words alone): a flag per result *source* (`mov`, `sel`, each
//!    operation of the ALU, each special register and parameter), one-hot `a`, `b`, `c`, `d`
//!    registers and the two immediate flags. An opcode the executor does not compute lights no
//!    source, so its instruction writes nothing. One set of these channels serves the whole
//!    block, decoded just in time: instruction 0's in the decode layer, each next one's in the
//!    writeback layer of the one before, which also clears the old fields (its units read them
//!    before the layer adds anything), so four instructions cost one instruction's channels.
//! 2. **Per instruction** (`1 + alu + 1` layers):
//!    - *operands*: `A = Σ_r [a = r ∧ ¬imm_a] · reg_r + [imm_a] · imm_a` limb by limb (one gated
//!      unit a limb and term, `Layer::gated`'s trick with an AND in the gate), `B` likewise, and
//!      `C = reg_c` for `sel`. The same layer clears what the previous instruction left in the
//!      ALU's channels (a unit `silu(256) · x/256` sent with weight −1 gives back exactly `x`);
//!    - *the ALU* (`limb_alu`): every operation side by side on `A`, `B`; beside its first two
//!      layers `nz = [Σ C ≥ 1]` and `sel = nz ? A : B`;
//!    - *writeback*: `reg_r += [d = r ∧ source s] · (result_s − reg_r)` for every register and
//!      source, one unit a limb: exactly one source flag is set, so at most one unit of a
//!      register's limb fires, and it replaces the limb. A special register's or parameter's
//!      result is a sum of context channels read in the same unit: `%tid` is
//!      `first_tid + Σ_l l·[lane = l]`, a parameter's limbs are its two launch words' limbs.
//!
//! Every channel is a small integer after §2's norm, so every unit is exact, as in `limbs`.
//! Terminators write no register and are computed as nothing; so are the instructions the
//! executor does not compute yet (`supports` says which), which the tests leave out.

use super::deltanet::DeltaNetWeights;
use super::isa::{Alu, Inst, Op as IsaOp, Shfl, Space, Special, MAX_PARAMS, SHFLS, SPECIALS};
use super::limb_alu::{AluStack, Op};
use super::limb_memory::{self, Layout};
use super::limbs::{Layer, Unit, LIMBS};
use super::program_image::{opcodes, WORDS};
use alloc::vec;
use alloc::vec::Vec;
use load::LoadChannels;

/// The parameters as special registers, in order.
const PARAMS: [Special; MAX_PARAMS] = {
    let mut p = [Special::Param(0); MAX_PARAMS];
    let mut i = 0;
    while i < MAX_PARAMS {
        p[i] = Special::Param(i as u8);
        i += 1;
    }
    p
};

/// Where a result comes from: `mov`'s is `A`, `sel`'s its own channels, the ALU's operations
/// theirs, a special register or parameter the launch context's (§11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Mov,
    Sel,
    Alu(Op),
    Special(Special),
    /// A global load's word (`load`).
    Load,
    /// A shared load's word (`load`, §14).
    LoadShared,
    /// Another lane's register, read from the register rows (`shuffle`, §18).
    Shfl(Shfl),
}

impl Source {
    fn of(op: IsaOp, alu: &AluStack) -> Option<Source> {
        let s = match op {
            IsaOp::Mov => Source::Mov,
            IsaOp::Sel => Source::Sel,
            IsaOp::Alu(a) => Source::Alu(Op::Alu(a)),
            IsaOp::Set(c) => Source::Alu(Op::Cmp(c)),
            IsaOp::S2R(s) => Source::Special(s),
            IsaOp::Ld(Space::Global) | IsaOp::Atom(Space::Global) => Source::Load,
            IsaOp::Ld(Space::Shared) | IsaOp::Atom(Space::Shared) => Source::LoadShared,
            IsaOp::Shfl(m) => Source::Shfl(m),
            _ => return None,
        };
        match s {
            Source::Alu(op) if !alu.results.iter().any(|&(o, _)| o == op) => None,
            s => Some(s),
        }
    }
}

/// Whether the executor computes `inst`'s effect at the lane's position: moves, the ALU's
/// operations (not the divisions), comparisons, selects, special registers, parameters and
/// loads (global and shared) write their registers; a store keeps its word index and word, which
/// the step's store tokens carry to the memory rows (§13, §14); an atomic add does both, keeping
/// the word it read plus `v` (§16); a shuffle reads another lane's register from the register
/// rows (§18); the terminators write nothing.
pub fn supports(inst: &Inst) -> bool {
    match *inst {
        Inst::Mov { .. } | Inst::Set { .. } | Inst::Sel { .. } | Inst::S2R { .. } | Inst::Shfl { .. } => true,
        Inst::Ld { .. } | Inst::St { .. } | Inst::AtomAdd { .. } => true,
        Inst::Alu { op, .. } => !matches!(op, Alu::DivS | Alu::DivU | Alu::RemS | Alu::RemU),
        Inst::Bra { .. } | Inst::Bar | Inst::Exit => true,
    }
}

/// The executor's channels in a stream whose bias is `one`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Exec {
    pub one: usize,
    /// The held block's ROM words: three channels each (low limb, high limb, set).
    pub rom: usize,
    /// The lane's registers, four limbs each (low first), rewritten in place.
    pub local: usize,
    pub regs: usize,
    /// The launch words (`register_file::LAUNCH_WORDS`, three channels each like the ROM's):
    /// the block's threads, the grid's blocks, the parameters' halves.
    pub launch: usize,
    /// The warp's first thread index, then its thread block.
    pub thread: usize,
    /// The lane as a one-hot group (lane `l` at `lane + 2·l`, the register file's next lane).
    pub lane: usize,
    pub lanes: usize,
    /// Where a memory token writes (`register_file::MEMORY_GROUPS`), the token's two limbs, the
    /// stream's width and global memory's words: for the load mixers (`load`).
    pub memory: usize,
    pub val: [usize; 2],
    /// Shared memory's address groups (`register_file::shared_groups`, from `shared`): the step's
    /// thread block one-hot, then where a shared store's halves write.
    pub shared: usize,
    pub shared_groups: [usize; 3],
    /// The register file's reset flag: the shared mixers forget every row there, so a launch's
    /// thread blocks start from zeros (`register_file::RESET`).
    pub reset: usize,
    /// Where the register file writes a VAL token's limbs (`register_file`): the warp one-hot,
    /// `(lane, half)` one-hot, the register one-hot and the "set" flag. A shuffle's mixer holds
    /// the same rows.
    pub file: [usize; 4],
    pub d_model: usize,
    pub global_words: usize,
    /// Instructions per block.
    pub block_len: usize,
    /// Its own channels from here ([`Self::len`]).
    pub first: usize,
}

/// The layers, and the sources in the order their flags are laid out.
pub struct Built {
    pub decode: Layer,
    /// Each instruction's layers, one after the other.
    pub stages: Vec<Layer>,
    /// Gated DeltaNet mixers, each with the index of the stage layer it goes before (the two
    /// make one decoder layer).
    pub mixers: Vec<(usize, DeltaNetWeights)>,
    pub sources: Vec<Source>,
}

/// One instruction's decoded fields (channels relative to the bias).
#[derive(Debug, Clone, Copy)]
struct Fields {
    sources: usize,
    a: usize,
    b: usize,
    c: usize,
    d: usize,
    imm: [usize; 2],
    /// 1 for a memory access (its address is `a` plus the offset in `a`'s immediate words).
    access: usize,
    /// 1 for a store or an atomic (either space).
    store: usize,
    /// 1 for a shared access.
    shared: usize,
    /// 1 for an atomic.
    atom: usize,
    /// 1 for a shuffle (any mode).
    shfl: usize,
}

impl Exec {
    fn sources(alu: &AluStack) -> Vec<Source> {
        let mut v = vec![Source::Mov, Source::Sel];
        v.extend(alu.results.iter().map(|&(op, _)| Source::Alu(op)));
        v.extend(SPECIALS.iter().chain(&PARAMS).map(|&s| Source::Special(s)));
        v.extend([Source::Load, Source::LoadShared]);
        v.extend(SHFLS.iter().map(|&m| Source::Shfl(m)));
        v
    }

    /// A special register's or parameter's limbs, as sums of channels (relative to the bias).
    /// The thread index is the warp's first plus the lane, with no carry: both are below 2^8.
    fn special(&self, s: Special) -> [Vec<(usize, f32)>; LIMBS] {
        let word = |k: usize| self.launch - self.one + 3 * k;
        let lane = (0..self.lanes).map(|l| (self.lane - self.one + 2 * l, l as f32));
        let mut limbs: [Vec<(usize, f32)>; LIMBS] = Default::default();
        match s {
            Special::Tid => limbs[0] = lane.chain([(self.thread - self.one, 1.0)]).collect(),
            Special::LaneId => limbs[0] = lane.collect(),
            Special::Ctaid => limbs[0] = vec![(self.thread - self.one + 1, 1.0)],
            Special::Ntid => limbs[0] = vec![(word(0), 1.0)],
            Special::Nctaid => limbs[0] = vec![(word(1), 1.0)],
            Special::Param(i) => {
                let at = word(2 + 2 * i as usize);
                limbs = [at, at + 1, at + 3, at + 4].map(|c| vec![(c, 1.0)]);
            }
        }
        limbs
    }

    /// Channels one instruction's decoded fields take.
    fn field_len(&self, sources: usize) -> usize {
        sources + 4 * self.regs + 7
    }

    /// The decoded fields of the instruction running (one set for all of a block's).
    fn fields(&self, sources: usize) -> Fields {
        let base = self.first - self.one;
        let a = base + sources;
        let (b, c, d) = (a + self.regs, a + 2 * self.regs, a + 3 * self.regs);
        let imm = [a + 4 * self.regs, a + 4 * self.regs + 1];
        let access = imm[1] + 1;
        let (store, shared, atom, shfl) = (access + 1, access + 2, access + 3, access + 4);
        Fields { sources: base, a, b, c, d, imm, access, store, shared, atom, shfl }
    }

    /// The ALU's channel `c` (its own numbering: 0 the bias) in this stream, relative to the bias.
    fn alu_channel(&self, c: usize, sources: usize) -> usize {
        match c {
            0 => 0,
            c => self.first - self.one + self.field_len(sources) + c - 1,
        }
    }

    /// `sel`'s `C`, `nz` and result, after the ALU's channels.
    fn sel(&self, alu: &AluStack, sources: usize) -> [usize; 3] {
        let c = self.alu_channel(alu.channels, sources);
        [c, c + LIMBS, c + LIMBS + 1]
    }

    /// A load's channels, after `sel`'s.
    fn load(&self, alu: &AluStack, sources: usize) -> LoadChannels {
        let address = alu.results.iter().find(|r| r.0 == Op::Alu(Alu::Add)).map_or(0, |r| r.1);
        LoadChannels { address: self.alu_channel(address, sources), first: self.sel(alu, sources)[2] + LIMBS }
    }

    /// Each instruction's store (relative to the bias): the word index, then the word's four
    /// limbs; all 0 for an instruction that is not a global store.
    fn stores_at(&self, alu: &AluStack, sources: usize) -> usize {
        self.shuffle(alu, sources).used().end
    }

    /// A shuffle's channels, after the load's.
    fn shuffle(&self, alu: &AluStack, sources: usize) -> ShuffleChannels {
        let b = self.alu_channel(alu.b, sources);
        ShuffleChannels { b, lanes: self.lanes, first: self.load(alu, sources).used().end }
    }

    /// [`Self::stores_at`] in the stream: instruction `i`'s from `stores() + (1 + LIMBS)·i`.
    pub fn stores(&self) -> usize {
        let alu = AluStack::build();
        self.stores_at(&alu, Self::sources(&alu).len()) + self.one
    }

    /// The channels from `first` on that this uses.
    pub fn len(&self) -> usize {
        self.stores() + (1 + LIMBS) * self.block_len - self.first
    }

    /// The load mixers' layout (every instruction's alike), and the channel its first read limb
    /// goes to: for decoding global memory from a mixer's state.
    pub(crate) fn load_layout(&self) -> (Layout, usize) {
        let alu = AluStack::build();
        let [global, _] = self.mixer_layouts(&alu, &Self::sources(&alu));
        (global, self.one + self.load(&alu, Self::sources(&alu).len()).loaded())
    }

    /// The shared mixers' layout (every instruction's alike).
    #[cfg(test)]
    pub(crate) fn shared_layout(&self) -> Layout {
        let alu = AluStack::build();
        let [_, shared] = self.mixer_layouts(&alu, &Self::sources(&alu));
        shared
    }

    /// The global load mixers' layout and the shared ones', each read where its source's flag
    /// is set.
    fn mixer_layouts(&self, alu: &AluStack, sources: &[Source]) -> [Layout; 2] {
        let load = self.load(alu, sources.len());
        let flag = |s: Source| {
            self.one + self.fields(sources.len()).sources + sources.iter().position(|&t| t == s).unwrap_or(0)
        };
        [
            load.layout(self.d_model, self.one, self.memory, self.val, flag(Source::Load)),
            load.shared_layout(
                self.d_model,
                self.one,
                (self.shared, self.shared_groups),
                self.val,
                flag(Source::LoadShared),
            ),
        ]
    }

    /// The shuffle mixer's layout: the register file's rows (`warp × (lane, half) ×
    /// register`), written where the file writes them, read where the instruction is a shuffle
    /// at the step's warp, the source lane's `(lane, half)` (one group per half) and `a`.
    fn shuffle_layout(&self, alu: &AluStack, sources: &[Source]) -> Layout {
        let n = sources.len();
        let (f, sh, load) = (self.fields(n), self.shuffle(alu, n), self.load(alu, n));
        let [warp, lane_half, reg, set] = self.file;
        let heads = (0..2)
            .map(|half| {
                let read = [warp, self.one + sh.src(half), self.one + f.a].map(limb_memory::Digit::Stream).to_vec();
                let mut h =
                    limb_memory::Head::new(&[warp, lane_half, reg], &[set], read, self.one + load.loaded() + 2 * half);
                h.read_when = vec![self.one + f.shfl];
                h
            })
            .collect();
        let groups = vec![self.shared_groups[0], 2 * self.lanes, self.regs];
        Layout { groups, d_model: self.d_model, one: self.one, value: self.val.to_vec(), heads }
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// ROM word `w` of instruction `i`, its low limb (relative to the bias).
    fn word(&self, i: usize, w: usize) -> usize {
        self.rom - self.one + 3 * (WORDS * i + w)
    }

    fn reg(&self, r: usize) -> usize {
        self.local - self.one + LIMBS * r
    }

    /// Instruction `i`'s fields from its ROM words, added to `f`'s channels in `layer`.
    fn decode_into(&self, layer: &mut Layer, i: usize, f: &Fields, alu: &AluStack, sources: &[Source]) {
        let mut flags: Vec<Option<usize>> = opcodes()
            .iter()
            .map(|&op| Source::of(op, alu).and_then(|s| sources.iter().position(|&t| t == s)).map(|k| f.sources + k))
            .collect();
        flags.push(None);
        layer.one_hot(&[(self.word(i, 0), 1.0)], &flags);
        let access: Vec<Option<usize>> = opcodes()
            .iter()
            .map(|op| matches!(op, IsaOp::Ld(_) | IsaOp::St(_) | IsaOp::Atom(_)).then_some(f.access))
            .collect();
        layer.one_hot(&[(self.word(i, 0), 1.0)], &access);
        let flag = |layer: &mut Layer, to: usize, on: fn(IsaOp) -> bool| {
            let flags: Vec<Option<usize>> = opcodes().iter().map(|&op| on(op).then_some(to)).collect();
            layer.one_hot(&[(self.word(i, 0), 1.0)], &flags);
        };
        flag(layer, f.store, |op| matches!(op, IsaOp::St(_) | IsaOp::Atom(_)));
        flag(layer, f.shared, |op| {
            matches!(op, IsaOp::Ld(Space::Shared) | IsaOp::St(Space::Shared) | IsaOp::Atom(Space::Shared))
        });
        flag(layer, f.atom, |op| matches!(op, IsaOp::Atom(_)));
        flag(layer, f.shfl, |op| matches!(op, IsaOp::Shfl(_)));
        let regs = |at: usize| (0..self.regs).map(|r| Some(at + r)).chain([None]).collect::<Vec<_>>();
        layer.one_hot(&[(self.word(i, 0) + 1, 1.0)], &regs(f.d));
        layer.one_hot(&[(self.word(i, 1), 1.0)], &regs(f.a));
        layer.one_hot(&[(self.word(i, 1) + 1, 1.0)], &regs(f.b));
        layer.one_hot(&[(self.word(i, 2), 1.0)], &regs(f.c));
        // The flags byte's bits 0 and 1 (its highest bit is 8: values 0..16).
        for (bit, to) in f.imm.into_iter().enumerate() {
            let bits: Vec<Option<usize>> = (0..17).map(|v| (v < 16 && v >> bit & 1 == 1).then_some(to)).collect();
            layer.one_hot(&[(self.word(i, 2) + 1, 1.0)], &bits);
        }
    }

    pub fn build(&self) -> Built {
        let alu = AluStack::build();
        let sources = Self::sources(&alu);
        let n = sources.len();
        // One set of field channels serves every instruction: instruction 0's are decoded
        // here, each next one's in the writeback layer of the one before, which reads the old
        // fields and clears them in the same layer (every unit reads the layer's input).
        let f = self.fields(n);
        let mut decode = Layer::default();
        self.decode_into(&mut decode, 0, &f, &alu, &sources);
        let alu_layers: Vec<Layer> = alu.layers.iter().map(|l| l.mapped(|c| self.alu_channel(c, n))).collect();
        let [a, b] = [alu.a, alu.b].map(|c| self.alu_channel(c, n));
        let [c, nz, sel] = self.sel(&alu, n);
        let load = self.load(&alu, n);
        let stores = self.stores_at(&alu, n);
        // Each limb of a source's result as a sum of channels (none: the limb is 0).
        let contiguous = |at: usize, limbs: usize| -> [Vec<(usize, f32)>; LIMBS] {
            core::array::from_fn(|l| if l < limbs { vec![(at + l, 1.0)] } else { vec![] })
        };
        let result = |s: Source| match s {
            Source::Mov => contiguous(a, LIMBS),
            Source::Sel => contiguous(sel, LIMBS),
            Source::Alu(op) => {
                let at = alu.results.iter().find(|&&(o, _)| o == op).map_or(0, |&(_, c)| self.alu_channel(c, n));
                contiguous(at, if matches!(op, Op::Cmp(_)) { 1 } else { LIMBS })
            }
            Source::Special(s) => self.special(s),
            Source::Load | Source::LoadShared | Source::Shfl(_) => contiguous(load.loaded(), LIMBS),
        };
        let index = load.index(self.global_words);
        // Both memories forget everything at the reset record: a prompt writes only the pages
        // of global memory that are not zeros.
        let [mixer, shared_mixer] =
            self.mixer_layouts(&alu, &sources).map(|l| limb_memory::cleared_at(limb_memory::weights(&l), self.reset));
        let shuffle = self.shuffle(&alu, n);
        let shuffle_mixer =
            limb_memory::cleared_at(limb_memory::weights(&self.shuffle_layout(&alu, &sources)), self.reset);
        let modes = SHFLS.map(|m| f.sources + sources.iter().position(|&s| s == Source::Shfl(m)).unwrap_or(0));
        let lane = |l: usize| self.lane - self.one + 2 * l;
        let mut mixers = Vec::new();
        let mut stages = Vec::new();
        for i in 0..self.block_len {
            let mut operands = Layer::default();
            if i > 0 {
                // What the previous instruction left: the ALU's channels and sel's.
                let used = (1..alu.channels).map(|c| self.alu_channel(c, n)).chain(c..sel + LIMBS);
                let used = used.chain(load.used()).chain(shuffle.used());
                for ch in used {
                    and_unit(&mut operands, &[], &[], vec![(ch, 1.0)], ch, -1.0);
                }
            }
            // A memory access adds the offset in `a`'s immediate words to `a` (the whole
            // address there when `a` is an immediate): `A` is `a`'s register or 0, `B` those
            // words, and the adder gives the address.
            let imm_limb = |w: usize, l: usize| self.word(i, w + l / 2) + l % 2;
            for (to, reg, imm, imm_word, reg_off) in
                [(a, f.a, f.imm[0], 4, &[][..]), (b, f.b, f.imm[1], 6, &[f.access][..])]
            {
                for l in 0..LIMBS {
                    for r in 0..self.regs {
                        let off = [&[imm][..], reg_off].concat();
                        and_unit(&mut operands, &[reg + r], &off, vec![(self.reg(r) + l, 1.0)], to + l, 1.0);
                    }
                    and_unit(&mut operands, &[imm], &[f.access], vec![(imm_limb(imm_word, l), 1.0)], to + l, 1.0);
                }
            }
            for l in 0..LIMBS {
                and_unit(&mut operands, &[f.access], &[], vec![(imm_limb(4, l), 1.0)], b + l, 1.0);
                // A store's word: `b`'s register or immediate.
                let v = load.value() + l;
                for r in 0..self.regs {
                    and_unit(&mut operands, &[f.b + r, f.store], &[f.imm[1]], vec![(self.reg(r) + l, 1.0)], v, 1.0);
                }
                and_unit(&mut operands, &[f.imm[1], f.store], &[], vec![(imm_limb(6, l), 1.0)], v, 1.0);
            }
            for l in 0..LIMBS {
                for r in 0..self.regs {
                    and_unit(&mut operands, &[f.c + r], &[], vec![(self.reg(r) + l, 1.0)], c + l, 1.0);
                }
            }
            let mut layers = vec![operands];
            layers.extend(alu_layers.iter().cloned());
            layers[1].step(&(0..LIMBS).map(|l| (c + l, 1.0)).collect::<Vec<_>>(), 1.0, &[(nz, 1.0)]);
            layers[2].units.extend(super::limbs::select(nz, a, b, sel).units);
            // A load's word index from the adder's result, then its word, read by a mixer.
            for (layer, units) in layers[3..5].iter_mut().zip(index.clone()) {
                layer.units.extend(units.units);
            }
            // A shuffle's source lane from `B` and the lane, then the read.
            layers[1].units.extend(shuffle.offset().units);
            layers[2].units.extend(shuffle.source(modes, lane).units);
            mixers.push((stages.len() + 3, shuffle_mixer.clone()));
            mixers.push((stages.len() + 5, mixer.clone()));
            mixers.push((stages.len() + 6, shared_mixer.clone()));
            // An atomic's sum, once both reads are in: the two layers from the shared read on
            // (the ALU has more than enough layers for it to finish before the writeback).
            let [add_0, add_1] = super::limbs::adder(load.atomic(), false);
            layers[6].units.extend(add_0.units);
            layers[7].units.extend(add_1.units);
            let mut writeback = Layer::default();
            for (k, &s) in sources.iter().enumerate() {
                let terms = result(s);
                for r in 0..self.regs {
                    for (l, terms) in terms.iter().enumerate() {
                        let mut up = vec![(self.reg(r) + l, -1.0)];
                        up.extend(terms);
                        and_unit(&mut writeback, &[f.d + r, f.sources + k], &[], up, self.reg(r) + l, 1.0);
                    }
                }
            }
            // A store's word index and word (an atomic's: the sum), kept for the step's tokens.
            let kept = stores + (1 + LIMBS) * i;
            and_unit(&mut writeback, &[f.store], &[f.shared], load.index_terms(), kept, 1.0);
            and_unit(&mut writeback, &[f.store, f.shared], &[], load.shared_index_terms(), kept, 1.0);
            for l in 0..LIMBS {
                and_unit(&mut writeback, &[f.store], &[f.atom], vec![(load.value() + l, 1.0)], kept + 1 + l, 1.0);
                and_unit(&mut writeback, &[f.atom], &[], vec![(load.atomic().r + l, 1.0)], kept + 1 + l, 1.0);
            }
            if i + 1 < self.block_len {
                for ch in f.sources..f.sources + self.field_len(n) {
                    and_unit(&mut writeback, &[], &[], vec![(ch, 1.0)], ch, -1.0);
                }
                self.decode_into(&mut writeback, i + 1, &f, &alu, &sources);
            }
            layers.push(writeback);
            stages.extend(layers);
        }
        let shift = |l: Layer| l.shifted(self.one);
        Built { decode: shift(decode), stages: stages.into_iter().map(shift).collect(), mixers, sources }
    }
}

/// A unit sending `Σ up` (integers, |Σ| < 2^16) times `k` to `to` when every channel of `on` is 1
/// and every one of `off` is 0 (0/1 channels): the gate `512·(Σ on − Σ off − |on|) + 256` is
/// 256 then, where silu is the identity, and at most −256 otherwise, where it is −0. The up
/// weights are scaled by 1/256, which is exact, and `256 · (Σ up / 256)` gives the sum back.
pub(super) fn and_unit(layer: &mut Layer, on: &[usize], off: &[usize], up: Vec<(usize, f32)>, to: usize, k: f32) {
    let mut gate: Vec<(usize, f32)> = on.iter().map(|&c| (c, 512.0)).chain(off.iter().map(|&c| (c, -512.0))).collect();
    gate.push((0, 256.0 - 512.0 * on.len() as f32));
    let up = up.into_iter().map(|(c, w)| (c, w / 256.0)).collect();
    layer.units.push(Unit { gate, up, down: vec![(to, k)] });
}

pub(crate) mod load;
pub(crate) mod shuffle;
use shuffle::ShuffleChannels;

#[cfg(test)]
mod tests;
