/* qwen3_matvec: rows [first, first + count) of y = W·x in qwen3-ebpf's fixed point (x Q16,
 * W Q24, y = (Σ x·w) >> 24 in s64), and the argmax of those rows (strict >, lowest index wins).
 *
 * Built three times (build.rs), one per weight storage of kernels_wasm::qwen3::weights:
 * WEIGHTS_Q24 (s32 words), WEIGHTS_BF16 (u16 + a BF16 → Q24 table), WEIGHTS_INT4 (per row: the
 * s32 scales of its 128-weight groups, then 64 bytes of nibbles per group).
 *
 * The whole matrix lives in the mmapable `weights` map (one entry per row), so one test_run call
 * covers as many rows as the caller asks: no per-batch copying as the seed did. COLS is set
 * before load (read-only data, so the verifier knows it exactly and bounds the column loop).
 * Each caller thread uses its own `args` slot, named by the first 4 bytes of the test packet
 * after the 14-byte Ethernet header, so two threads can run disjoint rows at once. */
#include "common.h"
#include "fixed.h"

/* args.flags: what the call fuses around the product. */
#define PRENORM 1  /* x := RMSNorm(x) with `nw` first (each thread into its own x slot) */
#define RESIDUAL 2 /* y := res + W·x (wrapping s32): the residual add of o and down, q|k|v's bias */
#define GLU 4      /* rows come in (gate, up) pairs: y[pair] := silu(gate) · up, at base + pair */

const volatile __u32 COLS = 1;

struct args {
	__u32 first;    /* this thread's rows */
	__u32 count;
	__s32 best;     /* out: the largest output of those rows and its row */
	__u32 best_row;
	__u32 flags;
	__u32 base;     /* GLU: the first row of the matrix (outputs go to base + pair) */
	__u32 zero;     /* always 0 (an initial value the verifier cannot see through) */
	__u32 eps;      /* PRENORM: rms_norm_eps in Q32 (4295 = Qwen3's 1e-6) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__uint(key_size, 4);
	__uint(value_size, 4); /* one row in its storage (WeightFormat::row_bytes), set before load */
} weights SEC(".maps");

#ifdef WEIGHTS_BF16
/* BF16 → Q24 for every 16-bit pattern: 256 KiB in one value (the seed kept it in an arena; an
 * mmapable array is the same lookup, bounded for the verifier by the u16 index). */
#define TABLE 65536
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__uint(key_size, 4);
	__uint(value_size, TABLE * 4);
} table SEC(".maps");
#endif

/* Entry 0: the input, written by the host; entries 1 + slot: that thread's normalised copy. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 3);
	__uint(key_size, 4);
	__uint(value_size, 4); /* COLS * 4 */
} x SEC(".maps");

/* PRENORM's Q20 scales. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__uint(key_size, 4);
	__uint(value_size, 4); /* COLS * 4 */
} nw SEC(".maps");

/* RESIDUAL's addend per row. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* rows, set before load */
	__type(key, __u32);
	__type(value, __s32);
} res SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* rows, set before load */
	__type(key, __u32);
	__type(value, __s32);
} out SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct args);
} args SEC(".maps");

struct loop_ctx {
	__u32 first;
	__s32 best;
	__u32 best_row;
	__u32 have;
	__u32 xkey;
	__u32 flags;
	__u32 base;
	__s32 gate;
};

struct norm_ctx {
	__s32 *in;
	__s32 *out;
	__s32 *w;
	__u64 sum;
	__u64 inv;
};

static long sum_squares(__u32 j, struct norm_ctx *nc)
{
	if (j >= COLS)
		return 1;
	__s64 v = nc->in[j];
	nc->sum += (__u64)(v * v);
	return 0;
}

static long scale(__u32 j, struct norm_ctx *nc)
{
	if (j >= COLS)
		return 1;
	nc->out[j] = norm_one(nc->in[j], nc->inv, nc->w[j]);
	return 0;
}

/* x[1 + slot] := RMSNorm(x[0]) with nw; the same arithmetic as qwen3_rms_norm. */
static __always_inline int prenorm(__u32 slot, __u64 zero, __u64 eps)
{
	__u32 k0 = 0, k1 = 1 + slot;
	struct norm_ctx nc = {};
	nc.in = bpf_map_lookup_elem(&x, &k0);
	nc.out = bpf_map_lookup_elem(&x, &k1);
	nc.w = bpf_map_lookup_elem(&nw, &k0);
	if (!nc.in || !nc.out || !nc.w)
		return 0;
	__u32 n = COLS;
	nc.sum = zero;
	if (bpf_loop(n, sum_squares, &nc, 0) != n)
		return 0;
	nc.inv = (1ULL << 32) / isqrt(nc.sum / n + eps);
	return bpf_loop(n, scale, &nc, 0) == n;
}

/* Σ x·w over one row, in s64 (wrapping, as the golden model's i64 products). */
static __always_inline int row_sum(void *row, __s32 *v, __s64 *out)
{
	/* Read COLS once: a volatile read per column would be a load per column. The verifier
	 * still knows its exact value (the read-only map is frozen at load). */
	__u32 n = COLS;
	__s64 sum = 0;
#if defined(WEIGHTS_Q24)
	__s32 *w = row;
#pragma clang loop unroll_count(8)
	for (__u32 c = 0; c < n; c++)
		sum += (__s64)v[c] * w[c];
#elif defined(WEIGHTS_BF16)
	__u32 zero = 0;
	__s32 *t = bpf_map_lookup_elem(&table, &zero);
	__u16 *w = row;
	if (!t)
		return 0;
#pragma clang loop unroll_count(8)
	for (__u32 c = 0; c < n; c++)
		sum += (__s64)v[c] * t[w[c]];
#elif defined(WEIGHTS_INT4)
	/* Per group: p = Σ x·q over its (up to) 128 codes, then sum += p · scale. */
	__u32 groups = (n + 127) / 128;
	__s32 *scales = row;
	__u8 *nib = (__u8 *)row + 4 * groups;
	for (__u32 g = 0; g < groups; g++) {
		__s64 p = 0;
		for (__u32 j = 0; j < 64; j++) {
			__u32 c = g * 128 + 2 * j;
			if (c + 1 >= n)
				break;
			__u8 b = nib[g * 64 + j];
			__s64 lo = (__s8)(__u8)(b << 4) >> 4, hi = (__s8)b >> 4;
			p += (__s64)v[c] * lo + (__s64)v[c + 1] * hi;
		}
		sum += p * scales[g];
	}
#else
#error "build.rs defines WEIGHTS_Q24, WEIGHTS_BF16 or WEIGHTS_INT4"
#endif
	*out = sum;
	return 1;
}

static long row(__u32 i, struct loop_ctx *ctx)
{
	__u32 r = ctx->first + i;
	void *w = bpf_map_lookup_elem(&weights, &r);
	__s32 *v = bpf_map_lookup_elem(&x, &ctx->xkey);
	__s64 sum;
	if (!w || !v || !row_sum(w, v, &sum))
		return 1;
	__s32 value = (__s32)(sum >> 24);
	if (ctx->flags & RESIDUAL) {
		__s32 *add = bpf_map_lookup_elem(&res, &r);
		if (!add)
			return 1;
		value = (__s32)((__u32)*add + (__u32)value);
	}
	if (ctx->flags & GLU) {
		/* Even rows are gates, odd rows their ups: emit silu(gate)·up for the pair. */
		if (((r - ctx->base) & 1) == 0) {
			ctx->gate = value;
			return 0;
		}
		__u32 at = ctx->base + ((r - ctx->base) >> 1);
		__s32 *y = bpf_map_lookup_elem(&out, &at);
		if (!y)
			return 1;
		*y = (__s32)(((__s64)silu(ctx->gate) * value) >> 16);
		return 0;
	}
	__s32 *y = bpf_map_lookup_elem(&out, &r);
	if (!y)
		return 1;
	*y = value;
	if (!ctx->have || value > ctx->best) {
		ctx->best = value;
		ctx->best_row = r;
		ctx->have = 1;
	}
	return 0;
}

SEC("socket")
int qwen3_matvec(struct __sk_buff *skb)
{
	__u32 slot = 0;
	if (bpf_skb_load_bytes(skb, 0, &slot, sizeof(slot)) < 0)
		return 0;
	struct args *a = bpf_map_lookup_elem(&args, &slot);
	if (!a)
		return 0;
	struct loop_ctx ctx = { .first = a->first, .flags = a->flags, .base = a->base };
	if (a->flags & PRENORM) {
		if (slot > 1 || !prenorm(slot, a->zero, a->eps))
			return 0;
		ctx.xkey = 1 + slot;
	}
	long done = bpf_loop(a->count, row, &ctx, 0);
	a->best = ctx.best;
	a->best_row = ctx.best_row;
	return done == a->count ? 1 : 0;
}
