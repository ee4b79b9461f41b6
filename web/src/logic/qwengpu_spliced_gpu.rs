//! The qwenGPU tab's second design on WebGPU (`kernels_wasm::gpu::machine`): the page's
//! spliced model as one GPU machine, a token one submission of every layer, the head and the
//! argmax, whose id is the next position's input without leaving the GPU. The page reads the
//! chosen ids back 256 positions at a time (each checked against the interpreter) and the
//! machine's rows after the last step.

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
        let _ = viewer.take(f, |_| None);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::qwengpu_spliced::SplicedStep;
    use kernels_wasm::qwengpu::suite::kernels;
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// warp_broadcast (one of the shortest launches: on SwiftShader a position costs tens of
    /// milliseconds) on the page's GPU machine: the arrays are the plain Rust version's, every
    /// step's tokens are the model's choices, and the rows read back after the last step hold
    /// the interpreter's machine; the steps before are marked unread, not passed off as
    /// agreeing. Launches one after another in one machine are `kernels_wasm`'s tests.
    #[test]
    async fn the_page_runs_a_kernel_on_the_gpu_machine() {
        let gpu = Gpu::new().await.expect("WebGPU in headless Chromium");
        let model = SplicedModel::build().unwrap();
        let mut machine = gpu_machine(&model, &gpu).unwrap();
        let k = kernels().into_iter().find(|k| k.name == "warp_broadcast").unwrap();
        let r = spliced_run_gpu(&model, (&gpu, &mut machine), &k, k.ptx, || 0.0).await.unwrap();
        assert!(r.arrays_equal && r.on.is_some());
        assert_eq!(r.steps.len() as u64, r.launched.steps);
        let chosen: usize = r.steps.iter().map(|s| s.tokens.len()).sum();
        assert_eq!(chosen as u64 + 1, r.launched.chosen);
        let (last, before) = r.steps.split_last().unwrap();
        assert!(last.read && last.agrees(), "{last:?}");
        assert!(before.iter().all(|s| !s.read && !SplicedStep::agrees(s)));
        // Edited PTX the machine cannot run is refused, naming the line.
        let bad = k.ptx.replacen("add.s32", "add.f32", 1);
        let err = spliced_run_gpu(&model, (&gpu, &mut machine), &k, &bad, || 0.0).await.unwrap_err();
        assert!(err.contains("PTX line"), "{err}");
    }
}
