//! The GPU checks (`checks`) in headless Chromium through WebGPU (SwiftShader under
//! `cargo xtask test`; `webdriver.json` at the workspace root enables it).

use super::{checks, Gpu};
use wasm_bindgen_test::wasm_bindgen_test as test;

async fn gpu() -> Option<Gpu> {
    match Gpu::new().await {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            checks::no_adapter(e, option_env!("SUBSTRATES_SKIP_GPU").is_some());
            None
        }
    }
}

#[test]
async fn accumulators_equal_the_plain_dot_product() {
    if let Some(g) = gpu().await {
        checks::accumulators_equal_the_plain_dot_product(&g).await
    }
}

#[test]
async fn f32_outputs_are_the_cpus_bit_for_bit() {
    if let Some(g) = gpu().await {
        checks::f32_outputs_are_the_cpus_bit_for_bit(&g).await
    }
}

#[test]
async fn bad_requests_are_named() {
    if let Some(g) = gpu().await {
        checks::bad_requests_are_named(&g).await
    }
}

/// What the tab shows: the adapter is named, and SwiftShader is known for a CPU emulation.
#[test]
async fn the_adapter_is_named() {
    if let Some(g) = gpu().await {
        assert!(!g.adapter.name.is_empty() || !g.adapter.driver.is_empty(), "{:?}", g.adapter);
        assert_eq!(g.adapter.backend, "webgpu");
    }
}

/// The compiled qwenGPU layers on WebGPU in lockstep with the interpreter: the page's path
/// (`Runner::launch_async`, each token's read-back awaited). All 49 suite kernels: about 4
/// minutes on SwiftShader.
#[test]
async fn qwengpu_kernels_run_on_the_gpu_layers_in_lockstep() {
    if let Some(g) = gpu().await {
        let ran = checks::qwengpu_kernels_in_lockstep(alloc::rc::Rc::new(g), &[]).await;
        assert_eq!(ran.len(), crate::qwengpu::suite::kernels().len());
    }
}

/// Tokens in batches on WebGPU (the GPU making each next input record) give the CPU's reports.
#[test]
async fn qwengpu_batches_equal_the_cpu() {
    if let Some(g) = gpu().await {
        assert!(checks::qwengpu_batches_equal_the_cpu(alloc::rc::Rc::new(g), &["vadd"], 64).await > 0);
    }
}

/// The second machine's DeltaNet layers on WebGPU with the CPU's bits, over a short launch
/// (natively `tests` replays two longer ones).
#[test]
async fn deltanet_layers_give_the_cpus_bits() {
    if let Some(g) = gpu().await {
        super::deltanet_checks::deltanet_steps_are_the_cpus(&g, &["warp_broadcast"], None).await;
    }
}

#[test]
async fn deltanet_bad_input_is_named() {
    if let Some(g) = gpu().await {
        super::deltanet_checks::deltanet_bad_input_is_named(&g).await
    }
}

/// The second machine's first SwiGLU layers on WebGPU with the CPU's bits, over a short launch.
#[test]
async fn swiglu_layers_give_the_cpus_bits() {
    if let Some(g) = gpu().await {
        super::swiglu_checks::swiglu_layers_are_the_cpus(&g, "warp_broadcast", 12).await;
    }
}

#[test]
async fn swiglu_bad_input_is_named() {
    if let Some(g) = gpu().await {
        super::swiglu_checks::swiglu_bad_input_is_named(&g).await
    }
}

/// The second machine as a language model on WebGPU: a kernel launched in lockstep, every chosen
/// token the interpreter's, the DeltaNet states the CPU runner's after it. QWENGPU_MACHINE_KERNELS
/// at build time names other kernels (`all`: the suite, `cargo xtask test --only
/// gpu-suite-chromium`; the states are then left to the native runs, as natively).
#[test]
async fn the_machine_runs_a_kernel_in_lockstep() {
    let names = option_env!("QWENGPU_MACHINE_KERNELS").unwrap_or("warp_broadcast");
    let kernels = super::machine_checks::named(names);
    if let Some(g) = gpu().await {
        let chosen =
            super::machine_checks::machine_launches_are_the_interpreters(&g, &kernels, kernels.len() <= 4, |l| {
                wasm_bindgen_test::console_log!("{l}")
            })
            .await;
        wasm_bindgen_test::console_log!(
            "{} kernels in lockstep on {}: {chosen} tokens chosen",
            kernels.len(),
            g.adapter
        );
    }
}

#[test]
async fn machine_bad_input_is_named() {
    if let Some(g) = gpu().await {
        super::machine_checks::machine_bad_input_is_named(&g).await
    }
}
