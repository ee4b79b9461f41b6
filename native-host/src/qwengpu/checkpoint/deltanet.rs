//! A compiled Gated DeltaNet in the checkpoint: its matrices as sparse entries (most of a
//! stream-wide projection is zero), its per-head vectors, convolution taps and norm weights dense.

use super::{DeltaNetShape, Tensors};
use anyhow::{ensure, Result};
use kernels_wasm::qwengpu::deltanet::{DeltaNetWeights, Matrix, CONV};

/// Its small tensors (name, values, shape): stored dense.
pub(super) fn deltanet_vectors(d: &DeltaNetWeights) -> [(&'static str, &[f32], Vec<usize>); 4] {
    [
        ("a_log", &d.a_log, vec![d.heads]),
        ("dt_bias", &d.dt_bias, vec![d.heads]),
        ("conv", &d.conv, vec![d.channels(), CONV]),
        ("norm", &d.norm, vec![d.d_v]),
    ]
}

/// A Gated DeltaNet read back: each matrix from its entries, the vectors as they are.
pub(super) fn read_deltanet(t: &Tensors, i: usize, w: usize, s: DeltaNetShape) -> Result<DeltaNetWeights> {
    ensure!(
        s.heads >= 1 && s.heads <= 256 && s.d_k <= 4096 && s.d_v <= 4096,
        "compiled layer {i}: a DeltaNet of {} heads of {}×{}",
        s.heads,
        s.d_k,
        s.d_v
    );
    let mut d = DeltaNetWeights {
        d_model: w,
        heads: s.heads,
        d_k: s.d_k,
        d_v: s.d_v,
        w_qkv: Matrix::default(),
        w_z: Matrix::default(),
        w_b: Matrix::default(),
        w_a: Matrix::default(),
        a_log: Vec::new(),
        dt_bias: Vec::new(),
        conv: Vec::new(),
        norm: Vec::new(),
        eps: s.eps,
        w_out: Matrix::default(),
    };
    let (channels, hv) = (d.channels(), s.heads * s.d_v);
    for (part, rows, cols) in
        [("w_qkv", channels, w), ("w_z", hv, w), ("w_b", s.heads, w), ("w_a", s.heads, w), ("w_out", w, hv)]
    {
        let mut m = Matrix::zeros(rows, cols);
        for (r, c, v) in t.sparse(&format!("machine.{i}.{part}"), [rows, cols])? {
            m.set(r, c, v);
        }
        match part {
            "w_qkv" => d.w_qkv = m,
            "w_z" => d.w_z = m,
            "w_b" => d.w_b = m,
            "w_a" => d.w_a = m,
            _ => d.w_out = m,
        }
    }
    d.a_log = t.f32s(&format!("machine.{i}.a_log"), &[s.heads])?;
    d.dt_bias = t.f32s(&format!("machine.{i}.dt_bias"), &[s.heads])?;
    d.conv = t.f32s(&format!("machine.{i}.conv"), &[channels, CONV])?;
    d.norm = t.f32s(&format!("machine.{i}.norm"), &[s.d_v])?;
    Ok(d)
}
