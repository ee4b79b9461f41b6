//! PTX's bit instructions (`bfe`, `bfi`, `prmt`, `brev`, `popc`, `clz`, `bfind`, `shf`, `cnot`)
//! as sequences of the machine's word operations.
//!
//! Each sequence is exact for every input, by the machine's shift rule: a shift by 32 or more
//! gives 0 (all sign bits for `Sra`), which is what makes the edge cases fall out without
//! branches. A length of 0 or a position past bit 31 needs no special case:
//! - `(1 << len) − 1` is the all-ones mask for `len ≥ 32` and 0 for `len = 0`;
//! - `x << 32 >> 32` is 0.
//!
//! Intermediates live in fresh virtual registers (named `%__t<line>.<k>`, which PTX cannot
//! spell), so the allocator colours them like any other; the result is written last, so `d` may
//! be one of the sources. 64-bit forms are refused: the machine's words are 32 bits, and only
//! addresses (whose high word is 0) are kept in 64-bit registers.

use super::isa::{Alu, Cmp, Inst, Src};
use super::ptx::{Instruction, PtxError};
use super::select::{err, Ctx};
use alloc::vec::Vec;

/// The instructions of one sequence, with its temporaries.
struct Seq<'c, 'e> {
    cx: &'c mut Ctx<'e>,
    line: usize,
    temps: usize,
    code: Vec<Inst>,
}

impl Seq<'_, '_> {
    fn temp(&mut self) -> Result<u8, PtxError> {
        self.temps += 1;
        self.cx.vreg(&alloc::format!("%__t{}.{}", self.line, self.temps), self.line)
    }

    /// `d = a op b`, into a fresh temporary unless `d` is given.
    fn alu(&mut self, op: Alu, a: Src, b: Src, d: Option<u8>) -> Result<Src, PtxError> {
        let d = match d {
            Some(d) => d,
            None => self.temp()?,
        };
        self.code.push(Inst::Alu { op, d, a, b });
        Ok(Src::Reg(d))
    }

    /// PTX reads positions and lengths from their low 8 bits.
    fn byte(&mut self, s: Src) -> Result<Src, PtxError> {
        match s {
            Src::Imm(v) => Ok(Src::Imm(v & 0xff)),
            r => self.alu(Alu::And, r, Src::Imm(0xff), None),
        }
    }

    /// The number of one bits of `x`, SWAR: pairs, nibbles, bytes, then a multiply adds the four
    /// bytes into the top one (each is at most 8, so no carry crosses a byte).
    fn popc(&mut self, x: Src, d: Option<u8>) -> Result<Src, PtxError> {
        let t = self.alu(Alu::Shr, x, Src::Imm(1), None)?;
        let t = self.alu(Alu::And, t, Src::Imm(0x5555_5555), None)?;
        let x = self.alu(Alu::Sub, x, t, None)?;
        let t = self.alu(Alu::Shr, x, Src::Imm(2), None)?;
        let t = self.alu(Alu::And, t, Src::Imm(0x3333_3333), None)?;
        let x = self.alu(Alu::And, x, Src::Imm(0x3333_3333), None)?;
        let x = self.alu(Alu::Add, x, t, None)?;
        let t = self.alu(Alu::Shr, x, Src::Imm(4), None)?;
        let x = self.alu(Alu::Add, x, t, None)?;
        let x = self.alu(Alu::And, x, Src::Imm(0x0f0f_0f0f), None)?;
        let x = self.alu(Alu::Mul, x, Src::Imm(0x0101_0101), None)?;
        self.alu(Alu::Shr, x, Src::Imm(24), d)
    }

    /// Leading zeros: smear the highest one bit into every lower bit, then count the zeros left.
    fn clz(&mut self, x: Src, d: Option<u8>) -> Result<Src, PtxError> {
        let mut x = x;
        for s in [1, 2, 4, 8, 16] {
            let t = self.alu(Alu::Shr, x, Src::Imm(s), None)?;
            x = self.alu(Alu::Or, x, t, None)?;
        }
        let x = self.alu(Alu::Xor, x, Src::Imm(u32::MAX), None)?;
        self.popc(x, d)
    }
}

/// One bit instruction of `i` as machine instructions.
pub(super) fn translate(cx: &mut Ctx<'_>, i: &Instruction) -> Result<Vec<Inst>, PtxError> {
    let (line, op, a) = (i.line, &i.op, &i.args);
    if op.iter().any(|t| t.ends_with("64")) {
        return err(line, alloc::format!("`{}`: 64-bit data is outside the machine (its words are 32 bits)", i.text));
    }
    let need = |n: usize| {
        if a.len() == n {
            Ok(())
        } else {
            err(line, alloc::format!("`{}`: {n} operands expected", i.text))
        }
    };
    let signed = op.iter().any(|t| t == "s32");
    let d = cx.dst(a.first().ok_or(PtxError { line, what: "no operands".into() })?, line)?;
    let mut q = Seq { cx, line, temps: 0, code: Vec::new() };
    match op[0].as_str() {
        "bfe" => {
            // d = the `len` bits of `a` from `pos`, zero- or sign-extended: shift the field
            // down, then up and down again by 32 − min(len, 32) to clear or extend the rest.
            need(4)?;
            let (x, pos, len) = (q.cx.src(&a[1], line)?, q.cx.src(&a[2], line)?, q.cx.src(&a[3], line)?);
            let (pos, len) = (q.byte(pos)?, q.byte(len)?);
            let down = if signed { Alu::Sra } else { Alu::Shr };
            let field = q.alu(down, x, pos, None)?;
            let spare = match len {
                Src::Imm(n) => Src::Imm(32 - n.min(32)),
                len => {
                    let m = q.alu(Alu::MinU, len, Src::Imm(32), None)?;
                    q.alu(Alu::Sub, Src::Imm(32), m, None)?
                }
            };
            let up = q.alu(Alu::Shl, field, spare, None)?;
            q.alu(down, up, spare, Some(d))?;
        }
        "bfi" => {
            // d = b with bits pos … pos + len − 1 replaced by the low bits of f.
            need(5)?;
            let (f, b) = (q.cx.src(&a[1], line)?, q.cx.src(&a[2], line)?);
            let (pos, len) = (q.cx.src(&a[3], line)?, q.cx.src(&a[4], line)?);
            let (pos, len) = (q.byte(pos)?, q.byte(len)?);
            let mask = match (pos, len) {
                (Src::Imm(p), Src::Imm(n)) => {
                    let ones = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
                    Src::Imm(if p >= 32 { 0 } else { ones << p })
                }
                (pos, len) => {
                    let m = q.alu(Alu::Shl, Src::Imm(1), len, None)?;
                    let m = q.alu(Alu::Sub, m, Src::Imm(1), None)?;
                    q.alu(Alu::Shl, m, pos, None)?
                }
            };
            let ins = q.alu(Alu::Shl, f, pos, None)?;
            let ins = q.alu(Alu::And, ins, mask, None)?;
            let keep = match mask {
                Src::Imm(m) => Src::Imm(!m),
                m => q.alu(Alu::Xor, m, Src::Imm(u32::MAX), None)?,
            };
            let kept = q.alu(Alu::And, b, keep, None)?;
            q.alu(Alu::Or, kept, ins, Some(d))?;
        }
        "prmt" => {
            // Byte permute, default mode: result byte k is byte (s & 7) of {b, a} (a holds
            // bytes 0–3), or that byte's sign replicated when s & 8, s = selector nibble k.
            need(4)?;
            if op.len() > 2 {
                return err(line, alloc::format!("`{}`: only prmt's default mode is supported", i.text));
            }
            let (x, y) = (q.cx.src(&a[1], line)?, q.cx.src(&a[2], line)?);
            let Some(sel) = q.cx.constant(&a[3]) else {
                return err(line, alloc::format!("`{}`: prmt with a computed selector", i.text));
            };
            let mut acc: Option<Src> = None;
            for k in 0..4u32 {
                let s = (sel >> (4 * k)) & 0xf;
                let (src, byte) = if s & 7 < 4 { (x, s & 3) } else { (y, s & 3) };
                let v = if s & 8 == 0 {
                    let t = q.alu(Alu::Shr, src, Src::Imm(8 * byte), None)?;
                    q.alu(Alu::And, t, Src::Imm(0xff), None)?
                } else {
                    // The byte's top bit, to every bit, then one byte of it.
                    let t = q.alu(Alu::Shl, src, Src::Imm(24 - 8 * byte), None)?;
                    let t = q.alu(Alu::Sra, t, Src::Imm(31), None)?;
                    q.alu(Alu::And, t, Src::Imm(0xff), None)?
                };
                let placed = if k == 0 { v } else { q.alu(Alu::Shl, v, Src::Imm(8 * k), None)? };
                let last = (k == 3).then_some(d);
                acc = Some(match acc {
                    None => placed,
                    Some(acc) => q.alu(Alu::Or, acc, placed, last)?,
                });
            }
        }
        "brev" => {
            // Swap neighbouring bits, pairs, nibbles, bytes, then the halves.
            need(2)?;
            let mut x = q.cx.src(&a[1], line)?;
            for (s, m) in [(1, 0x5555_5555), (2, 0x3333_3333), (4, 0x0f0f_0f0f), (8, 0x00ff_00ff)] {
                let hi = q.alu(Alu::Shr, x, Src::Imm(s), None)?;
                let hi = q.alu(Alu::And, hi, Src::Imm(m), None)?;
                let lo = q.alu(Alu::And, x, Src::Imm(m), None)?;
                let lo = q.alu(Alu::Shl, lo, Src::Imm(s), None)?;
                x = q.alu(Alu::Or, hi, lo, None)?;
            }
            let hi = q.alu(Alu::Shr, x, Src::Imm(16), None)?;
            let lo = q.alu(Alu::Shl, x, Src::Imm(16), None)?;
            q.alu(Alu::Or, hi, lo, Some(d))?;
        }
        "popc" => {
            need(2)?;
            let x = q.cx.src(&a[1], line)?;
            q.popc(x, Some(d))?;
        }
        "clz" => {
            need(2)?;
            let x = q.cx.src(&a[1], line)?;
            q.clz(x, Some(d))?;
        }
        "bfind" => {
            // The highest one bit's position, 0xffffffff for none: 31 − clz (clz(0) = 32). A
            // negative s32 looks for its highest zero bit instead, i.e. in !a.
            need(2)?;
            if op.iter().any(|t| t == "shiftamt") {
                return err(line, alloc::format!("`{}`: bfind.shiftamt is not supported", i.text));
            }
            let mut x = q.cx.src(&a[1], line)?;
            if signed {
                let sign = q.alu(Alu::Sra, x, Src::Imm(31), None)?;
                x = q.alu(Alu::Xor, x, sign, None)?;
            }
            let z = q.clz(x, None)?;
            q.alu(Alu::Sub, Src::Imm(31), z, Some(d))?;
        }
        "shf" => {
            // Funnel shift of the 64-bit pair b:a by n: `.l` keeps the high word, `.r` the low;
            // `.wrap` takes n mod 32, `.clamp` min(n, 32). Rotates compile to these.
            need(4)?;
            let left = op.iter().any(|t| t == "l");
            let (x, y, c) = (q.cx.src(&a[1], line)?, q.cx.src(&a[2], line)?, q.cx.src(&a[3], line)?);
            let wrap = op.iter().any(|t| t == "wrap");
            let (n, rest) = match c {
                Src::Imm(c) => {
                    let n = if wrap { c & 31 } else { c.min(32) };
                    (Src::Imm(n), Src::Imm(32 - n))
                }
                c => {
                    let n = if wrap {
                        q.alu(Alu::And, c, Src::Imm(31), None)?
                    } else {
                        q.alu(Alu::MinU, c, Src::Imm(32), None)?
                    };
                    (n, q.alu(Alu::Sub, Src::Imm(32), n, None)?)
                }
            };
            let (main, other) = if left {
                (q.alu(Alu::Shl, y, n, None)?, q.alu(Alu::Shr, x, rest, None)?)
            } else {
                (q.alu(Alu::Shr, x, n, None)?, q.alu(Alu::Shl, y, rest, None)?)
            };
            q.alu(Alu::Or, main, other, Some(d))?;
        }
        "cnot" => {
            need(2)?;
            let x = q.cx.src(&a[1], line)?;
            q.code.push(Inst::Set { cmp: Cmp::Eq, d, a: x, b: Src::Imm(0) });
        }
        other => return err(line, alloc::format!("`{other}` is not a bit instruction")),
    }
    Ok(q.code)
}

#[cfg(test)]
mod tests {
    use crate::qwengpu::interp::{Launch, Machine};
    use crate::qwengpu::isa::MachineSpec;
    use crate::qwengpu::lower::compile;
    use alloc::string::String;
    use alloc::vec::Vec;

    /// A one-thread kernel `out[k] = OP(in[0], in[1], …)` for each line of `body` (PTX using
    /// `%r1…%r4` as inputs and writing `%r9`), run on the interpreter.
    fn run(body: &[&str], inputs: [u32; 4]) -> Vec<u32> {
        let mut text = String::from(
            ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry k(\n.param .u64 k_param_0\n)\n{\n\
             .reg .b32 %r<16>;\n.reg .b64 %rd<4>;\nld.param.u64 %rd1, [k_param_0];\ncvta.to.global.u64 %rd2, %rd1;\n\
             ld.global.u32 %r1, [%rd2];\nld.global.u32 %r2, [%rd2+4];\nld.global.u32 %r3, [%rd2+8];\nld.global.u32 %r4, [%rd2+12];\n",
        );
        for (k, line) in body.iter().enumerate() {
            text.push_str(line);
            text.push_str(&alloc::format!("\nst.global.u32 [%rd2+{}], %r9;\n", 16 + 4 * k));
        }
        text.push_str("ret;\n}\n");
        let spec = MachineSpec { rom_blocks: 256, ..MachineSpec::default() };
        let kernel = compile(&text, None, &spec).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut memory = inputs.to_vec();
        memory.resize(4 + body.len(), 0);
        let mut m = Machine::new(spec, kernel.program, &memory, Launch { grid: 1, block: 1, params: alloc::vec![0] })
            .unwrap_or_else(|e| panic!("{e}"));
        m.run(100_000).unwrap_or_else(|e| panic!("{e}"));
        m.global[4..4 + body.len()].to_vec()
    }

    /// PTX's definitions, written from the ISA manual's pseudocode.
    fn bfe(a: u32, pos: u32, len: u32, signed: bool) -> u32 {
        let (pos, len) = (pos & 0xff, len & 0xff);
        let msb = 31;
        let sbit = if !signed || len == 0 { 0 } else { (a >> (pos + len - 1).min(msb)) & 1 };
        (0..32).fold(0, |d, i| {
            let bit = if i < len && pos + i <= msb { (a >> (pos + i)) & 1 } else { sbit };
            d | (bit << i)
        })
    }

    fn bfi(f: u32, b: u32, pos: u32, len: u32) -> u32 {
        let (pos, len) = (pos & 0xff, len & 0xff);
        (0..32)
            .fold(b, |d, i| if i >= pos && i < pos + len { (d & !(1 << i)) | (((f >> (i - pos)) & 1) << i) } else { d })
    }

    fn prmt(a: u32, b: u32, sel: u32) -> u32 {
        let bytes = (u64::from(b) << 32 | u64::from(a)).to_le_bytes();
        (0..4).fold(0, |d, k| {
            let s = (sel >> (4 * k)) & 0xf;
            let byte = bytes[(s & 7) as usize];
            let v = if s & 8 != 0 {
                if byte & 0x80 != 0 {
                    0xff
                } else {
                    0
                }
            } else {
                byte as u32
            };
            d | (v << (8 * k))
        })
    }

    fn shf(a: u32, b: u32, c: u32, left: bool, wrap: bool) -> u32 {
        let n = if wrap { c & 31 } else { c.min(32) };
        let pair = u64::from(b) << 32 | u64::from(a);
        if left {
            ((pair << n) >> 32) as u32
        } else {
            (pair >> n) as u32
        }
    }

    const WORDS: [u32; 10] =
        [0, 1, 2, 0x8000_0000, 0xffff_ffff, 0x1234_5678, 0x8765_4321, 0x00f0_0f00, 31, 0x7fff_ffff];

    #[test]
    fn bit_instructions_match_ptx_definitions() {
        let body = [
            "bfe.u32 %r9, %r1, %r2, %r3;",
            "bfe.s32 %r9, %r1, %r2, %r3;",
            "bfe.u32 %r9, %r1, 3, 5;",
            "bfe.s32 %r9, %r1, 28, 8;",
            "bfi.b32 %r9, %r1, %r4, %r2, %r3;",
            "bfi.b32 %r9, %r1, %r4, 4, 8;",
            "prmt.b32 %r9, %r1, %r4, 0x3210;",
            "prmt.b32 %r9, %r1, %r4, 0x0123;",
            "prmt.b32 %r9, %r1, %r4, 0x7b5c;",
            "mov.b32 %r10, 291;\nprmt.b32 %r9, %r1, %r4, %r10;",
            "brev.b32 %r9, %r1;",
            "popc.b32 %r9, %r1;",
            "clz.b32 %r9, %r1;",
            "bfind.u32 %r9, %r1;",
            "bfind.s32 %r9, %r1;",
            "shf.l.wrap.b32 %r9, %r1, %r4, %r2;",
            "shf.r.clamp.b32 %r9, %r1, %r4, %r2;",
            "shf.l.wrap.b32 %r9, %r1, %r1, 7;",
            "cnot.b32 %r9, %r1;",
            "mad.hi.u32 %r9, %r1, %r4, %r2;",
            "mad.hi.s32 %r9, %r1, %r4, %r2;",
        ];
        let counts = [0u32, 1, 5, 8, 31, 32, 33, 255, 256 + 3];
        for (n, &a) in WORDS.iter().enumerate() {
            for &p in &counts {
                let (len, b) = (counts[(n + p as usize) % counts.len()], WORDS[(n * 7 + p as usize) % WORDS.len()]);
                let got = run(&body, [a, p, len, b]);
                let hi = |x: u64| (x >> 32) as u32;
                let want = [
                    bfe(a, p, len, false),
                    bfe(a, p, len, true),
                    bfe(a, 3, 5, false),
                    bfe(a, 28, 8, true),
                    bfi(a, b, p, len),
                    bfi(a, b, 4, 8),
                    prmt(a, b, 0x3210),
                    prmt(a, b, 0x0123),
                    prmt(a, b, 0x7b5c),
                    prmt(a, b, 291),
                    a.reverse_bits(),
                    a.count_ones(),
                    a.leading_zeros(),
                    if a == 0 { u32::MAX } else { 31 - a.leading_zeros() },
                    {
                        let x = if (a as i32) < 0 { !a } else { a };
                        if x == 0 {
                            u32::MAX
                        } else {
                            31 - x.leading_zeros()
                        }
                    },
                    shf(a, b, p, true, true),
                    shf(a, b, p, false, false),
                    a.rotate_left(7),
                    u32::from(a == 0),
                    hi(u64::from(a) * u64::from(b)).wrapping_add(p),
                    hi((i64::from(a as i32) * i64::from(b as i32)) as u64).wrapping_add(p),
                ];
                for ((line, g), w) in body.iter().zip(&got).zip(&want) {
                    assert_eq!(g, w, "{line} with a={a:#x} pos/n={p} len={len} b={b:#x}");
                }
            }
        }
    }

    #[test]
    fn sixty_four_bit_and_unsupported_forms_are_refused_by_line() {
        for (inst, what) in [
            ("popc.b64 %r9, %rd1;", "64-bit"),
            ("brev.b64 %rd3, %rd1;", "64-bit"),
            ("prmt.b32.f4e %r9, %r1, %r4, %r2;", "default mode"),
            ("prmt.b32 %r9, %r1, %r4, %r2;", "computed selector"),
            ("bfind.shiftamt.u32 %r9, %r1;", "shiftamt"),
        ] {
            let text = alloc::format!(
                ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry k(\n.param .u64 k_param_0\n)\n{{\n\
                 .reg .b32 %r<16>;\n.reg .b64 %rd<4>;\n{inst}\nret;\n}}\n"
            );
            let e = compile(&text, None, &MachineSpec::default()).unwrap_err();
            assert!(e.line == 10 && e.what.contains(what), "{inst}: {e}");
        }
    }
}
