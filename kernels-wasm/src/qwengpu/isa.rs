//! The qwenGPU instruction set: what one lane of the 4-lane SIMT machine can do.
//!
//! Words are 32-bit two's complement and wrap. A program is a ROM of blocks of up to
//! [`MachineSpec::block_len`] instructions; only a block's last instruction may transfer control
//! (`Bra`, `Exit`, `Bar`), otherwise the block falls through to the next. One machine step runs
//! one block for one warp (the lanes whose PC is the warp's lowest, see `interp`).
//!
//! Memory never faults: a global address is a byte address whose word index is taken modulo the
//! global memory's size (so an out-of-range read returns another array's word, as on qwenGPU);
//! shared addresses likewise modulo the shared memory.

use alloc::vec::Vec;

/// The sizes a machine is compiled for; the defaults are qwenGPU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineSpec {
    /// Lanes per warp.
    pub lanes: usize,
    /// General registers per lane (`r0 … r{regs-1}`).
    pub regs: usize,
    /// ROM blocks.
    pub rom_blocks: usize,
    /// Instructions per block.
    pub block_len: usize,
    /// Words of global memory, shared by all arrays of a launch.
    pub global_words: usize,
    /// Words of shared memory per thread block.
    pub shared_words: usize,
    /// Threads per launch and per thread block.
    pub max_threads: usize,
    pub max_block_threads: usize,
    /// Whether the ALU divides (`DivS`, `DivU`, `RemS`, `RemU`). Without a divider the lowering
    /// expands each division into a routine of other instructions (`soft_div`).
    pub divider: bool,
    /// Whether a step runs its block lane by lane (each lane's instructions, then the next
    /// lane's), as the second machine does, rather than instruction by instruction across the
    /// lanes. The two agree unless a block both writes memory and accesses it again (another
    /// lane's store could be seen, or missed): with this set, the lowering ends a block before
    /// such an access ([`Inst::conflicts`]).
    pub lanes_in_turn: bool,
    /// How a warp's lanes that took different paths are scheduled and merged again.
    pub reconverge: Reconverge,
}

/// A warp's reconvergence rule (`interp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reconverge {
    /// An immediate-post-dominator SIMT stack: a divergent branch pushes both paths, each runs
    /// to the branch's join block, where the lanes merge (as GPUs do it).
    #[default]
    Stack,
    /// Each lane keeps its own PC and a step runs the lanes whose PC is the warp's lowest
    /// (Collange's stack-less reconvergence). Lanes merge wherever their PCs meet, which for
    /// code laid out with every join after the paths that reach it is the join itself. Its
    /// whole state is a PC per lane, written without reading itself, which is what the second
    /// machine's sequencer can hold (`docs/qwengpu-second-machine.md` §24).
    LowestPc,
}

impl Default for MachineSpec {
    fn default() -> Self {
        MachineSpec {
            lanes: 4,
            regs: 15,
            rom_blocks: 32,
            block_len: 4,
            global_words: 126,
            shared_words: 32,
            max_threads: 128,
            max_block_threads: 32,
            divider: true,
            lanes_in_turn: false,
            reconverge: Reconverge::Stack,
        }
    }
}

impl MachineSpec {
    /// The second machine's (issue #22, `docs/qwengpu-second-machine.md` §15): no divider, since
    /// its layers cannot hold one (§4), so each division is `soft_div`'s loop; a ROM of
    /// [`SECOND_ROM_BLOCKS`] blocks holds the loops (a kernel with three divisions takes 43).
    pub fn second() -> MachineSpec {
        MachineSpec {
            rom_blocks: SECOND_ROM_BLOCKS,
            divider: false,
            lanes_in_turn: true,
            reconverge: Reconverge::LowestPc,
            ..MachineSpec::default()
        }
    }
}

/// The second machine's ROM blocks, which its record tokens name (`machine_tokens`).
pub const SECOND_ROM_BLOCKS: usize = 64;

/// A source operand: a register or an immediate word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Src {
    Reg(u8),
    Imm(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alu {
    Add,
    Sub,
    Mul,
    /// High 32 bits of the 64-bit product, signed / unsigned.
    MulHiS,
    MulHiU,
    /// Division rounds toward zero; by zero gives all ones, remainder by zero gives the dividend
    /// (RISC-V's rules: total, no trap). `i32::MIN / −1` wraps to `i32::MIN`, remainder 0.
    DivS,
    DivU,
    RemS,
    RemU,
    And,
    Or,
    Xor,
    /// Shifts by 32 or more give 0 (all sign bits for `Sra`), as PTX's clamped shifts do.
    Shl,
    Shr,
    Sra,
    MinS,
    MaxS,
    MinU,
    MaxU,
}

/// Comparisons: the result is 1 or 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    LtS,
    LeS,
    GtS,
    GeS,
    LtU,
    LeU,
    GtU,
    GeU,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    Global,
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shfl {
    /// From lane `b mod lanes`.
    Idx,
    /// From lane `lane − b` (own value when that is below 0).
    Up,
    /// From lane `lane + b` (own value past the last lane).
    Down,
    /// From lane `lane xor b` (own value past the last lane).
    Bfly,
}

/// Read-only per-thread values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// Thread index within its block, block size, block index, block count, lane in the warp.
    Tid,
    Ntid,
    Ctaid,
    Nctaid,
    LaneId,
    /// The launch's i-th parameter (an array's byte address in global memory, or a scalar).
    Param(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inst {
    /// `d = a`.
    Mov { d: u8, a: Src },
    /// `d = a op b`.
    Alu { op: Alu, d: u8, a: Src, b: Src },
    /// `d = (a cmp b) ? 1 : 0`.
    Set { cmp: Cmp, d: u8, a: Src, b: Src },
    /// `d = c != 0 ? a : b`.
    Sel { d: u8, c: u8, a: Src, b: Src },
    /// `d = mem[(a + off) / 4]`.
    Ld { space: Space, d: u8, a: Src, off: i32 },
    /// `mem[(a + off) / 4] = v`.
    St { space: Space, a: Src, off: i32, v: Src },
    /// `d = mem[…]; mem[…] = d + v`, lane by lane in lane order.
    AtomAdd { space: Space, d: u8, a: Src, off: i32, v: Src },
    /// `d = a` of another lane (see [`Shfl`]), every active lane reading before any writes.
    Shfl { mode: Shfl, d: u8, a: u8, b: Src },
    /// `d = special`.
    S2R { d: u8, s: Special },
    /// Block terminator: lanes with `c != 0` (or all, without `c`; `neg` inverts) go to
    /// `target`, the others fall through. If the warp's lanes disagree, the two paths run one
    /// after the other and merge at block `join` (the branch's immediate post-dominator, which
    /// the lowering computes; see `interp`).
    Bra { target: u16, c: Option<u8>, neg: bool, join: u16 },
    /// Block terminator: the executing lanes wait until every warp of the thread block arrives.
    Bar,
    /// Block terminator: the executing lanes finish.
    Exit,
}

impl Inst {
    pub fn is_terminator(&self) -> bool {
        matches!(self, Inst::Bra { .. } | Inst::Bar | Inst::Exit)
    }

    /// The space a memory access reaches (`None`: not an access).
    pub fn memory_space(&self) -> Option<Space> {
        match *self {
            Inst::Ld { space, .. } | Inst::St { space, .. } | Inst::AtomAdd { space, .. } => Some(space),
            _ => None,
        }
    }

    /// A memory access (either space).
    pub fn accesses_memory(&self) -> bool {
        self.memory_space().is_some()
    }

    /// A store or an atomic: an access that writes memory.
    pub fn writes_memory(&self) -> bool {
        matches!(self, Inst::St { .. } | Inst::AtomAdd { .. })
    }

    /// Whether `self` may not join a block holding `block` on a machine whose lanes run in turn
    /// ([`MachineSpec::lanes_in_turn`]).
    /// - Memory: both access memory and one of them writes it. With at most one writing access
    ///   in a block and no other access, a lane sees exactly the writes of the lanes before it
    ///   in either order, and its own come after its reads.
    /// - Shuffles: one is a shuffle whose source register the other writes. A shuffle reads
    ///   other lanes' registers, and in turn the lanes before have run the whole block, the ones
    ///   after none of it; when nothing in the block writes the source, both read it as the
    ///   block began, which is what the interpreter's shuffle reads (a shuffle that writes its
    ///   own source is [`Inst::shuffles_onto_itself`]).
    pub fn conflicts(&self, block: &[Inst]) -> bool {
        let memory = self.accesses_memory()
            && block.iter().any(|i| i.accesses_memory() && (i.writes_memory() || self.writes_memory()));
        let source = self.shuffle_source().is_some_and(|a| block.iter().any(|i| i.write() == Some(a)));
        let written = self.write().is_some_and(|d| block.iter().any(|i| i.shuffle_source() == Some(d)));
        memory || source || written
    }

    /// A shuffle's source register.
    pub fn shuffle_source(&self) -> Option<u8> {
        match *self {
            Inst::Shfl { a, .. } => Some(a),
            _ => None,
        }
    }

    /// A shuffle that writes its own source: on a machine whose lanes run in turn, a later lane
    /// would read an earlier lane's result (the lowering goes through a scratch register).
    pub fn shuffles_onto_itself(&self) -> bool {
        self.shuffle_source().is_some_and(|a| self.write() == Some(a))
    }

    /// Registers this instruction reads and writes (for checks against the machine's size).
    pub fn registers(&self) -> Vec<u8> {
        let mut r = self.reads();
        r.extend(self.write());
        r
    }

    /// Registers this instruction reads, in operand order.
    pub fn reads(&self) -> Vec<u8> {
        let reg = |s: &Src| match *s {
            Src::Reg(r) => Some(r),
            Src::Imm(_) => None,
        };
        match self {
            Inst::Mov { a, .. } | Inst::Ld { a, .. } => reg(a).into_iter().collect(),
            Inst::Alu { a, b, .. } | Inst::Set { a, b, .. } => reg(a).into_iter().chain(reg(b)).collect(),
            Inst::Sel { c, a, b, .. } => [*c].into_iter().chain(reg(a)).chain(reg(b)).collect(),
            Inst::St { a, v, .. } | Inst::AtomAdd { a, v, .. } => reg(a).into_iter().chain(reg(v)).collect(),
            Inst::Shfl { a, b, .. } => [*a].into_iter().chain(reg(b)).collect(),
            Inst::Bra { c, .. } => c.iter().copied().collect(),
            Inst::S2R { .. } | Inst::Bar | Inst::Exit => Vec::new(),
        }
    }

    /// The register this instruction writes, if any.
    pub fn write(&self) -> Option<u8> {
        match *self {
            Inst::Mov { d, .. }
            | Inst::Alu { d, .. }
            | Inst::Set { d, .. }
            | Inst::Sel { d, .. }
            | Inst::Ld { d, .. }
            | Inst::AtomAdd { d, .. }
            | Inst::Shfl { d, .. }
            | Inst::S2R { d, .. } => Some(d),
            Inst::St { .. } | Inst::Bra { .. } | Inst::Bar | Inst::Exit => None,
        }
    }
}

/// Kernel parameters a launch may pass (each is a read-only register row per thread).
pub const MAX_PARAMS: usize = 8;

/// An instruction's operation, its operands aside: what a compiled machine's opcode names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Nop,
    Mov,
    Alu(Alu),
    Set(Cmp),
    Sel,
    Ld(Space),
    St(Space),
    Atom(Space),
    Shfl(Shfl),
    S2R(Special),
    Bra,
    Bar,
    Exit,
}

impl Op {
    /// Every operation in opcode order; with `specials`, an `S2R` for each special register and
    /// parameter before the terminators (the second machine's ROM has them; the first reads
    /// specials as moves from their rows).
    pub fn all(specials: bool) -> Vec<Op> {
        let mut v = alloc::vec![Op::Nop, Op::Mov];
        v.extend(ALUS.iter().map(|&a| Op::Alu(a)));
        v.extend(CMPS.iter().map(|&c| Op::Set(c)));
        v.push(Op::Sel);
        for s in SPACES {
            v.extend([Op::Ld(s), Op::St(s), Op::Atom(s)]);
        }
        v.extend(SHFLS.iter().map(|&s| Op::Shfl(s)));
        if specials {
            v.extend(SPECIALS.iter().map(|&s| Op::S2R(s)));
            v.extend((0..MAX_PARAMS as u8).map(|i| Op::S2R(Special::Param(i))));
        }
        v.extend([Op::Bra, Op::Bar, Op::Exit]);
        v
    }
}

/// Every value of each operand enum, in the order the compiled machines number them.
pub const SPECIALS: [Special; 5] = [Special::Tid, Special::Ntid, Special::Ctaid, Special::Nctaid, Special::LaneId];
pub const ALUS: [Alu; 19] = [
    Alu::Add,
    Alu::Sub,
    Alu::Mul,
    Alu::MulHiS,
    Alu::MulHiU,
    Alu::DivS,
    Alu::DivU,
    Alu::RemS,
    Alu::RemU,
    Alu::And,
    Alu::Or,
    Alu::Xor,
    Alu::Shl,
    Alu::Shr,
    Alu::Sra,
    Alu::MinS,
    Alu::MaxS,
    Alu::MinU,
    Alu::MaxU,
];
pub const CMPS: [Cmp; 10] =
    [Cmp::Eq, Cmp::Ne, Cmp::LtS, Cmp::LeS, Cmp::GtS, Cmp::GeS, Cmp::LtU, Cmp::LeU, Cmp::GtU, Cmp::GeU];
pub const SHFLS: [Shfl; 4] = [Shfl::Idx, Shfl::Up, Shfl::Down, Shfl::Bfly];
pub const SPACES: [Space; 2] = [Space::Global, Space::Shared];

/// A program: its ROM blocks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Program {
    pub blocks: Vec<Vec<Inst>>,
}

impl Alu {
    pub fn eval(self, a: u32, b: u32) -> u32 {
        let (sa, sb) = (a as i32, b as i32);
        match self {
            Alu::Add => a.wrapping_add(b),
            Alu::Sub => a.wrapping_sub(b),
            Alu::Mul => a.wrapping_mul(b),
            Alu::MulHiS => ((sa as i64 * sb as i64) >> 32) as u32,
            Alu::MulHiU => ((a as u64 * b as u64) >> 32) as u32,
            Alu::DivS => match sb {
                0 => u32::MAX,
                -1 => sa.wrapping_neg() as u32,
                _ => (sa / sb) as u32,
            },
            Alu::DivU => a.checked_div(b).unwrap_or(u32::MAX),
            Alu::RemS => match sb {
                0 => a,
                -1 => 0,
                _ => (sa % sb) as u32,
            },
            Alu::RemU => a.checked_rem(b).unwrap_or(a),
            Alu::And => a & b,
            Alu::Or => a | b,
            Alu::Xor => a ^ b,
            Alu::Shl => a.checked_shl(b).unwrap_or(0),
            Alu::Shr => a.checked_shr(b).unwrap_or(0),
            Alu::Sra => (sa.checked_shr(b).unwrap_or(if sa < 0 { -1 } else { 0 })) as u32,
            Alu::MinS => sa.min(sb) as u32,
            Alu::MaxS => sa.max(sb) as u32,
            Alu::MinU => a.min(b),
            Alu::MaxU => a.max(b),
        }
    }
}

impl Cmp {
    pub fn eval(self, a: u32, b: u32) -> u32 {
        let (sa, sb) = (a as i32, b as i32);
        u32::from(match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::LtS => sa < sb,
            Cmp::LeS => sa <= sb,
            Cmp::GtS => sa > sb,
            Cmp::GeS => sa >= sb,
            Cmp::LtU => a < b,
            Cmp::LeU => a <= b,
            Cmp::GtU => a > b,
            Cmp::GeU => a >= b,
        })
    }
}
