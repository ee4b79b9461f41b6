// One token through one SwiGLU layer of the second machine as the spliced runner applies it
// (`limbs::Layer`, pre-norm with the machine's norm weights, the output added to the stream), in
// three dispatches: `norm` (one workgroup), `units` (a hidden unit an invocation) and `down` (a
// channel an invocation). `gpu::swiglu` writes the constants before this text and lays out `w`;
// `exact.wgsl` comes before it too.
//
// Exactness. The norm's sum of squares runs in channel order over the nonzero channels, as
// `rms_norm_into` adds them; its division and root, and each channel's division by the RMS, are
// `exact.wgsl`'s correctly rounded ones. A unit's gate and up sums run in its entries' order,
// and a channel's output sums the units' contributions in unit order, as `forward_scheduled`
// does; the units it leaves out (their gates silu to ±0) add ±0 here, which changes no sum that
// starts at +0. SiLU is taken from its branches (±0, ≥ 104: itself; ≤ −104: −0); a gate between
// them is reported. A channel no unit writes is copied.

@group(0) @binding(0) var<storage, read> w: array<u32>;
// x (D), the normed stream n (D), each unit's output h (UNITS).
@group(0) @binding(1) var<storage, read_write> work: array<u32>;
// The outcome (error code, unit or channel, argument bits, 0), then x after the layer (D).
@group(0) @binding(2) var<storage, read_write> out: array<atomic<u32>>;

const ERR_SILU: u32 = 1u;
const ERR_NORM: u32 = 2u;

var<workgroup> wg_rms: f32;

@compute @workgroup_size(64)
fn norm(@builtin(local_invocation_index) lid: u32) {
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
        let r = sqrt_rn(m.value + bitcast<f32>(w[EPS_AT]));
        if (m.flags != 0u || r.flags != 0u) {
            fail(ERR_NORM, D, ss);
        }
        wg_rms = r.value;
    }
    workgroupBarrier();
    let rms = wg_rms;
    for (var i = lid; i < D; i += 64u) {
        let v = wf(X_AT + i);
        // ±0 / rms is ±0; otherwise the quotient of |v|, correctly rounded, with v's sign.
        var q = v;
        if (v != 0.0) {
            let d = div_rn(abs(v), rms);
            if (d.flags != 0u) {
                fail(ERR_NORM, i, v);
            }
            q = select(d.value, -d.value, v < 0.0);
        }
        work[N_AT + i] = bitcast<u32>(q * bitcast<f32>(w[NORM_AT + i]));
    }
}

// Σ weight · n over the (channel, weight) pairs at w[first..end], in order from +0.
fn dot(first: u32, end: u32) -> f32 {
    var s = 0.0;
    for (var e = first; e < end; e += 2u) {
        s = s + bitcast<f32>(w[e + 1u]) * wf(N_AT + w[e]);
    }
    return s;
}

@compute @workgroup_size(64)
fn units(@builtin(global_invocation_id) id: vec3<u32>) {
    let u = id.x;
    if (u >= UNITS) {
        return;
    }
    // A unit's gate pairs, then its up pairs: three boundaries.
    let at = UNIT_TABLE + 2u * u;
    let g = dot(w[at], w[at + 1u]);
    var s = g;
    if (g <= -104.0) {
        s = -0.0;
    } else if (g != 0.0 && g < 104.0) {
        fail(ERR_SILU, u, g);
    }
    work[H_AT + u] = bitcast<u32>(s * dot(w[at + 1u], w[at + 2u]));
}

@compute @workgroup_size(64)
fn down(@builtin(global_invocation_id) id: vec3<u32>) {
    let c = id.x;
    if (c >= D) {
        return;
    }
    // Channel c's (unit, weight) pairs, in unit order.
    let first = w[CHAN_TABLE + c];
    let end = w[CHAN_TABLE + c + 1u];
    var x = wf(X_AT + c);
    if (end > first) {
        var acc = 0.0;
        for (var e = first; e < end; e += 2u) {
            acc = acc + bitcast<f32>(w[e + 1u]) * wf(H_AT + w[e]);
        }
        x = x + acc;
    }
    atomicStore(&out[4u + c], bitcast<u32>(x));
}
