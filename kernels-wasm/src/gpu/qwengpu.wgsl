// One token through the compiled qwenGPU layers (`qwengpu::net::Schedule::forward`'s
// arithmetic, layer by layer), by one invocation: the layers are sparse and sequential, so
// the parallelism a GPU offers is not in one token. `gpu::qwengpu` writes the constants before
// this text and lays out `prog` (see there); `exact.wgsl` comes before it too.
//
// Exactness: the gates and sums are integers far below 2^24 and the products are exact (powers
// of two times small integers), so + − × give the CPU's bits whatever the order, fused or not.
// SiLU is taken from its exact cut-offs (|x| ≥ 104, where the CPU's formula is exactly x or
// −0); a gate between them is reported, not approximated. The heads' norms use `sqrt_rn` and
// `div_rn`.

@group(0) @binding(0) var<storage, read> prog: array<u32>;
@group(0) @binding(1) var<storage, read_write> state: array<f32>;
// Per group its hot offset (−1: cold); then the number of groups made hot since the last
// reset, and their ids.
@group(0) @binding(2) var<storage, read_write> mach: array<i32>;
@group(0) @binding(3) var<storage, read_write> scratch: array<u32>;
@group(0) @binding(4) var<storage, read_write> io: array<u32>;

const A: f32 = 64.0;
const ERR_WRITE: u32 = 1u;    // a second value written into a group
const ERR_SILU: u32 = 2u;     // a gate between the cut-offs
const ERR_EXACT: u32 = 3u;    // a norm outside the normal range
const ERR_FULL: u32 = 4u;     // a scratch list ran out
const ERR_BUDGET: u32 = 5u;   // more work than any token needs: a corrupt layer, not a hang
const ERR_NO_NEXT: u32 = 6u;  // no next record (batches)
const ERR_VALUE: u32 = 7u;    // a pending write's key without its value (batches)

// Records evaluated in this token so far (a CPU token evaluates a few hundred).
var<private> budget: u32 = 0u;
const BUDGET: u32 = 4000000u;

fn spend(layer: u32) -> bool {
    budget += 1u;
    if (budget > BUDGET) {
        fail(ERR_BUDGET, layer, budget);
        return false;
    }
    return true;
}

fn fail(code: u32, layer: u32, detail: u32) {
    if (io[OUT_AT] == 0u) {
        io[OUT_AT] = code;
        io[OUT_AT + 1u] = layer;
        io[OUT_AT + 2u] = detail;
    }
}

fn failed() -> bool {
    return io[OUT_AT] != 0u;
}

// Makes cold group `g` hot at channel `h`, noting it twice: in `mach`'s list (for the next
// token's reset) and in the output record's. (Written here, not copied from `mach` at the end:
// on lavapipe, Mesa 22.3, such a final copy loop lost its stores past a varying point while
// `mach` held the right list; the divmod kernel's lockstep test caught it.)
fn set_hot(g: u32, h: u32, layer: u32) {
    let n = u32(mach[GROUPS]);
    if (n >= TOUCH_CAP) {
        fail(ERR_FULL, layer, 0u);
        return;
    }
    mach[g] = i32(h);
    mach[GROUPS + 1u + n] = i32(g);
    mach[GROUPS] = i32(n + 1u);
    io[TOUCHED_AT + 2u * n] = g;
    io[TOUCHED_AT + 2u * n + 1u] = h;
}

// `State::write`: adds `add` to channel `h` of cold group `g` (which holds −A), which must
// turn it to +A.
fn write(g: u32, h: u32, add: f32, layer: u32) {
    if (-A + add != A || mach[g] >= 0) {
        fail(ERR_WRITE, layer, g);
        return;
    }
    set_hot(g, h, layer);
}

fn silu(x: f32, layer: u32) -> f32 {
    if (x >= 104.0) {
        return x;
    }
    if (x <= -104.0) {
        return -0.0;
    }
    fail(ERR_SILU, layer, bitcast<u32>(x));
    return 0.0;
}

// --- The AND-unit MLP (`mlp::MlpLayer`): the pivot groups scanned, buckets, records. ---

fn eval(start: u32, end: u32, layer: u32) {
    var i = start;
    while (i < end) {
        if (!spend(layer)) {
            return;
        }
        var gate = bitcast<f32>(prog[i]);
        let left = prog[i + 1u];
        let writes = prog[i + 2u];
        i += 3u;
        for (var c = 0u; c < left; c++) {
            let gw = prog[i];
            let len = prog[i + 1u];
            let h = mach[gw >> 1u];
            if (h >= 0) {
                for (var j = 0u; j < len; j++) {
                    if (prog[i + 2u + j] == u32(h)) {
                        gate += select(256.0, -256.0, (gw & 1u) == 1u);
                        break;
                    }
                }
            }
            i += 2u + len;
        }
        let act = silu(gate, layer) * 1.0;
        if (act != 0.0) {
            let n = scratch[FIRED_N];
            if (n >= FIRED_CAP) {
                fail(ERR_FULL, layer, 1u);
                return;
            }
            scratch[3u * n] = i;
            scratch[3u * n + 1u] = writes;
            scratch[3u * n + 2u] = bitcast<u32>(act);
            scratch[FIRED_N] = n + 1u;
        }
        i += 3u * writes;
    }
}

fn mlp(layer: u32, d: u32) {
    let pivot_at = prog[d + 1u];
    let pivots = prog[d + 2u];
    let starts = prog[d + 3u];
    let buckets = prog[d + 4u];
    let sstarts = prog[d + 5u];
    let code = prog[d + 6u];
    scratch[FIRED_N] = 0u;
    for (var p = 0u; p < pivots; p++) {
        let h = mach[prog[pivot_at + 2u * p]];
        if (h < 0) {
            continue;
        }
        let k = prog[pivot_at + 2u * p + 1u] + u32(h);
        for (var b = prog[starts + k]; b < prog[starts + k + 1u]; b++) {
            if (!spend(layer)) {
                return;
            }
            let g2 = prog[buckets + 2u * b];
            var j = prog[buckets + 2u * b + 1u];
            if (g2 != NO_SECOND) {
                let h2 = mach[g2];
                if (h2 < 0) {
                    continue;
                }
                j += u32(h2);
            }
            eval(code + prog[sstarts + j], code + prog[sstarts + j + 1u], layer);
        }
    }
    eval(code + prog[d + 7u], code + prog[d + 8u], layer);
    for (var f = 0u; f < scratch[FIRED_N]; f++) {
        let at = scratch[3u * f];
        let act = bitcast<f32>(scratch[3u * f + 2u]);
        for (var w = 0u; w < scratch[3u * f + 1u]; w++) {
            if (failed()) {
                return;
            }
            write(prog[at + 3u * w + 1u], prog[at + 3u * w + 2u], act, layer);
        }
    }
}

// --- A Gated DeltaNet head (`head::MemLayer`). ---

// The hot entries of a projection (`hot_entries`): per listed group with a hot channel, that
// channel's (target, weight) pairs, into scratch at `to` (pairs). Returns how many.
fn hot_entries(cols: u32, to: u32, layer: u32) -> u32 {
    var n = 0u;
    for (var c = 0u; c < prog[cols]; c++) {
        let g = prog[cols + 1u + 2u * c];
        let h = mach[g];
        if (h < 0) {
            continue;
        }
        // The channel's pairs lie at prog[tab[h]..tab[h + 1]].
        let tab = prog[cols + 2u + 2u * c];
        for (var e = prog[tab + u32(h)]; e < prog[tab + u32(h) + 1u]; e += 2u) {
            if (n >= ENTRY_CAP) {
                fail(ERR_FULL, layer, 2u);
                return n;
            }
            scratch[to + 2u * n] = prog[e];
            scratch[to + 2u * n + 1u] = prog[e + 1u];
            n++;
        }
    }
    return n;
}

// silu, then x / sqrt(Σx² + 1e-6), then × scale, as the CPU's `l2`.
fn l2(at: u32, n: u32, scale: f32, layer: u32) {
    var ss = 0.0;
    for (var i = 0u; i < n; i++) {
        let v = silu(bitcast<f32>(scratch[at + 2u * i + 1u]), layer);
        scratch[at + 2u * i + 1u] = bitcast<u32>(v);
        ss = ss + v * v;
    }
    let root = sqrt_rn(ss + 1e-6);
    let inv = div_rn(1.0, root.value);
    if (root.flags != 0u || inv.flags != 0u) {
        fail(ERR_EXACT, layer, bitcast<u32>(ss));
        return;
    }
    for (var i = 0u; i < n; i++) {
        let v = bitcast<f32>(scratch[at + 2u * i + 1u]);
        scratch[at + 2u * i + 1u] = bitcast<u32>(v * inv.value * scale);
    }
}

fn vec_at(which: u32, j: u32) -> u32 {
    return VEC_AT + which * VEC_CAP + j;
}

fn head(layer: u32, d: u32) {
    let dv = prog[d + 6u];
    let base = prog[d + 7u];
    let norm = bitcast<f32>(prog[d + 8u]);
    let alpha = bitcast<f32>(prog[d + 9u]);
    let beta = bitcast<f32>(prog[d + 10u]);
    let gate = bitcast<f32>(prog[d + 11u]);
    let scale = bitcast<f32>(prog[d + 12u]);
    let nk = hot_entries(prog[d + 1u], K_AT, layer);
    let nq = hot_entries(prog[d + 2u], Q_AT, layer);
    if (nk == 0u && nq == 0u && alpha == 1.0) {
        return;
    }
    l2(K_AT, nk, 1.0, layer);
    l2(Q_AT, nq, scale, layer);
    if (failed()) {
        return;
    }
    if (alpha != 1.0) {
        for (var i = 0u; i < prog[d + 5u] * dv; i++) {
            state[base + i] *= alpha;
        }
    }
    if (nk > 0u) {
        // v from the value channels, Sᵀk, then each keyed row moved to v (the delta rule).
        for (var j = 0u; j < dv; j++) {
            scratch[vec_at(0u, j)] = 0u;
            scratch[vec_at(1u, j)] = 0u;
        }
        let ne = hot_entries(prog[d + 3u], E_AT, layer);
        for (var e = 0u; e < ne; e++) {
            let v = silu(bitcast<f32>(scratch[E_AT + 2u * e + 1u]), layer);
            scratch[vec_at(0u, scratch[E_AT + 2u * e])] = bitcast<u32>(v);
        }
        for (var e = 0u; e < nk; e++) {
            let row = base + scratch[K_AT + 2u * e] * dv;
            let ki = bitcast<f32>(scratch[K_AT + 2u * e + 1u]);
            for (var j = 0u; j < dv; j++) {
                let kv = bitcast<f32>(scratch[vec_at(1u, j)]) + state[row + j] * ki;
                scratch[vec_at(1u, j)] = bitcast<u32>(kv);
            }
        }
        for (var e = 0u; e < nk; e++) {
            let r = scratch[K_AT + 2u * e];
            let row = base + r * dv;
            let ki = bitcast<f32>(scratch[K_AT + 2u * e + 1u]);
            for (var j = 0u; j < dv; j++) {
                let v = bitcast<f32>(scratch[vec_at(0u, j)]);
                let kv = bitcast<f32>(scratch[vec_at(1u, j)]);
                state[row + j] = state[row + j] + ki * (beta * (v - kv));
            }
            // The row goes back to the host with the token's output.
            let n = io[OUT_AT + 4u];
            if (n >= ROWS_CAP) {
                fail(ERR_FULL, layer, 3u);
                return;
            }
            let at = ROWS_AT + n * (2u + VEC_CAP);
            io[at] = layer;
            io[at + 1u] = r;
            for (var j = 0u; j < dv; j++) {
                io[at + 2u + j] = bitcast<u32>(state[row + j]);
            }
            io[OUT_AT + 4u] = n + 1u;
        }
    }
    if (nq == 0u) {
        return;
    }
    // o = Σ qᵢ·Sᵢ (the first term assigned), then RMSNormGated over its nonzero entries in order.
    let q0 = bitcast<f32>(scratch[Q_AT + 1u]);
    let r0 = base + scratch[Q_AT] * dv;
    for (var j = 0u; j < dv; j++) {
        scratch[vec_at(2u, j)] = bitcast<u32>(state[r0 + j] * q0);
    }
    for (var e = 1u; e < nq; e++) {
        let row = base + scratch[Q_AT + 2u * e] * dv;
        let qi = bitcast<f32>(scratch[Q_AT + 2u * e + 1u]);
        for (var j = 0u; j < dv; j++) {
            scratch[vec_at(2u, j)] = bitcast<u32>(bitcast<f32>(scratch[vec_at(2u, j)]) + state[row + j] * qi);
        }
    }
    var ss = 0.0;
    for (var j = 0u; j < dv; j++) {
        let o = bitcast<f32>(scratch[vec_at(2u, j)]);
        if (o != 0.0) {
            ss = ss + o * o;
        }
    }
    let mean = div_rn(ss, f32(dv));
    let root = sqrt_rn(mean.value + 1e-6);
    let r = div_rn(1.0, root.value);
    if (mean.flags != 0u || root.flags != 0u || r.flags != 0u) {
        fail(ERR_EXACT, layer, bitcast<u32>(ss));
        return;
    }
    let out = prog[d + 4u];
    for (var j = 0u; j < dv; j++) {
        let o = bitcast<f32>(scratch[vec_at(2u, j)]);
        if (o == 0.0) {
            continue;
        }
        let y = o * r.value * norm * gate;
        if (y != 0.0 && !failed()) {
            write(prog[out + 3u * j + 1u], prog[out + 3u * j + 2u], 2.0 * A * y, layer);
        }
    }
}

// One token: the input record at `io[input]` (count, then (group, channel) pairs).
fn token(input: u32) {
    // Back to "everything cold but the constant", undoing only what the last token touched.
    for (var i = 0u; i < u32(mach[GROUPS]); i++) {
        mach[u32(mach[GROUPS + 1u + i])] = -1;
    }
    mach[GROUPS] = 0;
    for (var i = 0u; i < 5u; i++) {
        io[OUT_AT + i] = 0u;
    }
    budget = 0u;
    set_hot(0u, 0u, 0u);
    for (var i = 0u; i < io[input]; i++) {
        set_hot(io[input + 1u + 2u * i], io[input + 2u + 2u * i], 0u);
    }
    for (var l = 0u; l < LAYERS; l++) {
        let d = LAYER_TABLE + 16u * l;
        if (prog[d] == 0u) {
            mlp(l, d);
        } else {
            head(l, d);
        }
        if (failed()) {
            break;
        }
    }
}

// After a token: its CTRL record, if it was one, and the next token's input record into
// `io[to]`, made from this token's output by the plan's copies (what the host does between
// tokens). Returns the next record's kind, or -1 (an error is set).
fn next_record(to: u32) -> i32 {
    let kind = mach[io[PLAN_AT + 1u + 3u * PLAN_CAP]];
    if (kind != i32(io[PLAN_AT + 5u + 3u * PLAN_CAP])) {
        io[BATCH_CONTROL] += 1u;
    }
    if (kind == i32(io[PLAN_AT + 6u + 3u * PLAN_CAP])) {
        let r = REC_AT + 3u * io[BATCH_RECORDS];
        io[r] = u32(mach[io[PLAN_AT + 2u + 3u * PLAN_CAP]]);
        io[r + 1u] = u32(mach[io[PLAN_AT + 3u + 3u * PLAN_CAP]]);
        io[r + 2u] = u32(mach[io[PLAN_AT + 4u + 3u * PLAN_CAP]]);
        io[BATCH_RECORDS] += 1u;
    }
    var n = 0u;
    var next = -1;
    for (var c = 0u; c < io[PLAN_AT]; c++) {
        let src = io[PLAN_AT + 1u + 3u * c];
        let dst = io[PLAN_AT + 2u + 3u * c];
        let key = io[PLAN_AT + 3u + 3u * c];
        if (key != NO_KEY && mach[key] < 0) {
            continue;
        }
        let h = mach[src];
        if (h < 0) {
            if (key != NO_KEY) {
                fail(ERR_VALUE, LAYERS, src);
                return -1;
            }
            continue;
        }
        io[to + 1u + 2u * n] = dst;
        io[to + 2u + 2u * n] = u32(h);
        n++;
        if (dst == io[PLAN_AT + 1u + 3u * PLAN_CAP]) {
            next = h;
        }
    }
    io[to] = n;
    io[BATCH_NEXT] = to;
    if (next < 0) {
        fail(ERR_NO_NEXT, LAYERS, 0u);
    }
    return next;
}

// One token. Alone (`BATCH_TOKENS` 0) from `IN_AT`, for the host to read its output record;
// in a batch from the input record `next` made, until the batch stops.
@compute @workgroup_size(1)
fn main() {
    if (io[BATCH_TOKENS] == 0u) {
        token(IN_AT);
        io[OUT_AT + 3u] = u32(mach[GROUPS]);
        return;
    }
    if (io[BATCH_STOP] != 0u) {
        return;
    }
    token(io[BATCH_NEXT]);
    if (failed()) {
        io[BATCH_STOP] = 1u;
        return;
    }
    io[BATCH_RAN] += 1u;
}

// Between a batch's tokens: the next input record (a separate dispatch: on lavapipe, Mesa
// 22.3, a second token in the same invocation as the first went wrong).
@compute @workgroup_size(1)
fn next() {
    if (io[BATCH_STOP] != 0u) {
        return;
    }
    let to = select(IN_AT, IN2_AT, io[BATCH_NEXT] == IN_AT);
    let kind = next_record(to);
    if (kind < 0 || u32(kind) == io[PLAN_AT + 7u + 3u * PLAN_CAP] || io[BATCH_RECORDS] >= io[BATCH_MAX_RECORDS]
        || io[BATCH_RAN] >= io[BATCH_TOKENS]) {
        io[BATCH_STOP] = 1u;
    }
}
