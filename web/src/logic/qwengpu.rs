//! The qwenGPU tab's model: a kernel of the suite (or edited PTX) lowered and run on the
//! reference interpreter, one snapshot per machine step for the stepper.

use kernels_wasm::qwengpu::compiled::{Op, Summary};
use kernels_wasm::qwengpu::interp::{Entry, StepRecord};
use kernels_wasm::qwengpu::isa::{Inst, MachineSpec, Program};
use kernels_wasm::qwengpu::lower::Kernel;
use kernels_wasm::qwengpu::run::{Report, Runner};
use kernels_wasm::qwengpu::suite::SuiteKernel;

/// Steps recorded for the stepper (a run longer than this is refused, not truncated).
pub const MAX_STEPS: usize = 20_000;

/// The machine after one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub record: StepRecord,
    /// The registers of the warp that ran (`[lane][r]`) and its SIMT stack afterwards.
    pub regs: Vec<Vec<u32>>,
    pub stack: Vec<Entry>,
    pub global: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub kernel: Kernel,
    pub snapshots: Vec<Snapshot>,
    /// The arrays as the run left them, and as the plain Rust version says they must be.
    pub arrays: Vec<Vec<u32>>,
    pub expected: Vec<Vec<u32>>,
}

/// Lowers `ptx` and runs it with `k`'s launch and inputs.
pub fn trace(k: &SuiteKernel, ptx: &str) -> Result<Trace, String> {
    let (kernel, p, mut m) = k.machine(ptx, &MachineSpec::default())?;
    let mut snapshots = Vec::new();
    while let Some(record) = m.step().map_err(|e| e.to_string())? {
        if snapshots.len() == MAX_STEPS {
            return Err(format!("more than {MAX_STEPS} steps: too long to step through here"));
        }
        let w = &m.warps[record.warp];
        snapshots.push(Snapshot { record, regs: w.regs.clone(), stack: w.stack.clone(), global: m.global.clone() });
    }
    Ok(Trace { kernel, snapshots, arrays: p.read_arrays(&m.global), expected: k.expected(&p) })
}

/// "step N: warp w ran block b with lanes ■■□■".
pub fn step_line(position: usize, r: &StepRecord) -> String {
    format!("step {position}: warp {} ran block {} with lanes {}", r.warp, r.block, lanes(r.mask, 4))
}

/// A SIMT stack, top entry first, one line per entry.
pub fn stack_lines(stack: &[Entry]) -> Vec<String> {
    stack
        .iter()
        .rev()
        .map(|e| {
            let join = e.join.map(|j| j.to_string()).unwrap_or_else(|| "exit".into());
            format!("pc {} → join {join}, lanes {}", e.pc, lanes(e.mask, 4))
        })
        .collect()
}

/// Lanes of a mask as ■ (ran) and □ (waited), lane 0 first.
pub fn lanes(mask: u32, n: usize) -> String {
    (0..n).map(|l| if mask & (1 << l) != 0 { '■' } else { '□' }).collect()
}

/// One instruction as a line of assembly.
pub fn asm(inst: &Inst) -> String {
    use kernels_wasm::qwengpu::isa::Src;
    let s = |x: &Src| match x {
        Src::Reg(r) => format!("r{r}"),
        Src::Imm(v) => format!("{}", *v as i32),
    };
    match inst {
        Inst::Mov { d, a } => format!("mov r{d}, {}", s(a)),
        Inst::Alu { op, d, a, b } => format!("{} r{d}, {}, {}", format!("{op:?}").to_lowercase(), s(a), s(b)),
        Inst::Set { cmp, d, a, b } => format!("set.{} r{d}, {}, {}", format!("{cmp:?}").to_lowercase(), s(a), s(b)),
        Inst::Sel { d, c, a, b } => format!("sel r{d}, r{c} ? {} : {}", s(a), s(b)),
        Inst::Ld { space, d, a, off } => format!("ld.{} r{d}, [{}{off:+}]", format!("{space:?}").to_lowercase(), s(a)),
        Inst::St { space, a, off, v } => {
            format!("st.{} [{}{off:+}], {}", format!("{space:?}").to_lowercase(), s(a), s(v))
        }
        Inst::AtomAdd { space, d, a, off, v } => {
            format!("atom.add.{} r{d}, [{}{off:+}], {}", format!("{space:?}").to_lowercase(), s(a), s(v))
        }
        Inst::Shfl { mode, d, a, b } => format!("shfl.{} r{d}, r{a}, {}", format!("{mode:?}").to_lowercase(), s(b)),
        Inst::S2R { d, s: sp } => format!("s2r r{d}, {sp:?}"),
        Inst::Bra { target, c: None, .. } => format!("bra {target}"),
        Inst::Bra { target, c: Some(c), neg, join } => {
            format!("@{}r{c} bra {target} (join {join})", if *neg { "!" } else { "" })
        }
        Inst::Bar => "bar".into(),
        Inst::Exit => "exit".into(),
    }
}

/// The ROM as text, one line per block.
pub fn listing(program: &Program, lines: &[usize]) -> Vec<String> {
    program
        .blocks
        .iter()
        .enumerate()
        .map(|(b, block)| {
            let body: Vec<String> = block.iter().map(asm).collect();
            format!("{b:>2} (PTX {:>3}): {}", lines.get(b).copied().unwrap_or(0), body.join("; "))
        })
        .collect()
}

/// A run on the compiled layers: checked against the interpreter after every step (with a view
/// of the state rows per step), then timed without the check.
#[derive(Debug, Clone, PartialEq)]
pub struct LayersRun {
    pub summary: Summary,
    pub report: Report,
    /// The interpreter's snapshots for the same steps, shown beside the state rows.
    pub interpreter: Vec<Snapshot>,
    pub rom_ops: Vec<Option<Op>>,
    pub rom_rows: usize,
    /// Register rows per thread (a write's row key is thread × this + row) and ROM slots per block.
    pub reg_rows: usize,
    pub block_len: usize,
    /// The timed run's milliseconds, and its executor's device time where measured.
    pub ms: f64,
    pub device_ms: Option<f64>,
    pub arrays_equal: bool,
}

impl LayersRun {
    /// `count` (steps, tokens) per second of the timed run.
    pub fn per_s(&self, count: u64) -> f64 {
        count as f64 / (self.ms / 1e3).max(1e-9)
    }
}

/// Runs `ptx` with `k`'s launch and inputs on the compiled machine in `runner` (on its
/// executor: this page's wasm, or WebGPU); `now` is a millisecond clock.
pub async fn layers_run(
    runner: &mut Runner,
    k: &SuiteKernel,
    ptx: &str,
    mut now: impl FnMut() -> f64,
) -> Result<LayersRun, String> {
    let t = trace(k, ptx)?;
    let p = k.prepare();
    let program = &t.kernel.program;
    (runner.lockstep, runner.views) = (true, true);
    let report =
        runner.launch_async(program, &p.memory, &p.launch, MAX_STEPS as u64).await.map_err(|e| e.to_string())?;
    let rom_ops = runner.rom_ops();
    (runner.lockstep, runner.views) = (false, false);
    let start = now();
    let timed =
        runner.launch_async(program, &p.memory, &p.launch, MAX_STEPS as u64).await.map_err(|e| e.to_string())?;
    let ms = now() - start;
    Ok(LayersRun {
        summary: runner.c.summary(),
        arrays_equal: p.read_arrays(&report.global) == t.expected,
        report,
        interpreter: t.snapshots,
        rom_ops,
        rom_rows: runner.c.rom_rows,
        reg_rows: runner.c.rows,
        block_len: runner.c.spec.block_len,
        ms,
        device_ms: timed.device_seconds.map(|s| s * 1e3),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_wasm::qwengpu::suite::kernels;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// A run on this page's CPU never waits: one poll finishes it.
    fn ready<T>(f: impl core::future::Future<Output = T>) -> T {
        let f = core::pin::pin!(f);
        match f.poll(&mut core::task::Context::from_waker(core::task::Waker::noop())) {
            core::task::Poll::Ready(r) => r,
            core::task::Poll::Pending => panic!("the CPU executor waited"),
        }
    }

    #[test]
    fn a_trace_records_every_step_and_ends_with_the_expected_arrays() {
        let k = kernels().into_iter().find(|k| k.name == "collatz").unwrap();
        let t = trace(&k, k.ptx).unwrap();
        assert_eq!(t.arrays, t.expected);
        assert!(t.snapshots.len() > 10);
        // Divergence shows: some step ran with only part of a warp.
        assert!(t.snapshots.iter().any(|s| s.record.mask != 0b1111));
        assert_eq!(t.snapshots.last().map(|s| s.global.len()), Some(126));
        assert_eq!(lanes(0b0101, 4), "■□■□");
        assert_eq!(listing(&t.kernel.program, &t.kernel.rom_lines).len(), t.kernel.program.blocks.len());
        // Edited PTX that the machine cannot run is refused with its line.
        let err = trace(&k, &k.ptx.replacen("add.s32", "add.f32", 1)).unwrap_err();
        assert!(err.contains("PTX line") && err.contains("floating point"), "{err}");
    }

    /// The compiled layers' run of a kernel with a shuffle and divergence: every step's view of
    /// the state rows equals the interpreter's registers and memory, and the ROM rows decode to
    /// the program's opcodes.
    #[test]
    fn the_layers_run_shows_state_rows_equal_to_the_interpreter() {
        let spec = MachineSpec::default();
        let mut runner = Runner::new(kernels_wasm::qwengpu::compiled::Compiled::new(spec).unwrap());
        let k = kernels().into_iter().find(|k| k.name == "warp_scan").unwrap();
        let mut clock = 0.0;
        let r = ready(layers_run(&mut runner, &k, k.ptx, || {
            clock += 1.0;
            clock
        }))
        .unwrap();
        assert!(r.arrays_equal);
        assert_eq!(r.report.views.len(), r.interpreter.len());
        for (v, s) in r.report.views.iter().zip(&r.interpreter) {
            assert_eq!((v.record, &v.regs, &v.global, &v.stack), (s.record, &s.regs, &s.global, &s.stack));
        }
        assert!(r.report.views.iter().any(|v| v.tokens.iter().any(|t| t.phase == 1)), "a shuffle's second pass");
        let t = trace(&k, k.ptx).unwrap();
        for (b, block) in t.kernel.program.blocks.iter().enumerate() {
            assert!(r.rom_ops[b * spec.block_len].is_some(), "block {b}");
            assert_eq!(block.len() > 1, r.rom_ops[b * spec.block_len + 1].is_some(), "block {b}");
        }
        assert_eq!(r.summary.deltanet_heads, 9);
        assert_eq!(r.ms, 1.0);
    }
}
