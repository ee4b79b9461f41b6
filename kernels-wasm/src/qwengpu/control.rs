//! The SIMT sequencer in the layers: which warp runs, which lane and slot comes next, and each
//! warp's reconvergence stack, as the interpreter defines them (`interp`).
//!
//! State rows: one row per warp (a Gated DeltaNet head) holds its stack pointer and its
//! [`DEPTH`] stack entries (pc, join, mask); one row per CTA holds each warp's status (live, at
//! the barrier, done, absent) and whether a later CTA exists. The token record carries the
//! sequencer's registers — kind, warp, lane, slot, phase, pc, mask, the branch outcomes so far —
//! and every token computes the next record:
//! - EXEC (one instruction, one lane) → the next active lane; then the shuffle's second pass;
//!   then the next slot; after the block's last slot, CTRL.
//! - CTRL applies the block's terminator to the warp's stack (branch: uniform or divergent with
//!   two pushes; exit: lanes leave every entry), pops entries that reached their join or lost
//!   their lanes, updates the warp's status and picks the next warp (itself; the next live one;
//!   the first live one; all released from the barrier; the next CTA) → FETCH, or DONE.
//! - FETCH reads the chosen warp's top entry → EXEC of its first active lane at slot 0.

use super::alu_units::OpWhere;
use super::compiled::Op;
use super::head::rows_for;
use super::isa::MachineSpec;
use super::net::{Cond, Group, MemLayer};
use super::units::{any_of, is, Builder};
use alloc::vec;
use alloc::vec::Vec;

pub use super::control_rows::*;

/// Everything the sequencer adds to the stream.
#[derive(Debug, Clone)]
pub struct Seq {
    pub z: Sizes,
    pub rec: Record,
    pub next: Record,
    /// Pending writes of a warp row and a CTA row (the previous token's), and this token's.
    pub pwk: Group,
    pub pwv: WarpRow,
    pub psk: Group,
    pub psv: StatusRow,
    pub owk: Group,
    pub owv: WarpRow,
    pub osk: Group,
    pub osv: StatusRow,
    /// The rows read.
    pub wr: WarpRow,
    pub sr: StatusRow,
    /// (output group, input group): what the host copies from a token's output into the next
    /// token's input record.
    pub carry: Vec<(Group, Group)>,
}

fn copy_group(b: &mut Builder, at: usize, when: &[Cond], src: Group, dst: Group) {
    b.copy(at, when, &[src], &[dst]);
}

fn first_lane(m: usize) -> Option<usize> {
    (m != 0).then(|| m.trailing_zeros() as usize)
}

impl Seq {
    /// The record's and the pending rows' groups; `cta` and `phase` are the machine's own.
    pub fn new(b: &mut Builder, spec: &MachineSpec, cta: Group, phase: Group) -> Seq {
        let z = Sizes::new(spec);
        let rec = Record::new(b, "seq.", &z, Some(cta), Some(phase));
        let next = Record::new(b, "next.", &z, None, None);
        let pwk = b.s.group("pend.warp", z.warps);
        let pwv = WarpRow::new(b, "pend.warp.", &z);
        let psk = b.s.group("pend.cta", z.ctas);
        let psv = StatusRow::new(b, "pend.cta.", &z);
        let owk = b.s.group("out.warp", z.warps);
        let owv = WarpRow::new(b, "out.warp.", &z);
        let osk = b.s.group("out.cta", z.ctas);
        let osv = StatusRow::new(b, "out.cta.", &z);
        let wr = WarpRow::new(b, "warp.", &z);
        let sr = StatusRow::new(b, "cta.", &z);
        let mut carry: Vec<(Group, Group)> = next.groups().into_iter().zip(rec.groups()).collect();
        carry.extend([(owk, pwk), (osk, psk)]);
        carry.extend(owv.groups().into_iter().zip(pwv.groups()));
        carry.extend(osv.groups().into_iter().zip(psv.groups()));
        Seq { z, rec, next, pwk, pwv, psk, psv, owk, owv, osk, osv, wr, sr, carry }
    }

    /// Depth 0 (before the ROM): the thread and ROM row one-hots of an EXEC token.
    pub fn prologue(&self, b: &mut Builder, thread: Group, pcrow: Group) {
        let (r, z) = (&self.rec, &self.z);
        let exec = is(r.kind, EXEC);
        for w in 0..z.warps {
            for l in 0..z.lanes {
                if w * z.lanes + l < thread.len {
                    b.unit(0, vec![exec.clone(), is(r.warp, w), is(r.lane, l)], vec![thread.ch(w * z.lanes + l)]);
                }
            }
        }
        for p in 0..z.pcs - 1 {
            for s in 0..z.block_len {
                b.unit(0, vec![exec.clone(), is(r.pc, p), is(r.slot, s)], vec![pcrow.ch(p * z.block_len + s)]);
            }
        }
    }

    /// The next record of an EXEC token (at `at`, after the instruction's fields and branch
    /// outcome exist).
    #[allow(clippy::too_many_arguments)]
    pub fn exec_next(
        &self,
        b: &mut Builder,
        at: usize,
        op: OpWhere,
        end: Group,
        tgt: Group,
        join: Group,
        taken: Group,
    ) {
        let (r, n, z) = (&self.rec, &self.next, &self.z);
        let exec = is(r.kind, EXEC);
        for g in [(r.warp, n.warp), (r.wi, n.wi), (r.cta, n.cta), (r.pc, n.pc), (r.mask, n.mask)] {
            copy_group(b, at, core::slice::from_ref(&exec), g.0, g.1);
        }
        copy_group(b, at, core::slice::from_ref(&exec), tgt, n.tgt);
        copy_group(b, at, core::slice::from_ref(&exec), join, n.join);
        let terms = [
            (PLAIN, op(&|o| !matches!(o, Op::Bra | Op::Bar | Op::Exit))),
            (BRA, op(&|o| o == Op::Bra)),
            (BAR, op(&|o| o == Op::Bar)),
            (EXIT, op(&|o| o == Op::Exit)),
        ];
        for (t, c) in &terms {
            b.unit(at, vec![exec.clone(), c.clone()], vec![n.term.ch(*t)]);
        }
        // acc |= taken << lane.
        for a in 0..z.masks() {
            b.unit(at, vec![exec.clone(), is(r.acc, a), Cond::None(taken.all())], vec![n.acc.ch(a)]);
            for l in 0..z.lanes {
                for t in 0..2 {
                    b.unit(
                        at,
                        vec![exec.clone(), is(r.acc, a), is(r.lane, l), is(taken, t)],
                        vec![n.acc.ch(a | t << l)],
                    );
                }
            }
        }
        let shfl = op(&|o| matches!(o, Op::Shfl(_)));
        let not_shfl = op(&|o| !matches!(o, Op::Shfl(_)));
        for m in 1..z.masks() {
            let first = first_lane(m).unwrap_or(0);
            for l in 0..z.lanes {
                let after = (l + 1..z.lanes).find(|&k| m & (1 << k) != 0);
                let base = vec![exec.clone(), is(r.mask, m), is(r.lane, l)];
                let go = |b: &mut Builder,
                          extra: Vec<Cond>,
                          kind: usize,
                          lane: Option<usize>,
                          slot: Option<usize>,
                          phase: Option<usize>| {
                    let mut c = base.clone();
                    c.extend(extra);
                    let mut w = vec![n.kind.ch(kind)];
                    w.extend(lane.map(|x| n.lane.ch(x)));
                    w.extend(phase.map(|x| n.phase.ch(x)));
                    b.unit(at, c.clone(), w);
                    if let Some(s) = slot {
                        // The slot: the same one, or the next.
                        for cur in 0..z.block_len {
                            let to = cur + s;
                            if to < z.block_len {
                                let mut c2 = c.clone();
                                c2.push(is(r.slot, cur));
                                b.unit(at, c2, vec![n.slot.ch(to)]);
                            }
                        }
                    }
                };
                match after {
                    Some(k) => {
                        for p in 0..2 {
                            go(b, vec![is(r.phase, p)], EXEC, Some(k), Some(0), Some(p));
                        }
                    }
                    None => {
                        go(b, vec![is(r.phase, 0), shfl.clone()], EXEC, Some(first), Some(0), Some(1));
                        for (p, extra) in [(0, Some(not_shfl.clone())), (1, None)] {
                            let mut c = vec![is(r.phase, p), is(end, 0)];
                            c.extend(extra.clone());
                            go(b, c, EXEC, Some(first), Some(1), Some(0));
                            let mut c = vec![is(r.phase, p), is(end, 1)];
                            c.extend(extra);
                            go(b, c, CTRL, None, None, None);
                        }
                    }
                }
            }
        }
    }

    /// The CTRL and FETCH layers from `at` (12 decoder layers; the two heads at `at + 1`, `at + 2`).
    // Entries are parallel arrays (read row, raw, new, popped) indexed by depth.
    #[allow(clippy::needless_range_loop)]
    pub fn control(&self, b: &mut Builder, at: usize) -> usize {
        let (r, n, z) = (&self.rec, &self.next, &self.z);
        let ctrl = is(r.kind, CTRL);
        let cf = Cond::Any(vec![r.kind.ch(CTRL), r.kind.ch(FETCH)]);
        let (wk, sk) = (b.s.group("warp.key", z.warps), b.s.group("cta.key", z.ctas));
        for w in 0..z.warps {
            b.unit(at, vec![cf.clone(), is(r.warp, w)], vec![wk.ch(w)]);
        }
        for c in 0..z.ctas {
            b.unit(at, vec![ctrl.clone(), is(r.cta, c)], vec![sk.ch(c)]);
        }
        let wh = MemLayer::new(
            &b.s,
            rows_for(z.warps),
            &wk.all(),
            &self.pwk.all(),
            &self.pwv.channels(),
            &self.wr.channels(),
            WARP_HOT,
        );
        b.mem(at + 1, wh);
        let sh = MemLayer::new(
            &b.s,
            rows_for(z.ctas),
            &sk.all(),
            &self.psk.all(),
            &self.psv.channels(),
            &self.sr.channels(),
            STATUS_HOT,
        );
        b.mem(at + 2, sh);
        let wr = &self.wr;
        // at+2: the top entry; the branch case (divergent or not).
        let top = [b.s.group("top.pc", z.pcs), b.s.group("top.join", z.joins()), b.s.group("top.mask", z.masks())];
        for d in 0..DEPTH {
            for f in 0..3 {
                copy_group(b, at + 2, &[is(wr.sp, d + 1)], wr.entries[d][f], top[f]);
            }
        }
        let div = b.s.group("ctrl.divergent", 2);
        for a in 0..z.masks() {
            for m in 0..z.masks() {
                let d = usize::from(a != 0 && a != m);
                b.unit(at + 2, vec![ctrl.clone(), is(r.term, BRA), is(r.acc, a), is(r.mask, m)], vec![div.ch(d)]);
            }
        }
        b.unit(at + 2, vec![ctrl.clone(), any_of(r.term, |t| t != BRA)], vec![div.ch(0)]);
        // at+3: the new top, the two pushes, the lanes that exit.
        let nt = [
            b.s.group("ctrl.top.pc", z.pcs),
            b.s.group("ctrl.top.join", z.joins()),
            b.s.group("ctrl.top.mask", z.masks()),
        ];
        let e1 = [
            b.s.group("ctrl.e1.pc", z.pcs),
            b.s.group("ctrl.e1.join", z.joins()),
            b.s.group("ctrl.e1.mask", z.masks()),
        ];
        let e2 = [
            b.s.group("ctrl.e2.pc", z.pcs),
            b.s.group("ctrl.e2.join", z.joins()),
            b.s.group("ctrl.e2.mask", z.masks()),
        ];
        let x = b.s.group("ctrl.exited", z.masks());
        for p in 0..z.pcs {
            let next_pc = (p + 1).min(z.pcs - 1);
            // Not a branch, or a branch no lane took: fall through.
            b.unit(at + 3, vec![ctrl.clone(), any_of(r.term, |t| t != BRA), is(r.pc, p)], vec![nt[0].ch(next_pc)]);
            b.unit(at + 3, vec![ctrl.clone(), is(r.term, BRA), is(r.acc, 0), is(r.pc, p)], vec![nt[0].ch(next_pc)]);
            b.unit(at + 3, vec![ctrl.clone(), is(div, 1), is(r.pc, p)], vec![e1[0].ch(next_pc)]);
        }
        for m in 1..z.masks() {
            // All active lanes took it.
            for t in 0..z.pcs {
                b.unit(
                    at + 3,
                    vec![ctrl.clone(), is(r.term, BRA), is(r.acc, m), is(r.mask, m), is(r.tgt, t)],
                    vec![nt[0].ch(t)],
                );
            }
        }
        for j in 0..z.pcs {
            b.unit(at + 3, vec![ctrl.clone(), is(div, 1), is(r.join, j)], vec![nt[0].ch(j), e1[1].ch(j), e2[1].ch(j)]);
            b.unit(at + 3, vec![ctrl.clone(), is(div, 1), is(r.tgt, j)], vec![e2[0].ch(j)]);
        }
        copy_group(b, at + 3, core::slice::from_ref(&ctrl), top[1], nt[1]);
        copy_group(b, at + 3, core::slice::from_ref(&ctrl), top[2], nt[2]);
        for m in 0..z.masks() {
            for a in 0..z.masks() {
                b.unit(
                    at + 3,
                    vec![ctrl.clone(), is(div, 1), is(r.mask, m), is(r.acc, a)],
                    vec![e1[2].ch(m & !a), e2[2].ch(a)],
                );
            }
            b.unit(at + 3, vec![ctrl.clone(), is(r.term, EXIT), is(r.mask, m)], vec![x.ch(m)]);
        }
        b.unit(at + 3, vec![ctrl.clone(), any_of(r.term, |t| t != EXIT)], vec![x.ch(0)]);
        // at+4: the raw entries and the new stack size.
        let raw: Vec<[Group; 3]> = (0..DEPTH)
            .map(|d| {
                [
                    b.s.group(&alloc::format!("ctrl.raw{d}.pc"), z.pcs),
                    b.s.group(&alloc::format!("ctrl.raw{d}.join"), z.joins()),
                    b.s.group(&alloc::format!("ctrl.raw{d}.mask"), z.masks()),
                ]
            })
            .collect();
        let spr = b.s.group("ctrl.sp2", DEPTH + 1);
        let sp_in = |set: &dyn Fn(usize) -> bool| any_of(wr.sp, set);
        for d in 0..DEPTH {
            for f in 0..3 {
                copy_group(b, at + 4, &[ctrl.clone(), sp_in(&|s| s > d + 1)], wr.entries[d][f], raw[d][f]);
                copy_group(b, at + 4, &[ctrl.clone(), is(wr.sp, d + 1)], nt[f], raw[d][f]);
                copy_group(b, at + 4, &[ctrl.clone(), is(div, 1), is(wr.sp, d)], e1[f], raw[d][f]);
                if d >= 1 {
                    copy_group(b, at + 4, &[ctrl.clone(), is(div, 1), is(wr.sp, d - 1)], e2[f], raw[d][f]);
                }
            }
            let empty = vec![raw[d][0].ch(0), raw[d][1].ch(z.pcs), raw[d][2].ch(0)];
            b.unit(at + 4, vec![ctrl.clone(), is(div, 0), sp_in(&|s| s <= d)], empty.clone());
            b.unit(at + 4, vec![ctrl.clone(), is(div, 1), sp_in(&|s| s + 2 <= d)], empty);
        }
        for s in 0..=DEPTH {
            b.unit(at + 4, vec![ctrl.clone(), is(div, 0), is(wr.sp, s)], vec![spr.ch(s)]);
            if s + 2 <= DEPTH {
                b.unit(at + 4, vec![ctrl.clone(), is(div, 1), is(wr.sp, s)], vec![spr.ch(s + 2)]);
            }
        }
        // at+5: exited lanes leave every entry.
        let ent: Vec<[Group; 3]> = (0..DEPTH)
            .map(|d| {
                [
                    b.s.group(&alloc::format!("ctrl.new{d}.pc"), z.pcs),
                    b.s.group(&alloc::format!("ctrl.new{d}.join"), z.joins()),
                    b.s.group(&alloc::format!("ctrl.new{d}.mask"), z.masks()),
                ]
            })
            .collect();
        for d in 0..DEPTH {
            copy_group(b, at + 5, &[], raw[d][0], ent[d][0]);
            copy_group(b, at + 5, &[], raw[d][1], ent[d][1]);
            for m in 0..z.masks() {
                for e in 0..z.masks() {
                    b.unit(at + 5, vec![is(raw[d][2], m), is(x, e)], vec![ent[d][2].ch(m & !e)]);
                }
            }
        }
        // at+6, +7: an entry is popped when its lanes are gone or it reached its join.
        let pop: Vec<Group> = (0..DEPTH).map(|d| b.s.group(&alloc::format!("ctrl.pop{d}"), 2)).collect();
        for d in 0..DEPTH {
            b.unit(at + 6, vec![is(ent[d][2], 0)], vec![pop[d].ch(1)]);
            for p in 0..z.pcs {
                b.unit(
                    at + 6,
                    vec![any_of(ent[d][2], |m| m != 0), is(ent[d][0], p), is(ent[d][1], p)],
                    vec![pop[d].ch(1)],
                );
            }
            b.unit(at + 7, vec![ctrl.clone(), Cond::None(vec![pop[d].ch(1)])], vec![pop[d].ch(0)]);
        }
        // at+8: the settled stack size: the highest entry below the top that is kept.
        let spn = b.s.group("ctrl.sp", DEPTH + 1);
        for s in 0..=DEPTH {
            for d in 0..=s {
                let mut c = vec![ctrl.clone(), is(spr, s)];
                if d > 0 {
                    c.push(is(pop[d - 1], 0));
                }
                c.extend((d..s).map(|k| is(pop[k], 1)));
                b.unit(at + 8, c, vec![spn.ch(d)]);
            }
        }
        // at+9: the warp's row written back; statuses; the next warp.
        copy_group(b, at + 9, core::slice::from_ref(&ctrl), spn, self.owv.sp);
        for d in 0..DEPTH {
            for f in 0..3 {
                copy_group(b, at + 9, core::slice::from_ref(&ctrl), ent[d][f], self.owv.entries[d][f]);
            }
        }
        let pads: Vec<usize> = self.owv.pad.hot.iter().map(|g| g.ch(0)).collect();
        b.unit(at + 9, vec![ctrl.clone()], pads);
        copy_group(b, at + 9, core::slice::from_ref(&ctrl), r.warp, self.owk);
        let sr = &self.sr;
        let st2: Vec<Group> = (0..z.per_cta).map(|j| b.s.group(&alloc::format!("ctrl.st{j}"), 4)).collect();
        for (j, g) in st2.iter().enumerate() {
            copy_group(b, at + 9, &[ctrl.clone(), Cond::None(vec![r.wi.ch(j)])], sr.st[j], *g);
            b.unit(at + 9, vec![ctrl.clone(), is(r.wi, j), is(spn, 0)], vec![g.ch(FINISHED)]);
            b.unit(
                at + 9,
                vec![ctrl.clone(), is(r.wi, j), any_of(spn, |s| s > 0), is(r.term, BAR)],
                vec![g.ch(BARRIER)],
            );
            b.unit(
                at + 9,
                vec![ctrl.clone(), is(r.wi, j), any_of(spn, |s| s > 0), any_of(r.term, |t| t != BAR)],
                vec![g.ch(LIVE)],
            );
        }
        // at+10: schedule (the interpreter's rule), the CTA's row, the next record.
        // The next warp as an offset from this one (`to − wi`, or the next CTA's `count − wi`), so
        // that no unit needs this warp's index and the CTA index together (at+11 adds them).
        let step = b.s.group("ctrl.step", 2 * z.per_cta + 1);
        // The warp-in-CTA index again, hot only in CTRL tokens, so the scheduling units are
        // reached only there (every EXEC token carries `wi`).
        let cwi = b.s.group("ctrl.wi", z.per_cta);
        copy_group(b, at + 9, core::slice::from_ref(&ctrl), r.wi, cwi);
        let live = |j: usize| is(st2[j], LIVE);
        let not_live = |j: usize| any_of(st2[j], |s| s != LIVE);
        let w = z.per_cta;
        let fetch = |b: &mut Builder, conds: Vec<Cond>, to: usize, release: bool| {
            // The same CTA: warp − wi + to.
            for i in 0..w {
                let mut c = conds.clone();
                c.push(is(cwi, i));
                b.unit(at + 10, c, vec![step.ch(to + w - i)]);
            }
            let mut c = conds.clone();
            c.push(ctrl.clone());
            b.unit(at + 10, c.clone(), vec![n.kind.ch(FETCH), n.wi.ch(to)]);
            copy_group(b, at + 10, &c, r.cta, n.cta);
            for j in 0..w {
                for s in 0..4 {
                    let mut cs = c.clone();
                    cs.push(is(st2[j], s));
                    let out = if release && s == BARRIER { LIVE } else { s };
                    b.unit(at + 10, cs, vec![self.osv.st[j].ch(out)]);
                }
            }
        };
        for i in 0..w {
            let wi = is(cwi, i);
            fetch(b, vec![ctrl.clone(), wi.clone(), live(i)], i, false);
            for j in i + 1..w {
                let mut c = vec![ctrl.clone(), wi.clone(), not_live(i), live(j)];
                c.extend((i + 1..j).map(not_live));
                fetch(b, c, j, false);
            }
            for j in 0..i {
                let mut c = vec![ctrl.clone(), wi.clone(), live(j)];
                c.extend((0..j).chain(i..w).map(not_live));
                fetch(b, c, j, false);
            }
        }
        for j in 0..w {
            let mut c: Vec<Cond> = vec![ctrl.clone(), is(st2[j], BARRIER)];
            c.extend((0..w).map(not_live));
            c.extend((0..j).map(|k| any_of(st2[k], |s| s != BARRIER)));
            fetch(b, c, j, true);
        }
        // Every warp done: the next CTA (its first warp follows this CTA's last), or the end.
        let gone: Vec<Cond> = (0..w).map(|j| any_of(st2[j], |s| s == FINISHED || s == ABSENT)).collect();
        let mut all_gone = vec![ctrl.clone()];
        all_gone.extend(gone.iter().cloned());
        for j in 0..w {
            for s in 0..4 {
                let mut c = all_gone.clone();
                c.push(is(st2[j], s));
                b.unit(at + 10, c, vec![self.osv.st[j].ch(s)]);
            }
        }
        let mut done = all_gone.clone();
        done.push(is(sr.last, 1));
        b.unit(at + 10, done, vec![n.kind.ch(DONE)]);
        for count in 1..=w {
            let mut c = all_gone.clone();
            c.push(is(sr.last, 0));
            if count < w {
                c.push(is(st2[count], ABSENT));
            }
            c.push(any_of(st2[count - 1], |s| s != ABSENT));
            b.unit(at + 10, c.clone(), vec![n.kind.ch(FETCH), n.wi.ch(0)]);
            for i in 0..w {
                let mut c2 = c.clone();
                c2.push(is(cwi, i));
                b.unit(at + 10, c2, vec![step.ch(count + w - i)]);
            }
            for k in 0..z.ctas - 1 {
                let mut c2 = c.clone();
                c2.push(is(r.cta, k));
                b.unit(at + 10, c2, vec![n.cta.ch(k + 1)]);
            }
        }
        for g in 0..z.warps {
            for d in 0..step.len {
                if (g + d).checked_sub(w).is_some_and(|x| x < z.warps) {
                    b.unit(at + 11, vec![ctrl.clone(), is(step, d), is(r.warp, g)], vec![n.warp.ch(g + d - w)]);
                }
            }
        }
        copy_group(b, at + 10, core::slice::from_ref(&ctrl), r.cta, self.osk);
        copy_group(b, at + 10, core::slice::from_ref(&ctrl), sr.last, self.osv.last);
        let pads: Vec<usize> = self.osv.pad.hot.iter().map(|g| g.ch(0)).collect();
        b.unit(at + 10, vec![ctrl.clone()], pads);
        // FETCH (at+3): the chosen warp's top entry → EXEC of its first lane at slot 0.
        let fetch_k = is(r.kind, FETCH);
        for m in 1..z.masks() {
            let l = first_lane(m).unwrap_or(0);
            b.unit(
                at + 3,
                vec![fetch_k.clone(), is(top[2], m)],
                vec![
                    n.kind.ch(EXEC),
                    n.lane.ch(l),
                    n.slot.ch(0),
                    n.phase.ch(0),
                    n.acc.ch(0),
                    n.mask.ch(m),
                    n.term.ch(PLAIN),
                    n.tgt.ch(0),
                    n.join.ch(0),
                ],
            );
        }
        copy_group(b, at + 3, core::slice::from_ref(&fetch_k), top[0], n.pc);
        for g in [(r.warp, n.warp), (r.wi, n.wi), (r.cta, n.cta)] {
            copy_group(b, at + 3, core::slice::from_ref(&fetch_k), g.0, g.1);
        }
        at + 12
    }
}
