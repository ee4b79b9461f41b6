//! Instruction selection: one PTX instruction as machine instructions on virtual registers,
//! with the kernel's variables (shared, module-scope, local) laid out first. `lower` then builds
//! the control flow, allocates the registers and packs the ROM.

use super::isa::{Alu, Cmp, Inst, MachineSpec, Shfl, Space, Special, Src, MAX_PARAMS};
use super::ptx::{Entry, Instruction, Operand, PtxError, Stmt};
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

pub(super) fn err<T>(line: usize, what: impl Into<String>) -> Result<T, PtxError> {
    Err(PtxError { line, what: what.into() })
}

/// Virtual register ids; `SCRATCH` is the reserved physical register.
pub(super) const SCRATCH: u8 = 255;

pub(super) struct Ctx<'a> {
    entry: &'a Entry,
    pub(super) vregs: BTreeMap<String, u8>,
    shared: BTreeMap<String, u32>,
    pub(super) shared_bytes: usize,
    /// The byte address of each module-scope variable in global memory.
    globals: BTreeMap<String, u32>,
    /// Their initial words, in address order ([`super::lower::Kernel::data`]).
    pub(super) data: Vec<u32>,
    /// Registers whose only definition in the kernel is a `mov` of an immediate (clang puts a
    /// `prmt` selector in one): their value, for instructions that need it known.
    constants: BTreeMap<String, u32>,
    /// No `cvta.shared` in the kernel, so a generic address is a global one.
    generic_is_global: bool,
    /// The local depot's symbol and bytes per thread; its base address is the extra parameter
    /// after the kernel's own.
    pub(super) local: Option<(String, u32)>,
    /// The 64-bit registers, those whose high word is known to be 0, and those whose high word
    /// is computed ([`super::wide`]).
    pub(super) wide: BTreeSet<String>,
    pub(super) zero_high: BTreeSet<String>,
    pub(super) high: BTreeSet<String>,
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
        // Each element of a vector load is a destination too.
        if let (Some(Operand::Vector(ds)), "ld") = (i.args.first(), i.op[0].as_str()) {
            for d in ds.iter().filter_map(|d| if let Operand::Reg(d) = d { Some(d.as_str()) } else { None }) {
                defs.entry(d).or_insert((0, None)).0 += 1;
            }
        }
    }
    defs.into_iter().filter_map(|(r, (n, v))| Some((r.to_string(), v.filter(|_| n == 1)?))).collect()
}

impl<'a> Ctx<'a> {
    /// The context of lowering `entry`: its shared, module-scope and local variables laid out
    /// (each refused if the machine cannot hold it).
    pub(super) fn new(entry: &'a Entry, spec: &MachineSpec) -> Result<Ctx<'a>, PtxError> {
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
        let (wide, zero_high, high) = super::wide::analyse(entry);
        let generic_is_global = !entry
            .body
            .iter()
            .any(|s| matches!(s, Stmt::Inst(i) if i.op[0] == "cvta" && i.op.get(1).is_some_and(|p| p == "shared")));
        let (mut data, mut globals) = (Vec::new(), BTreeMap::new());
        for (name, words) in &entry.globals {
            globals.insert(name.clone(), 4 * data.len() as u32);
            data.extend_from_slice(words);
        }
        if data.len() > spec.global_words {
            return err(
                entry.line,
                alloc::format!(
                    "{} words of global variables; the machine's memory has {}",
                    data.len(),
                    spec.global_words
                ),
            );
        }
        let local = match &entry.local {
            Some((_, _)) if entry.params.len() >= MAX_PARAMS => {
                return err(
                    entry.line,
                    alloc::format!(
                        "a kernel with a local array takes at most {} parameters: the array's address is one more \
                         of the machine's {MAX_PARAMS}",
                        MAX_PARAMS - 1
                    ),
                )
            }
            Some((_, bytes)) if *bytes > spec.global_words * 4 => {
                return err(
                    entry.line,
                    alloc::format!(
                        "a local array of {bytes} bytes; the machine's memory has {}",
                        spec.global_words * 4
                    ),
                )
            }
            Some((name, bytes)) => Some((name.clone(), bytes.next_multiple_of(4) as u32)),
            None => None,
        };
        Ok(Ctx {
            entry,
            vregs: BTreeMap::new(),
            shared,
            shared_bytes,
            globals,
            data,
            constants: constants(entry),
            generic_is_global,
            local,
            wide,
            zero_high,
            high,
        })
    }

    /// `d` = the address of this thread's local array: thread `t = ctaid · ntid + tid` owns bytes
    /// `base + t · bytes ..` of the region [`super::args::layout`] puts after the arrays. The
    /// machine's `ntid` is the block rounded up to whole warps, so the padding lanes (which run
    /// too) have arrays of their own and never reach the next block's.
    fn local_address(&self, d: u8) -> Vec<Inst> {
        let Some((_, bytes)) = &self.local else { return vec![] };
        let r = |x: u8| Src::Reg(x);
        vec![
            Inst::S2R { d: SCRATCH, s: Special::Ntid },
            Inst::S2R { d, s: Special::Ctaid },
            Inst::Alu { op: Alu::Mul, d, a: r(d), b: r(SCRATCH) },
            Inst::S2R { d: SCRATCH, s: Special::Tid },
            Inst::Alu { op: Alu::Add, d, a: r(d), b: r(SCRATCH) },
            Inst::Alu { op: Alu::Mul, d, a: r(d), b: Src::Imm(*bytes) },
            Inst::S2R { d: SCRATCH, s: Special::Param(self.entry.params.len() as u8) },
            Inst::Alu { op: Alu::Add, d, a: r(d), b: r(SCRATCH) },
        ]
    }

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
            Operand::Symbol(s) => match self.shared.get(s).or(self.globals.get(s)) {
                Some(&off) => Ok(Src::Imm(off)),
                None => err(line, alloc::format!("symbol {s} is not a shared or global variable of this kernel")),
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
        other => return err(line, alloc::format!("%{other}: not a special register the machine has")),
    })
}

/// `ld.v4`/`st.v2` (an aligned int4 or int2): one word access per element, at consecutive
/// addresses. Every element's load reads the address register before any is written, which is
/// sound because PTX forbids a vector load whose destinations include its address register.
fn vector_access(cx: &mut Ctx<'_>, i: &Instruction, space: Space) -> Result<Vec<Inst>, PtxError> {
    let line = i.line;
    let mut out = Vec::new();
    match (i.op[0].as_str(), &i.args[..]) {
        ("ld", [Operand::Vector(ds), addr]) => {
            let (base, off) = cx.addr(addr, line)?;
            for (k, d) in ds.iter().enumerate() {
                if !matches!(d, Operand::Symbol(s) if s == "_") {
                    out.push(Inst::Ld { space, d: cx.dst(d, line)?, a: base, off: off + 4 * k as i32 });
                }
            }
        }
        ("st", [addr, Operand::Vector(vs)]) => {
            let (base, off) = cx.addr(addr, line)?;
            for (k, v) in vs.iter().enumerate() {
                out.push(Inst::St { space, a: base, off: off + 4 * k as i32, v: cx.src(v, line)? });
            }
        }
        _ => return err(line, alloc::format!("`{}`: a vector operand here", i.text)),
    }
    Ok(out)
}

/// The space a load, store or atomic `i` reaches.
pub(super) fn state_space(cx: &Ctx<'_>, i: &Instruction) -> Result<Space, PtxError> {
    // The state space among the opcode's parts (`ld.volatile.global.u32`); none is generic.
    let state = i.op.iter().skip(1).map(String::as_str).find(|p| matches!(*p, "global" | "shared" | "local" | "const"));
    match state {
        // `__constant__` data is global memory that the kernel only reads.
        Some("global" | "const") => Ok(Space::Global),
        Some("shared") => Ok(Space::Shared),
        // Each thread's local array lies in global memory too ([`Ctx::local_address`]).
        Some("local") if cx.local.is_some() => Ok(Space::Global),
        Some("local") => {
            err(i.line, alloc::format!("`{}`: a local access in a kernel without a local array (.local)", i.text))
        }
        // A device function's pointer parameters are generic. Only `cvta.shared` makes a
        // generic address of shared memory, so without one every generic address is global.
        None if cx.generic_is_global => Ok(Space::Global),
        None => err(
            i.line,
            alloc::format!(
                "`{}`: a generic access in a kernel that also takes generic addresses of shared memory \
                 (cvta.shared); the machine cannot tell the two apart at run time",
                i.text
            ),
        ),
        Some(other) => err(i.line, alloc::format!("`{}`: the {other} state space is not supported", i.text)),
    }
}

pub(super) fn signed(op: &[String]) -> bool {
    op.iter().any(|p| p.starts_with('s') && p[1..].parse::<u32>().is_ok())
}

fn is16(t: &str) -> bool {
    matches!(t, "u16" | "s16" | "b16")
}

/// One PTX instruction as machine instructions on virtual registers. 16-bit registers (`%rs`)
/// always hold their zero-extended value: an instruction whose result type is 16 bits
/// (`add.s16`, `mov.u16`, `cvt.u16.u32`) is followed by a mask to 16 bits. Signed 16-bit
/// comparisons would need the sign and are refused.
pub(super) fn translate(cx: &mut Ctx<'_>, i: &Instruction) -> Result<Vec<Inst>, PtxError> {
    let op = &i.op;
    let result_type = if op[0] == "cvt" { op.get(op.len().saturating_sub(2)) } else { op.last() };
    if op[0] == "setp" && op.iter().any(|t| t == "s16") && !matches!(op[1].as_str(), "eq" | "ne") {
        return err(i.line, alloc::format!("`{}`: signed 16-bit comparisons are not supported", i.text));
    }
    if let Some(out) = super::wide::translate(cx, i)? {
        return Ok(out);
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

pub(super) fn translate_32(cx: &mut Ctx<'_>, i: &Instruction) -> Result<Vec<Inst>, PtxError> {
    let (line, op, a) = (i.line, &i.op, &i.args);
    if op.iter().any(|p| matches!(p.as_str(), "f16" | "f32" | "f64" | "bf16" | "rn" | "rz" | "ftz" | "approx")) {
        return err(line, alloc::format!("`{}`: floating point is not supported by the machine", i.text));
    }
    if i.guard.is_some() && op[0] != "bra" {
        return err(line, alloc::format!("`{}`: only branches may be predicated", i.text));
    }
    let need =
        |n: usize| if a.len() == n { Ok(()) } else { err(line, alloc::format!("`{}`: {n} operands expected", i.text)) };
    if !matches!(op[0].as_str(), "setp" | "shfl") && a.iter().any(|o| matches!(o, Operand::Reg(r) if r.contains('|'))) {
        return err(line, alloc::format!("`{}`: a register pair here", i.text));
    }
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
        "ld" | "st" if a.iter().any(|o| matches!(o, Operand::Vector(_))) => {
            let space = state_space(cx, i)?;
            vector_access(cx, i, space)?
        }
        "ld" => {
            need(2)?;
            let (d, (base, off)) = (cx.dst(&a[0], line)?, cx.addr(&a[1], line)?);
            vec![Inst::Ld { space: state_space(cx, i)?, d, a: base, off }]
        }
        "st" => {
            need(2)?;
            let ((base, off), v) = (cx.addr(&a[0], line)?, cx.src(&a[1], line)?);
            vec![Inst::St { space: state_space(cx, i)?, a: base, off, v }]
        }
        "atom" => {
            need(3)?;
            if !op.iter().any(|p| p == "add") {
                return err(line, alloc::format!("`{}`: only atom.add is supported", i.text));
            }
            let (d, (base, off), v) = (cx.dst(&a[0], line)?, cx.addr(&a[1], line)?, cx.src(&a[2], line)?);
            vec![Inst::AtomAdd { space: state_space(cx, i)?, d, a: base, off, v }]
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
                // Launches are one-dimensional: y and z are index 0 of extent 1, as in CUDA.
                Operand::Special(s) if s.ends_with(".y") || s.ends_with(".z") => {
                    vec![Inst::Mov { d, a: Src::Imm(u32::from(s.starts_with('n'))) }]
                }
                Operand::Special(s) => vec![Inst::S2R { d, s: special(s, line)? }],
                Operand::Symbol(s) if cx.local.as_ref().is_some_and(|l| l.0 == *s) => cx.local_address(d),
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
            // setp.cmp[.bool].type p[|q], a, b[, c]: p = (a cmp b) bool c, q = !(a cmp b) bool c.
            let combine = match op.get(2).map(String::as_str) {
                Some("and") => Some(Alu::And),
                Some("or") => Some(Alu::Or),
                Some("xor") => Some(Alu::Xor),
                _ => None,
            };
            need(if combine.is_some() { 4 } else { 3 })?;
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
            let Operand::Reg(dest) = &a[0] else { return err(line, "setp's destination") };
            let (p, q) = match dest.split_once('|') {
                Some((p, q)) => (cx.vreg(p, line)?, Some(cx.vreg(q, line)?)),
                None => (cx.vreg(dest, line)?, None),
            };
            let (x, y) = (cx.src(&a[1], line)?, cx.src(&a[2], line)?);
            let not = |d: u8, v: u8| Inst::Alu { op: Alu::Xor, d, a: Src::Reg(v), b: Src::Imm(1) };
            match (combine, q) {
                (None, None) => vec![Inst::Set { cmp, d: p, a: x, b: y }],
                (None, Some(q)) => vec![Inst::Set { cmp, d: p, a: x, b: y }, not(q, p)],
                (Some(f), q) => {
                    let c = cx.src(&a[3], line)?;
                    let both = |d: u8, v: u8| [not(d, v), Inst::Alu { op: f, d, a: Src::Reg(d), b: c }];
                    let first = Inst::Alu { op: f, d: p, a: Src::Reg(SCRATCH), b: c };
                    let mut out = vec![Inst::Set { cmp, d: SCRATCH, a: x, b: y }];
                    // Whichever of p and q is c is written last.
                    match q {
                        Some(q) if c == Src::Reg(q) => out.extend([first].into_iter().chain(both(q, SCRATCH))),
                        Some(q) => out.extend(both(q, SCRATCH).into_iter().chain([first])),
                        None => out.push(first),
                    }
                    out
                }
            }
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

#[cfg(test)]
mod tests {
    use super::super::args::{run_ptx, Arg};
    use alloc::vec::Vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// A comparison into a predicate pair and one combined with another predicate (PTX lets
    /// clang write both; a pair once read as one register named `%p1|%p2`).
    const PTX: &str = r#"
.visible .entry k(
	.param .u64 k_param_0
)
{
	ld.param.u64 	%rd1, [k_param_0];
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd2, %r1, 16;
	add.s64 	%rd3, %rd1, %rd2;
	ld.global.u32 	%r2, [%rd3];
	setp.lt.s32 	%p1|%p2, %r2, 3;
	setp.gt.and.s32 	%p3|%p4, %r2, -2, %p1;
	setp.eq.or.s32 	%p2, %r2, 7, %p2;
	selp.u32 	%r3, 1, 0, %p1;
	selp.u32 	%r4, 2, 0, %p2;
	selp.u32 	%r5, 4, 0, %p3;
	selp.u32 	%r6, 8, 0, %p4;
	add.s32 	%r7, %r3, %r4;
	add.s32 	%r8, %r5, %r6;
	add.s32 	%r9, %r7, %r8;
	st.global.u32 	[%rd3+4], %r9;
	ret;
}
"#;

    #[test]
    fn predicate_pairs_and_combined_comparisons_are_ptxs() {
        let x: [i32; 4] = [-5, 0, 7, 3];
        let words: Vec<u32> = x.iter().flat_map(|&v| [v as u32, 0, 0, 0]).collect();
        let got: Vec<u32> = run_ptx(PTX, &[Arg::Array(words)], 1, 4)[0].chunks(4).map(|c| c[1]).collect();
        let want: Vec<u32> = x
            .iter()
            .map(|&v| {
                let (p1, p2) = (v < 3, v >= 3);
                let (p3, p4) = (v > -2 && p1, v <= -2 && p1);
                let p2 = v == 7 || p2;
                u32::from(p1) + 2 * u32::from(p2) + 4 * u32::from(p3) + 8 * u32::from(p4)
            })
            .collect();
        assert_eq!(got, want);
    }
}
