// Correctly rounded f32 square root and division in integer arithmetic. WGSL promises correctly
// rounded + − × but lets `sqrt` and `/` be a few ULP off, and the compiled qwenGPU layers need
// the CPU's bits; these give them (round to nearest, ties to even) for positive normal inputs
// and results. Anything else sets `EXACT_RANGE`: the caller reports it instead of guessing.

const EXACT_RANGE: u32 = 1u;

struct Exact {
    value: f32,
    flags: u32,
}

// Mantissa with the implicit bit (2^23 ≤ m < 2^24) and unbiased exponent of the integer
// mantissa: x = m · 2^e.
fn exact_split(x: f32) -> vec2<i32> {
    let b = bitcast<u32>(x);
    let e = i32((b >> 23u) & 0xffu);
    return vec2<i32>(i32((b & 0x7fffffu) | 0x800000u), e - 150);
}

// r · 2^k with 2^23 ≤ r < 2^24, as an f32 (normal results only).
fn exact_make(r: u32, k: i32) -> Exact {
    let biased = k + 150;
    if (biased < 1 || biased > 254) {
        return Exact(0.0, EXACT_RANGE);
    }
    return Exact(bitcast<f32>((u32(biased) << 23u) | (r & 0x7fffffu)), 0u);
}

fn exact_normal(x: f32) -> bool {
    let e = (bitcast<u32>(x) >> 23u) & 0xffu;
    return x > 0.0 && e != 0u && e != 255u;
}

// Rounds q (whose top bit is at `bits` − 1, bits > 24) to 24 bits; `sticky` says a nonzero
// remainder lies below q. Returns the mantissa and how far it was shifted. (A root or quotient
// of 24-bit operands is never exactly halfway between two floats, so the tie rule never acts;
// it is kept as IEEE states it.)
fn exact_round(q: u32, bits: u32, sticky: bool) -> vec2<u32> {
    let s = bits - 24u;
    var r = q >> s;
    let guard = (q >> (s - 1u)) & 1u;
    let below = (q & ((1u << (s - 1u)) - 1u)) != 0u || sticky;
    if (guard == 1u && (below || (r & 1u) == 1u)) {
        r += 1u;
    }
    if (r == 0x1000000u) {
        return vec2<u32>(r >> 1u, s + 1u);
    }
    return vec2<u32>(r, s);
}

fn sqrt_rn(x: f32) -> Exact {
    if (x == 0.0) {
        return Exact(x, 0u);
    }
    if (!exact_normal(x)) {
        return Exact(0.0, EXACT_RANGE);
    }
    var me = exact_split(x);
    var m = u32(me.x);
    var e = me.y;
    if ((e & 1) != 0) {
        m <<= 1u;
        e -= 1;
    }
    // R = m · 2^26 (< 2^51) as two words; its integer square root, two bits at a time.
    let hi = m >> 6u;
    let lo = (m & 63u) << 26u;
    var rem = 0u;
    var root = 0u;
    for (var i = 25i; i >= 0; i--) {
        let at = u32(2 * i);
        var pair = 0u;
        if (at >= 32u) {
            pair = (hi >> (at - 32u)) & 3u;
        } else {
            pair = (lo >> at) & 3u;
        }
        rem = (rem << 2u) | pair;
        let trial = (root << 2u) | 1u;
        root <<= 1u;
        if (rem >= trial) {
            rem -= trial;
            root |= 1u;
        }
    }
    // sqrt(R) = sqrt(m) · 2^13; root has 25 or 26 bits. A square root is never exactly halfway
    // between two floats, so the remainder only decides "above or not".
    let bits = 32u - countLeadingZeros(root);
    let rs = exact_round(root, bits, rem != 0u);
    return exact_make(rs.x, e / 2 - 13 + i32(rs.y));
}

fn div_rn(a: f32, b: f32) -> Exact {
    if (a == 0.0 && exact_normal(b)) {
        return Exact(0.0, 0u);
    }
    if (!exact_normal(a) || !exact_normal(b)) {
        return Exact(0.0, EXACT_RANGE);
    }
    let sa = exact_split(a);
    let sb = exact_split(b);
    var rem = u32(sa.x);
    let d = u32(sb.x);
    var e = sa.y - sb.y;
    if (rem < d) {
        rem <<= 1u;
        e -= 1;
    }
    // 26 quotient bits (the leading 1, 23 more, guard and one below), restoring division.
    var q = 0u;
    for (var i = 0u; i < 26u; i++) {
        q <<= 1u;
        if (rem >= d) {
            rem -= d;
            q |= 1u;
        }
        rem <<= 1u;
    }
    let rq = exact_round(q, 26u, rem != 0u);
    return exact_make(rq.x, e - 25 + i32(rq.y));
}
