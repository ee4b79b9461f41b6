//! The second machine's ROM as the prompt writes it (issue #22, `docs/qwengpu-second-machine.md`
//! §8): each instruction as [`WORDS`] 16-bit words, so that VAL tokens can carry it into state
//! rows and a layer can decode it from small integer channels (every field is at most 8 bits, one
//! limb of a word).
//!
//! | word | low byte | high byte |
//! | --- | --- | --- |
//! | 0 | opcode ([`opcode`]) | `d` |
//! | 1 | `a` (a register) | `b` (a register) |
//! | 2 | `c` (`sel`'s condition, `bra`'s predicate) | flags: 1 `a` is an immediate, 2 `b` is one, 4 `bra` on `c`, 8 `bra` on `c = 0` |
//! | 3 | `bra`'s target block | its join block |
//! | 4, 5 | `a`'s immediate, low half then high (a memory access's offset when `a` is a register) | |
//! | 6, 7 | `b`'s immediate (a store's value when it is one) | |
//!
//! All-zero words are the no-op, so a block shorter than the ROM's rows needs nothing written
//! after its last instruction. A memory access from an immediate address has its offset folded
//! into it (the interpreter adds them with wrapping, so the address is the same); [`normal`]
//! folds an instruction the same way, and `decode(encode(i)) == normal(i)`.

use super::isa::{Inst, Op, Special, Src, MAX_PARAMS};
use alloc::vec::Vec;

/// Words per instruction.
pub const WORDS: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("parameter {0}: the machine takes {MAX_PARAMS}")]
    Param(u8),
    #[error("opcode {0} is not an instruction")]
    Opcode(u8),
    #[error("{0:?} has no opcode")]
    Unencodable(Inst),
    #[error("an instruction is {WORDS} words, not {0}")]
    Length(usize),
}

/// Every opcode's meaning: index `i` is opcode `i`.
pub fn opcodes() -> Vec<Op> {
    Op::all(true)
}

/// The opcode of `op`.
pub fn opcode(op: Op) -> Option<u8> {
    opcodes().iter().position(|&o| o == op).map(|i| i as u8)
}

/// The words of `inst` (`None`: the no-op).
pub fn encode(inst: Option<&Inst>) -> Result<[u16; WORDS], ImageError> {
    let Some(&inst) = inst else { return Ok([0; WORDS]) };
    let (mut d, mut ra, mut rb, mut rc, mut flags, mut tgt, mut join) = (0u8, 0u8, 0u8, 0u8, 0u8, 0u16, 0u16);
    let (mut imm_a, mut imm_b) = (0u32, 0u32);
    let mut a = |s: Src, off: u32| match s {
        Src::Reg(r) => (ra, imm_a) = (r, off),
        Src::Imm(v) => (flags, imm_a) = (flags | 1, v.wrapping_add(off)),
    };
    let b = |s: Src, rb: &mut u8, flags: &mut u8, imm_b: &mut u32| match s {
        Src::Reg(r) => *rb = r,
        Src::Imm(v) => (*flags, *imm_b) = (*flags | 2, v),
    };
    let op = match inst {
        Inst::Mov { d: x, a: s } => {
            (d, ()) = (x, a(s, 0));
            Op::Mov
        }
        Inst::Alu { op, d: x, a: s, b: t } => {
            (d, ()) = (x, a(s, 0));
            b(t, &mut rb, &mut flags, &mut imm_b);
            Op::Alu(op)
        }
        Inst::Set { cmp, d: x, a: s, b: t } => {
            (d, ()) = (x, a(s, 0));
            b(t, &mut rb, &mut flags, &mut imm_b);
            Op::Set(cmp)
        }
        Inst::Sel { d: x, c, a: s, b: t } => {
            (d, rc, ()) = (x, c, a(s, 0));
            b(t, &mut rb, &mut flags, &mut imm_b);
            Op::Sel
        }
        Inst::Ld { space, d: x, a: s, off } => {
            (d, ()) = (x, a(s, off as u32));
            Op::Ld(space)
        }
        Inst::St { space, a: s, off, v } => {
            a(s, off as u32);
            b(v, &mut rb, &mut flags, &mut imm_b);
            Op::St(space)
        }
        Inst::AtomAdd { space, d: x, a: s, off, v } => {
            (d, ()) = (x, a(s, off as u32));
            b(v, &mut rb, &mut flags, &mut imm_b);
            Op::Atom(space)
        }
        Inst::Shfl { mode, d: x, a: r, b: t } => {
            (d, ra) = (x, r);
            b(t, &mut rb, &mut flags, &mut imm_b);
            Op::Shfl(mode)
        }
        Inst::S2R { d: x, s } => {
            if let Special::Param(i) = s {
                if i as usize >= MAX_PARAMS {
                    return Err(ImageError::Param(i));
                }
            }
            d = x;
            Op::S2R(s)
        }
        Inst::Bra { target, c, neg, join: j } => {
            (tgt, join) = (target, j);
            if let Some(c) = c {
                (rc, flags) = (c, flags | 4 | if neg { 8 } else { 0 });
            }
            Op::Bra
        }
        Inst::Bar => Op::Bar,
        Inst::Exit => Op::Exit,
    };
    let code = u16::from(opcode(op).ok_or(ImageError::Unencodable(inst))?);
    let pair = |lo: u8, hi: u8| u16::from(lo) | u16::from(hi) << 8;
    Ok([
        code | u16::from(d) << 8,
        pair(ra, rb),
        pair(rc, flags),
        (tgt & 0xff) | (join & 0xff) << 8,
        imm_a as u16,
        (imm_a >> 16) as u16,
        imm_b as u16,
        (imm_b >> 16) as u16,
    ])
}

/// The instruction `words` encode (`None`: the no-op).
pub fn decode(words: &[u16]) -> Result<Option<Inst>, ImageError> {
    let w: &[u16; WORDS] = words.try_into().map_err(|_| ImageError::Length(words.len()))?;
    let (code, d) = ((w[0] & 0xff) as u8, (w[0] >> 8) as u8);
    let (ra, rb, rc, flags) = ((w[1] & 0xff) as u8, (w[1] >> 8) as u8, (w[2] & 0xff) as u8, (w[2] >> 8) as u8);
    let (imm_a, imm_b) = (u32::from(w[4]) | u32::from(w[5]) << 16, u32::from(w[6]) | u32::from(w[7]) << 16);
    let a = if flags & 1 != 0 { Src::Imm(imm_a) } else { Src::Reg(ra) };
    let b = if flags & 2 != 0 { Src::Imm(imm_b) } else { Src::Reg(rb) };
    // A memory access: from a register plus the offset, or from the folded immediate.
    let (base, off) = if flags & 1 != 0 { (Src::Imm(imm_a), 0) } else { (Src::Reg(ra), imm_a as i32) };
    let op = *opcodes().get(code as usize).ok_or(ImageError::Opcode(code))?;
    Ok(Some(match op {
        Op::Nop => return Ok(None),
        Op::Mov => Inst::Mov { d, a },
        Op::Alu(op) => Inst::Alu { op, d, a, b },
        Op::Set(cmp) => Inst::Set { cmp, d, a, b },
        Op::Sel => Inst::Sel { d, c: rc, a, b },
        Op::Ld(space) => Inst::Ld { space, d, a: base, off },
        Op::St(space) => Inst::St { space, a: base, off, v: b },
        Op::Atom(space) => Inst::AtomAdd { space, d, a: base, off, v: b },
        Op::Shfl(mode) => Inst::Shfl { mode, d, a: ra, b },
        Op::S2R(s) => Inst::S2R { d, s },
        Op::Bra => {
            Inst::Bra { target: w[3] & 0xff, c: (flags & 4 != 0).then_some(rc), neg: flags & 8 != 0, join: w[3] >> 8 }
        }
        Op::Bar => Inst::Bar,
        Op::Exit => Inst::Exit,
    }))
}

/// `inst` with a memory access's immediate address and offset folded into one immediate.
pub fn normal(inst: Inst) -> Inst {
    let fold = |a: Src, off: i32| match a {
        Src::Imm(v) => (Src::Imm(v.wrapping_add(off as u32)), 0),
        r => (r, off),
    };
    match inst {
        Inst::Ld { space, d, a, off } => {
            let (a, off) = fold(a, off);
            Inst::Ld { space, d, a, off }
        }
        Inst::St { space, a, off, v } => {
            let (a, off) = fold(a, off);
            Inst::St { space, a, off, v }
        }
        Inst::AtomAdd { space, d, a, off, v } => {
            let (a, off) = fold(a, off);
            Inst::AtomAdd { space, d, a, off, v }
        }
        other => other,
    }
}

/// A block's words: its instructions' in order.
pub fn block_words(block: &[Inst]) -> Result<Vec<u16>, ImageError> {
    let mut words = Vec::with_capacity(block.len() * WORDS);
    for inst in block {
        words.extend(encode(Some(inst))?);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qwengpu::isa::{Alu, MachineSpec, Shfl, Space};
    use crate::qwengpu::suite;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Every instruction of every suite kernel comes back from its words (with a memory access's
    /// immediate address folded), and every opcode names one meaning.
    #[test]
    fn suite_instructions_round_trip() {
        let spec = MachineSpec::default();
        let mut n = 0;
        for k in suite::kernels() {
            let (kernel, _, _) = k.machine(k.ptx, &spec).unwrap();
            for inst in kernel.program.blocks.iter().flatten() {
                let words = encode(Some(inst)).unwrap();
                assert_eq!(decode(&words).unwrap(), Some(normal(*inst)), "{}: {inst:?}", k.name);
                n += 1;
            }
        }
        assert!(n > 1000, "{n} instructions");
        let ops = opcodes();
        assert!(ops.len() < 256 && ops.iter().enumerate().all(|(i, &o)| opcode(o) == Some(i as u8)));
        assert_eq!(decode(&[0; WORDS]), Ok(None));
    }

    /// Edge cases the suite may not have: immediates with both halves, negative offsets,
    /// predicated branches either way, the last parameter; and bad words named.
    #[test]
    fn edges_round_trip_and_bad_words_are_named() {
        let insts = [
            Inst::Alu { op: Alu::MaxU, d: 14, a: Src::Imm(0xdead_beef), b: Src::Imm(0x8000_0001) },
            Inst::Ld { space: Space::Shared, d: 3, a: Src::Reg(9), off: -8 },
            Inst::St { space: Space::Global, a: Src::Imm(400), off: -4, v: Src::Imm(u32::MAX) },
            Inst::AtomAdd { space: Space::Shared, d: 1, a: Src::Reg(2), off: 12, v: Src::Reg(5) },
            Inst::Bra { target: 31, c: Some(6), neg: true, join: 17 },
            Inst::Bra { target: 2, c: None, neg: false, join: 0 },
            Inst::S2R { d: 0, s: Special::Param(MAX_PARAMS as u8 - 1) },
            Inst::Shfl { mode: Shfl::Bfly, d: 4, a: 4, b: Src::Imm(2) },
            Inst::Sel { d: 2, c: 3, a: Src::Imm(7), b: Src::Reg(1) },
        ];
        for inst in insts {
            assert_eq!(decode(&encode(Some(&inst)).unwrap()), Ok(Some(normal(inst))), "{inst:?}");
        }
        let far = Inst::S2R { d: 0, s: Special::Param(MAX_PARAMS as u8) };
        assert_eq!(encode(Some(&far)), Err(ImageError::Param(MAX_PARAMS as u8)));
        assert_eq!(decode(&[250, 0, 0, 0, 0, 0, 0, 0]), Err(ImageError::Opcode(250)));
        assert_eq!(decode(&[0; 3]), Err(ImageError::Length(3)));
    }
}
