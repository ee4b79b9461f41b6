// The ends of a token of the second machine (`gpu::machine`): `embed` looks up the token at the
// current position, `final_norm`, `logits` and `argmax` choose the next one. P and w are the
// ends' own: the embedding rows' table and pairs, the final norm's weights and ε, the head rows'
// table and pairs. `second.wgsl` comes before this text.
//
// Exactness. The final norm is `text::rms_norm`'s: the sum of squares in eight lanes (lane j the
// channels ≡ j mod 8, in order; a channel at ±0 adds +0 to a lane, which changes nothing), the
// lanes added pairwise as `text::dot` adds them, then `x · (1/√(mean + ε)) · w` with
// `exact.wgsl`'s root and divisions. A head row is `PackedHead`'s fold from +0 in its entries'
// order. The argmax is `greedy`'s over the whole vocabulary: the text tokens' logits are 0 at a
// machine position (`splice::runner`), so a machine token wins only with a logit above 0, and
// among equal logits the first.

var<workgroup> wg_id: u32;

// The token at the current position: the host's (the prompt) or the one the last position
// chose. Its row is written into a stream of zeros.
@compute @workgroup_size(64)
fn embed(@builtin(local_invocation_index) lid: u32) {
    if (stopped_uniform(lid)) {
        return;
    }
    if (lid == 0u) {
        let p = atomicAdd(&out[NEXT], 1u);
        atomicStore(&out[CUR], p);
        var id = 0xffffffffu;
        if (p < atomicLoad(&out[CAPACITY])) {
            id = atomicLoad(&out[IDS + p]);
        }
        if (id >= P.embed_rows) {
            fail(ERR_TOKEN, p, bitcast<f32>(id));
        }
        wg_id = id;
    }
    let id = workgroupUniformLoad(&wg_id);
    for (var c = lid; c < D; c += 64u) {
        work[X_AT + c] = 0u;
    }
    storageBarrier();
    if (lid == 0u && id < P.embed_rows) {
        for (var e = w[P.embed_table + id]; e < w[P.embed_table + id + 1u]; e += 2u) {
            work[X_AT + w[e]] = w[e + 1u];
        }
    }
}

// The positions before the host's last one choose nothing: their next token is the host's.
fn chooses() -> bool {
    return atomicLoad(&out[CUR]) + 1u >= atomicLoad(&out[FEED]);
}

// After an error or the end, or at a position that chooses nothing.
fn skips() -> bool {
    return stopped() || !chooses();
}

// `skips`, uniform across the workgroup (which then meets barriers): every invocation calls it.
fn skips_uniform(lid: u32) -> bool {
    if (lid == 0u) {
        wg_stop = select(0u, 1u, skips());
    }
    return workgroupUniformLoad(&wg_stop) != 0u;
}

var<workgroup> wg_lanes: array<f32, 8>;
var<workgroup> wg_inv: f32;

@compute @workgroup_size(64)
fn final_norm(@builtin(local_invocation_index) lid: u32) {
    if (skips_uniform(lid)) {
        return;
    }
    if (lid < 8u) {
        var acc = 0.0;
        for (var c = lid; c < D; c += 8u) {
            let v = wf(X_AT + c);
            if (v != 0.0) {
                acc = acc + v * v;
            }
        }
        wg_lanes[lid] = acc;
    }
    workgroupBarrier();
    if (lid == 0u) {
        let l = wg_lanes;
        let ss = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
        let mean = div_rn(ss, f32(D));
        let r = sqrt_rn(mean.value + bitcast<f32>(w[P.eps_at]));
        let inv = div_rn(1.0, r.value);
        if (mean.flags != 0u || r.flags != 0u || inv.flags != 0u) {
            fail(ERR_FINAL_NORM, D, ss);
        }
        wg_inv = inv.value;
    }
    let inv = workgroupUniformLoad(&wg_inv);
    for (var c = lid; c < D; c += 64u) {
        work[N_AT + c] = bitcast<u32>(wf(X_AT + c) * inv * bitcast<f32>(w[P.norm_at + c]));
    }
}

@compute @workgroup_size(64)
fn logits(@builtin(global_invocation_id) id: vec3<u32>) {
    let r = id.x;
    if (r >= P.head_rows || skips()) {
        return;
    }
    var l = 0.0;
    for (var e = w[P.head_table + r]; e < w[P.head_table + r + 1u]; e += 2u) {
        l = l + bitcast<f32>(w[e + 1u]) * wf(N_AT + w[e]);
    }
    work[P.logits_at + r] = bitcast<u32>(l);
}

var<workgroup> wg_best: array<f32, 64>;
var<workgroup> wg_at: array<u32, 64>;

// No machine logit above the text tokens' 0: the model chose a text token.
const NONE: u32 = 0xffffffffu;

@compute @workgroup_size(64)
fn argmax(@builtin(local_invocation_index) lid: u32) {
    if (skips_uniform(lid)) {
        return;
    }
    // Each invocation the first of its rows' largest logits above 0 (a NaN is never larger).
    var best = 0.0;
    var at = NONE;
    for (var r = lid; r < P.head_rows; r += 64u) {
        let l = wf(P.logits_at + r);
        if (l > best) {
            best = l;
            at = r;
        }
    }
    wg_best[lid] = best;
    wg_at[lid] = at;
    workgroupBarrier();
    if (lid != 0u) {
        return;
    }
    // The largest, the first row among equals.
    for (var i = 1u; i < 64u; i += 1u) {
        if (wg_best[i] > best || (wg_best[i] == best && wg_at[i] < at)) {
            best = wg_best[i];
            at = wg_at[i];
        }
    }
    let p = atomicLoad(&out[CUR]);
    if (p >= atomicLoad(&out[FEED]) && atomicLoad(&out[IDS + p]) == P.end_id) {
        // The end token the model chose has run: nothing runs after it (the host has the launch).
        atomicStore(&out[0], HALTED);
    } else if (at == NONE) {
        fail(ERR_TEXT, p, 0.0);
    } else if (p + 1u >= atomicLoad(&out[CAPACITY])) {
        fail(ERR_FULL, p, 0.0);
    } else {
        atomicStore(&out[IDS + p + 1u], at);
    }
}
