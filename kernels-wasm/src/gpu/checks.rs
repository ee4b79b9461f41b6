//! The GPU kernels against the CPU, as async checks that the native tests (Vulkan, `tests`)
//! and the wasm tests in Chromium (WebGPU, `web_tests`) both run: accumulators against the plain
//! dot product, f32 outputs against the CPU kernels bit for bit, on the CPU kernels' test shapes
//! and bitnet.cpp's presets; the compiled qwenGPU layers in lockstep with the interpreter.

use super::bitnet::GpuMatrix;
use super::{Gpu, GpuError};
use crate::bitnet::backend::Backend;
use crate::bitnet::i2s::{I2sLayout, I2sMatrix};
use crate::bitnet::lut_matrix::LutMatrix;
use crate::bitnet::quant::{quantize_activations, QuantActs, Rounding, TernaryMatrix};
use crate::bitnet::testutil::{edge_cases, plain_dot, Rng};
use crate::bitnet::tiling::{presets, Tile};
use crate::bitnet::tl1::Tl1Matrix;
use crate::bitnet::tl2::Tl2Matrix;
use alloc::vec;
use alloc::vec::Vec;

/// What to do without an adapter: fail, naming what to install, unless SUBSTRATES_SKIP_GPU
/// was set (at run time natively, at build time for wasm, where a page has no environment).
pub fn no_adapter(e: GpuError, skip: bool) {
    if skip {
        #[cfg(not(target_arch = "wasm32"))]
        std::eprintln!("SKIPPED (SUBSTRATES_SKIP_GPU is set): {e}");
        return;
    }
    panic!(
        "{e}. The GPU tests need an adapter: natively Vulkan (`apt-get install mesa-vulkan-drivers`, Mesa \
         lavapipe), in Chromium WebGPU (`--enable-unsafe-webgpu`); or set SUBSTRATES_SKIP_GPU=1 to skip them"
    )
}

/// Uploads `t` in `format` with `tile` (the LUT formats) or I2_S's x86 layout.
fn upload(gpu: &Gpu, format: &str, t: &TernaryMatrix, tile: Option<Tile>) -> GpuMatrix {
    match format {
        "I2_S" => GpuMatrix::i2s(gpu, &I2sMatrix::pack(t, I2sLayout::X86).unwrap()).unwrap(),
        "I2_S arm" => GpuMatrix::i2s(gpu, &I2sMatrix::pack(t, I2sLayout::Arm).unwrap()).unwrap(),
        "TL1" => GpuMatrix::tl1(gpu, &Tl1Matrix::pack_with(t, tile.unwrap()).unwrap()).unwrap(),
        _ => GpuMatrix::tl2(gpu, &Tl2Matrix::pack_with(t, tile.unwrap()).unwrap()).unwrap(),
    }
}

fn quantized(q: Vec<i8>) -> QuantActs {
    QuantActs { q, scale: 1.0 }
}

/// The CPU kernels' own test shapes (every bm, both TL2 BKs, with and without a tail).
fn shapes() -> Vec<(&'static str, usize, usize, Option<Tile>)> {
    let t = |bm_tile, bk, bm| Some(Tile { bm_tile, bk, bm });
    vec![
        ("I2_S", 32, 128, None),
        ("I2_S", 96, 512, None),
        ("I2_S arm", 64, 192, None),
        ("TL1", 32, 64, t(32, 64, 32)),
        ("TL1", 64, 128, t(64, 32, 32)),
        ("TL1", 64, 64, t(64, 64, 64)),
        ("TL1", 128, 256, t(128, 256, 64)),
        ("TL1", 96, 192, t(96, 64, 32)),
        ("TL2", 32, 96, t(32, 96, 32)),
        ("TL2", 64, 128, t(64, 96, 32)),
        ("TL2", 64, 224, t(32, 192, 32)),
        ("TL2", 96, 384, t(96, 192, 32)),
        ("TL2", 128, 352, t(64, 96, 32)),
        ("TL2", 160, 768, t(160, 96, 32)),
    ]
}

/// Every accumulator equals `Σ w·q`, on the edge cases (all ±1 weights against ±127 and −128,
/// alternating signs) and random data, several activation rows per dispatch.
pub async fn accumulators_equal_the_plain_dot_product(gpu: &Gpu) {
    let mut rng = Rng::new(5);
    for (format, m, k, tile) in shapes() {
        let mut cases = edge_cases(m, k);
        cases.push((rng.ternary(m, k), rng.acts(k)));
        for (t, q) in cases {
            // TL1 takes −127..=127 (as per_tensor_quant makes them): −128 is I2_S's and TL2's.
            let clamp = |q: Vec<i8>| match format {
                "TL1" => q.iter().map(|&v| v.max(-127)).collect(),
                _ => q,
            };
            let (q, other) = (clamp(q), clamp(rng.acts(k)));
            let gm = upload(gpu, format, &t, tile);
            let got = gm.gemm_acc(gpu, &[quantized(q.clone()), quantized(other.clone())]).await.unwrap();
            let want = [plain_dot(&t, &q), plain_dot(&t, &other)].concat();
            assert_eq!(got, want, "{format} {m}x{k} {tile:?}");
        }
    }
}

/// `Y = X·Wᵀ` in f32 on the GPU is bit-identical to the CPU driver, on bitnet.cpp's preset
/// shapes (the 700M model's, one per format and kind) and a batch of activation rows.
pub async fn f32_outputs_are_the_cpus_bit_for_bit(gpu: &Gpu) {
    let mut rng = Rng::new(8);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    let mut cases: Vec<(&str, usize, usize, Option<Tile>)> =
        presets().filter(|p| p.1 * p.2 <= 1536 * 4096).map(|(f, m, k, tile)| (f.name(), m, k, Some(tile))).collect();
    cases.extend([("I2_S", 1536, 4096, None), ("I2_S", 4096, 1536, None)]);
    assert!(cases.iter().any(|c| c.0 == "TL1") && cases.iter().any(|c| c.0 == "TL2"));
    for (format, m, k, tile) in cases {
        let t = TernaryMatrix::quantize(m, k, &rng.f32s(m * k, 1.0)).unwrap();
        let n = 3;
        let xs = rng.f32s(n * k, 4.0);
        let (mut cpu, mut got) = (vec![0.0f32; n * m], vec![0.0f32; n * m]);
        // The CPU's GEMV row by row (scalar kernels, round half to even as the GEMM drivers).
        for (x, y) in xs.chunks_exact(k).zip(cpu.chunks_exact_mut(m)) {
            match format {
                "I2_S" => {
                    let acts = quantize_activations(x, Rounding::HalfEven).unwrap();
                    I2sMatrix::pack(&t, I2sLayout::X86).unwrap().gemv(&acts, Backend::Scalar, y)
                }
                "TL1" => {
                    let p = Tl1Matrix::pack_with(&t, tile.unwrap()).unwrap();
                    p.gemv(&p.tables(x).unwrap(), Backend::Scalar, y)
                }
                _ => {
                    let p = Tl2Matrix::pack_with(&t, tile.unwrap()).unwrap();
                    p.gemv(&p.tables(x).unwrap(), Backend::Scalar, y)
                }
            }
            .unwrap();
        }
        upload(gpu, format, &t, tile).gemm(gpu, &xs, &mut got).await.unwrap();
        assert_eq!(bits(&got), bits(&cpu), "{format} {m}x{k}");
    }
}

/// Wrong shapes and bad activations are named, never dispatched.
pub async fn bad_requests_are_named(gpu: &Gpu) {
    let t = Rng::new(1).ternary(32, 128);
    let gm = upload(gpu, "I2_S", &t, None);
    let mut out = vec![0.0; 32];
    let err = gm.gemm(gpu, &[0.5; 100], &mut out).await.unwrap_err();
    assert!(err.to_string().contains("activations (n rows of K): expected 128 values, got 100"), "{err}");
    let err = gm.gemm(gpu, &[0.5; 128], &mut [0.0; 31]).await.unwrap_err();
    assert!(err.to_string().contains("outputs"), "{err}");
    let mut xs = vec![0.5; 128];
    xs[7] = f32::NAN;
    let err = gm.gemm(gpu, &xs, &mut out).await.unwrap_err();
    assert!(err.to_string().contains("non-finite value at index 7"), "{err}");
    let err = gm.gemm_acc(gpu, &[quantized(vec![0; 64])]).await.unwrap_err();
    assert!(err.to_string().contains("expected 128 values, got 64"), "{err}");
    let tl1 = upload(gpu, "TL1", &t, Some(Tile { bm_tile: 32, bk: 64, bm: 32 }));
    let err = tl1.gemm_acc(gpu, &[quantized(vec![-128; 128])]).await.unwrap_err();
    assert!(err.to_string().contains("activation -128"), "{err}");
}

/// Suite kernels (`names`, or every one when empty) on the compiled qwenGPU layers on the GPU
/// (`qwengpu.wgsl`, one token per dispatch), in lockstep with the interpreter after every step
/// (registers, memory, masks and stacks decoded from the GPU's state rows), with arrays equal to
/// each kernel's plain Rust version. Returns (name, steps, tokens) per kernel run.
pub async fn qwengpu_kernels_in_lockstep<G>(gpu: G, names: &[&str]) -> Vec<(&'static str, u64, u64)>
where
    G: core::ops::Deref<Target = Gpu> + 'static,
{
    use super::qwengpu::GpuExecutor;
    use crate::qwengpu::compiled::Compiled;
    use crate::qwengpu::isa::MachineSpec;
    use crate::qwengpu::run::Runner;
    use crate::qwengpu::suite::kernels;
    let spec = MachineSpec::default();
    let c = Compiled::new(spec).unwrap();
    let exec = GpuExecutor::new(gpu, &c).unwrap();
    let mut r = Runner::new(c);
    r.executor = Some(alloc::boxed::Box::new(exec));
    let (mut failed, mut ran) = (Vec::new(), Vec::new());
    for k in kernels().into_iter().filter(|k| names.is_empty() || names.contains(&k.name)) {
        let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
        match r.launch_async(&kernel.program, &p.memory, &p.launch, 100_000).await {
            Ok(report) if p.read_arrays(&report.global) == k.expected(&p) => {
                ran.push((k.name, report.steps, report.tokens))
            }
            Ok(_) => failed.push(alloc::format!("{}: wrong arrays", k.name)),
            Err(e) => failed.push(alloc::format!("{}: {e}", k.name)),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let want = if names.is_empty() { kernels().len() } else { names.len() };
    assert_eq!(ran.len(), want, "kernels run (a name that is not a suite kernel?)");
    ran
}

/// Suite kernels run with `batch` EXEC tokens per dispatch (the GPU makes each next input
/// record itself) report what the CPU's layers report token by token: steps, CTRL records,
/// token counts and the arrays; a step limit is hit at the same step. Returns the tokens run.
pub async fn qwengpu_batches_equal_the_cpu<G>(gpu: G, names: &[&str], batch: u32) -> u64
where
    G: core::ops::Deref<Target = Gpu> + 'static,
{
    use super::qwengpu::GpuExecutor;
    use crate::qwengpu::compiled::Compiled;
    use crate::qwengpu::isa::MachineSpec;
    use crate::qwengpu::run::Runner;
    use crate::qwengpu::suite::kernels;
    let spec = MachineSpec::default();
    let (c, cpu) = (Compiled::new(spec).unwrap(), Compiled::new(spec).unwrap());
    let exec = GpuExecutor::new(gpu, &c).unwrap();
    let (mut on_gpu, mut on_cpu) = (Runner::new(c), Runner::new(cpu));
    on_gpu.executor = Some(alloc::boxed::Box::new(exec));
    (on_gpu.batch, on_gpu.lockstep, on_cpu.lockstep) = (batch, false, false);
    let mut tokens = 0;
    for k in kernels().into_iter().filter(|k| names.is_empty() || names.contains(&k.name)) {
        let (kernel, p, _) = k.machine(k.ptx, &spec).unwrap();
        let want = on_cpu.launch(&kernel.program, &p.memory, &p.launch, 100_000).unwrap();
        let got = on_gpu.launch_async(&kernel.program, &p.memory, &p.launch, 100_000).await.unwrap();
        let summary =
            |r: &crate::qwengpu::run::Report| (r.steps, r.tokens, r.counts, r.records.clone(), r.global.clone());
        assert_eq!(summary(&got), summary(&want), "{} in batches of {batch}", k.name);
        assert_eq!(p.read_arrays(&got.global), k.expected(&p), "{}", k.name);
        tokens += got.tokens;
        // A step limit stops both at the same step.
        let limit = want.steps / 2;
        let cpu_err = on_cpu.launch(&kernel.program, &p.memory, &p.launch, limit).map(|_| ()).unwrap_err();
        let gpu_err = on_gpu.launch_async(&kernel.program, &p.memory, &p.launch, limit).await.map(|_| ()).unwrap_err();
        assert_eq!(alloc::format!("{gpu_err}"), alloc::format!("{cpu_err}"), "{}", k.name);
    }
    tokens
}
