//! The compiled machine's larger functional units (see `compiled` for where they sit). Each
//! copies its operands in at layer 5 when its opcode is on, so for every other instruction its
//! units stay silent.

use super::compiled::Op;
use super::isa::Alu;
use super::net::{Cond, Group, MemLayer};
use super::units::{active, any_of, channels, is, union, Builder, Nibs};
use alloc::vec;
use alloc::vec::Vec;

type OpIs<'a> = &'a dyn Fn(Op) -> Cond;
/// A condition on the opcode from a predicate over opcodes.
pub type OpWhere<'a> = &'a dyn Fn(&dyn Fn(Op) -> bool) -> Cond;

fn alu_any(op_is: OpIs, alus: &[Alu]) -> Cond {
    union(&alus.iter().map(|&a| op_is(Op::Alu(a))).collect::<Vec<_>>())
}

fn sign(w: &Nibs, negative: bool) -> Cond {
    any_of(w[7], |d| (d >= 8) == negative)
}

/// `shl`, `shr`, `sra` by b: (b mod 4) bits at layer 6, (b div 4) mod 8 nibbles at layer 8; an
/// amount of 32 or more gives 0 (or the sign for `sra`). Each shift has its own copy of the
/// operand, so its units are reached through the operand's digits (hot only for that shift), not
/// through the opcode.
pub fn shifts(b: &mut Builder, op_is: OpIs, opa: &Nibs, opb: &Nibs) -> Nibs {
    let (shl, shr, sra) = (op_is(Op::Alu(Alu::Shl)), op_is(Op::Alu(Alu::Shr)), op_is(Op::Alu(Alu::Sra)));
    let on = union(&[shl.clone(), shr.clone(), sra.clone()]);
    let (s, z) = (b.word("shift.b", 8), b.word("shift", 8));
    b.copy(5, core::slice::from_ref(&on), opb, &s);
    let small = b.s.group("shift.small", 2);
    let mut conds: Vec<Cond> = (2..8).map(|k| is(s[k], 0)).collect();
    conds.push(any_of(s[1], |d| d < 2));
    b.unit(6, conds, vec![small.ch(1)]);
    b.unit(7, vec![active(s[0]), Cond::None(vec![small.ch(1)])], vec![small.ch(0)]);
    for (op, left, name) in [(&shl, true, "shl"), (&shr, false, "shr"), (&sra, false, "sra")] {
        let arith = op == &sra;
        let (x, y) = (b.word(&alloc::format!("{name}.a"), 8), b.word(&alloc::format!("{name}.bits"), 8));
        b.copy(5, core::slice::from_ref(op), opa, &x);
        // Bits: nibble k takes its neighbour's bits (the lower one left, the upper one right).
        for k in 0..8usize {
            for t in 0..4 {
                let tc = any_of(s[0], |d| d & 3 == t);
                let nb = if left { k.checked_sub(1) } else { Some(k + 1).filter(|&n| n < 8) };
                for u in 0..16 {
                    let shift = |n: usize| {
                        if left {
                            ((u << t) | (n >> (4 - t))) & 15
                        } else {
                            ((u >> t) | (n << (4 - t))) & 15
                        }
                    };
                    match nb.filter(|_| t > 0) {
                        Some(nb) => {
                            for v in 0..16 {
                                b.unit(6, vec![is(x[k], u), tc.clone(), is(x[nb], v)], vec![y[k].ch(shift(v))]);
                            }
                        }
                        // No neighbour: zeros come in, or the sign for sra's top nibble.
                        None => {
                            let fill = if arith && k == 7 && u >= 8 { 15 } else { 0 };
                            b.unit(6, vec![is(x[k], u), tc.clone()], vec![y[k].ch(shift(fill))]);
                        }
                    }
                }
            }
        }
        // Nibbles: m = (b >> 2) mod 8.
        for m in 0..8 {
            let mc = [any_of(s[0], |d| d >> 2 == m & 3), any_of(s[1], |d| d & 1 == m >> 2)];
            for (k, zk) in z.iter().enumerate() {
                let src = if left { k.checked_sub(m) } else { Some(k + m).filter(|&i| i < 8) };
                let mut base = vec![is(small, 1)];
                base.extend(mc.iter().cloned());
                match src {
                    Some(i) => b.copy(8, &base, &[y[i]], &[*zk]),
                    None if arith => {
                        for neg in [false, true] {
                            let mut c = base.clone();
                            c.push(sign(&x, neg));
                            b.unit(8, c, vec![zk.ch(if neg { 15 } else { 0 })]);
                        }
                    }
                    None => {
                        let mut c = base.clone();
                        c.push(active(x[0]));
                        b.unit(8, c, vec![zk.ch(0)]);
                    }
                }
            }
        }
        // 32 or more.
        for neg in [false, true] {
            if neg && !arith {
                continue;
            }
            let mut c = vec![active(x[0]), is(small, 0)];
            if arith {
                c.push(sign(&x, neg));
            }
            b.unit(8, c, (0..8).map(|k| z[k].ch(if neg { 15 } else { 0 })).collect());
        }
    }
    z
}

/// Shuffles: the source lane from the lane and b (6–8), its thread (9), the register key (10),
/// a register-file head reading it (11). Returns the value read.
#[allow(clippy::too_many_arguments)]
pub fn shuffle(
    b: &mut Builder,
    op: OpWhere,
    phase: Group,
    thread: Group,
    lane: Group,
    opb: &Nibs,
    ra: Group,
    rows: usize,
    prk: &Group,
    prv: &Nibs,
    dk: usize,
) -> Nibs {
    use super::isa::Shfl;
    let lanes = lane.len;
    let is_shfl = op(&|o| matches!(o, Op::Shfl(_)));
    let sh = b.word("shfl.b", 8);
    b.copy(5, &[is_shfl.clone(), is(phase, 0)], opb, &sh);
    // b as a lane offset, or `lanes` when it is lanes or more.
    let off = b.s.group("shfl.offset", lanes + 1);
    for d in 0..lanes {
        let mut conds: Vec<Cond> = (1..8).map(|k| is(sh[k], 0)).collect();
        conds.push(is(sh[0], d));
        b.unit(6, conds, vec![off.ch(d)]);
    }
    b.unit(7, vec![active(sh[0]), Cond::None((0..lanes).map(|d| off.ch(d)).collect())], vec![off.ch(lanes)]);
    let src = b.s.group("shfl.src", lanes);
    let mode = |m: Shfl| op(&move |o| o == Op::Shfl(m));
    for s in 0..lanes {
        b.unit(8, vec![mode(Shfl::Idx), any_of(sh[0], |d| d % lanes == s)], vec![src.ch(s)]);
    }
    for l in 0..lanes {
        for d in 0..=lanes {
            let k = (d < lanes).then_some(d);
            let from = |m: Shfl| match m {
                Shfl::Up => k.and_then(|k| l.checked_sub(k)),
                Shfl::Down => k.map(|k| l + k).filter(|&s| s < lanes),
                Shfl::Bfly => k.map(|k| l ^ k).filter(|&s| s < lanes),
                Shfl::Idx => None,
            };
            for m in [Shfl::Up, Shfl::Down, Shfl::Bfly] {
                b.unit(8, vec![mode(m), is(lane, l), is(off, d)], vec![src.ch(from(m).unwrap_or(l))]);
            }
        }
    }
    let threads = thread.len;
    let t2 = b.s.group("shfl.thread", threads);
    for t in 0..threads {
        for s in 0..lanes {
            b.unit(9, vec![is(thread, t), is(src, s)], vec![t2.ch(t - t % lanes + s)]);
        }
    }
    let ks = b.s.group("shfl.key", threads * rows);
    for t in 0..threads {
        for r in 0..rows {
            b.unit(10, vec![is(t2, t), is(ra, r)], vec![ks.ch(t * rows + r)]);
        }
    }
    let vs = b.word("shfl", 8);
    let head = MemLayer::new(&b.s, dk, &ks.all(), &prk.all(), &channels(prv), &channels(&vs), 8);
    b.mem(11, head);
    b.zero_if_cold(11, &[active(sh[0])], &vs);
    vs
}

/// The word index `(addr / 4) mod n` as one-hot over `n`, from layer `at`: a transducer over the
/// nibbles from the top whose state is the address so far mod 4n (8 layers), then `state / 4`.
/// `(addr mod 4n) / 4 = (addr / 4) mod n`.
pub fn word_index(b: &mut Builder, at: usize, when: &Cond, addr: &Nibs, n: usize, name: &str) -> Group {
    let top_down: Nibs = addr.iter().rev().copied().collect();
    let when = [when.clone(), active(addr[0])];
    let (end, rest) =
        b.transducer(at, &when, &top_down, None, None, 4 * n, &alloc::format!("{name}.mod"), &|d, _, r| {
            (0, (r * 16 + d) % (4 * n))
        });
    let idx = b.s.group(&alloc::format!("{name}.index"), n);
    for r in 0..4 * n {
        b.unit(end, vec![is(rest, r)], vec![idx.ch(r / 4)]);
    }
    idx
}

/// `mul.lo`, `mul.hi.u32` and `mul.hi.s32`: a 64-bit product (nibble products at 6, a tree of
/// 16-nibble adders 7–70), and for the signed high word the correction
/// `hi_s = hi_u − (a < 0 ? b : 0) − (b < 0 ? a : 0)` (71–78).
pub fn multiplier(b: &mut Builder, op_is: OpIs, opa: &Nibs, opb: &Nibs) -> (Nibs, Nibs, Nibs) {
    let on = alu_any(op_is, &[Alu::Mul, Alu::MulHiS, Alu::MulHiU]);
    let (x, y) = (b.word("mul.a", 8), b.word("mul.b", 8));
    b.copy(5, core::slice::from_ref(&on), opa, &x);
    b.copy(5, core::slice::from_ref(&on), opb, &y);
    let prod = b.word("mul.product", 16);
    let end = b.mul(6, &x, &y, &prod, "mul");
    let signed = op_is(Op::Alu(Alu::MulHiS));
    let (ca, cb, corr) = (b.word("mulhi.ca", 8), b.word("mulhi.cb", 8), b.word("mulhi.corr", 8));
    for (dst, neg_of, other) in [(&ca, &x, &y), (&cb, &y, &x)] {
        b.copy(6, &[signed.clone(), sign(neg_of, true)], other, dst);
        b.constant(6, &[signed.clone(), sign(neg_of, false)], 0, dst);
    }
    b.add(8, &[active(ca[0])], &ca, &cb, &corr, "mulhi.add");
    let his = b.word("mulhi.s", 8);
    let hi: Nibs = prod[8..].to_vec();
    b.sub(end, &[active(corr[0])], &hi, &corr, &his, "mulhi.sub");
    (prod[..8].to_vec(), hi, his)
}

/// Negation `0 − a` (a borrow chain) from layer `at`, its borrow in set at `at − 1`.
fn negate(b: &mut Builder, at: usize, when: &[Cond], a: &Nibs, name: &str) -> Nibs {
    let out = b.word(name, a.len());
    let borrow = |d: usize, _, br: usize| ((32 - d - br) % 16, usize::from(d + br > 0));
    b.transducer(at, when, a, None, Some(&out), 2, &alloc::format!("{name}.b"), &borrow);
    out
}

/// Division and remainder, radix-16 long division: |a| and |b| (6–14), the multiples q·|b| for
/// q = 1..15 (15–25), then per digit of the quotient 15 subtractions of the multiples from the
/// running remainder and a selection of the largest that does not borrow (26–105), and the
/// signs (106–114). Division by zero falls out as all ones with the dividend as remainder; the
/// signed quotient by zero is forced to all ones as the interpreter defines it.
pub fn divider(b: &mut Builder, op_is: OpIs, opa: &Nibs, opb: &Nibs) -> Nibs {
    let signed = alu_any(op_is, &[Alu::DivS, Alu::RemS]);
    let on = alu_any(op_is, &[Alu::DivS, Alu::RemS, Alu::DivU, Alu::RemU]);
    let (x, y) = (b.word("div.a", 8), b.word("div.b", 8));
    b.copy(5, core::slice::from_ref(&on), opa, &x);
    b.copy(5, core::slice::from_ref(&on), opb, &y);
    let yz = b.s.group("div.b_zero", 2);
    b.is_zero(6, &[active(y[0])], &y, yz);
    let (nx, ny) = (
        negate(b, 6, core::slice::from_ref(&signed), &x, "div.-a"),
        negate(b, 6, core::slice::from_ref(&signed), &y, "div.-b"),
    );
    let (ax, ay) = (b.word("div.|a|", 8), b.word("div.|b|", 8));
    let unsigned = alu_any(op_is, &[Alu::DivU, Alu::RemU]);
    for (abs, v, neg) in [(&ax, &x, &nx), (&ay, &y, &ny)] {
        b.copy(14, &[signed.clone(), sign(v, true)], neg, abs);
        b.copy(14, &[signed.clone(), sign(v, false)], v, abs);
        b.copy(14, core::slice::from_ref(&unsigned), v, abs);
    }
    let live = [active(ay[0])];
    // q·|b| as lo + hi·16 per nibble product, 9 nibbles.
    let mut multiples = vec![Nibs::new()];
    for q in 1..16 {
        let (lo, hi, m) = (b.word("div.lo", 9), b.word("div.hi", 9), b.word(&alloc::format!("div.{q}b"), 9));
        for i in 0..8 {
            for v in 0..16 {
                b.unit(15, vec![is(ay[i], v)], vec![lo[i].ch(q * v % 16), hi[i + 1].ch(q * v / 16)]);
            }
        }
        b.constant(15, &live, 0, &[lo[8], hi[0]]);
        b.add(17, &live, &lo, &hi, &m, "div.m");
        multiples.push(m);
    }
    let mut r = b.word("div.r", 8);
    b.constant(15, &live, 0, &r);
    let quo = b.word("div.q", 8);
    let mut t = 26;
    for k in (0..8).rev() {
        // r' = r·16 + digit k of |a|: a relabelling of nibbles.
        let shifted: Nibs = core::iter::once(ax[k]).chain(r.iter().copied()).collect();
        let mut diffs = vec![shifted.clone()];
        let mut borrows = vec![None];
        for (q, m) in multiples.iter().enumerate().skip(1) {
            let d = b.word(&alloc::format!("div.r-{q}b"), 9);
            let (_, borrow) = b.sub(t, &live, &shifted, m, &d, "div.s");
            diffs.push(d);
            borrows.push(Some(borrow));
        }
        let next = b.word("div.r", 8);
        for q in 0..16 {
            let mut conds = vec![];
            if let Some(bq) = borrows[q] {
                conds.push(is(bq, 0));
            }
            if let Some(Some(bn)) = borrows.get(q + 1) {
                conds.push(is(*bn, 1));
            }
            b.unit(t + 9, conds.clone(), vec![quo[k].ch(q)]);
            b.copy(t + 9, &conds, &diffs[q][..8], &next);
        }
        r = next;
        t += 10;
    }
    let (nq, nr) = (
        negate(b, t, core::slice::from_ref(&signed), &quo, "div.-q"),
        negate(b, t, core::slice::from_ref(&signed), &r, "div.-r"),
    );
    let out = b.word("div", 8);
    let end = t + 8;
    let (divs, rems) = (op_is(Op::Alu(Alu::DivS)), op_is(Op::Alu(Alu::RemS)));
    b.copy(end, &[op_is(Op::Alu(Alu::DivU))], &quo, &out);
    b.copy(end, &[op_is(Op::Alu(Alu::RemU))], &r, &out);
    b.constant(end, &[divs.clone(), is(yz, 1)], u32::MAX as u64, &out);
    for (sx, sy) in [(false, false), (false, true), (true, false), (true, true)] {
        let src = if sx != sy { &nq } else { &quo };
        b.copy(end, &[divs.clone(), is(yz, 0), sign(&x, sx), sign(&y, sy)], src, &out);
    }
    b.copy(end, &[rems.clone(), sign(&x, true)], &nr, &out);
    b.copy(end, &[rems, sign(&x, false)], &r, &out);
    out
}
