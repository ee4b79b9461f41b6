// TL1 on the GPU: bitnet.cpp's `qgemm_lut` with one invocation per (output row, activation
// row). The packed layout (`bitnet::tl1`) stores 16 consecutive rows × 2 pairs per 16-byte
// vector, so the 16 invocations of a row group read 16 consecutive bytes, and all of them look
// up the same activation pair's table.
//
// A table entry is an int16 split into a high-byte and a low-byte 16-entry table (bytes 0–15
// high, 16–31 low); it is rebuilt exactly and summed in i32. The CPU sums int16 per BK block and
// widens after it; those block sums never overflow (|entry| ≤ 255, ≤ 128 pairs per block), so
// one i32 sum is the same integer.

struct Params {
    rows: u32,        // M
    cols: u32,        // K
    bm_tile: u32,     // BM: rows per tile
    bk: u32,          // BK: columns per K block
    bm: u32,          // bm: rows per row block
    k_blocks: u32,
    n: u32,           // activation rows in this dispatch
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> packed: array<u32>;
@group(0) @binding(2) var<storage, read> tables: array<u32>; // n rows of K/2 tables of 32 bytes
@group(0) @binding(3) var<storage, read_write> acc: array<i32>;

fn packed_byte(i: u32) -> u32 {
    return (packed[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

fn table_byte(i: u32) -> u32 {
    return (tables[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu;
}

// Entry e of the table at byte `at`: high byte at e, low byte at 16 + e, sign-extended.
fn entry(at: u32, e: u32) -> i32 {
    let v = (table_byte(at + e) << 8u) | table_byte(at + 16u + e);
    return bitcast<i32>(v << 16u) >> 16u;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.x;
    let t_row = id.y;
    if (row >= p.rows || t_row >= p.n) {
        return;
    }
    let by = 256u / p.bm;              // columns per sb step
    let row_blocks = p.bm_tile / p.bm;
    let block_bytes = p.bm * p.bk / 4u;
    let t = row / p.bm_tile;
    let in_tile = row % p.bm_tile;
    let rb = in_tile / p.bm;
    let g = (in_tile % p.bm) / 16u;    // 16-row group of the row block
    let r = row % 16u;
    let tbase = t_row * (p.cols / 2u) * 32u;
    var s = 0;
    for (var kb = 0u; kb < p.k_blocks; kb++) {
        let block = ((t * p.k_blocks + kb) * row_blocks + rb) * block_bytes;
        for (var sb = 0u; sb < p.bk / by; sb++) {
            for (var h = 0u; h < by / 4u; h++) {
                let byte = packed_byte(block + ((sb * (p.bm / 16u) + g) * (by / 4u) + h) * 16u + r);
                let pair = kb * p.bk / 2u + sb * by / 2u + 2u * h;
                s += entry(tbase + pair * 32u, byte >> 4u) + entry(tbase + (pair + 1u) * 32u, byte & 15u);
            }
        }
    }
    acc[t_row * p.rows + row] = s;
}
