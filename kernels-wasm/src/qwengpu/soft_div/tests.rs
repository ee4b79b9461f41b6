//! The routine against the ISA's own division, through the lowering and the interpreter.

use super::super::interp::{Launch, Machine};
use super::super::isa::{Alu, Inst, MachineSpec};
use super::super::lower::compile;
use super::super::suite;
use crate::bitnet::random::Rng;
use alloc::vec;
use alloc::vec::Vec;

/// Reads `a[i]`, `b[i]`, writes `a/b, a%b` unsigned and signed, and the same with the
/// destination aliasing an operand and with immediates, into `o[8i…8i+7]`.
const KERNEL: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry divs(
	.param .u64 pa,
	.param .u64 pb,
	.param .u64 po
)
{
	.reg .b32 	%r<20>;
	.reg .b64 	%rd<10>;
	ld.param.u64 	%rd1, [pa];
	ld.param.u64 	%rd2, [pb];
	ld.param.u64 	%rd3, [po];
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd4, %r1, 4;
	add.s64 	%rd5, %rd1, %rd4;
	ld.global.u32 	%r2, [%rd5];
	add.s64 	%rd6, %rd2, %rd4;
	ld.global.u32 	%r3, [%rd6];
	mul.wide.u32 	%rd7, %r1, 32;
	add.s64 	%rd8, %rd3, %rd7;
	div.u32 	%r4, %r2, %r3;
	st.global.u32 	[%rd8], %r4;
	rem.u32 	%r4, %r2, %r3;
	st.global.u32 	[%rd8+4], %r4;
	div.s32 	%r4, %r2, %r3;
	st.global.u32 	[%rd8+8], %r4;
	rem.s32 	%r4, %r2, %r3;
	st.global.u32 	[%rd8+12], %r4;
	mov.u32 	%r8, %r2;
	div.s32 	%r8, %r8, %r3;
	st.global.u32 	[%rd8+16], %r8;
	mov.u32 	%r9, %r3;
	rem.u32 	%r9, %r2, %r9;
	st.global.u32 	[%rd8+20], %r9;
	div.u32 	%r10, %r2, 7;
	st.global.u32 	[%rd8+24], %r10;
	rem.s32 	%r11, -7, %r3;
	st.global.u32 	[%rd8+28], %r11;
	ret;
}
"#;

fn want(a: u32, b: u32) -> [u32; 8] {
    [
        Alu::DivU.eval(a, b),
        Alu::RemU.eval(a, b),
        Alu::DivS.eval(a, b),
        Alu::RemS.eval(a, b),
        Alu::DivS.eval(a, b),
        Alu::RemU.eval(a, b),
        Alu::DivU.eval(a, 7),
        Alu::RemS.eval(7u32.wrapping_neg(), b),
    ]
}

fn no_divider() -> MachineSpec {
    // Four divisions' loops and more: past the default ROM, which is the second machine's to
    // size.
    MachineSpec { divider: false, rom_blocks: 256, global_words: 4096, ..MachineSpec::default() }
}

fn divides(program: &[Vec<Inst>]) -> bool {
    program.iter().flatten().any(|i| matches!(i, Inst::Alu { op: Alu::DivS | Alu::DivU | Alu::RemS | Alu::RemU, .. }))
}

#[test]
fn the_routine_divides_as_the_isa_does_on_edge_and_random_operands() {
    let spec = no_divider();
    let kernel = compile(KERNEL, None, &spec).unwrap();
    assert!(!divides(&kernel.program.blocks), "the divisions are still there");
    assert!(divides(&compile(KERNEL, None, &MachineSpec::default()).unwrap().program.blocks));
    let edges = [0u32, 1, 2, 3, 7, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, u32::MAX, u32::MAX - 1, 1 << 16, 12345];
    let mut pairs: Vec<(u32, u32)> = edges.iter().flat_map(|&a| edges.iter().map(move |&b| (a, b))).collect();
    let mut rng = Rng::new(22);
    for _ in 0..256 {
        // Random words, and small divisors, where long quotients are exercised.
        let (a, b) = (rng.next_u64() as u32, rng.next_u64() as u32);
        pairs.push((a, b));
        pairs.push((a, b >> (rng.next_u64() % 32)));
    }
    for chunk in pairs.chunks(32) {
        let n = chunk.len();
        let mut memory: Vec<u32> = chunk.iter().map(|p| p.0).chain(chunk.iter().map(|p| p.1)).collect();
        memory.resize(2 * n + 8 * n, 0);
        let launch = Launch { grid: 1, block: n, params: vec![0, 4 * n as u32, 8 * n as u32] };
        let mut m = Machine::new(spec, kernel.program.clone(), &memory, launch).unwrap();
        m.run(10_000_000).unwrap();
        for (i, &(a, b)) in chunk.iter().enumerate() {
            assert_eq!(m.global[2 * n + 8 * i..2 * n + 8 * i + 8], want(a, b), "a = {a:#x}, b = {b:#x}");
        }
    }
}

/// Every suite kernel that divides gives its expected arrays without a divider, in more steps.
#[test]
fn suite_kernels_that_divide_run_without_a_divider() {
    let spec = MachineSpec { divider: false, rom_blocks: 256, ..MachineSpec::default() };
    let mut seen = 0;
    for k in suite::kernels() {
        let with = compile(k.ptx, None, &MachineSpec::default()).unwrap();
        if !divides(&with.program.blocks) {
            continue;
        }
        seen += 1;
        let without = compile(k.ptx, None, &spec).unwrap();
        assert!(!divides(&without.program.blocks), "{}", k.name);
        let (arrays, steps) = k.run_interpreter(&spec).unwrap();
        assert_eq!(arrays, k.expected(&k.prepare()), "{}", k.name);
        let (_, steps_with) = k.run_interpreter(&MachineSpec::default()).unwrap();
        assert!(steps > steps_with, "{}: {steps} steps without a divider, {steps_with} with", k.name);
    }
    assert_eq!(seen, 4, "divmod, gcd, histogram and is_prime divide");
}
