//! ROM rows: an instruction's fields as one-hot groups (the value a ROM state row holds).

use super::compiled::{Compiled, Op, MAX_PARAMS};
use super::isa::{Inst, Special, Src};
use super::net::Group;
use super::units::{channels, Builder, Nibs, Padding};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// The instruction fields of a ROM row; each is one-hot (a word is eight one-hot nibbles).
#[derive(Debug, Clone)]
pub struct Fields {
    pub op: Group,
    pub ra: Group,
    pub rb: Group,
    pub rc: Group,
    pub rd: Group,
    pub aimm: Group,
    pub bimm: Group,
    /// Branch kind: always, if c ≠ 0, if c = 0.
    pub brk: Group,
    pub tgt: Group,
    pub join: Group,
    pub end: Group,
    pub imma: Nibs,
    pub immb: Nibs,
    pub off: Nibs,
    pub pad: Padding,
}

impl Fields {
    pub(super) fn new(
        b: &mut Builder,
        p: &str,
        n_ops: usize,
        rows: usize,
        targets: usize,
        value_width: usize,
        hot: usize,
    ) -> Fields {
        let mut g = |name: &str, len| b.s.group(&alloc::format!("{p}{name}"), len);
        let (op, ra, rb, rc, rd) = (g("op", n_ops), g("ra", rows), g("rb", rows), g("rc", rows), g("rd", rows));
        let (aimm, bimm, brk, tgt, join, end) =
            (g("aimm", 2), g("bimm", 2), g("brk", 3), g("tgt", targets), g("join", targets), g("end", 2));
        let imma = b.word(&alloc::format!("{p}imma"), 8);
        let immb = b.word(&alloc::format!("{p}immb"), 8);
        let off = b.word(&alloc::format!("{p}off"), 8);
        let fields = [op, ra, rb, rc, rd, aimm, bimm, brk, tgt, join, end];
        let used: Vec<Group> = fields.iter().chain(&imma).chain(&immb).chain(&off).copied().collect();
        let pad = b.padding(p, &used, hot, value_width);
        Fields { op, ra, rb, rc, rd, aimm, bimm, brk, tgt, join, end, imma, immb, off, pad }
    }

    /// Every group, in order (padding last).
    pub fn groups(&self) -> Vec<Group> {
        let mut v = vec![
            self.op, self.ra, self.rb, self.rc, self.rd, self.aimm, self.bimm, self.brk, self.tgt, self.join, self.end,
        ];
        v.extend(self.imma.iter().chain(&self.immb).chain(&self.off));
        v.extend(self.pad.groups());
        v
    }

    pub fn channels(&self) -> Vec<usize> {
        channels(&self.groups())
    }
}

impl Compiled {
    /// The ROM row of an instruction (`None`: the no-op row) as (group, hot index) pairs of
    /// `fields`.
    pub fn encode(&self, fields: &Fields, inst: Option<&Inst>, end: bool) -> Result<Vec<(Group, usize)>, String> {
        let (mut op, mut ra, mut rb, mut rc, mut rd) = (Op::Nop, 0, 0, 0, 0);
        let (mut a, mut bsrc, mut off, mut brk, mut tgt, mut join) = (None, None, 0u32, 0, 0, 0);
        let mut src_a = |s: Src, ra: &mut usize| match s {
            Src::Reg(r) => *ra = r as usize,
            Src::Imm(v) => a = Some(v),
        };
        match inst.copied() {
            None => {}
            Some(Inst::Mov { d, a: s }) => {
                (op, rd) = (Op::Mov, d as usize);
                src_a(s, &mut ra);
            }
            Some(Inst::Alu { op: o, d, a: x, b: y }) => {
                (op, rd) = (Op::Alu(o), d as usize);
                src_a(x, &mut ra);
                bsrc = Some(y);
            }
            Some(Inst::Set { cmp, d, a: x, b: y }) => {
                (op, rd) = (Op::Set(cmp), d as usize);
                src_a(x, &mut ra);
                bsrc = Some(y);
            }
            Some(Inst::Sel { d, c, a: x, b: y }) => {
                (op, rd, rc) = (Op::Sel, d as usize, c as usize);
                src_a(x, &mut ra);
                bsrc = Some(y);
            }
            Some(Inst::Ld { space, d, a: x, off: o }) => {
                (op, rd, off) = (Op::Ld(space), d as usize, o as u32);
                src_a(x, &mut ra);
            }
            Some(Inst::St { space, a: x, off: o, v }) => {
                (op, off) = (Op::St(space), o as u32);
                src_a(x, &mut ra);
                bsrc = Some(v);
            }
            Some(Inst::AtomAdd { space, d, a: x, off: o, v }) => {
                (op, rd, off) = (Op::Atom(space), d as usize, o as u32);
                src_a(x, &mut ra);
                bsrc = Some(v);
            }
            Some(Inst::Shfl { mode, d, a: x, b: y }) => {
                (op, rd, ra) = (Op::Shfl(mode), d as usize, x as usize);
                bsrc = Some(y);
            }
            Some(Inst::S2R { d, s }) => {
                if let Special::Param(i) = s {
                    if i as usize >= MAX_PARAMS {
                        return Err(alloc::format!("parameter {i}: the compiled machine takes {MAX_PARAMS}"));
                    }
                }
                (op, rd, ra) = (Op::Mov, d as usize, self.special_row(s));
            }
            Some(Inst::Bra { target, c, neg, join: j }) => {
                op = Op::Bra;
                (tgt, join) = (target as usize, j as usize);
                if let Some(c) = c {
                    (rc, brk) = (c as usize, if neg { 2 } else { 1 });
                }
            }
            Some(Inst::Bar) => op = Op::Bar,
            Some(Inst::Exit) => op = Op::Exit,
        }
        let mut b_imm = 0;
        if let Some(s) = bsrc {
            match s {
                Src::Reg(r) => rb = r as usize,
                Src::Imm(v) => b_imm = v,
            }
        }
        let f = fields;
        let mut hot = vec![
            (f.op, self.op_index(op)),
            (f.ra, ra),
            (f.rb, rb),
            (f.rc, rc),
            (f.rd, rd),
            (f.aimm, usize::from(a.is_some())),
            (f.bimm, usize::from(matches!(bsrc, Some(Src::Imm(_))))),
            (f.brk, brk),
            (f.tgt, tgt),
            (f.join, join),
            (f.end, usize::from(end)),
        ];
        for (w, v) in [(&f.imma, a.unwrap_or(0)), (&f.immb, b_imm), (&f.off, off)] {
            hot.extend(w.iter().enumerate().map(|(k, g)| (*g, ((v >> (4 * k)) & 15) as usize)));
        }
        hot.extend(f.pad.hot.iter().map(|g| (*g, 0)));
        Ok(hot)
    }
}
