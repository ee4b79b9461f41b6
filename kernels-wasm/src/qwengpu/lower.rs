//! PTX → machine blocks.
//!
//! 1. Basic blocks of the PTX body (a label starts one, a branch or `ret` ends one) and their
//!    control-flow graph; each conditional branch's join is its immediate post-dominator.
//! 2. Each PTX instruction becomes one or two machine instructions on virtual registers. The
//!    machine's words are 32 bits: 64-bit registers hold addresses (< 2^32) and 64-bit
//!    arithmetic is done on the low word, which is exact for addresses; kernels on 64-bit data
//!    are outside the machine.
//! 3. Registers: liveness over the CFG, then greedy colouring onto `r0 … r{regs−2}`; the last
//!    register is kept as scratch for `mad` (`d = a·b + c` needs a temporary when `d` is `c`)
//!    and `abs`.
//! 4. ROM blocks of up to `block_len` instructions in PTX order; a branch, `bar.sync` or `ret`
//!    ends one. Every refusal names the PTX line and the limit.

use super::isa::{Alu, Cmp, Inst, MachineSpec, Program, Shfl, Space, Special, Src};
use super::ptx::{Entry, Instruction, Operand, PtxError, Stmt};
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

/// A lowered kernel: the program, the parameter names, and for each ROM block the PTX line it
/// starts at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub name: String,
    pub program: Program,
    pub params: Vec<String>,
    pub rom_lines: Vec<usize>,
    pub shared_bytes: usize,
}

pub(super) fn err<T>(line: usize, what: impl Into<String>) -> Result<T, PtxError> {
    Err(PtxError { line, what: what.into() })
}

/// Virtual register ids; `SCRATCH` is the reserved physical register.
const SCRATCH: u8 = 255;

struct Block {
    label: Option<String>,
    insts: Vec<Instruction>,
    /// Machine instructions on virtual registers, with the PTX line of each.
    code: Vec<(Inst, usize)>,
    succ: Vec<usize>,
}

pub(super) struct Ctx<'a> {
    entry: &'a Entry,
    vregs: BTreeMap<String, u8>,
    shared: BTreeMap<String, u32>,
    /// Registers whose only definition in the kernel is a `mov` of an immediate (clang puts a
    /// `prmt` selector in one): their value, for instructions that need it known.
    constants: BTreeMap<String, u32>,
}

/// [`Ctx::constants`] of `entry`.
fn constants(entry: &Entry) -> BTreeMap<String, u32> {
    let mut defs: BTreeMap<&str, (usize, Option<u32>)> = BTreeMap::new();
    for stmt in &entry.body {
        let Stmt::Inst(i) = stmt else { continue };
        // A register first operand is a destination (stores and branches start with an address
        // or a label).
        if let Some(Operand::Reg(d)) = i.args.first() {
            let value = match (i.op[0].as_str(), i.args.get(1), i.guard.is_none()) {
                ("mov", Some(Operand::Imm(v)), true) => Some(*v as u32),
                _ => None,
            };
            defs.entry(d).or_insert((0, value)).0 += 1;
        }
    }
    defs.into_iter().filter_map(|(r, (n, v))| Some((r.to_string(), v.filter(|_| n == 1)?))).collect()
}

impl Ctx<'_> {
    pub(super) fn vreg(&mut self, name: &str, line: usize) -> Result<u8, PtxError> {
        if let Some(&v) = self.vregs.get(name) {
            return Ok(v);
        }
        let id = self.vregs.len();
        if id >= SCRATCH as usize {
            return err(line, "more than 254 PTX registers");
        }
        self.vregs.insert(name.into(), id as u8);
        Ok(id as u8)
    }

    /// `o`'s value if it is an immediate or a register that holds one constant.
    pub(super) fn constant(&self, o: &Operand) -> Option<u32> {
        match o {
            Operand::Imm(v) => Some(*v as u32),
            Operand::Reg(r) => self.constants.get(r).copied(),
            _ => None,
        }
    }

    pub(super) fn src(&mut self, o: &Operand, line: usize) -> Result<Src, PtxError> {
        match o {
            Operand::Reg(r) => Ok(Src::Reg(self.vreg(r, line)?)),
            Operand::Imm(v) => Ok(Src::Imm(*v as u32)),
            Operand::Symbol(s) => match self.shared.get(s) {
                Some(&off) => Ok(Src::Imm(off)),
                None => err(line, alloc::format!("symbol {s} is not a shared variable of this kernel")),
            },
            other => err(line, alloc::format!("operand {other:?} here")),
        }
    }

    pub(super) fn dst(&mut self, o: &Operand, line: usize) -> Result<u8, PtxError> {
        match o {
            Operand::Reg(r) => self.vreg(r, line),
            other => err(line, alloc::format!("destination {other:?}")),
        }
    }

    /// `[base+off]` → (base, off).
    fn addr(&mut self, o: &Operand, line: usize) -> Result<(Src, i32), PtxError> {
        match o {
            Operand::Addr(base, off) => Ok((self.src(base, line)?, *off as i32)),
            other => err(line, alloc::format!("address {other:?}")),
        }
    }
}

fn special(name: &str, line: usize) -> Result<Special, PtxError> {
    Ok(match name {
        "tid.x" => Special::Tid,
        "ntid.x" => Special::Ntid,
        "ctaid.x" => Special::Ctaid,
        "nctaid.x" => Special::Nctaid,
        "laneid" => Special::LaneId,
        other => return err(line, alloc::format!("%{other}: the machine is one-dimensional (x only)")),
    })
}

fn signed(op: &[String]) -> bool {
    op.iter().any(|p| p.starts_with('s') && p[1..].parse::<u32>().is_ok())
}

fn is16(t: &str) -> bool {
    matches!(t, "u16" | "s16" | "b16")
}

/// One PTX instruction as machine instructions on virtual registers. 16-bit registers (`%rs`)
/// always hold their zero-extended value: an instruction whose result type is 16 bits
/// (`add.s16`, `mov.u16`, `cvt.u16.u32`) is followed by a mask to 16 bits. Signed 16-bit
/// comparisons would need the sign and are refused.
fn translate(cx: &mut Ctx<'_>, i: &Instruction) -> Result<Vec<Inst>, PtxError> {
    let op = &i.op;
    let result_type = if op[0] == "cvt" { op.get(op.len().saturating_sub(2)) } else { op.last() };
    if op[0] == "setp" && op.iter().any(|t| t == "s16") && !matches!(op[1].as_str(), "eq" | "ne") {
        return err(i.line, alloc::format!("`{}`: signed 16-bit comparisons are not supported", i.text));
    }
    let mut out = translate_32(cx, i)?;
    let masked = result_type.is_some_and(|t| is16(t)) && !matches!(op[0].as_str(), "setp" | "st");
    // (16-bit loads and stores are refused in `translate_32`: memory is words.)
    if let (true, Some(Inst::Alu { d, .. } | Inst::Mov { d, .. } | Inst::Sel { d, .. })) = (masked, out.last()) {
        let d = *d;
        out.push(Inst::Alu { op: Alu::And, d, a: Src::Reg(d), b: Src::Imm(0xffff) });
    }
    Ok(out)
}

fn translate_32(cx: &mut Ctx<'_>, i: &Instruction) -> Result<Vec<Inst>, PtxError> {
    let (line, op, a) = (i.line, &i.op, &i.args);
    if op.iter().any(|p| matches!(p.as_str(), "f16" | "f32" | "f64" | "bf16" | "rn" | "rz" | "ftz" | "approx")) {
        return err(line, alloc::format!("`{}`: floating point is not supported by the machine", i.text));
    }
    if i.guard.is_some() && op[0] != "bra" {
        return err(line, alloc::format!("`{}`: only branches may be predicated", i.text));
    }
    let need =
        |n: usize| if a.len() == n { Ok(()) } else { err(line, alloc::format!("`{}`: {n} operands expected", i.text)) };
    let space = |s: &str| match s {
        "global" => Ok(Space::Global),
        "shared" => Ok(Space::Shared),
        other => err(line, alloc::format!("`{}`: the {other} state space is not supported", i.text)),
    };
    let sgn = signed(op);
    let binary = |alu: Alu, cx: &mut Ctx<'_>| -> Result<Vec<Inst>, PtxError> {
        need(3)?;
        let (d, x, y) = (cx.dst(&a[0], line)?, cx.src(&a[1], line)?, cx.src(&a[2], line)?);
        Ok(vec![Inst::Alu { op: alu, d, a: x, b: y }])
    };
    let narrow = op.iter().any(|t| matches!(t.as_str(), "u8" | "s8" | "b8" | "u16" | "s16" | "b16"));
    if matches!(op[0].as_str(), "ld" | "st" | "atom") && op.get(1).map(String::as_str) != Some("param") && narrow {
        // A byte or half-word access would read or overwrite the whole word around it.
        return err(
            line,
            alloc::format!("`{}`: arrays of bytes or half-words are not supported (memory is 32-bit words)", i.text),
        );
    }
    Ok(match op[0].as_str() {
        "ld" if op.get(1).map(String::as_str) == Some("param") => {
            need(2)?;
            let d = cx.dst(&a[0], line)?;
            let Operand::Addr(base, 0) = &a[1] else { return err(line, "parameter address") };
            let Operand::Symbol(name) = &**base else { return err(line, "parameter name") };
            match cx.entry.params.iter().position(|p| p == name) {
                Some(k) => vec![Inst::S2R { d, s: Special::Param(k as u8) }],
                None => return err(line, alloc::format!("unknown parameter {name}")),
            }
        }
        "ld" => {
            need(2)?;
            let (d, (base, off)) = (cx.dst(&a[0], line)?, cx.addr(&a[1], line)?);
            vec![Inst::Ld { space: space(op.get(1).map(String::as_str).unwrap_or("generic"))?, d, a: base, off }]
        }
        "st" => {
            need(2)?;
            let ((base, off), v) = (cx.addr(&a[0], line)?, cx.src(&a[1], line)?);
            vec![Inst::St { space: space(op.get(1).map(String::as_str).unwrap_or("generic"))?, a: base, off, v }]
        }
        "atom" => {
            need(3)?;
            if !op.iter().any(|p| p == "add") {
                return err(line, alloc::format!("`{}`: only atom.add is supported", i.text));
            }
            let (d, (base, off), v) = (cx.dst(&a[0], line)?, cx.addr(&a[1], line)?, cx.src(&a[2], line)?);
            vec![Inst::AtomAdd { space: space(&op[1])?, d, a: base, off, v }]
        }
        "cvt" if op.iter().skip(1).any(|t| matches!(t.as_str(), "s8" | "u8")) => {
            return err(line, alloc::format!("`{}`: 8-bit conversions are not supported", i.text));
        }
        "cvt" if op.len() >= 3 && is16(&op[op.len() - 1]) && !is16(&op[op.len() - 2]) => {
            // 16 → 32 bits: 16-bit registers are kept zero-extended; s16 sign-extends.
            need(2)?;
            let (d, x) = (cx.dst(&a[0], line)?, cx.src(&a[1], line)?);
            if op[op.len() - 1] == "s16" && op[op.len() - 2].starts_with('s') {
                vec![
                    Inst::Alu { op: Alu::Shl, d: SCRATCH, a: x, b: Src::Imm(16) },
                    Inst::Alu { op: Alu::Sra, d, a: Src::Reg(SCRATCH), b: Src::Imm(16) },
                ]
            } else {
                vec![Inst::Mov { d, a: x }]
            }
        }
        "mov" | "cvta" | "cvt" => {
            need(2)?;
            let d = cx.dst(&a[0], line)?;
            match &a[1] {
                Operand::Special(s) => vec![Inst::S2R { d, s: special(s, line)? }],
                other => vec![Inst::Mov { d, a: cx.src(other, line)? }],
            }
        }
        "add" => binary(Alu::Add, cx)?,
        "sub" => binary(Alu::Sub, cx)?,
        "mul" if op.get(1).map(String::as_str) == Some("hi") => {
            binary(if sgn { Alu::MulHiS } else { Alu::MulHiU }, cx)?
        }
        "mul" => binary(Alu::Mul, cx)?,
        "div" => binary(if sgn { Alu::DivS } else { Alu::DivU }, cx)?,
        "rem" => binary(if sgn { Alu::RemS } else { Alu::RemU }, cx)?,
        "and" => binary(Alu::And, cx)?,
        "or" => binary(Alu::Or, cx)?,
        "xor" => binary(Alu::Xor, cx)?,
        "shl" => binary(Alu::Shl, cx)?,
        "shr" => binary(if sgn { Alu::Sra } else { Alu::Shr }, cx)?,
        "min" => binary(if sgn { Alu::MinS } else { Alu::MinU }, cx)?,
        "max" => binary(if sgn { Alu::MaxS } else { Alu::MaxU }, cx)?,
        "not" | "neg" => {
            need(2)?;
            let (d, x) = (cx.dst(&a[0], line)?, cx.src(&a[1], line)?);
            match (op[0].as_str(), op.get(1).map(String::as_str)) {
                ("not", Some("pred")) => vec![Inst::Alu { op: Alu::Xor, d, a: x, b: Src::Imm(1) }],
                ("not", _) => vec![Inst::Alu { op: Alu::Xor, d, a: x, b: Src::Imm(u32::MAX) }],
                _ => vec![Inst::Alu { op: Alu::Sub, d, a: Src::Imm(0), b: x }],
            }
        }
        "abs" => {
            // |a| = max(a, 0 − a); abs(i32::MIN) stays i32::MIN, as in PTX.
            need(2)?;
            let (d, x) = (cx.dst(&a[0], line)?, cx.src(&a[1], line)?);
            vec![
                Inst::Alu { op: Alu::Sub, d: SCRATCH, a: Src::Imm(0), b: x },
                Inst::Alu { op: Alu::MaxS, d, a: x, b: Src::Reg(SCRATCH) },
            ]
        }
        "mad" => {
            need(4)?;
            let (d, x, y, z) = (cx.dst(&a[0], line)?, cx.src(&a[1], line)?, cx.src(&a[2], line)?, cx.src(&a[3], line)?);
            // mad.lo and mad.wide (the low word, as for every 64-bit value), mad.hi.
            let mul = match op.get(1).map(String::as_str) {
                Some("hi") if sgn => Alu::MulHiS,
                Some("hi") => Alu::MulHiU,
                _ => Alu::Mul,
            };
            vec![
                Inst::Alu { op: mul, d: SCRATCH, a: x, b: y },
                Inst::Alu { op: Alu::Add, d, a: Src::Reg(SCRATCH), b: z },
            ]
        }
        "setp" => {
            need(3)?;
            let cmp = match (op.get(1).map(String::as_str).unwrap_or(""), sgn) {
                ("eq", _) => Cmp::Eq,
                ("ne", _) => Cmp::Ne,
                ("lt", true) => Cmp::LtS,
                ("le", true) => Cmp::LeS,
                ("gt", true) => Cmp::GtS,
                ("ge", true) => Cmp::GeS,
                ("lt" | "lo", false) => Cmp::LtU,
                ("le" | "ls", false) => Cmp::LeU,
                ("gt" | "hi", false) => Cmp::GtU,
                ("ge" | "hs", false) => Cmp::GeU,
                (other, _) => return err(line, alloc::format!("comparison {other:?}")),
            };
            let (d, x, y) = (cx.dst(&a[0], line)?, cx.src(&a[1], line)?, cx.src(&a[2], line)?);
            vec![Inst::Set { cmp, d, a: x, b: y }]
        }
        "selp" => {
            need(4)?;
            let (d, x, y) = (cx.dst(&a[0], line)?, cx.src(&a[1], line)?, cx.src(&a[2], line)?);
            let Src::Reg(c) = cx.src(&a[3], line)? else { return err(line, "selp's predicate") };
            vec![Inst::Sel { d, c, a: x, b: y }]
        }
        "shfl" => {
            // shfl[.sync].mode.b32 d, a, b, c[, membermask]
            let mode =
                match op.iter().find(|p| matches!(p.as_str(), "idx" | "up" | "down" | "bfly")).map(String::as_str) {
                    Some("idx") => Shfl::Idx,
                    Some("up") => Shfl::Up,
                    Some("down") => Shfl::Down,
                    _ => Shfl::Bfly,
                };
            if a.len() < 4 || matches!(&a[0], Operand::Reg(r) if r.contains('|')) {
                return err(line, alloc::format!("`{}`: shfl with a predicate output", i.text));
            }
            let (d, b) = (cx.dst(&a[0], line)?, cx.src(&a[2], line)?);
            let Src::Reg(x) = cx.src(&a[1], line)? else { return err(line, "shfl's source must be a register") };
            vec![Inst::Shfl { mode, d, a: x, b }]
        }
        "bfe" | "bfi" | "prmt" | "brev" | "popc" | "clz" | "bfind" | "shf" | "cnot" => {
            super::lower_bits::translate(cx, i)?
        }
        "bar" | "barrier" => vec![Inst::Bar],
        "ret" | "exit" => vec![Inst::Exit],
        "bra" => vec![], // placed by `lower` (targets are ROM indices)
        _ => return err(line, alloc::format!("`{}` is not supported by the machine", i.text)),
    })
}

fn push(uses: &mut Vec<u8>, s: Src) {
    if let Src::Reg(r) = s {
        uses.push(r);
    }
}

/// Registers an instruction reads and the one it writes (virtual ids).
fn uses_defs(inst: &Inst) -> (Vec<u8>, Option<u8>) {
    let mut u = Vec::new();
    let def = match *inst {
        Inst::Mov { d, a } => {
            push(&mut u, a);
            Some(d)
        }
        Inst::Alu { d, a, b, .. } | Inst::Set { d, a, b, .. } => {
            push(&mut u, a);
            push(&mut u, b);
            Some(d)
        }
        Inst::Sel { d, c, a, b } => {
            push(&mut u, a);
            push(&mut u, b);
            u.push(c);
            Some(d)
        }
        Inst::Ld { d, a, .. } => {
            push(&mut u, a);
            Some(d)
        }
        Inst::St { a, v, .. } => {
            push(&mut u, a);
            push(&mut u, v);
            None
        }
        Inst::AtomAdd { d, a, v, .. } => {
            push(&mut u, a);
            push(&mut u, v);
            Some(d)
        }
        Inst::Shfl { d, a, b, .. } => {
            u.push(a);
            push(&mut u, b);
            Some(d)
        }
        Inst::S2R { d, .. } => Some(d),
        Inst::Bra { c, .. } => {
            u.extend(c);
            None
        }
        Inst::Bar | Inst::Exit => None,
    };
    (u, def)
}

/// Immediate post-dominators (`n` = the virtual exit for blocks that only reach exits).
fn ipdoms(succ: &[Vec<usize>]) -> Vec<usize> {
    let n = succ.len();
    let exit = n;
    // pdom[b] as a bitset over 0..=n.
    let full: Vec<bool> = vec![true; n + 1];
    let mut pdom: Vec<Vec<bool>> = vec![full; n + 1];
    pdom[exit] = (0..=n).map(|i| i == exit).collect();
    let mut changed = true;
    while changed {
        changed = false;
        for b in (0..n).rev() {
            let targets: Vec<usize> = if succ[b].is_empty() { vec![exit] } else { succ[b].clone() };
            let mut set: Vec<bool> = vec![true; n + 1];
            for &s in &targets {
                for (x, v) in set.iter_mut().zip(&pdom[s]) {
                    *x &= *v;
                }
            }
            set[b] = true;
            if set != pdom[b] {
                pdom[b] = set;
                changed = true;
            }
        }
    }
    (0..n)
        .map(|b| {
            // The strict post-dominator that every other strict post-dominator post-dominates.
            let strict: Vec<usize> = (0..=n).filter(|&x| x != b && pdom[b][x]).collect();
            strict.iter().copied().find(|&c| strict.iter().all(|&o| o == c || pdom[c][o])).unwrap_or(exit)
        })
        .collect()
}

/// Lowers a parsed entry for the machine `spec`.
pub fn lower(entry: &Entry, spec: &MachineSpec) -> Result<Kernel, PtxError> {
    // Shared variables, laid out in order.
    let mut shared = BTreeMap::new();
    let mut shared_bytes = 0usize;
    for (name, bytes) in &entry.shared {
        shared.insert(name.clone(), shared_bytes as u32);
        // Saturating: any sum past the machine's memory is refused just below, however large.
        shared_bytes = shared_bytes.saturating_add(bytes.checked_next_multiple_of(4).unwrap_or(usize::MAX));
    }
    if shared_bytes > spec.shared_words * 4 {
        return err(
            entry.line,
            alloc::format!("{shared_bytes} bytes of shared memory; the machine has {}", spec.shared_words * 4),
        );
    }
    let mut cx = Ctx { entry, vregs: BTreeMap::new(), shared, constants: constants(entry) };
    // 1. Basic blocks.
    let mut blocks: Vec<Block> = vec![Block { label: None, insts: vec![], code: vec![], succ: vec![] }];
    for stmt in &entry.body {
        match stmt {
            Stmt::Label(l, _) => {
                if blocks.last().is_some_and(|b| !b.insts.is_empty() || b.label.is_some()) {
                    blocks.push(Block { label: None, insts: vec![], code: vec![], succ: vec![] });
                }
                if let Some(b) = blocks.last_mut() {
                    b.label = Some(l.clone());
                }
            }
            Stmt::Inst(i) => {
                let ends = matches!(i.op[0].as_str(), "bra" | "ret" | "exit");
                if let Some(b) = blocks.last_mut() {
                    b.insts.push(i.clone());
                }
                if ends {
                    blocks.push(Block { label: None, insts: vec![], code: vec![], succ: vec![] });
                }
            }
        }
    }
    blocks.retain(|b| !b.insts.is_empty() || b.label.is_some());
    let index: BTreeMap<String, usize> =
        blocks.iter().enumerate().filter_map(|(i, b)| b.label.clone().map(|l| (l, i))).collect();
    let n = blocks.len();
    let mut succs = Vec::with_capacity(n);
    for (b, block) in blocks.iter().enumerate() {
        let last = block.insts.last().cloned();
        succs.push(match last {
            Some(i) if i.op[0] == "bra" => {
                let Some(Operand::Symbol(t)) = i.args.first() else { return err(i.line, "branch target") };
                let Some(&t) = index.get(t) else { return err(i.line, alloc::format!("no label {t}")) };
                if i.guard.is_some() && b + 1 < n {
                    vec![t, b + 1]
                } else {
                    vec![t]
                }
            }
            Some(i) if matches!(i.op[0].as_str(), "ret" | "exit") => vec![],
            _ if b + 1 < n => vec![b + 1],
            Some(i) => return err(i.line, "the kernel falls off its end without ret"),
            None => vec![],
        });
    }
    for (block, succ) in blocks.iter_mut().zip(succs) {
        block.succ = succ;
    }
    // The post-dominator sets are quadratic in the blocks: refuse a kernel that could never fit
    // the ROM before building them (every basic block needs a ROM block of its own, and eight
    // times the ROM leaves room for empty ones), not after (fuzzing found 50k labels).
    if blocks.len() > 8 * spec.rom_blocks {
        return err(
            entry.line,
            alloc::format!("{} basic blocks; the machine's ROM holds {} blocks", blocks.len(), spec.rom_blocks),
        );
    }
    let join = ipdoms(&blocks.iter().map(|b| b.succ.clone()).collect::<Vec<_>>());
    // 2. Translate.
    for b in &mut blocks {
        for i in b.insts.clone() {
            for inst in translate(&mut cx, &i)? {
                b.code.push((inst, i.line));
            }
        }
    }
    // 3. Liveness per block (backwards dataflow), then interference at every definition.
    let nv = cx.vregs.len();
    let mut live_in: Vec<Vec<bool>> = vec![vec![false; nv]; n];
    let mut live_out: Vec<Vec<bool>> = vec![vec![false; nv]; n];
    let guard_reg = |b: &Block, cx: &Ctx<'_>| {
        b.insts.last().and_then(|i| i.guard.as_ref()).and_then(|(p, _)| cx.vregs.get(p).copied())
    };
    let mut changed = true;
    while changed {
        changed = false;
        for bi in (0..n).rev() {
            let mut live = vec![false; nv];
            for &s in &blocks[bi].succ {
                for (l, v) in live.iter_mut().zip(&live_in[s]) {
                    *l |= *v;
                }
            }
            live_out[bi] = live.clone();
            if let Some(p) = guard_reg(&blocks[bi], &cx) {
                live[p as usize] = true;
            }
            for (inst, _) in blocks[bi].code.iter().rev() {
                let (uses, def) = uses_defs(inst);
                if let Some(d) = def.filter(|&d| d != SCRATCH) {
                    live[d as usize] = false;
                }
                for u in uses.into_iter().filter(|&u| u != SCRATCH) {
                    live[u as usize] = true;
                }
            }
            if live != live_in[bi] {
                live_in[bi] = live;
                changed = true;
            }
        }
    }
    let mut interferes = vec![vec![false; nv]; nv];
    let mut pressure_line = (0usize, 0usize);
    for bi in 0..n {
        let mut live = live_out[bi].clone();
        if let Some(p) = guard_reg(&blocks[bi], &cx) {
            live[p as usize] = true;
        }
        for (inst, line) in blocks[bi].code.iter().rev() {
            let (uses, def) = uses_defs(inst);
            if let Some(d) = def.filter(|&d| d != SCRATCH) {
                for (o, &l) in live.iter().enumerate() {
                    if l && o != d as usize {
                        interferes[d as usize][o] = true;
                        interferes[o][d as usize] = true;
                    }
                }
                live[d as usize] = false;
            }
            for u in uses.into_iter().filter(|&u| u != SCRATCH) {
                live[u as usize] = true;
            }
            let count = live.iter().filter(|&&l| l).count();
            if count > pressure_line.0 {
                pressure_line = (count, *line);
            }
        }
    }
    let colours = spec.regs - 1;
    let mut phys = vec![u8::MAX; nv];
    for v in 0..nv {
        let taken: Vec<u8> = (0..nv).filter(|&o| interferes[v][o] && phys[o] != u8::MAX).map(|o| phys[o]).collect();
        match (0..colours as u8).find(|c| !taken.contains(c)) {
            Some(c) => phys[v] = c,
            None => {
                return err(
                    pressure_line.1,
                    alloc::format!(
                        "too many live registers: {} at once here; the machine has {} (and 1 scratch)",
                        pressure_line.0.max(colours + 1),
                        colours
                    ),
                )
            }
        }
    }
    let map = |r: u8| if r == SCRATCH { (spec.regs - 1) as u8 } else { phys[r as usize] };
    // 4. ROM blocks: the first ROM block of each PTX block, then targets and joins.
    let mut rom: Vec<Vec<Inst>> = Vec::new();
    let mut rom_lines = Vec::new();
    let mut first_rom = vec![0usize; n + 1];
    let mut pending: Vec<(usize, usize)> = Vec::new(); // (rom block, ptx block) whose branch needs its target
    for (bi, b) in blocks.iter().enumerate() {
        first_rom[bi] = rom.len();
        let mut cur: Vec<Inst> = Vec::new();
        let mut cur_line = b.insts.first().map(|i| i.line).unwrap_or(entry.line);
        for (inst, line) in &b.code {
            if cur.is_empty() {
                cur_line = *line;
            }
            cur.push(remap(inst, &map));
            if cur.len() == spec.block_len || inst.is_terminator() {
                rom.push(core::mem::take(&mut cur));
                rom_lines.push(cur_line);
            }
        }
        let branch = b.insts.last().filter(|i| i.op[0] == "bra");
        if let Some(i) = branch {
            if cur.len() + 1 > spec.block_len {
                rom.push(core::mem::take(&mut cur));
                rom_lines.push(cur_line);
            }
            if cur.is_empty() {
                cur_line = i.line;
            }
            cur.push(Inst::Bra { target: 0, c: None, neg: false, join: 0 });
            pending.push((rom.len(), bi));
        }
        if !cur.is_empty() {
            rom.push(cur);
            rom_lines.push(cur_line);
        }
        if rom.len() > spec.rom_blocks {
            let line = b.insts.first().map(|i| i.line).unwrap_or(entry.line);
            return err(
                line,
                alloc::format!("the program needs more than the ROM's {} blocks from here on", spec.rom_blocks),
            );
        }
    }
    first_rom[n] = rom.len();
    for (r, bi) in pending {
        let i = blocks[bi].insts.last().ok_or(PtxError { line: entry.line, what: "branch".into() })?;
        let c = i.guard.as_ref().map(|(p, neg)| (cx.vregs.get(p).copied().map(map), *neg));
        let target = first_rom[blocks[bi].succ[0]] as u16;
        let j = first_rom[join[bi]] as u16;
        let last = rom[r].len() - 1;
        rom[r][last] = match c {
            Some((Some(c), neg)) => Inst::Bra { target, c: Some(c), neg, join: j },
            Some((None, _)) => return err(i.line, "a branch on a predicate that is never set"),
            None => Inst::Bra { target, c: None, neg: false, join: j },
        };
    }
    let program = Program { blocks: rom };
    program.check(spec).map_err(|e| PtxError { line: entry.line, what: e.to_string() })?;
    Ok(Kernel { name: entry.name.clone(), program, params: entry.params.clone(), rom_lines, shared_bytes })
}

fn remap(inst: &Inst, map: &impl Fn(u8) -> u8) -> Inst {
    let s = |x: Src| match x {
        Src::Reg(r) => Src::Reg(map(r)),
        imm => imm,
    };
    match *inst {
        Inst::Mov { d, a } => Inst::Mov { d: map(d), a: s(a) },
        Inst::Alu { op, d, a, b } => Inst::Alu { op, d: map(d), a: s(a), b: s(b) },
        Inst::Set { cmp, d, a, b } => Inst::Set { cmp, d: map(d), a: s(a), b: s(b) },
        Inst::Sel { d, c, a, b } => Inst::Sel { d: map(d), c: map(c), a: s(a), b: s(b) },
        Inst::Ld { space, d, a, off } => Inst::Ld { space, d: map(d), a: s(a), off },
        Inst::St { space, a, off, v } => Inst::St { space, a: s(a), off, v: s(v) },
        Inst::AtomAdd { space, d, a, off, v } => Inst::AtomAdd { space, d: map(d), a: s(a), off, v: s(v) },
        Inst::Shfl { mode, d, a, b } => Inst::Shfl { mode, d: map(d), a: map(a), b: s(b) },
        Inst::S2R { d, s: sp } => Inst::S2R { d: map(d), s: sp },
        other => other,
    }
}

/// Parses and lowers PTX text.
pub fn compile(ptx: &str, entry: Option<&str>, spec: &MachineSpec) -> Result<Kernel, PtxError> {
    lower(&super::ptx::parse(ptx, entry)?, spec)
}
