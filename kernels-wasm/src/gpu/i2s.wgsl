// I2_S on the GPU: acc = Σ code·q − Σ q = Σ w·q per output row and activation row, as
// `bitnet::i2s` computes it (FORMATS.md has the byte layout).
//
// One workgroup per (output row, activation row). A block of `block` weights is `lanes` bytes
// (x86: 128 in 32, ARM: 64 in 16); byte j holds weights j, j + lanes, j + 2·lanes, j + 3·lanes
// at shifts 6, 4, 2, 0. So one u32 of codes, shifted and masked with 0x03030303, gives four
// codes whose activations are four consecutive int8 — one u32 of q. Each invocation takes
// every WG-th code word; the partial sums meet in workgroup memory. All sums are i32 and
// exact (|Σ w·q| ≤ 127·K), so the order of the reduction cannot change a bit.

struct Params {
    rows: u32,        // M
    cols: u32,        // K
    lane_words: u32,  // u32 words per 2-bit plane of a block (lanes / 4)
    n: u32,           // activation rows in this dispatch
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> codes: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<u32>;      // n rows of K int8, packed 4 per u32
@group(0) @binding(3) var<storage, read_write> acc: array<i32>; // n rows of M

const WG: u32 = 64u;
var<workgroup> part: array<i32, WG>;

// Σ a[i]·b[i] over the four bytes, a unsigned (codes 0..2), b signed int8.
fn dot4(a: u32, b: u32) -> i32 {
    var s = 0;
    for (var c = 0u; c < 4u; c++) {
        let code = i32((a >> (8u * c)) & 0xffu);
        let x = bitcast<i32>(b << (24u - 8u * c)) >> 24u;
        s += code * x;
    }
    return s;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wg.x;
    let t = wg.y;
    let words = p.cols / 16u;    // code words per row: K / 4 bytes / 4
    let row_codes = row * words;
    let row_q = t * (p.cols / 4u);
    var s = 0;
    for (var w = lid; w < words; w += WG) {
        // Word i of block b is its bytes 4i..4i+4: weights 4i.. of each plane, whose
        // activations are q words b·4·lane_words + plane·lane_words + i.
        let b = w / p.lane_words;
        let i = w % p.lane_words;
        let cw = codes[row_codes + w];
        for (var plane = 0u; plane < 4u; plane++) {
            let c = (cw >> (6u - 2u * plane)) & 0x03030303u;
            let qw = q[row_q + (4u * b + plane) * p.lane_words + i];
            s += dot4(c, qw) - dot4(0x01010101u, qw);
        }
    }
    part[lid] = s;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half /= 2u) {
        if (lid < half) {
            part[lid] += part[lid + half];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        acc[t * p.rows + row] = part[0];
    }
}
