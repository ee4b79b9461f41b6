// The second machine's shaders (`gpu::machine`) are one module with one bind group layout: a
// layer's parameters (P) and weights (w) are its own bind group's, the recurrent state a
// DeltaNet's; `work` and `out` are every layer's. `gpu::machine` writes D (the stream's width),
// out's layout and the error codes before this text; `exact.wgsl` comes before it too.
//
// work: the stream x (D words from X_AT), its normed copy n (N_AT), a DeltaNet's output y
// (Y_AT), then the current layer's scratch (from S_AT, where P says).
// out: the outcome (error code, where, argument bits, position, layer), the position being run
// and the next one, the first position the model chooses (the ones before are the host's), the
// positions there is room for, then the token id at each position.

struct Params {
    // A Gated DeltaNet: its projections' rows, shape and tables (`gpu::deltanet`).
    rows: u32, channels: u32, heads: u32, dk: u32,
    dv: u32, row_table: u32, out_table: u32, vec_table: u32,
    mid_at: u32, hot_at: u32, o_at: u32, g_at: u32,
    // A SwiGLU MLP (`gpu::swiglu`).
    units: u32, unit_table: u32, chan_table: u32, h_at: u32,
    // Every layer's norm weights and ε (the final norm's, at the ends).
    norm_at: u32, eps_at: u32,
    // The ends (`gpu::machine`): the embedding and head rows' tables, the logits, and the id of
    // the token after which the model stops.
    embed_table: u32, embed_rows: u32, head_table: u32, head_rows: u32,
    logits_at: u32, end_id: u32,
    // The layer's index in the machine, which an error names.
    layer: u32, spare: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;
@group(0) @binding(3) var<storage, read_write> work: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<atomic<u32>>;

const X_AT: u32 = 0u;
const N_AT: u32 = D;
const Y_AT: u32 = 2u * D;
// CUR, NEXT, FEED, CAPACITY and IDS (out's layout), HALTED (the outcome after the end token
// ran) and the ERR_ codes come from `gpu::machine`'s header, as D does.

// Records the first error: its code, where (a head, a unit, a channel), the argument, the
// position and the layer.
fn fail(code: u32, at: u32, x: f32) {
    if (atomicMax(&out[0], code) == 0u) {
        atomicStore(&out[1], at);
        atomicStore(&out[2], bitcast<u32>(x));
        atomicStore(&out[3], atomicLoad(&out[CUR]));
        atomicStore(&out[4], P.layer);
    }
}

fn wf(i: u32) -> f32 {
    return bitcast<f32>(work[i]);
}

// After an error or the end token nothing runs: the state stays as the last good token left it.
fn stopped() -> bool {
    return atomicLoad(&out[0]) != 0u;
}

var<workgroup> wg_stop: u32;

// `stopped`, uniform across the workgroup (which may then meet barriers): every invocation calls
// it.
fn stopped_uniform(lid: u32) -> bool {
    if (lid == 0u) {
        wg_stop = atomicLoad(&out[0]);
    }
    return workgroupUniformLoad(&wg_stop) != 0u;
}

var<workgroup> wg_rms: f32;


// The layer's pre-norm, x into n: the sum of squares in channel order over the nonzero channels
// (as `rms_norm_into` adds them), each channel divided by the RMS with `exact.wgsl`'s division,
// its sign put back, then weighted: `v / rms · w`.
@compute @workgroup_size(64)
fn norm(@builtin(local_invocation_index) lid: u32) {
    if (stopped_uniform(lid)) {
        return;
    }
    if (lid == 0u) {
        var ss = 0.0;
        for (var i = 0u; i < D; i += 1u) {
            let v = wf(X_AT + i);
            if (v != 0.0) {
                ss = ss + v * v;
            }
        }
        // √(Σx²/d + ε).
        let m = div_rn(ss, f32(D));
        let r = sqrt_rn(m.value + bitcast<f32>(w[P.eps_at]));
        if (m.flags != 0u || r.flags != 0u) {
            fail(ERR_PRE_NORM, D, ss);
        }
        wg_rms = r.value;
    }
    let rms = workgroupUniformLoad(&wg_rms);
    for (var i = lid; i < D; i += 64u) {
        let v = wf(X_AT + i);
        // ±0 / rms is ±0; otherwise the quotient of |v|, correctly rounded, with v's sign.
        var q = v;
        if (v != 0.0) {
            let d = div_rn(abs(v), rms);
            if (d.flags != 0u) {
                fail(ERR_PRE_NORM, i, v);
            }
            q = select(d.value, -d.value, v < 0.0);
        }
        work[N_AT + i] = bitcast<u32>(q * bitcast<f32>(w[P.norm_at + i]));
    }
}
