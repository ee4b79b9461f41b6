//! The qwenGPU tab's second design on WebGPU (`kernels_wasm::gpu::machine`): the page's
//! spliced model as one GPU machine, a token one submission of every layer, the head and the
//! argmax, whose id is the next position's input without leaving the GPU. The page reads the
//! chosen ids back 256 positions at a time (each checked against the interpreter) and the
//! machine's rows after the last step.
//!
//! Tested end to end: the e2e test picks WebGPU in the panel and checks the arrays, the summary,
//! the steps not read back and the last step's rows against the interpreter (a logic test in
//! Chromium would run the same minute-long launch on SwiftShader a second time).

use super::qwengpu::MAX_STEPS;
use super::qwengpu_spliced::{finish, prepare, SplicedModel, SplicedRun};
use kernels_wasm::gpu::launch::launch as gpu_launch;
use kernels_wasm::gpu::machine::GpuMachine;
use kernels_wasm::gpu::Gpu;
use kernels_wasm::qwengpu::isa::MachineSpec;
use kernels_wasm::qwengpu::splice::launch::Fed;
use kernels_wasm::qwengpu::suite::SuiteKernel;

/// Positions the page's GPU machine has room for (its launches run one after another in one
/// context, as on the CPU; a machine out of room is built again).
pub const GPU_POSITIONS: usize = 1 << 18;

/// The second machine of the page's model on `gpu`.
pub fn gpu_machine(model: &SplicedModel, gpu: &Gpu) -> Result<GpuMachine, String> {
    let norms = model.splice.norms(&model.model);
    GpuMachine::new(gpu, &model.splice, &norms, GPU_POSITIONS).map_err(|e| format!("uploading the machine: {e}"))
}

/// [`spliced_run`] on WebGPU: each position one submission, the next id chosen by the GPU's
/// argmax, the chosen ids read back 256 positions at a time and checked against the
/// interpreter. The rows are read back after the last step only: a read at every step would
/// stop the GPU there.
pub async fn spliced_run_gpu(
    model: &SplicedModel,
    (gpu, machine): (&Gpu, &mut GpuMachine),
    k: &SuiteKernel,
    ptx: &str,
    mut now: impl FnMut() -> f64,
) -> Result<SplicedRun, String> {
    let spec = MachineSpec::second();
    let (kernel, p, mut viewer, warps) = prepare(k, ptx)?;
    let splice = &model.splice;
    let start = now();
    let fed = |f: &Fed| {
        let _ = viewer.take(f, |_| Ok(None));
    };
    let launched =
        gpu_launch((gpu, &mut *machine), splice, (spec, &kernel.program), &p.memory, &p.launch, MAX_STEPS as u64, fed)
            .await;
    let ms = now() - start;
    let mut run = finish((k, &p), splice, viewer, launched, (ms, Some(gpu.adapter.to_string())))?;
    if let Some(last) = run.steps.last_mut() {
        let rows = machine.machine_rows(gpu, splice, warps, spec.regs, last.global.len()).await;
        let rows = rows.map_err(|e| format!("reading the rows back: {e}"))?;
        last.read = true;
        last.rows = rows.registers.into_iter().filter(|row| row.warp as usize == last.record.warp).collect();
        last.memory = rows.memory;
    }
    Ok(run)
}
