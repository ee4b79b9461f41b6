//! The qwenGPU machine compiled into Qwen3.5 decoder layers (a Gated DeltaNet token mixer and
//! a SwiGLU MLP per layer, see `net`), with weights computed from the machine's sizes alone: the
//! program, the inputs and the launch enter as tokens.
//!
//! One token is one instruction for one lane (or a sequencer step, see `control`). Its input
//! record is the previous token's output record: the sequencer's registers (warp, lane, slot,
//! pc, mask …) and the pending register, global, shared and control-row writes, which the
//! DeltaNet heads apply before they read (the machine's write-back stage). The layers, top to
//! bottom:
//!
//! | layer | DeltaNet head (state rows) | MLP |
//! |---|---|---|
//! | 0 | ROM: rows (block, slot) → the instruction's fields | register keys (thread × register) |
//! | 1–3 | register file, read ports A, B, C | unwritten registers read 0 |
//! | 4–5 | | operands (register or immediate), routing to one functional unit, logic ops, moves, `c ≠ 0` |
//! | 6–13 | | add, subtract, compare, address chains (nibble-serial), shifts, shuffle lanes |
//! | 11 | register file, shuffle port (another lane's register) | |
//! | 14–23 | | compares resolved, min/max, byte address → word index (mod the memory size) |
//! | 24, 25 | global memory; shared memory (rows CTA × word) | loads of unwritten words read 0 |
//! | 26–33 | | atomicAdd's sum |
//! | 6–71 | | multiplier: nibble products, a tree of adders (64-bit for `mul.hi`) |
//! | 6–113 | | divider: radix-16 long division against the 15 multiples of the divisor |
//! | 26–37 | 27: each warp's SIMT stack; 28: each CTA's warp statuses | the sequencer's CTRL and FETCH (`control`) |
//! | 114 | | result multiplexer, the output record, the next record |
//!
//! (Depths are counted after a prologue layer that makes the thread and ROM-row one-hots from
//! the record.) Every register file copy applies every write, so all ports read the same
//! registers.

use super::head::rows_for;
use super::isa::{Alu, Cmp, MachineSpec, Space, Special};
use super::net::{Cond, Group, Layer, MemLayer, Stream};
pub use super::rom::Fields;
use super::units::{active, any_of, channels, is, Builder, Nibs};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

pub use super::isa::MAX_PARAMS;
pub use super::isa::{ALUS, CMPS, SPECIALS};

/// The decoded opcode a ROM row holds (never `Op::S2R`: this machine reads special registers
/// as moves from their rows).
pub use super::isa::Op;

pub fn ops() -> Vec<Op> {
    Op::all(false)
}

/// Why a machine or program cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("the compiled machine needs {0}")]
    Spec(String),
    #[error("block {block}: {what}")]
    Program { block: usize, what: String },
}

/// Where everything the host feeds and reads sits in the stream.
#[derive(Debug, Clone)]
pub struct Io {
    pub thread: Group,
    pub cta: Group,
    pub pc: Group,
    pub phase: Group,
    /// Pending writes (the previous token's output record): register key and value, global
    /// word and value, shared (CTA × word) and value; a ROM row and its fields.
    pub prk: Group,
    pub prv: Nibs,
    pub pgk: Group,
    pub pgv: Nibs,
    pub psk: Group,
    pub psv: Nibs,
    pub prom: Group,
    pub promv: Fields,
    /// A read-back query of a global word (VAL tokens).
    pub qg: Group,
    /// The instruction read from ROM.
    pub inst: Fields,
    /// Output record.
    pub ork: Group,
    pub orv: Nibs,
    pub ogk: Group,
    pub ogv: Nibs,
    pub osk: Group,
    pub osv: Nibs,
    pub taken: Group,
    /// The loaded (or read-back) word.
    pub ld: Nibs,
    /// The sequencer's record and control rows.
    pub seq: super::control::Seq,
}

/// The state heads' indices in `Compiled::layers`.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub rom: usize,
    pub regs: [usize; 4],
    pub global: usize,
    pub shared: usize,
    /// Each warp's SIMT stack; each CTA's warp statuses.
    pub warp: usize,
    pub cta: usize,
}

/// What the compiled machine is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Decoder layers (a DeltaNet token mixer and an MLP each, some of them empty).
    pub decoder_layers: usize,
    pub deltanet_heads: usize,
    pub mlp_sublayers: usize,
    pub hidden_units: usize,
    /// The residual stream's width.
    pub d_model: usize,
    /// Parameters as dense Qwen3.5 matrices would hold them, and those that are not zero.
    pub parameters: u64,
    pub nonzero: u64,
    /// Floats of recurrent state (every head's d_k × d_v).
    pub state_floats: usize,
}

/// The compiled machine.
pub struct Compiled {
    pub spec: MachineSpec,
    pub stream: Stream,
    pub layers: Vec<Layer>,
    /// Decoder layers (DeltaNet + MLP pairs, some sublayers empty).
    pub depth: usize,
    pub io: Io,
    pub heads: Heads,
    /// Register rows per thread: general, the shuffle temporary, specials, parameters.
    pub rows: usize,
    pub rom_rows: usize,
    pub ops: Vec<Op>,
}

impl Compiled {
    pub fn special_row(&self, s: Special) -> usize {
        match s {
            Special::Param(i) => self.spec.regs + 1 + SPECIALS.len() + i as usize,
            s => self.spec.regs + 1 + SPECIALS.iter().position(|&x| x == s).unwrap_or(0),
        }
    }
    pub fn op_index(&self, op: Op) -> usize {
        self.ops.iter().position(|&o| o == op).unwrap_or(0)
    }
    /// The ROM row of a block's slot; the last row is the no-op.
    pub fn rom_row(&self, block: usize, slot: usize) -> usize {
        block * self.spec.block_len + slot
    }
    pub fn summary(&self) -> Summary {
        let d = self.stream.d;
        let mut sum = Summary {
            decoder_layers: self.depth,
            deltanet_heads: 0,
            mlp_sublayers: 0,
            hidden_units: 0,
            d_model: d,
            parameters: 0,
            nonzero: 0,
            state_floats: 0,
        };
        for l in &self.layers {
            sum.parameters += l.parameters(d);
            sum.nonzero += l.nonzero() as u64;
            match l {
                Layer::Mem(h) => {
                    sum.deltanet_heads += 1;
                    sum.state_floats += h.state.len();
                }
                Layer::Mlp(m) => {
                    sum.mlp_sublayers += 1;
                    sum.hidden_units += m.units;
                }
            }
        }
        sum
    }

    /// Compiles the machine of `spec` into layers.
    pub fn new(spec: MachineSpec) -> Result<Compiled, CompileError> {
        let bad = |what: &str| Err(CompileError::Spec(what.into()));
        if !spec.lanes.is_power_of_two() || spec.lanes > 16 {
            return bad("a power-of-two lane count up to 16");
        }
        if spec.regs < 2 || spec.max_threads == 0 || spec.global_words == 0 || spec.shared_words == 0 {
            return bad("at least 2 registers, 1 thread and a word of each memory");
        }
        let rows = (spec.regs + 1 + SPECIALS.len() + MAX_PARAMS).next_power_of_two();
        let threads = spec.max_threads;
        let ctas = (spec.max_threads / spec.lanes).max(1);
        let rom_rows = spec.rom_blocks * spec.block_len + 1;
        let targets = spec.rom_blocks + 1;
        if threads * rows > 1 << 16 || ctas * spec.shared_words > 1 << 16 || spec.global_words > 1 << 12 {
            return bad("at most 65,536 register rows, 65,536 shared rows and 4,096 global words");
        }
        let all_ops = ops();
        let mut b = Builder::new();
        // The token's input record.
        let thread = b.s.group("thread", threads);
        let cta = b.s.group("cta", ctas);
        let pc = b.s.group("pc", rom_rows);
        let phase = b.s.group("phase", 2);
        let prk = b.s.group("pend.reg", threads * rows);
        let prv = b.word("pend.reg.v", 8);
        let pgk = b.s.group("pend.global", spec.global_words);
        let pgv = b.word("pend.global.v", 8);
        let psk = b.s.group("pend.shared", ctas * spec.shared_words);
        let psv = b.word("pend.shared.v", 8);
        let prom = b.s.group("pend.rom", rom_rows);
        let qg = b.s.group("query.global", spec.global_words);
        // ROM rows: 64 hot groups in 1,024 channels (d_v / hot = 16, a power of 4).
        let (hot, width) = (64, 1024);
        let promv = Fields::new(&mut b, "pend.rom.", all_ops.len(), rows, targets, width, hot);
        let f = Fields::new(&mut b, "", all_ops.len(), rows, targets, width, hot);
        // The sequencer's record and rows; its prologue (depth 0) makes the thread and ROM row
        // one-hots, so everything else sits one decoder layer deeper.
        let seq = super::control::Seq::new(&mut b, &spec, cta, phase);
        seq.prologue(&mut b, thread, pc);
        b.offset = 1;
        let op = |pred: &dyn Fn(Op) -> bool| {
            Cond::Any(all_ops.iter().enumerate().filter(|(_, &o)| pred(o)).map(|(i, _)| f.op.ch(i)).collect())
        };
        let op_is = |o: Op| op(&|x| x == o);
        let word = |b: &mut Builder, name: &str| b.word(name, 8);

        // Layer 0: ROM fetch; register keys.
        let dk_rom = rows_for(rom_rows);
        b.mem(0, MemLayer::new(&b.s, dk_rom, &pc.all(), &prom.all(), &promv.channels(), &f.channels(), hot));
        let key = |b: &mut Builder, name: &str| b.s.group(name, threads * rows);
        let (ka, kb, kc) = (key(&mut b, "key.a"), key(&mut b, "key.b"), key(&mut b, "key.c"));
        for t in 0..threads {
            for r in 0..rows {
                b.unit(0, vec![is(thread, t), is(f.ra, r), is(phase, 0)], vec![ka.ch(t * rows + r)]);
                b.unit(0, vec![is(thread, t), is(f.rb, r)], vec![kb.ch(t * rows + r)]);
                b.unit(0, vec![is(thread, t), is(f.rc, r)], vec![kc.ch(t * rows + r)]);
            }
            // A shuffle's second phase moves the temporary into d.
            b.unit(0, vec![is(thread, t), is(phase, 1)], vec![ka.ch(t * rows + spec.regs)]);
        }
        let lane = b.s.group("lane", spec.lanes);
        for t in 0..threads {
            b.unit(0, vec![is(thread, t)], vec![lane.ch(t % spec.lanes)]);
        }

        // Layers 1–3: the register file's read ports.
        let dk_regs = rows_for(threads * rows);
        let (va, vb, vc) = (word(&mut b, "reg.a"), word(&mut b, "reg.b"), word(&mut b, "reg.c"));
        for (i, (k, v)) in [(ka, &va), (kb, &vb), (kc, &vc)].into_iter().enumerate() {
            let head = MemLayer::new(&b.s, dk_regs, &k.all(), &prk.all(), &channels(&prv), &channels(v), 8);
            b.mem(1 + i, head);
        }
        let on = active(thread);
        for v in [&va, &vb, &vc] {
            b.zero_if_cold(3, core::slice::from_ref(&on), v);
        }

        // Layer 4: operands; c = 0?
        let (opa, opb) = (word(&mut b, "opa"), word(&mut b, "opb"));
        for (dst, imm, reg, flag) in [(&opa, &f.imma, &va, f.aimm), (&opb, &f.immb, &vb, f.bimm)] {
            b.copy(4, &[is(flag, 1)], imm, dst);
            b.copy(4, &[is(flag, 0)], reg, dst);
        }
        let cz = b.s.group("c.zero", 2);
        b.is_zero(4, &[op(&|o| matches!(o, Op::Sel | Op::Bra))], &vc, cz);

        // Layer 5: routing, logic, moves; 6: select, branch outcome.
        let logic = word(&mut b, "logic");
        // Each logic op has its own operand copies, so its table is reached through their digits.
        type Logic = fn(usize, usize) -> usize;
        let table: [(Alu, Logic); 3] = [(Alu::And, |x, y| x & y), (Alu::Or, |x, y| x | y), (Alu::Xor, |x, y| x ^ y)];
        for (alu, fun) in table {
            let (la, lb) = (word(&mut b, "logic.a"), word(&mut b, "logic.b"));
            b.copy(5, &[op_is(Op::Alu(alu))], &opa, &la);
            b.copy(5, &[op_is(Op::Alu(alu))], &opb, &lb);
            for k in 0..8 {
                for x in 0..16 {
                    for y in 0..16 {
                        b.unit(6, vec![is(la[k], x), is(lb[k], y)], vec![logic[k].ch(fun(x, y))]);
                    }
                }
            }
        }
        let mov = word(&mut b, "mov");
        b.copy(5, &[op_is(Op::Mov)], &opa, &mov);
        b.copy(5, &[op(&|o| matches!(o, Op::Shfl(_))), is(phase, 1)], &opa, &mov);
        let sel = word(&mut b, "sel");
        b.copy(6, &[op_is(Op::Sel), is(cz, 0)], &opa, &sel);
        b.copy(6, &[op_is(Op::Sel), is(cz, 1)], &opb, &sel);
        let taken = b.s.group("taken", 2);
        // brk: 0 always, 1 if c ≠ 0, 2 if c = 0.
        b.unit(6, vec![op_is(Op::Bra), is(f.brk, 0)], vec![taken.ch(1)]);
        for (k, z) in [(1, 0), (2, 1)] {
            b.unit(6, vec![op_is(Op::Bra), is(f.brk, k), is(cz, z)], vec![taken.ch(1)]);
            b.unit(6, vec![op_is(Op::Bra), is(f.brk, k), is(cz, 1 - z)], vec![taken.ch(0)]);
        }

        // Add and subtract (chains at 6–13).
        let (add_out, sub_out) = (word(&mut b, "add"), word(&mut b, "sub"));
        for (alu, out) in [(Alu::Add, &add_out), (Alu::Sub, &sub_out)] {
            let (x, y) = (word(&mut b, "fu.a"), word(&mut b, "fu.b"));
            b.copy(5, &[op_is(Op::Alu(alu))], &opa, &x);
            b.copy(5, &[op_is(Op::Alu(alu))], &opb, &y);
            let on = [op_is(Op::Alu(alu))];
            if alu == Alu::Add {
                b.add(6, &on, &x, &y, out, "add.c");
            } else {
                b.sub(6, &on, &x, &y, out, "sub.c");
            }
        }

        // Compares and min/max: a borrow|differs chain (6–13), resolved at 14, selected at 15.
        let is_cmp = |o: Op| matches!(o, Op::Set(_) | Op::Alu(Alu::MinS | Alu::MaxS | Alu::MinU | Alu::MaxU));
        let (ca, cb) = (word(&mut b, "cmp.a"), word(&mut b, "cmp.b"));
        b.copy(5, &[op(&is_cmp)], &opa, &ca);
        b.copy(5, &[op(&is_cmp)], &opb, &cb);
        // State = borrow + 2·differs.
        let (_, cmp_state) = b.transducer(6, &[op(&is_cmp)], &ca, Some(&cb), None, 4, "cmp.s", &|x, y, s| {
            let (borrow, differs) = (s & 1, s >> 1);
            let nb = usize::from(x < y + borrow);
            (0, nb + 2 * (differs | usize::from(x != y)))
        });
        let set_out = word(&mut b, "set");
        let pick = b.s.group("cmp.pick_a", 2);
        for s in 0..4 {
            for sa in 0..2 {
                for sb in 0..2 {
                    let (borrow, ne) = (s & 1 == 1, s >> 1 == 1);
                    let lt_u = borrow;
                    let lt_s = borrow ^ (sa == 1) ^ (sb == 1);
                    let conds = |o: Op| {
                        vec![
                            op_is(o),
                            is(cmp_state, s),
                            any_of(ca[7], |d| (d >= 8) == (sa == 1)),
                            any_of(cb[7], |d| (d >= 8) == (sb == 1)),
                        ]
                    };
                    for c in CMPS {
                        let v = match c {
                            Cmp::Eq => !ne,
                            Cmp::Ne => ne,
                            Cmp::LtS => lt_s,
                            Cmp::LeS => lt_s || !ne,
                            Cmp::GtS => !lt_s && ne,
                            Cmp::GeS => !lt_s,
                            Cmp::LtU => lt_u,
                            Cmp::LeU => lt_u || !ne,
                            Cmp::GtU => !lt_u && ne,
                            Cmp::GeU => !lt_u,
                        };
                        let writes = (0..8).map(|k| set_out[k].ch(if k == 0 { usize::from(v) } else { 0 })).collect();
                        b.unit(14, conds(Op::Set(c)), writes);
                    }
                    for (alu, a_if_lt, signed) in [
                        (Alu::MinS, true, true),
                        (Alu::MaxS, false, true),
                        (Alu::MinU, true, false),
                        (Alu::MaxU, false, false),
                    ] {
                        let lt = if signed { lt_s } else { lt_u };
                        b.unit(14, conds(Op::Alu(alu)), vec![pick.ch(usize::from(lt == a_if_lt))]);
                    }
                }
            }
        }
        let minmax = word(&mut b, "minmax");
        b.copy(15, &[is(pick, 1)], &ca, &minmax);
        b.copy(15, &[is(pick, 0)], &cb, &minmax);

        // Shifts: by (b mod 4) bits at 6, then by whole nibbles at 8; b ≥ 32 gives 0 or the sign.
        let shift = super::alu_units::shifts(&mut b, &op_is, &opa, &opb);

        // Shuffles: the source lane (6–8), its thread (9), key (10), read (11).
        let shfl = super::alu_units::shuffle(&mut b, &op, phase, thread, lane, &opb, f.ra, rows, &prk, &prv, dk_regs);

        // Memory: address = a + off (6–13), word index mod each memory's size (14–22), keys (23).
        let is_mem = |o: Op| matches!(o, Op::Ld(_) | Op::St(_) | Op::Atom(_));
        let (ma, mo, addr) = (word(&mut b, "agu.a"), word(&mut b, "agu.off"), word(&mut b, "agu.addr"));
        b.copy(5, &[op(&is_mem)], &opa, &ma);
        b.copy(5, &[op(&is_mem)], &f.off, &mo);
        b.add(6, &[op(&is_mem)], &ma, &mo, &addr, "agu.c");
        let in_space = |s: Space| op(&|o| matches!(o, Op::Ld(x) | Op::St(x) | Op::Atom(x) if x == s));
        let ga = super::alu_units::word_index(&mut b, 14, &in_space(Space::Global), &addr, spec.global_words, "global");
        let sa = super::alu_units::word_index(&mut b, 14, &in_space(Space::Shared), &addr, spec.shared_words, "shared");
        let sk = b.s.group("shared.key", ctas * spec.shared_words);
        let (ogk, osk) =
            (b.s.group("out.global", spec.global_words), b.s.group("out.shared", ctas * spec.shared_words));
        let stores = |s: Space| op(&|o| matches!(o, Op::St(x) | Op::Atom(x) if x == s));
        for c in 0..ctas {
            for i in 0..spec.shared_words {
                b.unit(23, vec![is(cta, c), is(sa, i)], vec![sk.ch(c * spec.shared_words + i)]);
                b.unit(23, vec![stores(Space::Shared), is(cta, c), is(sa, i)], vec![osk.ch(c * spec.shared_words + i)]);
            }
        }
        for i in 0..spec.global_words {
            b.unit(23, vec![stores(Space::Global), is(ga, i)], vec![ogk.ch(i)]);
        }
        let ld = word(&mut b, "load");
        let global_head =
            MemLayer::new(&b.s, rows_for(spec.global_words), &ga.all(), &pgk.all(), &channels(&pgv), &channels(&ld), 8);
        let global_head = global_head.with_query(&b.s, &qg.all());
        b.mem(24, global_head);
        let dk_shared = rows_for(ctas * spec.shared_words);
        b.mem(25, MemLayer::new(&b.s, dk_shared, &sk.all(), &psk.all(), &channels(&psv), &channels(&ld), 8));
        let loads = op(&|o| matches!(o, Op::Ld(_) | Op::Atom(_)));
        b.zero_if_cold(25, core::slice::from_ref(&loads), &ld);
        b.zero_if_cold(25, &[active(qg)], &ld);
        // atomicAdd: mem = old + v (26–33).
        let atom = word(&mut b, "atom");
        let (xa, xb) = (word(&mut b, "atom.a"), word(&mut b, "atom.b"));
        b.copy(25, &[op(&|o| matches!(o, Op::Atom(_)))], &opb, &xb);
        b.copy(26, &[active(xb[0])], &ld, &xa);
        b.add(28, &[active(xa[0])], &xa, &xb, &atom, "atom.c");

        // Multiplier (6–71, then the signed correction) and divider (6–113).
        let mul = super::alu_units::multiplier(&mut b, &op_is, &opa, &opb);
        let div = super::alu_units::divider(&mut b, &op_is, &opa, &opb);

        // The sequencer: CTRL and FETCH (26–37, its heads at 27 and 28).
        seq.control(&mut b, 26);
        // Output record (after every unit).
        let out = b.depth().max(38);
        seq.exec_next(&mut b, out, &op, f.end, f.tgt, f.join, taken);
        let writes_reg = |o: Op| matches!(o, Op::Mov | Op::Alu(_) | Op::Set(_) | Op::Sel | Op::Ld(_) | Op::Atom(_));
        let ork = b.s.group("out.reg", threads * rows);
        for t in 0..threads {
            for r in 0..rows {
                b.unit(5, vec![op(&writes_reg), is(thread, t), is(f.rd, r)], vec![ork.ch(t * rows + r)]);
                b.unit(
                    5,
                    vec![op(&|o| matches!(o, Op::Shfl(_))), is(phase, 1), is(thread, t), is(f.rd, r)],
                    vec![ork.ch(t * rows + r)],
                );
            }
            b.unit(
                5,
                vec![op(&|o| matches!(o, Op::Shfl(_))), is(phase, 0), is(thread, t)],
                vec![ork.ch(t * rows + spec.regs)],
            );
        }
        let orv = word(&mut b, "result");
        let sources: Vec<(Vec<Cond>, &Nibs)> = vec![
            (vec![op_is(Op::Alu(Alu::Add))], &add_out),
            (vec![op_is(Op::Alu(Alu::Sub))], &sub_out),
            (vec![], &logic),
            (vec![], &mov),
            (vec![], &sel),
            (vec![], &set_out),
            (vec![], &minmax),
            (vec![], &shift),
            (vec![], &shfl),
            (vec![op_is(Op::Alu(Alu::Mul))], &mul.0),
            (vec![op_is(Op::Alu(Alu::MulHiU))], &mul.1),
            (vec![op_is(Op::Alu(Alu::MulHiS))], &mul.2),
            (vec![], &div),
            (vec![loads.clone()], &ld),
        ];
        for (when, src) in sources {
            b.copy(out, &when, src, &orv);
        }
        let (ogv, osv) = (word(&mut b, "out.global.v"), word(&mut b, "out.shared.v"));
        for (s, dst) in [(Space::Global, &ogv), (Space::Shared, &osv)] {
            b.copy(out, &[op_is(Op::St(s))], &opb, dst);
            b.copy(out, &[op_is(Op::Atom(s))], &atom, dst);
        }

        let (stream, layers, depth) = b.finish();
        let mems: Vec<usize> =
            layers.iter().enumerate().filter(|(_, l)| matches!(l, Layer::Mem(_))).map(|(i, _)| i).collect();
        // Heads in depth order: ROM, ports A–C, the shuffle port, global, shared, warp rows, CTA rows.
        let heads = Heads {
            rom: mems[0],
            regs: [mems[1], mems[2], mems[3], mems[4]],
            global: mems[5],
            shared: mems[6],
            warp: mems[7],
            cta: mems[8],
        };
        let io = Io {
            thread,
            cta,
            pc,
            phase,
            prk,
            prv,
            pgk,
            pgv,
            psk,
            psv,
            prom,
            promv,
            qg,
            inst: f,
            ork,
            orv,
            ogk,
            ogv,
            osk,
            osv,
            taken,
            ld,
            seq,
        };
        Ok(Compiled { spec, stream, layers, depth, io, heads, rows, rom_rows, ops: all_ops })
    }
}
