//! 64-bit integers (`long long`, `size_t`, `(long long)a * b`) as pairs of machine words.
//!
//! Most 64-bit arithmetic clang emits is addressing, whose low word depends only on the low
//! words of its operands (add, sub, mul.lo, shl, and/or/xor, moves, widening): the machine runs it
//! on the low word alone, exactly. What reads a high word (comparisons, right shifts, min/max,
//! 64-bit stores, splitting a value into its words) needs it computed, so a register gets a
//! second machine register, `name.hi`, only where that is so: [`analyse`] marks the registers a
//! high word is read from, then every register their high words are made from, back to loads,
//! parameters and 32-bit values. Division, remainder, high products and atomics on 64 bits are
//! refused: the machine's units are 32-bit.

use super::isa::{Alu, Cmp, Inst, Src};
use super::ptx::{Entry, Instruction, Operand, PtxError, Stmt};
use super::select::{err, state_space, translate_32, Ctx};
use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

pub(super) fn is64(t: &str) -> bool {
    matches!(t, "s64" | "u64" | "b64")
}

fn last(i: &Instruction) -> &str {
    i.op.last().map_or("", String::as_str)
}

/// Whether the instruction's destination register holds 64 bits: by its type, or by the name
/// clang gives 64-bit registers (`ld.global.s32 %rd12, …` loads a word into one, extended).
fn result64(i: &Instruction) -> bool {
    let op = &i.op;
    if dest(i).is_some_and(|d| d.starts_with("%rd")) && !matches!(op[0].as_str(), "setp" | "st") {
        return true;
    }
    match op[0].as_str() {
        "setp" | "st" | "bra" | "ret" | "bar" | "atom" => false,
        "cvt" => op.len() >= 3 && is64(&op[op.len() - 2]),
        "mul" | "mad" => op.get(1).is_some_and(|p| p == "wide") || is64(last(i)),
        _ => is64(last(i)),
    }
}

fn regs(args: &[Operand]) -> Vec<&str> {
    args.iter()
        .flat_map(|a| match a {
            Operand::Reg(r) => vec![r.as_str()],
            Operand::Vector(es) => regs(es),
            _ => vec![],
        })
        .collect()
}

fn dest(i: &Instruction) -> Option<&str> {
    match i.args.first() {
        Some(Operand::Reg(r)) => Some(r),
        _ => None,
    }
}

/// The registers whose high word `i` reads for its own result.
fn demands(i: &Instruction) -> Vec<&str> {
    let (op, a) = (i.op[0].as_str(), &i.args[..]);
    let wide = is64(last(i));
    match op {
        "setp" | "shr" | "min" | "max" if wide && a.len() >= 2 => regs(&a[1..]),
        "st" if wide && i.op.get(1).is_none_or(|s| s != "param") && a.len() == 2 => regs(&a[1..]),
        "mov" if matches!(a.first(), Some(Operand::Vector(_))) => regs(&a[1..]),
        _ => vec![],
    }
}

/// The registers whose high words the high word of `i`'s result is made from.
fn feeds(i: &Instruction) -> Vec<&str> {
    let a = &i.args[..];
    let wide = i.op.get(1).is_some_and(|p| p == "wide");
    match i.op[0].as_str() {
        "mad" if wide => regs(a.get(3..).unwrap_or(&[])),
        "mul" if wide => vec![],
        "mov" | "cvta" | "add" | "sub" | "and" | "or" | "xor" | "not" | "neg" | "mul" | "mad" | "min" | "max" => {
            regs(a.get(1..).unwrap_or(&[]))
        }
        "selp" => regs(a.get(1..3).unwrap_or(&[])),
        "shl" | "shr" => regs(a.get(1..2).unwrap_or(&[])),
        _ => vec![],
    }
}

/// Whether `i`'s result has a zero high word when every register in `zero` has one: a word
/// zero-extended (a parameter, an unsigned load or conversion from 32 bits), a small immediate,
/// a copy, or an `and` with such a value.
fn zero_high(i: &Instruction, zero: &BTreeSet<String>) -> bool {
    let op = &i.op;
    let zero_operand = |o: &Operand| match o {
        Operand::Reg(r) => zero.contains(r) || !r.starts_with("%rd"),
        Operand::Imm(v) => *v >> 32 == 0,
        _ => true,
    };
    let from = op.last().map_or("", String::as_str);
    match op[0].as_str() {
        "ld" => op.get(1).is_some_and(|p| p == "param") || !from.starts_with('s') && !is64(from),
        "cvt" => from.starts_with('u') && !is64(from),
        "mov" | "cvta" => i.args.get(1).is_some_and(zero_operand),
        "and" => i.args[1..].iter().any(zero_operand),
        "or" | "xor" => i.args[1..].iter().all(zero_operand),
        _ => false,
    }
}

/// The 64-bit registers of `entry`, and those of them whose high word must be computed (not
/// those known to be zero, which read as the immediate 0).
pub(super) fn analyse(entry: &Entry) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let insts: Vec<&Instruction> =
        entry.body.iter().filter_map(|s| if let Stmt::Inst(i) = s { Some(i) } else { None }).collect();
    let wide: BTreeSet<String> =
        insts.iter().filter(|i| result64(i)).filter_map(|i| dest(i)).map(str::to_string).collect();
    // The greatest set of registers every definition of which leaves a zero high word.
    let mut zero = wide.clone();
    let mut changed = true;
    while changed {
        changed = false;
        for i in &insts {
            if let Some(d) = dest(i).filter(|d| zero.contains(*d)) {
                if !zero_high(i, &zero) {
                    zero.remove(d);
                    changed = true;
                }
            }
        }
    }
    let computed = |r: &str| wide.contains(r) && !zero.contains(r);
    let mut high: BTreeSet<String> =
        insts.iter().flat_map(|i| demands(i)).filter(|r| computed(r)).map(str::to_string).collect();
    changed = true;
    while changed {
        changed = false;
        for i in &insts {
            if result64(i) && dest(i).is_some_and(|d| high.contains(d)) {
                for s in feeds(i).into_iter().filter(|s| computed(s)) {
                    changed |= high.insert(s.to_string());
                }
            }
        }
    }
    (wide, zero, high)
}

impl Ctx<'_> {
    /// The high word of operand `o` (0 for a 32-bit value or an address symbol).
    fn hi(&mut self, o: &Operand, line: usize) -> Result<Src, PtxError> {
        Ok(match o {
            Operand::Reg(r) if self.wide.contains(r) && !self.zero_high.contains(r) => {
                Src::Reg(self.vreg(&format!("{r}.hi"), line)?)
            }
            // A 64-bit register clang names but never defines reads 0, as an unset register does.
            Operand::Imm(v) => Src::Imm((*v >> 32) as u32),
            _ => Src::Imm(0),
        })
    }

    fn hi_dst(&mut self, o: &Operand, line: usize) -> Result<u8, PtxError> {
        match o {
            Operand::Reg(r) => self.vreg(&format!("{r}.hi"), line),
            other => err(line, format!("destination {other:?}")),
        }
    }

    /// Temporary `k` of one instruction's sequence, named by its line: dead after it, so each
    /// interferes only with what is live there (and only those a sequence uses are made).
    fn temp(&mut self, line: usize, k: usize) -> Result<u8, PtxError> {
        self.vreg(&format!("$w{line}.{k}"), line)
    }
}

fn alu(op: Alu, d: u8, a: Src, b: Src) -> Inst {
    Inst::Alu { op, d, a, b }
}

/// The machine instructions of a 64-bit `i` that needs its high words, or `None` where the
/// low-word translation ([`translate_32`]) is exact.
pub(super) fn translate(cx: &mut Ctx<'_>, i: &Instruction) -> Result<Option<Vec<Inst>>, PtxError> {
    let (op, a, line) = (i.op[0].as_str(), &i.args[..], i.line);
    let (wide, signed) = (is64(last(i)), last(i) == "s64");
    let part = |k: usize| i.op.get(k).map(String::as_str);
    if wide && (matches!(op, "div" | "rem" | "atom" | "red") || (matches!(op, "mul" | "mad") && part(1) == Some("hi")))
    {
        return err(
            line,
            format!(
                "`{}`: 64-bit division, high products and atomics are outside the machine (its units are 32-bit)",
                i.text
            ),
        );
    }
    let need = |n: usize| if a.len() == n { Ok(()) } else { err(line, format!("`{}`: {n} operands expected", i.text)) };
    let r = Src::Reg;
    let mut out = Vec::new();
    match op {
        "setp" if wide => {
            need(3)?;
            if i.op.len() > 3 || matches!(&a[0], Operand::Reg(p) if p.contains('|')) {
                return err(
                    line,
                    format!("`{}`: a 64-bit comparison combined with a predicate or into a pair", i.text),
                );
            }
            let p = cx.dst(&a[0], line)?;
            out = compare(cx, part(1).unwrap_or(""), signed, p, &a[1], &a[2], line)?;
        }
        "min" | "max" if wide => {
            need(3)?;
            let cmp = if op == "min" { "lt" } else { "gt" };
            let t2 = cx.temp(line, 2)?;
            out = compare(cx, cmp, signed, t2, &a[1], &a[2], line)?;
            let (xl, yl, xh, yh) =
                (cx.src(&a[1], line)?, cx.src(&a[2], line)?, cx.hi(&a[1], line)?, cx.hi(&a[2], line)?);
            out.push(Inst::Sel { d: cx.dst(&a[0], line)?, c: t2, a: xl, b: yl });
            if cx.needs_hi(&a[0]) {
                out.push(Inst::Sel { d: cx.hi_dst(&a[0], line)?, c: t2, a: xh, b: yh });
            }
        }
        "shr" if wide => {
            need(3)?;
            let Some(k) = cx.constant(&a[2]) else {
                return err(line, format!("`{}`: a 64-bit shift by an amount known only at run time", i.text));
            };
            let (d, x, xh) = (cx.dst(&a[0], line)?, cx.src(&a[1], line)?, cx.hi(&a[1], line)?);
            let fill =
                |h: Src| if signed { alu(Alu::Sra, d, h, Src::Imm(31)) } else { Inst::Mov { d, a: Src::Imm(0) } };
            let right = if signed { Alu::Sra } else { Alu::Shr };
            let dh = if cx.needs_hi(&a[0]) { Some(cx.hi_dst(&a[0], line)?) } else { None };
            let t0 = cx.temp(line, 0)?;
            match k {
                0 => out.push(Inst::Mov { d, a: x }),
                1..=31 => out.extend([
                    alu(Alu::Shl, t0, xh, Src::Imm(32 - k)),
                    alu(Alu::Shr, d, x, Src::Imm(k)),
                    alu(Alu::Or, d, r(d), r(t0)),
                ]),
                32..=63 => out.push(alu(right, d, xh, Src::Imm(k - 32))),
                _ => out.push(fill(xh)),
            }
            if let Some(dh) = dh {
                out.push(match k {
                    0 => Inst::Mov { d: dh, a: xh },
                    1..=31 => alu(right, dh, xh, Src::Imm(k)),
                    _ if signed => alu(Alu::Sra, dh, xh, Src::Imm(31)),
                    _ => Inst::Mov { d: dh, a: Src::Imm(0) },
                });
            }
        }
        "st" if wide && part(1) != Some("param") => {
            need(2)?;
            let Operand::Addr(base, off) = &a[0] else { return err(line, "address") };
            let (b, off) = (cx.src(base, line)?, *off as i32);
            let space = state_space(cx, i)?;
            let (vl, vh) = (cx.src(&a[1], line)?, cx.hi(&a[1], line)?);
            out.extend([Inst::St { space, a: b, off, v: vl }, Inst::St { space, a: b, off: off + 4, v: vh }]);
        }
        "ld" if wide && part(1) != Some("param") => {
            need(2)?;
            let Operand::Addr(base, off) = &a[1] else { return err(line, "address") };
            let (b, off) = (cx.src(base, line)?, *off as i32);
            let space = state_space(cx, i)?;
            let d = cx.dst(&a[0], line)?;
            // The high word first: the address may be the destination's own low word.
            if cx.needs_hi(&a[0]) {
                out.push(Inst::Ld { space, d: cx.hi_dst(&a[0], line)?, a: b, off: off + 4 });
            }
            out.push(Inst::Ld { space, d, a: b, off });
        }
        // `mov.b64 {lo, hi}, %rd`: a value split into its words (a sink or a scratch name
        // takes a word nobody reads).
        "mov" if matches!(a.first(), Some(Operand::Vector(_))) => {
            need(2)?;
            let Operand::Vector(words) = &a[0] else { return Ok(None) };
            let halves = [cx.src(&a[1], line)?, cx.hi(&a[1], line)?];
            for (w, h) in words.iter().zip(halves) {
                if let Operand::Reg(_) = w {
                    out.push(Inst::Mov { d: cx.dst(w, line)?, a: h });
                }
            }
        }
        "mov" if matches!(a.get(1), Some(Operand::Vector(_))) => {
            need(2)?;
            let Operand::Vector(words) = &a[1] else { return Ok(None) };
            let [lo, hi] = [words.first(), words.get(1)].map(|w| w.cloned().unwrap_or(Operand::Imm(0)));
            out.push(Inst::Mov { d: cx.dst(&a[0], line)?, a: cx.src(&lo, line)? });
            if cx.needs_hi(&a[0]) {
                out.push(Inst::Mov { d: cx.hi_dst(&a[0], line)?, a: cx.src(&hi, line)? });
            }
        }
        _ if result64(i) && a.first().is_some_and(|d| cx.needs_hi(d)) => out = with_high(cx, i)?,
        _ => return Ok(None),
    }
    Ok(Some(out))
}

impl Ctx<'_> {
    fn needs_hi(&self, o: &Operand) -> bool {
        matches!(o, Operand::Reg(r) if self.high.contains(r))
    }
}

/// `p = a <cmp> b` on 64-bit values: the high words decide unless they are equal, then the low
/// words, unsigned.
fn compare(
    cx: &mut Ctx<'_>,
    cmp: &str,
    signed: bool,
    p: u8,
    x: &Operand,
    y: &Operand,
    line: usize,
) -> Result<Vec<Inst>, PtxError> {
    let (xl, yl, xh, yh) = (cx.src(x, line)?, cx.src(y, line)?, cx.hi(x, line)?, cx.hi(y, line)?);
    let t0 = cx.temp(line, 0)?;
    let r = Src::Reg;
    let set = |cmp, d, a, b| Inst::Set { cmp, d, a, b };
    let (strict, low) = match (cmp, signed) {
        ("eq", _) => return Ok(vec![set(Cmp::Eq, t0, xh, yh), set(Cmp::Eq, p, xl, yl), alu(Alu::And, p, r(p), r(t0))]),
        ("ne", _) => return Ok(vec![set(Cmp::Ne, t0, xh, yh), set(Cmp::Ne, p, xl, yl), alu(Alu::Or, p, r(p), r(t0))]),
        ("lt", true) => (Cmp::LtS, Cmp::LtU),
        ("le", true) => (Cmp::LtS, Cmp::LeU),
        ("gt", true) => (Cmp::GtS, Cmp::GtU),
        ("ge", true) => (Cmp::GtS, Cmp::GeU),
        ("lt" | "lo", false) => (Cmp::LtU, Cmp::LtU),
        ("le" | "ls", false) => (Cmp::LtU, Cmp::LeU),
        ("gt" | "hi", false) => (Cmp::GtU, Cmp::GtU),
        ("ge" | "hs", false) => (Cmp::GtU, Cmp::GeU),
        (other, _) => return err(line, format!("comparison {other:?}")),
    };
    Ok(vec![
        set(Cmp::Eq, p, xh, yh),
        set(low, t0, xl, yl),
        alu(Alu::And, p, r(p), r(t0)),
        set(strict, t0, xh, yh),
        alu(Alu::Or, p, r(p), r(t0)),
    ])
}

/// A 64-bit result whose high word is read: the high word's instructions with the low word's.
fn with_high(cx: &mut Ctx<'_>, i: &Instruction) -> Result<Vec<Inst>, PtxError> {
    let (op, a, line) = (i.op[0].as_str(), &i.args[..], i.line);
    let part = |k: usize| i.op.get(k).map(String::as_str);
    let r = Src::Reg;
    let dh = cx.hi_dst(&a[0], line)?;
    let operand = |k: usize| a.get(k).cloned().unwrap_or(Operand::Imm(0));
    let mut out = Vec::new();
    match op {
        // Kernel parameters are 32-bit words on the machine: their high word is 0. A word
        // loaded into a 64-bit register is extended as its type says.
        "ld" => {
            out = translate_32(cx, i)?;
            let d = cx.dst(&a[0], line)?;
            let signed = part(1) != Some("param") && i.op.last().is_some_and(|t| t.starts_with('s'));
            out.push(if signed { alu(Alu::Sra, dh, r(d), Src::Imm(31)) } else { Inst::Mov { d: dh, a: Src::Imm(0) } });
        }
        "cvt" => {
            let from = i.op.last().map_or("", String::as_str);
            out = translate_32(cx, i)?;
            let d = cx.dst(&a[0], line)?;
            out.push(match from {
                f if is64(f) => Inst::Mov { d: dh, a: cx.hi(&operand(1), line)? },
                f if f.starts_with('s') => alu(Alu::Sra, dh, r(d), Src::Imm(31)),
                _ => Inst::Mov { d: dh, a: Src::Imm(0) },
            });
        }
        "mov" | "cvta" => {
            out.push(Inst::Mov { d: dh, a: cx.hi(&operand(1), line)? });
            out.extend(translate_32(cx, i)?);
        }
        "and" | "or" | "xor" => {
            let f = match op {
                "and" => Alu::And,
                "or" => Alu::Or,
                _ => Alu::Xor,
            };
            out.push(alu(f, dh, cx.hi(&operand(1), line)?, cx.hi(&operand(2), line)?));
            out.extend(translate_32(cx, i)?);
        }
        "not" => {
            out.push(alu(Alu::Xor, dh, cx.hi(&operand(1), line)?, Src::Imm(u32::MAX)));
            out.extend(translate_32(cx, i)?);
        }
        "selp" => {
            let Src::Reg(c) = cx.src(&operand(3), line)? else { return err(line, "selp's predicate") };
            out.push(Inst::Sel { d: dh, c, a: cx.hi(&operand(1), line)?, b: cx.hi(&operand(2), line)? });
            out.extend(translate_32(cx, i)?);
        }
        "add" | "sub" | "neg" => {
            // The low words with their carry (borrow), then the high words.
            let (t0, t1) = (cx.temp(line, 0)?, cx.temp(line, 1)?);
            let d = cx.dst(&a[0], line)?;
            let (x, y) = if op == "neg" { (Operand::Imm(0), operand(1)) } else { (operand(1), operand(2)) };
            let (xl, yl, xh, yh) = (cx.src(&x, line)?, cx.src(&y, line)?, cx.hi(&x, line)?, cx.hi(&y, line)?);
            if op == "add" {
                // The carry is `sum < x` for the operand x the sum does not overwrite.
                let (keep, sum) = match (xl, yl) {
                    (Src::Reg(x), _) if x != d => (xl, d),
                    (_, Src::Reg(y)) if y != d => (yl, d),
                    (Src::Imm(_), _) => (xl, d),
                    (_, Src::Imm(_)) => (yl, d),
                    _ => (xl, t0),
                };
                out.extend([
                    alu(Alu::Add, sum, xl, yl),
                    Inst::Set { cmp: Cmp::LtU, d: t1, a: r(sum), b: keep },
                    alu(Alu::Add, dh, xh, yh),
                    alu(Alu::Add, dh, r(dh), r(t1)),
                ]);
                if sum != d {
                    out.push(Inst::Mov { d, a: r(sum) });
                }
            } else {
                out.extend([
                    Inst::Set { cmp: Cmp::LtU, d: t1, a: xl, b: yl },
                    alu(Alu::Sub, d, xl, yl),
                    alu(Alu::Sub, dh, xh, yh),
                    alu(Alu::Sub, dh, r(dh), r(t1)),
                ]);
            }
        }
        "mul" | "mad" if part(1) == Some("wide") => {
            // 32 × 32 → 64: the high word is the high product, signed or not.
            let signed = i.op.last().is_some_and(|t| t == "s32");
            let hi = if signed { Alu::MulHiS } else { Alu::MulHiU };
            let (x, y) = (cx.src(&operand(1), line)?, cx.src(&operand(2), line)?);
            let d = cx.dst(&a[0], line)?;
            let (t0, t1, t2) = (cx.temp(line, 0)?, cx.temp(line, 1)?, cx.temp(line, 2)?);
            out.extend([alu(Alu::Mul, t0, x, y), alu(hi, t1, x, y)]);
            if op == "mad" {
                let (zl, zh) = (cx.src(&operand(3), line)?, cx.hi(&operand(3), line)?);
                out.extend([
                    alu(Alu::Add, t2, r(t0), zl),
                    Inst::Set { cmp: Cmp::LtU, d: t0, a: r(t2), b: zl },
                    alu(Alu::Add, t1, r(t1), r(t0)),
                    alu(Alu::Add, dh, r(t1), zh),
                    Inst::Mov { d, a: r(t2) },
                ]);
            } else {
                out.extend([Inst::Mov { d: dh, a: r(t1) }, Inst::Mov { d, a: r(t0) }]);
            }
        }
        "mul" => {
            // (xh·2³² + xl)(yh·2³² + yl) mod 2⁶⁴: the high word takes the low product's carry
            // word and both cross products.
            let (x, y) = (operand(1), operand(2));
            let (xl, yl, xh, yh) = (cx.src(&x, line)?, cx.src(&y, line)?, cx.hi(&x, line)?, cx.hi(&y, line)?);
            let d = cx.dst(&a[0], line)?;
            let (t0, t1) = (cx.temp(line, 0)?, cx.temp(line, 1)?);
            out.extend([
                alu(Alu::MulHiU, t0, xl, yl),
                alu(Alu::Mul, t1, xl, yh),
                alu(Alu::Add, t0, r(t0), r(t1)),
                alu(Alu::Mul, t1, xh, yl),
                alu(Alu::Add, dh, r(t0), r(t1)),
                alu(Alu::Mul, d, xl, yl),
            ]);
        }
        "shl" => {
            let Some(k) = cx.constant(&operand(2)) else {
                return err(line, format!("`{}`: a 64-bit shift by an amount known only at run time", i.text));
            };
            let (x, xh) = (cx.src(&operand(1), line)?, cx.hi(&operand(1), line)?);
            let d = cx.dst(&a[0], line)?;
            let t0 = cx.temp(line, 0)?;
            match k {
                0 => out.extend([Inst::Mov { d: dh, a: xh }, Inst::Mov { d, a: x }]),
                1..=31 => out.extend([
                    alu(Alu::Shr, t0, x, Src::Imm(32 - k)),
                    alu(Alu::Shl, dh, xh, Src::Imm(k)),
                    alu(Alu::Or, dh, r(dh), r(t0)),
                    alu(Alu::Shl, d, x, Src::Imm(k)),
                ]),
                32..=63 => out.extend([alu(Alu::Shl, dh, x, Src::Imm(k - 32)), Inst::Mov { d, a: Src::Imm(0) }]),
                _ => out.extend([Inst::Mov { d: dh, a: Src::Imm(0) }, Inst::Mov { d, a: Src::Imm(0) }]),
            }
        }
        _ => {
            return err(
                line,
                format!("`{}`: the high word of this 64-bit result is read, and cannot be computed", i.text),
            )
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::args::{run_ptx, Arg};
    use alloc::vec;
    use alloc::vec::Vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// `out[i] = {a + b, a − b, a < b (signed), a < b (unsigned), a >> 35 (signed)}` over 64-bit
    /// words `a = v[2i], b = v[2i + 1]`, as clang writes such PTX.
    const PTX: &str = r#"
.visible .entry k(
	.param .u64 k_param_0,
	.param .u64 k_param_1
)
{
	ld.param.u64 	%rd1, [k_param_0];
	ld.param.u64 	%rd2, [k_param_1];
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd3, %r1, 16;
	add.s64 	%rd4, %rd1, %rd3;
	ld.global.u64 	%rd5, [%rd4];
	ld.global.u64 	%rd6, [%rd4+8];
	mul.wide.u32 	%rd7, %r1, 40;
	add.s64 	%rd8, %rd2, %rd7;
	add.s64 	%rd9, %rd5, %rd6;
	st.global.u64 	[%rd8], %rd9;
	sub.s64 	%rd10, %rd5, %rd6;
	st.global.u64 	[%rd8+8], %rd10;
	setp.lt.s64 	%p1, %rd5, %rd6;
	selp.u64 	%rd11, 1, 0, %p1;
	st.global.u64 	[%rd8+16], %rd11;
	setp.lt.u64 	%p2, %rd5, %rd6;
	selp.u64 	%rd12, 1, 0, %p2;
	st.global.u64 	[%rd8+24], %rd12;
	shr.s64 	%rd13, %rd5, 35;
	st.global.u64 	[%rd8+32], %rd13;
	ret;
}
"#;

    #[test]
    fn arithmetic_and_comparisons_past_32_bits_match_i64() {
        let pairs: [(i64, i64); 4] =
            [(1 << 40, (1 << 40) - 1), (-5, 3), (i64::MIN + 7, i64::MAX - 2), (0xffff_ffff, 0x1_0000_0001)];
        let words: Vec<u32> =
            pairs.iter().flat_map(|&(a, b)| [a, b]).flat_map(|v| [v as u32, (v >> 32) as u32]).collect();
        let got = run_ptx(PTX, &[Arg::Array(words), Arg::Array(vec![0; 40])], 1, 4);
        let want: Vec<u32> = pairs
            .iter()
            .flat_map(|&(a, b)| {
                [a.wrapping_add(b), a.wrapping_sub(b), i64::from(a < b), i64::from((a as u64) < (b as u64)), a >> 35]
            })
            .flat_map(|v| [v as u32, (v >> 32) as u32])
            .collect();
        assert_eq!(got[1], want);
    }
}
