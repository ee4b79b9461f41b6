//! Integer division as a routine of the machine's other instructions, for a machine with no
//! divider.
//!
//! The second machine's layers cannot hold a divider (docs/qwengpu-second-machine.md §4: exact
//! comparisons on scalar limbs reach 16-bit quantities, and a 32-bit quotient digit by digit
//! needs about 10^6 units a digit, or 96 layers bit by bit). NVIDIA's GPUs have no integer
//! divider either: `ptxas` expands `div.u32` into other instructions. So does this pass, on the
//! PTX, before the lowering: each `div`/`rem` becomes a loop of shifts, a comparison and a
//! conditional subtraction, whose steps the machine runs like any others.
//!
//! **The loop** is restoring division, one quotient bit an iteration, 32 iterations. The pair
//! `(r, a)` shifts left as one 64-bit word, so the dividend's bits enter the remainder from the
//! top of `a` and the quotient's bits enter `a` from the bottom: after 32 iterations `a` is the
//! quotient and `r` the remainder. `r < b` holds before each shift, so the shifted remainder is
//! below `2b`, which can exceed 32 bits when `b ≥ 2^31`: the bit shifted out of `r` (`h`) is kept
//! and counts as "greater or equal", and `r − b` then wraps to the true remainder (below `b`).
//!
//! **Division by zero** needs no test: every comparison with `b = 0` succeeds, so every quotient
//! bit is 1 (all ones, as the ISA's `DivU` gives) and nothing is ever subtracted (the remainder
//! is the dividend, as `RemU` gives).
//!
//! **Signed** operands are divided as magnitudes (`|i32::MIN|` is `2^31`, exact as unsigned).
//! The quotient is negated when the signs differ and the divisor is not zero (by zero it stays
//! all ones, −1); the remainder takes the dividend's sign. `i32::MIN / −1` comes out as
//! `−2^31`, which wraps to `i32::MIN`, remainder 0: the ISA's `DivS`/`RemS` in every case.

use super::ptx::{instruction, Instruction, PtxError, Stmt};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Whether `i` is a division the routine replaces: a 32-bit `div` or `rem` of three operands,
/// unguarded. Any other is left as it is, for the lowering to refuse with its own words, as on
/// any machine (a 64-bit division, a predicated one, a wrong operand count).
fn expands(i: &Instruction) -> bool {
    matches!(i.op[0].as_str(), "div" | "rem")
        && !i.op.last().is_some_and(|t| super::wide::is64(t))
        && i.guard.is_none()
        && i.args.len() == 3
}

/// `body` with every division [`expands`] names replaced by its routine.
pub fn expand(body: &[Stmt]) -> Result<Vec<Stmt>, PtxError> {
    let mut out = Vec::with_capacity(body.len());
    let mut site = 0;
    for stmt in body {
        match stmt {
            Stmt::Inst(i) if expands(i) => {
                out.extend(routine(i, site)?);
                site += 1;
            }
            other => out.push(other.clone()),
        }
    }
    Ok(out)
}

/// The statements that compute division site `site` (`i`: `div|rem.type d, a, b`).
fn routine(i: &Instruction, site: usize) -> Result<Vec<Stmt>, PtxError> {
    let line = i.line;
    let text = |o: &super::ptx::Operand| -> Result<String, PtxError> {
        match o {
            super::ptx::Operand::Reg(r) => Ok(r.clone()),
            super::ptx::Operand::Imm(v) => Ok(format!("{}", *v as u32)),
            other => super::select::err(line, format!("`{}`: operand {other:?}", i.text)),
        }
    };
    let (d, x, y) = (text(&i.args[0])?, text(&i.args[1])?, text(&i.args[2])?);
    let signed = super::select::signed(&i.op);
    let rem = i.op[0] == "rem";
    // Fresh names per site: clang's registers are `%r`, `%rd`, `%p`, `%rs`…, never `%dv`.
    let r = |n: &str| format!("%dv{site}{n}");
    let (a, b, rr, i, t, h, p) = (r("a"), r("b"), r("r"), r("i"), r("t"), r("h"), r("p"));
    // Copies first: `d` may be `x` or `y`.
    let mut head = vec![format!("mov.u32 {a}, {x}"), format!("mov.u32 {b}, {y}")];
    // The counter `i` runs 64 + s down by two, so its low bit carries the sign the result takes
    // through the loop (s = 0 unsigned) and the loop holds one register fewer: the routine's
    // peak is six registers (a, b, r, i and two temporaries; p dies where t is born) besides
    // the kernel's own.
    if signed {
        // s: the remainder takes the dividend's sign; the quotient is negated when the signs
        // differ and the divisor is not zero.
        head.push(format!("shr.u32 {i}, {a}, 31"));
        if !rem {
            head.push(format!("shr.u32 {t}, {b}, 31"));
            head.push(format!("xor.b32 {i}, {i}, {t}"));
            head.push(format!("setp.ne.u32 {p}, {b}, 0"));
            head.push(format!("selp.u32 {i}, {i}, 0, {p}"));
        }
        // Both operands to magnitudes: (v ^ m) − m with m = v >> 31 (arithmetic).
        for v in [&a, &b] {
            head.push(format!("shr.s32 {t}, {v}, 31"));
            head.push(format!("xor.b32 {v}, {v}, {t}"));
            head.push(format!("sub.u32 {v}, {v}, {t}"));
        }
        head.push(format!("add.u32 {i}, {i}, 64"));
    } else {
        head.push(format!("mov.u32 {i}, 64"));
    }
    head.push(format!("mov.u32 {rr}, 0"));
    let (top, skip, done) = (format!("$Ldv{site}"), format!("$Ldv{site}_skip"), format!("$Ldv{site}_done"));
    // Leading zero bytes of the dividend, eight iterations at a time: while r is 0 and b is
    // not, an iteration shifts a zero into r, compares 0 ≥ b (false) and enters a zero quotient
    // bit, so eight of them are a <<= 8. A dividend of 0 skips the loop altogether. By zero,
    // every iteration runs (each gives a quotient bit of 1).
    head.push(format!("setp.eq.u32 {p}, {b}, 0"));
    head.push(format!("@{p} bra {top}"));
    let skipping = [
        format!("shr.u32 {t}, {a}, 24"),
        format!("setp.ne.u32 {p}, {t}, 0"),
        format!("@{p} bra {top}"),
        format!("shl.b32 {a}, {a}, 8"),
        format!("sub.u32 {i}, {i}, 16"),
        format!("setp.gt.u32 {p}, {i}, 1"),
        format!("@{p} bra {skip}"),
        format!("bra.uni {done}"),
    ];
    let body = [
        // (r, a) <<= 1 as one 64-bit word; h keeps the bit shifted out of r.
        format!("shr.u32 {h}, {rr}, 31"),
        format!("shl.b32 {rr}, {rr}, 1"),
        format!("shr.u32 {t}, {a}, 31"),
        format!("or.b32 {rr}, {rr}, {t}"),
        format!("shl.b32 {a}, {a}, 1"),
        // t = the quotient bit: the shifted remainder (h its 33rd bit) is at least b.
        format!("setp.ge.u32 {p}, {rr}, {b}"),
        format!("selp.u32 {t}, 1, 0, {p}"),
        format!("or.b32 {t}, {t}, {h}"),
        // r −= b where the bit is 1 (h: the mask 0 or all ones, then b or 0), and the bit
        // into a's free low bit.
        format!("neg.s32 {h}, {t}"),
        format!("and.b32 {h}, {h}, {b}"),
        format!("sub.u32 {rr}, {rr}, {h}"),
        format!("or.b32 {a}, {a}, {t}"),
        format!("sub.u32 {i}, {i}, 2"),
        format!("setp.gt.u32 {p}, {i}, 1"),
        format!("@{p} bra {top}"),
    ];
    let result = if rem { &rr } else { &a };
    let tail = if signed {
        // (v ^ −s) + s: v negated where s (now all of i) is 1.
        vec![
            format!("neg.s32 {t}, {i}"),
            format!("xor.b32 {result}, {result}, {t}"),
            format!("add.u32 {d}, {result}, {i}"),
        ]
    } else {
        vec![format!("mov.u32 {d}, {result}")]
    };
    let inst = |l: &String| instruction(l, line).map(Stmt::Inst);
    let mut stmts: Vec<Stmt> = head.iter().map(inst).collect::<Result<_, _>>()?;
    stmts.push(Stmt::Label(skip, line));
    for l in &skipping {
        stmts.push(inst(l)?);
    }
    stmts.push(Stmt::Label(top, line));
    for l in &body {
        stmts.push(inst(l)?);
    }
    stmts.push(Stmt::Label(done, line));
    for l in &tail {
        stmts.push(inst(l)?);
    }
    Ok(stmts)
}

#[cfg(test)]
mod tests;
