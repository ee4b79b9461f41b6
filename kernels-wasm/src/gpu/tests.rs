//! The GPU checks (`checks`) natively, on the machine's Vulkan adapter (Mesa lavapipe under
//! `cargo xtask test`), sharing one device; plus what only a native build can test.

use super::{block_on, checks, Gpu, GpuError};
use crate::bitnet::backend::Backend;
use crate::bitnet::i2s::{I2sLayout, I2sMatrix};
use crate::bitnet::pool::Pool;
use crate::bitnet::quant::TernaryMatrix;
use crate::bitnet::random::Rng;
use crate::bitnet::threads::i2s_gemm;
use std::sync::OnceLock;

/// The adapter every test shares, or `None` when skipping is asked for.
fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Result<Gpu, GpuError>> = OnceLock::new();
    match GPU.get_or_init(|| block_on(Gpu::new())) {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            checks::no_adapter(e.clone(), std::env::var_os("SUBSTRATES_SKIP_GPU").is_some());
            None
        }
    }
}

#[test]
fn accumulators_equal_the_plain_dot_product() {
    if let Some(g) = gpu() {
        block_on(checks::accumulators_equal_the_plain_dot_product(g))
    }
}

#[test]
fn f32_outputs_are_the_cpus_bit_for_bit() {
    if let Some(g) = gpu() {
        block_on(checks::f32_outputs_are_the_cpus_bit_for_bit(g))
    }
}

#[test]
fn bad_requests_are_named() {
    if let Some(g) = gpu() {
        block_on(checks::bad_requests_are_named(g))
    }
}

/// The GPU GEMM equals the threaded CPU driver (two threads) on a 700M shape with a batch that
/// the driver splits across threads.
#[test]
fn f32_outputs_are_the_threaded_drivers() {
    let Some(gpu) = gpu() else { return };
    let mut rng = Rng::new(12);
    let t = TernaryMatrix::quantize(1536, 1536, &rng.f32s(1536 * 1536, 1.0)).unwrap();
    let p = I2sMatrix::pack(&t, I2sLayout::X86).unwrap();
    let xs = rng.f32s(5 * 1536, 2.0);
    let (mut cpu, mut got) = (vec![0.0f32; 5 * 1536], vec![0.0f32; 5 * 1536]);
    i2s_gemm(&p, &xs, Backend::Scalar, &Pool::new(2).unwrap(), &mut cpu).unwrap();
    block_on(super::bitnet::GpuMatrix::i2s(gpu, &p).unwrap().gemm(gpu, &xs, &mut got)).unwrap();
    assert!(got.iter().zip(&cpu).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// Without an adapter (an instance with no backend to offer one) the error says so.
#[test]
fn no_adapter_is_named() {
    let err = block_on(Gpu::with_backends(wgpu::Backends::empty())).err().unwrap();
    assert!(matches!(err, GpuError::NoAdapter(_)), "{err}");
    assert!(err.to_string().starts_with("no GPU adapter: "), "{err}");
}

/// The correctly rounded square root and division of `exact.wgsl` (the compiled qwenGPU
/// layers' norms) equal the CPU's IEEE `sqrt` and `/` bit for bit, on a million random
/// positive normals across the whole exponent range and on the values the layers use; results
/// outside the normal range are flagged, never guessed.
#[test]
fn exact_sqrt_and_division_are_ieee() {
    let Some(gpu) = gpu() else { return };
    let source = concat!(include_str!("exact.wgsl"), include_str!("exact_test.wgsl"));
    let module = gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("exact_test"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = gpu.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("exact_test"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let mut rng = Rng::new(77);
    let normal = |r: u64| f32::from_bits(((r % 254 + 1) as u32) << 23 | (r >> 32) as u32 & 0x7f_ffff);
    let mut pairs: Vec<(f32, f32)> = (0..1 << 20).map(|_| (normal(rng.next_u64()), normal(rng.next_u64()))).collect();
    // What the heads compute: squares of 4096 and 256 summed, 1e-6 added, mean squares, and
    // the reciprocals of their roots; plus neighbours of exact squares and of 1.
    for c in 1..=64u32 {
        for v in [4096.0f32, 256.0, 1.0] {
            let ss = c as f32 * v * v;
            pairs.extend([(ss + 1e-6, 1.0), (ss / 128.0 + 1e-6, 128.0), (1.0, (ss + 1e-6).sqrt())]);
        }
        let sq = (c * c) as f32;
        pairs.extend([
            (sq, c as f32),
            (f32::from_bits(sq.to_bits() + 1), 3.0),
            (f32::from_bits(sq.to_bits() - 1), 7.0),
        ]);
    }
    let bytes: Vec<u8> = pairs.iter().flat_map(|(a, b)| [a.to_le_bytes(), b.to_le_bytes()].concat()).collect();
    let input = gpu.storage("pairs", &bytes).unwrap();
    let out_bytes = (pairs.len() * 16) as u64;
    let out = gpu.output(out_bytes).unwrap();
    let groups = (pairs.len() as u32).div_ceil(64);
    let got = block_on(gpu.dispatch(&pipeline, &[&input, &out], [groups, 1, 1], out_bytes)).unwrap().bytes;
    let word = |i: usize| u32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
    let is_normal = |x: f32| x.is_normal() && x > 0.0;
    let mut flagged = 0;
    for (i, &(a, b)) in pairs.iter().enumerate() {
        let (s, sf, d, df) = (word(4 * i), word(4 * i + 1), word(4 * i + 2), word(4 * i + 3));
        assert_eq!((f32::from_bits(s).to_bits(), sf), (a.sqrt().to_bits(), 0), "sqrt({a:e})");
        let want = a / b;
        match is_normal(want) {
            true => assert_eq!((d, df), (want.to_bits(), 0), "{a:e} / {b:e}"),
            false => {
                assert_eq!(df, 1, "{a:e} / {b:e} = {want:e} must be flagged");
                flagged += 1;
            }
        }
    }
    // The random pairs reach both ends of the range.
    assert!(flagged > 1000, "{flagged}");
}

/// The suite kernels `QWENGPU_GPU_KERNELS` names (comma-separated), or none: every one.
fn picked_kernels() -> Vec<String> {
    let names = std::env::var("QWENGPU_GPU_KERNELS").unwrap_or_default();
    names.split(',').filter(|n| !n.is_empty()).map(String::from).collect()
}

/// Every suite kernel on the compiled qwenGPU layers on the GPU, in lockstep
/// (`checks::qwengpu_kernels_in_lockstep`). `QWENGPU_GPU_KERNELS` (comma-separated) picks kernels.
#[test]
fn suite_kernels_run_on_the_gpu_layers_in_lockstep() {
    let Some(gpu) = gpu() else { return };
    let names = picked_kernels();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let start = std::time::Instant::now();
    let ran = block_on(checks::qwengpu_kernels_in_lockstep(gpu, &names));
    let tokens: u64 = ran.iter().map(|r| r.2).sum();
    let secs = start.elapsed().as_secs_f64();
    std::println!(
        "{} kernels, {tokens} tokens on the GPU in lockstep: {:.0} tokens/s",
        ran.len(),
        tokens as f64 / secs
    );
}

/// EXEC tokens in batches on the GPU give the CPU's reports: every suite kernel 256 tokens per
/// submission, and the edges (2 and 4096) on two kernels.
#[test]
fn batches_of_tokens_on_the_gpu_equal_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let names = picked_kernels();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let start = std::time::Instant::now();
    let tokens = block_on(checks::qwengpu_batches_equal_the_cpu(gpu, &names, 256));
    std::println!(
        "{tokens} tokens in batches of 256, each kernel also on the CPU, in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    for batch in [2, 4096] {
        block_on(checks::qwengpu_batches_equal_the_cpu(gpu, &["warp_scan", "collatz"], batch));
    }
}

/// Every DeltaNet layer of the second machine replays two launches' inputs on the GPU with the
/// CPU's outputs and state (`deltanet_checks`): every position, shared memory written, then
/// forgotten at the second launch.
#[test]
fn deltanet_layers_give_the_cpus_bits() {
    let Some(gpu) = gpu() else { return };
    let (layers, positions) =
        block_on(super::deltanet_checks::deltanet_steps_are_the_cpus(gpu, &["reduce_shared", "warp_scan"], None));
    std::eprintln!("{layers} DeltaNet layers, {positions} positions replayed");
}

#[test]
fn deltanet_bad_input_is_named() {
    if let Some(gpu) = gpu() {
        block_on(super::deltanet_checks::deltanet_bad_input_is_named(gpu))
    }
}

/// Every SwiGLU layer of the second machine maps a launch's recorded streams to the CPU's
/// (`swiglu_checks`).
#[test]
fn swiglu_layers_give_the_cpus_bits() {
    let Some(gpu) = gpu() else { return };
    let (layers, positions) = block_on(super::swiglu_checks::swiglu_layers_are_the_cpus(gpu, "warp_scan", usize::MAX));
    std::eprintln!("{layers} SwiGLU layers, {positions} positions replayed");
}

#[test]
fn swiglu_bad_input_is_named() {
    if let Some(gpu) = gpu() {
        block_on(super::swiglu_checks::swiglu_bad_input_is_named(gpu))
    }
}

/// The second machine on lavapipe as a language model: kernels launched in one context, every
/// chosen token the interpreter's, the arrays the suite's plain Rust's, the DeltaNet states the
/// CPU runner's (`machine_checks`). QWENGPU_MACHINE_KERNELS names other kernels (`all`: the suite).
#[test]
fn the_machine_runs_kernels_in_lockstep() {
    let Some(gpu) = gpu() else { return };
    let names = std::env::var("QWENGPU_MACHINE_KERNELS").unwrap_or_else(|_| "reverse,warp_scan".into());
    let kernels = super::machine_checks::named(&names);
    let cpu_too = kernels.len() <= 4;
    let chosen = block_on(super::machine_checks::machine_launches_are_the_interpreters(gpu, &kernels, cpu_too, |l| {
        eprintln!("{l}")
    }));
    eprintln!("{} kernels in lockstep on {}: {chosen} tokens chosen", kernels.len(), gpu.adapter);
}

#[test]
fn machine_bad_input_is_named() {
    if let Some(gpu) = gpu() {
        block_on(super::machine_checks::machine_bad_input_is_named(gpu))
    }
}
