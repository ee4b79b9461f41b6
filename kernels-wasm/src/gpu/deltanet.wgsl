// One token through one Gated DeltaNet layer (`qwengpu::deltanet::DeltaNet::step`, identity
// taps), in three dispatches: `project` (a row of W_qkv, W_z, W_b, W_a an invocation), `heads`
// (a head a workgroup) and `output` (a row of W_out an invocation, added to the stream where the
// row is not empty). `gpu::deltanet` lays out `w` and P; `second.wgsl` comes before this text.
//
// Exactness. A row's sum adds its products in column order from +0, skipping ±0 inputs, as the
// CPU's column-major product does for that row. The q, k and output norms use `sqrt_rn` and
// `div_rn`. Every other non-linear step is taken from the branch where its value does not depend
// on the last ulp of `exp` or `ln` (`deltanet::Regime` lists them); an argument elsewhere is
// reported, not approximated. The machine's products are exact (small integers times powers of
// two), so a compiler that fuses a multiply into an add changes nothing; the tests check the
// bits against the CPU on a real launch.

// ±0 or ≥ 32: x; ≤ −89: −0 (exp(89) overflows).
fn silu(x: f32, head: u32) -> f32 {
    if (x == 0.0 || x >= 32.0) {
        return x;
    }
    if (x <= -89.0) {
        return -0.0;
    }
    fail(ERR_SILU, head, x);
    return x;
}

// 1/√x, correctly rounded twice, as the CPU's `1.0 / x.sqrt()`.
fn rsqrt(x: f32, head: u32) -> f32 {
    let r = sqrt_rn(x);
    let q = div_rn(1.0, r.value);
    if (r.flags != 0u || q.flags != 0u) {
        fail(ERR_NORM, head, x);
    }
    return q.value;
}

fn finite(x: f32) -> bool {
    return ((bitcast<u32>(x) >> 23u) & 0xffu) != 0xffu;
}

// Row `r` of the matrix whose row table starts at `table` (absolute offsets of (column, weight)
// pairs in `w`), against the vector at `work[xs..]`.
fn row_product(table: u32, r: u32, xs: u32) -> f32 {
    var acc = 0.0;
    let end = w[table + r + 1u];
    for (var e = w[table + r]; e < end; e += 2u) {
        let xc = wf(xs + w[e]);
        if (xc != 0.0) {
            acc = acc + bitcast<f32>(w[e + 1u]) * xc;
        }
    }
    return acc;
}

@compute @workgroup_size(64)
fn project(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < P.rows && !stopped()) {
        work[P.mid_at + id.x] = bitcast<u32>(row_product(P.row_table, id.x, N_AT));
    }
}

var<workgroup> wg_count: array<u32, 64>;
var<workgroup> wg_total: u32;

// The hot entries of a q or k head at `src` (not ±0, not at or below −89, where silu is −0),
// SiLU'd, into `dst` as (index, value) pairs in index order; returns how many. Invocation `lid`
// scans the `lid`-th sixty-fourth of the head, then writes its entries after those of the
// invocations before it. Called by the whole workgroup (it has barriers).
fn hot(src: u32, dst: u32, lid: u32, head: u32) -> u32 {
    let per = (P.dk + 63u) / 64u;
    let first = min(lid * per, P.dk);
    let last = min(first + per, P.dk);
    var count = 0u;
    for (var i = first; i < last; i += 1u) {
        let x = wf(src + i);
        count += select(1u, 0u, x == 0.0 || x <= -89.0);
    }
    wg_count[lid] = count;
    workgroupBarrier();
    var at = 0u;
    for (var l = 0u; l < lid; l += 1u) {
        at += wg_count[l];
    }
    for (var i = first; i < last; i += 1u) {
        let x = wf(src + i);
        if (x == 0.0 || x <= -89.0) {
            continue;
        }
        work[dst + 2u * at] = i;
        work[dst + 2u * at + 1u] = bitcast<u32>(silu(0.0 + x, head));
        at += 1u;
    }
    // The total is the last invocation's end.
    if (lid == 63u) {
        wg_total = at;
    }
    storageBarrier();
    return workgroupUniformLoad(&wg_total);
}

// Norms and scales the `n` entries at `dst` as `x · (1/√(Σx² + 1e-6)) · scale`, the sum in
// index order (one invocation).
fn norm_entries(dst: u32, n: u32, scale: f32, head: u32) {
    if (n == 0u) {
        return;
    }
    var ss = 0.0;
    for (var k = 0u; k < n; k += 1u) {
        let a = wf(dst + 2u * k + 1u);
        ss = ss + a * a;
    }
    let scale_n = rsqrt(ss + constant(2u), head);
    for (var k = 0u; k < n; k += 1u) {
        work[dst + 2u * k + 1u] = bitcast<u32>(wf(dst + 2u * k + 1u) * scale_n * scale);
    }
}

// β = sigmoid(b): ±0 → ½ (exp(0) = 1), ≥ 17 → 1, ≤ −89 → 0.
fn beta_of(b: f32, head: u32) -> f32 {
    if (b == 0.0) {
        return 0.5;
    }
    if (b >= 17.0) {
        return 1.0;
    }
    if (b <= -89.0) {
        return 0.0;
    }
    fail(ERR_BETA, head, b);
    return 0.5;
}

// α = exp(−exp(a_log)·softplus(a + dt_bias)) from the branches of `Regime::{ALog, Softplus,
// Gate}`.
fn alpha_of(a: f32, head: u32) -> f32 {
    let a_log = bitcast<f32>(w[P.vec_table + head]);
    let at = a + bitcast<f32>(w[P.vec_table + P.heads + head]);
    var gate = 0.0;
    if (a_log <= -110.0) {
        // exp(a_log) = 0: the gate is −0·softplus, −0 for any finite softplus.
        if (!finite(at)) {
            fail(ERR_SOFTPLUS, head, at);
        }
        return 1.0;
    } else if (a_log == 0.0) {
        if (at > 20.0) {
            gate = -at;
        } else if (at <= -17.0) {
            gate = -0.0;
        } else {
            fail(ERR_SOFTPLUS, head, at);
        }
    } else {
        fail(ERR_A_LOG, head, a_log);
    }
    if (gate == 0.0) {
        return 1.0;
    }
    if (gate <= -110.0) {
        return 0.0;
    }
    fail(ERR_GATE, head, gate);
    return 1.0;
}

var<workgroup> wg_alpha: f32;
var<workgroup> wg_beta: f32;

// The constants after the per-head vectors and the norm weights: ε, 1/√d_k, the keys' 1e-6.
fn constant(i: u32) -> f32 {
    return bitcast<f32>(w[P.vec_table + 2u * P.heads + P.dv + i]);
}

@compute @workgroup_size(64)
fn heads(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (stopped_uniform(lid)) {
        return;
    }
    let h = g.x;
    let q_at = P.hot_at + h * 4u * P.dk;
    let k_at = q_at + 2u * P.dk;
    let nq = hot(P.mid_at + h * P.dk, q_at, lid, h);
    let nk = hot(P.mid_at + P.heads * P.dk + h * P.dk, k_at, lid, h);
    if (lid == 0u) {
        norm_entries(q_at, nq, constant(1u), h);
        norm_entries(k_at, nk, 1.0, h);
        // β reaches the state only through a key.
        wg_beta = 0.0;
        if (nk > 0u) {
            wg_beta = beta_of(wf(P.mid_at + P.channels + P.heads * P.dv + h), h);
        }
        wg_alpha = alpha_of(wf(P.mid_at + P.channels + P.heads * P.dv + P.heads + h), h);
    }
    storageBarrier();
    workgroupBarrier();
    let alpha = wg_alpha;
    let beta = wg_beta;
    let base = h * P.dk * P.dv;
    if (alpha != 1.0) {
        for (var i = lid; i < P.dk * P.dv; i += 64u) {
            state[base + i] = state[base + i] * alpha;
        }
    }
    storageBarrier();
    // Column j of the head's state: kv = Sᵀk, δ = β(v − kv), S += k ⊗ δ, o = Sᵀq.
    for (var j = lid; j < P.dv; j += 64u) {
        var kv = 0.0;
        for (var e = 0u; e < nk; e += 1u) {
            kv = kv + state[base + work[k_at + 2u * e] * P.dv + j] * wf(k_at + 2u * e + 1u);
        }
        let v = silu(0.0 + wf(P.mid_at + 2u * P.heads * P.dk + h * P.dv + j), h);
        let delta = beta * (v - kv);
        for (var e = 0u; e < nk; e += 1u) {
            let at = base + work[k_at + 2u * e] * P.dv + j;
            state[at] = state[at] + wf(k_at + 2u * e + 1u) * delta;
        }
        var o = 0.0;
        for (var e = 0u; e < nq; e += 1u) {
            o = o + state[base + work[q_at + 2u * e] * P.dv + j] * wf(q_at + 2u * e + 1u);
        }
        work[P.o_at + h * P.dv + j] = bitcast<u32>(o);
    }
    storageBarrier();
    // RMSNormGated: o · rsqrt(mean(o²) + ε) · w · silu(z).
    for (var j = lid; j < P.dv; j += 64u) {
        var ss = 0.0;
        for (var i = 0u; i < P.dv; i += 1u) {
            let o = wf(P.o_at + h * P.dv + i);
            ss = ss + o * o;
        }
        let eps = constant(0u);
        var mean = eps;
        if (ss != 0.0) {
            let d = div_rn(ss, f32(P.dv));
            if (d.flags != 0u) {
                fail(ERR_NORM, h, ss);
            }
            mean = d.value + eps;
        }
        let n = rsqrt(mean, h);
        let z = silu(wf(P.mid_at + P.channels + h * P.dv + j), h);
        let gain = bitcast<f32>(w[P.vec_table + 2u * P.heads + j]);
        work[P.g_at + h * P.dv + j] = bitcast<u32>(wf(P.o_at + h * P.dv + j) * n * gain * z);
    }
}

@compute @workgroup_size(64)
fn output(@builtin(global_invocation_id) id: vec3<u32>) {
    let r = id.x;
    if (r >= D || stopped()) {
        return;
    }
    let y = row_product(P.out_table, r, P.g_at);
    work[Y_AT + r] = bitcast<u32>(y);
    // The residual add, on the channels W_out writes only (the rows with an entry), so that no
    // other channel picks up a −0.
    if (w[P.out_table + r + 1u] > w[P.out_table + r]) {
        work[X_AT + r] = bitcast<u32>(wf(X_AT + r) + y);
    }
}
