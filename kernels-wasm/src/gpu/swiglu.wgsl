// One token through one SwiGLU layer of the second machine as the spliced runner applies it
// (`limbs::Layer`, pre-norm with the machine's norm weights, the output added to the stream), in
// three dispatches: `norm` (`second.wgsl`'s, one workgroup), `units` (a hidden unit an
// invocation) and `down` (a channel an invocation, the stream updated in place). `gpu::swiglu`
// lays out `w` and P; `second.wgsl` comes before this text.
//
// Exactness. The norm's sum of squares runs in channel order over the nonzero channels, as
// `rms_norm_into` adds them; its division and root, and each channel's division by the RMS, are
// `exact.wgsl`'s correctly rounded ones. A unit's gate and up sums run in its entries' order,
// and a channel's output sums the units' contributions in unit order, as `forward_scheduled`
// does; the units it leaves out (their gates silu to ±0) add ±0 here, which changes no sum that
// starts at +0. SiLU is taken from its branches (±0, ≥ 104: itself; ≤ −104: −0); a gate between
// them is reported. A channel no unit writes is copied.

// Σ weight · n over the (channel, weight) pairs at w[first..end], in order from +0.
fn unit_dot(first: u32, end: u32) -> f32 {
    var s = 0.0;
    for (var e = first; e < end; e += 2u) {
        s = s + bitcast<f32>(w[e + 1u]) * wf(N_AT + w[e]);
    }
    return s;
}

@compute @workgroup_size(64)
fn units(@builtin(global_invocation_id) id: vec3<u32>) {
    let u = id.x;
    if (u >= P.units || stopped()) {
        return;
    }
    // A unit's gate pairs, then its up pairs: three boundaries.
    let at = P.unit_table + 2u * u;
    let g = unit_dot(w[at], w[at + 1u]);
    var s = g;
    if (g <= -104.0) {
        s = -0.0;
    } else if (g != 0.0 && g < 104.0) {
        fail(ERR_UNIT_SILU, u, g);
    }
    work[P.h_at + u] = bitcast<u32>(s * unit_dot(w[at + 1u], w[at + 2u]));
}

@compute @workgroup_size(64)
fn down(@builtin(global_invocation_id) id: vec3<u32>) {
    let c = id.x;
    if (c >= D || stopped()) {
        return;
    }
    // Channel c's (unit, weight) pairs, in unit order.
    let first = w[P.chan_table + c];
    let end = w[P.chan_table + c + 1u];
    var x = wf(X_AT + c);
    if (end > first) {
        var acc = 0.0;
        for (var e = first; e < end; e += 2u) {
            acc = acc + bitcast<f32>(w[e + 1u]) * wf(P.h_at + w[e]);
        }
        x = x + acc;
    }
    work[X_AT + c] = bitcast<u32>(x);
}
