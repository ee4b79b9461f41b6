//! PTX → machine blocks.
//!
//! 1. Basic blocks of the PTX body (a label starts one, a branch or `ret` ends one) and their
//!    control-flow graph; each conditional branch's join is its immediate post-dominator.
//! 2. Each PTX instruction becomes one or a few machine instructions on virtual registers
//!    (`select`, with `inline` having inlined device functions before). The
//!    machine's words are 32 bits: 64-bit registers hold addresses (< 2^32) and 64-bit
//!    arithmetic is done on the low word, which is exact for addresses; kernels on 64-bit data
//!    are outside the machine.
//! 3. Registers: liveness over the CFG, then greedy colouring onto `r0 … r{regs−2}`; the last
//!    register is kept as scratch for `mad` (`d = a·b + c` needs a temporary when `d` is `c`)
//!    and `abs`.
//! 4. ROM blocks of up to `block_len` instructions in PTX order; a branch, `bar.sync` or `ret`
//!    ends one. Every refusal names the PTX line and the limit.

use super::isa::{Inst, MachineSpec, Program, Reconverge, Src};
use super::ptx::{Entry, Instruction, Operand, PtxError, Stmt};
use super::select::{err, translate, Ctx, SCRATCH};
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
    /// The initial words of the kernel's module-scope variables (`__device__`, `__constant__`),
    /// which sit at the start of global memory, before the arguments' arrays.
    pub data: Vec<u32>,
    /// Bytes of local array per thread (a multiple of 4), in a region after the arguments'
    /// arrays whose address is passed as one more parameter.
    pub local_bytes: usize,
}

/// A branch's predicate register (`None`: never set, refused) and whether it branches on 0.
type Guard = (Option<u8>, bool);

struct Block {
    label: Option<String>,
    insts: Vec<Instruction>,
    /// Machine instructions on virtual registers, with the PTX line of each.
    code: Vec<(Inst, usize)>,
    succ: Vec<usize>,
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
    let expanded;
    let entry = if spec.divider {
        entry
    } else {
        expanded = Entry { body: super::soft_div::expand(&entry.body)?, ..entry.clone() };
        &expanded
    };
    let mut cx = Ctx::new(entry, spec)?;
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
    // 4. ROM blocks in the machine's block order: the first ROM block of each PTX block, then
    // targets and joins. A PTX block whose fall-through successor is not the next in that order
    // ends in a branch to it (a conditional branch inverted where its target comes next).
    let order = match spec.reconverge {
        Reconverge::Stack => (0..n).collect(),
        Reconverge::LowestPc => super::layout::loop_order(&blocks.iter().map(|b| b.succ.clone()).collect::<Vec<_>>()),
    };
    let mut rom: Vec<Vec<Inst>> = Vec::new();
    let mut rom_lines = Vec::new();
    let mut first_rom = vec![0usize; n + 1];
    // (rom block, target PTX block, guard, the PTX block whose join it takes)
    let mut pending: Vec<(usize, usize, Option<Guard>, usize)> = Vec::new();
    for (k, &bi) in order.iter().enumerate() {
        let b = &blocks[bi];
        let next = order.get(k + 1).copied();
        first_rom[bi] = rom.len();
        let mut cur: Vec<Inst> = Vec::new();
        let mut cur_line = b.insts.first().map(|i| i.line).unwrap_or(entry.line);
        for (inst, line) in &b.code {
            let inst = remap(inst, &map);
            // With lanes in turn, `x = shfl(x)` goes through the scratch register (dead between
            // PTX instructions): `t = shfl(x); x = t`, the move in a block of its own.
            let insts = match inst {
                Inst::Shfl { mode, d, a, b } if spec.lanes_in_turn && inst.shuffles_onto_itself() => {
                    let t = map(SCRATCH);
                    vec![Inst::Shfl { mode, d: t, a, b }, Inst::Mov { d, a: Src::Reg(t) }]
                }
                _ => vec![inst],
            };
            for inst in insts {
                if spec.lanes_in_turn && inst.conflicts(&cur) {
                    rom.push(core::mem::take(&mut cur));
                    rom_lines.push(cur_line);
                }
                if cur.is_empty() {
                    cur_line = *line;
                }
                cur.push(inst);
                if cur.len() == spec.block_len || inst.is_terminator() {
                    rom.push(core::mem::take(&mut cur));
                    rom_lines.push(cur_line);
                }
            }
        }
        let last = b.insts.last();
        let line = last.map_or(cur_line, |i| i.line);
        let guard = match last.filter(|i| i.op[0] == "bra").map(|i| &i.guard) {
            Some(Some((p, neg))) => Some(Some((cx.vregs.get(p).copied().map(map), *neg))),
            Some(None) => Some(None),
            None => None,
        };
        let returns = last.is_some_and(|i| matches!(i.op[0].as_str(), "ret" | "exit"));
        // The PTX successor reached by falling through, if any.
        let fall = (!returns && guard != Some(None) && bi + 1 < n).then_some(bi + 1);
        let mut branches: Vec<(usize, Option<Guard>)> = Vec::new();
        match guard {
            Some(None) => branches.push((b.succ[0], None)),
            Some(Some(g)) if fall.is_some() && fall != next && next == Some(b.succ[0]) => {
                branches.push((bi + 1, Some((g.0, !g.1))));
            }
            Some(Some(g)) => branches.push((b.succ[0], Some(g))),
            None => {}
        }
        if let Some(f) = fall.filter(|&f| next != Some(f) && branches.first().is_none_or(|&(t, _)| t != f)) {
            branches.push((f, None));
        }
        for (target, g) in branches {
            if cur.len() + 1 > spec.block_len {
                rom.push(core::mem::take(&mut cur));
                rom_lines.push(cur_line);
            }
            if cur.is_empty() {
                cur_line = line;
            }
            cur.push(Inst::Bra { target: 0, c: None, neg: false, join: 0 });
            pending.push((rom.len(), target, g, bi));
            rom.push(core::mem::take(&mut cur));
            rom_lines.push(cur_line);
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
    for (r, target, guard, bi) in pending {
        let line = blocks[bi].insts.last().map_or(entry.line, |i| i.line);
        let (target, j) = (first_rom[target] as u16, first_rom[join[bi]] as u16);
        let last = rom[r].len() - 1;
        rom[r][last] = match guard {
            Some((Some(c), neg)) => Inst::Bra { target, c: Some(c), neg, join: j },
            Some((None, _)) => return err(line, "a branch on a predicate that is never set"),
            None => Inst::Bra { target, c: None, neg: false, join: j },
        };
    }
    let program = Program { blocks: rom };
    program.check(spec).map_err(|e| PtxError { line: entry.line, what: e.to_string() })?;
    Ok(Kernel {
        name: entry.name.clone(),
        program,
        params: entry.params.clone(),
        rom_lines,
        shared_bytes: cx.shared_bytes,
        local_bytes: cx.local.as_ref().map_or(0, |l| l.1 as usize),
        data: cx.data,
    })
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
