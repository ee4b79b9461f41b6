//! The text model's arithmetic on the shared stream: the reference's formulas (`qwen3::reference`:
//! RMSNorm `x · (1/√(mean + ε)) · w`, rotate-half RoPE, softmax attention with GQA, SwiGLU),
//! with every dot product summed in eight lanes so that a 135M model runs thousands of positions
//! in a test. The lane order is fixed, so a run is deterministic; and a stream that is the text's
//! channels followed by zeros gives each lane the same partial sums (adding `+0` to a sum of
//! squares or products changes no bit), which is what makes the spliced model's text positions
//! bit-identical to the plain model's.

use alloc::vec;
use alloc::vec::Vec;

const LANES: usize = 8;

/// `Σ a_i·b_i`: lane `j` sums the products `i ≡ j (mod 8)` in order, the tail goes to the first
/// lanes, then the lanes are added pairwise.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..LANES {
            acc[j] += x[j] * y[j];
        }
    }
    for (j, (x, y)) in ra.iter().zip(rb).enumerate() {
        acc[j] += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// `outs[t][r] = w_r · xs[t]` for the rows of a row-major matrix and every input `t`: each row is
/// read once for all inputs (from L1 after the first), each product is [`dot`]'s.
pub fn matmul(w: &[f32], xs: &[&[f32]], mut outs: Vec<&mut [f32]>) {
    let Some(cols) = xs.first().map(|x| x.len()) else { return };
    for (r, row) in w.chunks_exact(cols).enumerate() {
        for (x, out) in xs.iter().zip(outs.iter_mut()) {
            out[r] = dot(row, x);
        }
    }
}

/// RMSNorm over all of `x` (the stream's width), weights `w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mean = dot(x, x) / x.len() as f32;
    let inv = 1.0 / (mean + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * inv * w).collect()
}

/// cos and sin of RoPE's angles at `pos` for a head of `head_dim` (the reference's f64 angles).
pub fn rope_table(theta: f64, head_dim: usize, pos: usize) -> Vec<(f32, f32)> {
    (0..head_dim / 2)
        .map(|i| {
            let angle = pos as f64 * theta.powf(-(2.0 * i as f64) / head_dim as f64);
            (angle.cos() as f32, angle.sin() as f32)
        })
        .collect()
}

/// Rotate-half RoPE of one head.
pub fn rope(head: &mut [f32], table: &[(f32, f32)]) {
    let half = head.len() / 2;
    for (i, &(c, s)) in table.iter().enumerate() {
        let (a, b) = (head[i], head[i + half]);
        head[i] = a * c - b * s;
        head[i + half] = b * c + a * s;
    }
}

/// One query head against its cached keys and values (rows of `row` values, the head's at
/// `offset`): softmax of the scaled scores, then the weighted values, into `out`.
pub fn attend(q: &[f32], keys: &[f32], values: &[f32], row: usize, offset: usize, out: &mut [f32]) {
    let hd = q.len();
    let scale = (hd as f32).sqrt();
    let scores: Vec<f32> = keys.chunks_exact(row).map(|k| dot(q, &k[offset..offset + hd]) / scale).collect();
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f32 = e.iter().sum();
    out.fill(0.0);
    for (w, v) in e.iter().zip(values.chunks_exact(row)) {
        let w = w / total;
        for (o, &vv) in out.iter_mut().zip(&v[offset..offset + hd]) {
            *o += w * vv;
        }
    }
}

/// `silu(g) · u`, element by element, as the reference writes it.
pub fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter().zip(up).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect()
}

/// A zeroed vector (for the callers' scratch).
pub fn zeros(n: usize) -> Vec<f32> {
    vec![0.0; n]
}
