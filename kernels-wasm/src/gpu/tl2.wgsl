// TL2 on the GPU, one invocation per (output row, activation row), following `bitnet::tl2`'s
// layout (see FORMATS.md): per 32-row block, magnitude vectors of 32 bytes (two triplets per
// byte), sign groups of 32 bytes read as 16 little-endian u16 lanes, then the two-weight tail
// in TL1 style. Byte `pos` of a vector is row `row_of(pos)` = [0, 16, 8, 24][pos / 8] + pos % 8,
// so a row reads byte [0, 2, 1, 3][row / 8]·8 + row % 8 of each vector.
//
// Table entries are int16 stored low byte first (bytes 0–15), high bytes after (16–31). The
// CPU's int16 block sums never overflow (≤ 64 triplets of |entry| ≤ 384 per block, ≤ 16 pairs
// of ≤ 256 per tail block), so one i32 sum is the same integer.

struct Params {
    rows: u32,        // M
    cols: u32,        // K
    bm_tile: u32,     // BM
    bk: u32,          // BK (96 or 192)
    three_k: u32,     // columns through the triplet tables
    n: u32,           // activation rows in this dispatch
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> packed: array<u32>;
// Per activation row: three_k / 3 triplet tables, then (K − three_k) / 2 pair tables, 32 bytes each.
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read_write> acc: array<i32>;

fn packed_byte(i: u32) -> u32 {
    return (packed[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

fn table_byte(i: u32) -> u32 {
    return (tables[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

fn entry(at: u32, e: u32) -> i32 {
    let v = table_byte(at + e) | (table_byte(at + 16u + e) << 8u);
    return bitcast<i32>(v << 16u) >> 16u;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.x;
    let t_row = id.y;
    if (row >= p.rows || t_row >= p.n) {
        return;
    }
    let k_blocks = p.three_k / p.bk;
    let tail_blocks = (p.cols - p.three_k) / 32u;
    let row_blocks = p.bm_tile / 32u;
    let vpb = p.bk / 6u;                       // magnitude vectors per block
    let mag_bytes = p.three_k * p.rows / 6u;
    let sign_bytes = p.three_k * p.rows / 24u;
    let t = row / p.bm_tile;
    let rb = (row % p.bm_tile) / 32u;
    let r = row % 32u;
    let order = array<u32, 4>(0u, 2u, 1u, 3u);
    let pos = order[r / 8u] * 8u + r % 8u;
    let tables_per_row = p.three_k / 3u + (p.cols - p.three_k) / 2u;
    let tbase = t_row * tables_per_row * 32u;
    let two_base = tbase + (p.three_k / 3u) * 32u;
    var s = 0;
    for (var kb = 0u; kb < k_blocks; kb++) {
        let blk = (t * k_blocks + kb) * row_blocks + rb;
        for (var sb = 0u; sb < vpb; sb++) {
            let byte = packed_byte((blk * vpb + sb) * 32u + pos);
            let tr = kb * p.bk / 3u + 2u * sb;
            let lane_at = mag_bytes + (blk * (p.bk / 24u) + sb / 4u) * 32u + 2u * (r % 16u);
            let lane = packed_byte(lane_at) | (packed_byte(lane_at + 1u) << 8u);
            // Sign bits of this vector's two triplets: 15 − (4·(sb % 4) + r / 16) for the high
            // nibble, two below that for the low one.
            let top = 4u * (sb % 4u) + r / 16u;
            var hi = entry(tbase + tr * 32u, byte >> 4u);
            var lo = entry(tbase + (tr + 1u) * 32u, byte & 15u);
            if (((lane >> (15u - top)) & 1u) == 1u) {
                hi = -hi;
            }
            if (((lane >> (13u - top)) & 1u) == 1u) {
                lo = -lo;
            }
            s += hi + lo;
        }
    }
    for (var kb = 0u; kb < tail_blocks; kb++) {
        for (var sb = 0u; sb < 8u; sb++) {
            let at = mag_bytes + sign_bytes + (((t * tail_blocks + kb) * row_blocks + rb) * 8u + sb) * 32u;
            let byte = packed_byte(at + pos);
            let pair = kb * 16u + 2u * sb;
            s += entry(two_base + pair * 32u, byte >> 4u) + entry(two_base + (pair + 1u) * 32u, byte & 15u);
        }
    }
    acc[t_row * p.rows + row] = s;
}
