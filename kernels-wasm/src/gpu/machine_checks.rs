//! The second machine on the GPU as a whole (`machine`, `launch`), for the native tests
//! (lavapipe) and the wasm tests (SwiftShader): kernels launched one after another in one
//! context, every token the GPU's argmax chose checked against the interpreter's, the arrays
//! against the suite's plain Rust, memory and every PC read back out of the GPU's rows, and the
//! DeltaNet states after them against the CPU runner's.

use super::deltanet_checks::bits;
use super::launch::{launch, GpuLaunchError};
use super::machine::GpuMachine;
use super::{Gpu, GpuError};
use crate::qwengpu::isa::MachineSpec;
use crate::qwengpu::splice::launch::LaunchError;
use crate::qwengpu::splice::tests::{launch_all, llama};
use crate::qwengpu::splice::{Compiled, Runner, Splice};
use crate::qwengpu::suite;

/// Positions a test machine has room for (the whole suite is about 114,000).
const CAPACITY: usize = 1 << 20;

/// The kernels a comma-separated list names, in the suite's order (`all`: the whole suite); a
/// name that is not a suite kernel's panics, naming it.
pub fn named(names: &str) -> Vec<&'static str> {
    let all: Vec<&'static str> = suite::kernels().iter().map(|k| k.name).collect();
    if names == "all" {
        return all;
    }
    let names: Vec<&str> = names.split(',').map(str::trim).collect();
    if let Some(bad) = names.iter().find(|n| !all.contains(n)) {
        panic!("QWENGPU_MACHINE_KERNELS: {bad:?} is not a suite kernel");
    }
    all.into_iter().filter(|k| names.contains(k)).collect()
}

/// Launches `kernels` in turn on the GPU machine of the spliced tiny llama; returns the tokens
/// the model chose in all, and tells `log` of each kernel checked (a whole-suite campaign runs
/// for hours). With `cpu_too` the CPU runner launches them too and every DeltaNet state must
/// then be the GPU's, bit for bit.
pub async fn machine_launches_are_the_interpreters(
    gpu: &Gpu,
    kernels: &[&str],
    cpu_too: bool,
    log: impl Fn(&str),
) -> u64 {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut machine = GpuMachine::new(gpu, &splice, &splice.norms(&model), CAPACITY).unwrap();
    let spec = MachineSpec::second();
    let mut chosen = 0;
    for &name in kernels {
        let k = suite::kernels().into_iter().find(|k| k.name == name).unwrap();
        let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
        let mut steps = 0;
        let out = launch((gpu, &mut machine), &splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |f| {
            steps = steps.max(f.steps)
        })
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.read_arrays(&out.global), k.expected(&p), "{name}");
        assert!(out.chosen > 10 && out.tokens == out.prompt + out.chosen && steps == out.steps, "{name}: {out:?}");
        chosen += out.chosen;
        // The machine read back out of the GPU's rows: global memory as the launch left it,
        // and every lane of every warp exited.
        let per_cta = p.launch.block.div_ceil(spec.lanes);
        let warps = (p.launch.grid * per_cta, per_cta);
        let rows = machine.machine_rows(gpu, &splice, warps, spec.regs, out.global.len()).await.unwrap();
        let memory: Vec<Option<u32>> = out.global.iter().map(|&w| Some(w)).collect();
        assert_eq!(rows.memory, memory, "{name}: memory in the GPU's rows");
        assert_eq!(rows.registers.len(), warps.0 * spec.lanes, "{name}");
        let exited = Some(u32::from(crate::qwengpu::sequencer::EXITED));
        assert!(rows.registers.iter().all(|r| r.pc == exited), "{name}: {:?}", rows.registers);
        log(&alloc::format!("{name}: {} steps, {} tokens chosen, in lockstep", out.steps, out.chosen));
    }
    assert_eq!(machine.position() as u64, chosen + prompts(&splice, kernels), "positions run");
    if cpu_too {
        let mut runner = Runner::spliced(c, &model, &splice).unwrap();
        launch_all(&mut runner, &splice, kernels);
        let mut compared = 0;
        for i in 0..splice.layers.len() {
            let Some(cpu) = runner.deltanet(i) else { continue };
            let got = machine.state(gpu, i).await.unwrap().expect("a DeltaNet layer has a state");
            assert!(bits(&got) == bits(&cpu.state), "layer {i}: the GPU's state differs from the CPU's");
            compared += 1;
        }
        assert!(compared > 0);
    }
    chosen
}

/// The prompts' tokens of `kernels`' launches.
fn prompts(splice: &Splice, kernels: &[&str]) -> u64 {
    let spec = MachineSpec::second();
    let prompt = |name: &str| {
        let k = suite::kernels().into_iter().find(|k| k.name == name).unwrap();
        let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
        splice.registers.prompt_tokens(&kernel.program, &p.launch, &p.memory).unwrap().len() as u64
    };
    kernels.iter().map(|n| prompt(n)).sum()
}

/// Bad input is named: a prompt id past the embedding, a launch with no room left, a model that
/// cannot name the next token (its output layer emptied: the launch's first record diverges),
/// and a run after an error.
pub async fn machine_bad_input_is_named(gpu: &Gpu) {
    let (c, model) = llama();
    let mut splice = Splice::new(c).unwrap();
    let norms = splice.norms(&model);
    let mut machine = GpuMachine::new(gpu, &splice, &norms, 64).unwrap();
    let past = splice.embed.len() + 5;
    let e = machine.run(gpu, &[0, past], 0, |_| core::ops::ControlFlow::Continue(())).await.unwrap_err();
    assert!(
        matches!(&e, GpuError::Unsupported(w) if w.contains(&alloc::format!("token id {past} at position 1"))),
        "{e}"
    );
    let e = machine.run(gpu, &[0], 0, |_| core::ops::ControlFlow::Continue(())).await.unwrap_err();
    assert!(e.to_string().contains("build a new one"), "{e}");
    let spec = MachineSpec::second();
    let k = suite::kernels().into_iter().find(|k| k.name == "reverse").unwrap();
    let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
    let mut small = GpuMachine::new(gpu, &splice, &norms, 64).unwrap();
    let e = launch((gpu, &mut small), &splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |_| {}).await;
    assert!(matches!(&e, Err(GpuLaunchError::Gpu(GpuError::TooLarge { limit: 64, .. }))), "{e:?}");
    // Room for the prompt and a few of the steps' tokens: the launch runs, then is named out of
    // room with what it did.
    let prompt = prompts(&splice, &["reverse"]) as usize;
    let mut short = GpuMachine::new(gpu, &splice, &norms, prompt + 40).unwrap();
    let e = launch((gpu, &mut short), &splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |_| {}).await;
    let want = GpuLaunchError::OutOfRoom { capacity: prompt + 40, prompt: prompt as u64, steps: 2 };
    assert!(
        matches!(&e, Err(GpuLaunchError::OutOfRoom { capacity, prompt: fed, steps }) if *capacity == prompt + 40 && *fed == prompt as u64 && *steps > 0),
        "{e:?} (like {want})"
    );
    if let Some(Compiled::SwiGlu(output)) = splice.layers.last_mut() {
        output.units.clear();
    }
    let mut mute = GpuMachine::new(gpu, &splice, &norms, CAPACITY).unwrap();
    let e = launch((gpu, &mut mute), &splice, (spec, &kernel.program), &p.memory, &p.launch, 10_000, |_| {}).await;
    assert!(matches!(e, Err(GpuLaunchError::Launch(LaunchError::Diverged { step: 0, token: 0, .. }))), "{e:?}");
}
