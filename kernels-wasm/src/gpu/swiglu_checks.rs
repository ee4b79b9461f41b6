//! The second machine's SwiGLU layers on the GPU against the CPU, as an async check for the
//! native tests (lavapipe) and the wasm tests (SwiftShader): a suite kernel is launched inside the
//! spliced tiny llama on the CPU with the stream recorded before and after each SwiGLU layer
//! (`Runner::record_streams`), and each layer maps every recorded stream before it to the one
//! after it, bit for bit.

use super::deltanet_checks::bits;
use super::swiglu::GpuSwiGlu;
use super::{Gpu, GpuError, CHUNK};
use crate::qwengpu::limbs::{Layer, Unit};
use crate::qwengpu::splice::tests::{launch_all, llama};
use crate::qwengpu::splice::{Compiled, Runner, Splice};
use alloc::vec::Vec;

/// Replays the first `max_layers` SwiGLU layers of a launch of `kernel`; returns (layers,
/// positions replayed in all).
pub async fn swiglu_layers_are_the_cpus(gpu: &Gpu, kernel: &str, max_layers: usize) -> (usize, usize) {
    let (c, model) = llama();
    let splice = Splice::new(c).unwrap();
    let mut runner = Runner::spliced(c, &model, &splice).unwrap();
    let layers: Vec<usize> = (0..splice.layers.len())
        .filter(|&i| matches!(splice.layers[i], Compiled::SwiGlu(_)))
        .take(max_layers)
        .collect();
    runner.record_streams(&layers);
    launch_all(&mut runner, &splice, &[kernel]);
    let (norm, eps) = runner.machine_norm();
    let mut replayed = 0;
    for &i in &layers {
        let Compiled::SwiGlu(layer) = &splice.layers[i] else { unreachable!() };
        let (before, after) = runner.stream_tape(i).unwrap();
        let n = before.0.len();
        assert!(n > 0 && n == after.0.len(), "layer {i}: {n} streams before it, {} after", after.0.len());
        let on_gpu = GpuSwiGlu::new(gpu, layer, norm, eps).unwrap();
        for first in (0..n).step_by(CHUNK) {
            let xs: Vec<Vec<f32>> = (first..n.min(first + CHUNK)).map(|t| before.input(t, norm.len())).collect();
            let inputs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
            let got = on_gpu.forward(gpu, &inputs).await.unwrap_or_else(|e| panic!("layer {i}, from {first}: {e}"));
            for (t, got) in got.iter().enumerate() {
                let want = after.input(first + t, norm.len());
                assert!(bits(got) == bits(&want), "layer {i}, position {}: the GPU's stream differs", first + t);
            }
        }
        replayed += n;
    }
    assert!(!layers.is_empty(), "the spliced model has no SwiGLU layer");
    (layers.len(), replayed)
}

/// A gate between SiLU's cut-offs, a stream of the wrong width and a unit past the stream are
/// named.
pub async fn swiglu_bad_input_is_named(gpu: &Gpu) {
    let d = 16;
    let norm = alloc::vec![1.0f32; d];
    // One unit: gate = 32·n[1], up = n[2], down to channel 3.
    let unit = Unit { gate: alloc::vec![(1, 32.0)], up: alloc::vec![(2, 1.0)], down: alloc::vec![(3, 1.0)] };
    let layer = Layer { units: alloc::vec![unit] };
    let net = GpuSwiGlu::new(gpu, &layer, &norm, 1e-6).unwrap();
    // Channel 1 alone norms to about √16 = 4: a gate near 128, past the cut-off. Beside a
    // channel of 100 it norms to about 0.04: a gate near 1.3, between the cut-offs.
    let mut ok = alloc::vec![0.0f32; d];
    ok[1] = 1.0;
    assert!(net.forward(gpu, &[&ok]).await.is_ok());
    let mut bad = ok.clone();
    bad[2] = 100.0;
    match net.forward(gpu, &[&bad]).await {
        Err(GpuError::NotExact { step, at, .. }) => assert!(step.contains("SiLU") && at == "unit 0", "{step} {at}"),
        other => panic!("expected the gate to be refused, got {other:?}"),
    }
    let e = net.forward(gpu, &[&[1.0; 3]]).await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("3 channels") && e.contains("16"), "{e}");
    let past = Layer { units: alloc::vec![Unit { gate: alloc::vec![(d, 1.0)], up: Vec::new(), down: Vec::new() }] };
    let e = GpuSwiGlu::new(gpu, &past, &norm, 1e-6).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("channel 16"), "{e}");
}
