//! The second machine's DeltaNet layers on the GPU against the CPU, as an async check that the
//! native tests (lavapipe) and the wasm tests (SwiftShader in Chromium) both run: a suite kernel
//! is launched inside the spliced tiny llama on the CPU, every DeltaNet layer's inputs are
//! recorded, and each layer replays them on the GPU from a zero state. Every output and the
//! final state must be the CPU's bits.

use super::deltanet::GpuDeltaNet;
use super::CHUNK;
use super::{Gpu, GpuError};
use crate::qwengpu::deltanet::DeltaNet;
use crate::qwengpu::splice::tests::{launch_all, llama};
use crate::qwengpu::splice::{Runner, Splice};
use alloc::vec::Vec;

pub(super) fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

/// Replays the first `positions` recorded positions (all with `None`) of every DeltaNet layer of
/// `kernels` launched one after another in one context; returns (layers, positions replayed in
/// all). A launch after one that used shared memory has the shared layers forget it (α = 0 on
/// a written state, `limb_memory::cleared_at`).
pub async fn deltanet_steps_are_the_cpus(gpu: &Gpu, kernels: &[&str], positions: Option<usize>) -> (usize, usize) {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut runner = Runner::spliced(c, &model, &splice).unwrap();
    runner.record_deltanets();
    launch_all(&mut runner, &splice, kernels);
    let (mut layers, mut replayed) = (0, 0);
    for i in 0..splice.layers.len() {
        let Some(net) = runner.deltanet(i) else { continue };
        let tape = net.tape.as_ref().expect("recording was asked for");
        assert!(!tape.0.is_empty(), "layer {i} saw no input: the launch reset the recording");
        let w = net.weights();
        let mut cpu = DeltaNet::new(w.clone());
        let on_gpu = GpuDeltaNet::new(gpu, w).unwrap();
        let n = positions.unwrap_or(tape.0.len()).min(tape.0.len());
        for first in (0..n).step_by(CHUNK) {
            let xs: Vec<Vec<f32>> = (first..n.min(first + CHUNK)).map(|t| tape.input(t, w.d_model)).collect();
            let inputs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
            let got =
                on_gpu.steps(gpu, &inputs).await.unwrap_or_else(|e| panic!("layer {i}, from position {first}: {e}"));
            for (t, (x, got)) in xs.iter().zip(&got).enumerate() {
                let want = cpu.step(x);
                let t = first + t;
                assert!(bits(got) == bits(&want), "layer {i}, position {t}: the GPU's output differs from the CPU's");
            }
        }
        let state = on_gpu.state(gpu).await.unwrap();
        assert!(bits(&state) == bits(&cpu.state), "layer {i}: the GPU's state differs after {n} positions");
        (layers, replayed) = (layers + 1, replayed + n);
    }
    assert!(layers > 0, "the spliced model has no DeltaNet layer");
    (layers, replayed)
}

/// Bad input is named: a layer with other convolution taps, an input of the wrong width, and a
/// step outside the exact regimes (a SiLU argument between its cut-offs).
pub async fn deltanet_bad_input_is_named(gpu: &Gpu) {
    use crate::qwengpu::deltanet::{DeltaNetWeights, Matrix, CONV};
    let (d, heads, dk, dv) = (8, 1, 2, 2);
    let channels = heads * (2 * dk + dv);
    let mut taps = alloc::vec![0.0; channels * CONV];
    taps.chunks_exact_mut(CONV).for_each(|t| t[CONV - 1] = 1.0);
    let mut w = DeltaNetWeights {
        d_model: d,
        heads,
        d_k: dk,
        d_v: dv,
        w_qkv: Matrix::zeros(channels, d),
        w_z: Matrix::zeros(heads * dv, d),
        w_b: Matrix::zeros(heads, d),
        w_a: Matrix::zeros(heads, d),
        a_log: alloc::vec![0.0; heads],
        dt_bias: alloc::vec![-1000.0; heads],
        conv: taps,
        norm: alloc::vec![1.0; dv],
        eps: 1e-6,
        w_out: Matrix::zeros(d, heads * dv),
    };
    // q channel 0 reads input 0.
    w.w_qkv.set(0, 0, 1.0);
    let net = GpuDeltaNet::new(gpu, &w).unwrap();
    let mut x = alloc::vec![0.0; d];
    x[0] = 64.0;
    assert!(net.step(gpu, &x).await.is_ok());
    x[0] = 3.0;
    match net.step(gpu, &x).await {
        Err(GpuError::NotExact { step, at, arg }) => {
            assert!(step.contains("SiLU") && at == "head 0" && arg == 3.0, "{step} {at} {arg}")
        }
        other => panic!("expected SiLU's argument 3 to be refused, got {other:?}"),
    }
    let e = net.step(gpu, &[1.0; 3]).await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("3 channels") && e.contains("8"), "{e}");
    w.conv[0] = 0.5;
    let e = GpuDeltaNet::new(gpu, &w).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("taps"), "{e}");
}
