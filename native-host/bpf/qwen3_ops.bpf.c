/* qwen3_ops: the vector operators of a Qwen3 layer in qwen3-ebpf's fixed point, each one call:
 * RMSNorm (whole vector or per head: QK-norm), RoPE, SiLU·up, residual add, and causal attention
 * over a KV cache that lives in a map (the program writes this token's K and V itself).
 * Arithmetic is exactly kernels_wasm::qwen3::fixed; `work` is shared with the host by mmap and
 * its layout is mirrored by native-host/src/ebpf/ops.rs. */
#include "common.h"
#include "fixed.h"

#define MAXV 4096 /* longest vector: max(hidden, intermediate, heads·128) of Qwen3-0.6B is 3072 */
#define HD 128    /* the largest head_dim; work.hd is the model's (128 Qwen3, 64 llama) */
#define M (MAXV - 1)
#define ROPE 1   /* attention: RoPE q and k first */
#define QKNORM 2 /* attention: QK-norm q and k (before RoPE) */

struct work {
	__u32 n;        /* vector length */
	__u32 segs;     /* equal segments (heads) for norm / rope */
	__u32 heads;    /* attention: query heads */
	__u32 kv_heads; /* attention: KV heads */
	__u32 pos;      /* attention: this token's position */
	__u32 slot0;    /* attention: KV slot of (position 0, KV head 0) of this layer */
	__u32 stride;   /* attention: slots between consecutive positions */
	__u32 zero;     /* always 0: an initial value the verifier cannot see through (see below) */
	__u32 flags;    /* attention: ROPE, QKNORM (scales: w[0..hd] for q, w[hd..2hd] for k) */
	__u32 hd;       /* head_dim, even, ≤ HD */
	__u32 scale;    /* attention: 1/√hd in Q16 (5793 for 128) */
	__u32 eps;      /* rms_norm_eps in Q32 (4295 = 1e-6) */
	__u32 pad[4];
	__s32 a[MAXV];
	__s32 b[MAXV];
	__s32 c[MAXV];
	__s32 d[MAXV];
	__s32 w[MAXV];
	__s32 cos[HD / 2];
	__s32 sin[HD / 2];
};

struct kv {
	__s32 k[HD];
	__s32 v[HD];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct work);
} work SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* positions · layers · kv_heads, set before load */
	__type(key, __u32);
	__type(value, struct kv);
} kvcache SEC(".maps");

/* bpf_loop's context must live on the stack: callbacks get the work pointer through this. */
struct wctx {
	struct work *wk;
};

static __always_inline struct work *get_work(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&work, &zero);
}

/* ---- RMSNorm ---------------------------------------------------------------------------- */

/* Per-element callbacks: a bpf_loop callback is verified once, where an open-coded loop over up
 * to 4096 elements is walked by the verifier iteration by iteration (the seed's 1M-instruction
 * wall). */
struct norm_ctx {
	__s32 *vec;   /* wk->a or wk->b */
	__s32 *w;     /* wk->w */
	__u32 base;   /* first element of the segment */
	__u32 wbase;  /* first scale */
	__u64 sum;
	__u64 inv;
};

static long sum_squares(__u32 j, struct norm_ctx *nc)
{
	__s64 x = nc->vec[(nc->base + j) & M];
	nc->sum += (__u64)(x * x);
	return 0;
}

static long scale(__u32 j, struct norm_ctx *nc)
{
	__u32 at = (nc->base + j) & M;
	nc->vec[at] = norm_one(nc->vec[at], nc->inv, nc->w[(nc->wbase + j) & M]);
	return 0;
}

/* RMSNorm of vec[base .. base + len) with scales w[wbase ..]. */
static __always_inline long norm_range(struct work *wk, __s32 *vec, __u32 base, __u32 len, __u32 wbase)
{
	struct norm_ctx nc = { .vec = vec, .w = wk->w, .base = base, .wbase = wbase };
	nc.sum = wk->zero;
	if (len > MAXV || bpf_loop(len, sum_squares, &nc, 0) != len)
		return 1;
	__u64 mean = nc.sum / (len ? len : 1) + wk->eps;
	nc.inv = (1ULL << 32) / isqrt(mean);
	return bpf_loop(len, scale, &nc, 0) == len ? 0 : 1;
}

static long norm_segment(__u32 s, struct wctx *cx)
{
	struct work *wk = cx->wk;
	__u32 len = wk->n / (wk->segs ? wk->segs : 1);
	return norm_range(wk, wk->a, s * len, len, 0);
}

SEC("socket")
int qwen3_rms_norm(struct __sk_buff *skb)
{
	struct work *wk = get_work();
	if (!wk)
		return 0;
	__u32 segs = wk->segs ? wk->segs : 1;
	if (wk->n > MAXV)
		return 0;
	struct wctx cx = { .wk = wk };
	return bpf_loop(segs, norm_segment, &cx, 0) == segs;
}

/* ---- RoPE --------------------------------------------------------------------------------- */

struct rope_ctx {
	struct work *wk;
	__s32 *vec;
};

static long rope_head(__u32 h, struct rope_ctx *rc)
{
	struct work *wk = rc->wk;
	__s32 *vec = rc->vec;
	__u32 half = wk->hd / 2, base = h * wk->hd;
	for (__u32 i = 0; i < HD / 2; i++) {
		if (i >= half)
			break;
		__s64 x = vec[(base + i) & M], y = vec[(base + i + half) & M];
		__s64 c = wk->cos[i], s = wk->sin[i];
		vec[(base + i) & M] = (__s32)((x * c - y * s) >> 20);
		vec[(base + i + half) & M] = (__s32)((y * c + x * s) >> 20);
	}
	return 0;
}

/* head_dim is even and at most HD, and `count` heads of it fit a vector. */
static __always_inline int heads_fit(struct work *wk, __u32 count)
{
	return wk->hd && wk->hd <= HD && !(wk->hd & 1) && count <= MAXV / wk->hd;
}

SEC("socket")
int qwen3_rope(struct __sk_buff *skb)
{
	struct work *wk = get_work();
	if (!wk || !heads_fit(wk, wk->segs))
		return 0;
	struct rope_ctx rc = { .wk = wk, .vec = wk->a };
	return bpf_loop(wk->segs, rope_head, &rc, 0) == wk->segs;
}

/* ---- SiLU · up, residual add -------------------------------------------------------------- */

static long silu_mul_one(__u32 i, struct wctx *cx)
{
	struct work *wk = cx->wk;
	__s32 g = silu(wk->a[i & M]);
	wk->a[i & M] = (__s32)(((__s64)g * wk->b[i & M]) >> 16);
	return 0;
}

SEC("socket")
int qwen3_silu_mul(struct __sk_buff *skb)
{
	struct work *wk = get_work();
	if (!wk || wk->n > MAXV)
		return 0;
	struct wctx cx = { .wk = wk };
	return bpf_loop(wk->n, silu_mul_one, &cx, 0) == wk->n;
}

static long add_one(__u32 i, struct wctx *cx)
{
	struct work *wk = cx->wk;
	wk->a[i & M] = (__s32)((__u32)wk->a[i & M] + (__u32)wk->b[i & M]);
	return 0;
}

SEC("socket")
int qwen3_add(struct __sk_buff *skb)
{
	struct work *wk = get_work();
	if (!wk || wk->n > MAXV)
		return 0;
	struct wctx cx = { .wk = wk };
	return bpf_loop(wk->n, add_one, &cx, 0) == wk->n;
}

/* ---- attention ---------------------------------------------------------------------------- */

struct head_ctx {
	struct work *wk;
	struct kv *kv;
	__u32 h;
	__u32 kvh;
	__s32 max;
	__u64 mass;
	__s64 dot;
	__s64 alpha;
};

static long dot_one(__u32 i, struct head_ctx *hc)
{
	hc->dot += (__s64)hc->wk->a[(hc->h * hc->wk->hd + i) & M] * hc->kv->k[i & (HD - 1)];
	return 0;
}

static long update_one(__u32 i, struct head_ctx *hc)
{
	__u32 at = (hc->h * hc->wk->hd + i) & M;
	__s32 o = hc->wk->d[at];
	hc->wk->d[at] = o + (__s32)((((__s64)hc->kv->v[i & (HD - 1)] - o) * hc->alpha) >> 24);
	return 0;
}

static long attend_position(__u32 p, struct head_ctx *hc)
{
	struct work *wk = hc->wk;
	__u32 slot = wk->slot0 + p * wk->stride + hc->kvh;
	hc->kv = bpf_map_lookup_elem(&kvcache, &slot);
	if (!hc->kv)
		return 1;
	hc->dot = wk->zero;
	bpf_loop(wk->hd, dot_one, hc, 0);
	__s32 s = (__s32)(((hc->dot >> 16) * (__s64)wk->scale) >> 16);
	__u64 weight;
	if (hc->mass == 0) {
		hc->max = s;
		weight = 1 << 16;
	} else if (s > hc->max) {
		hc->mass = (hc->mass * (exp_neg((__s64)s - hc->max) >> 16)) >> 16;
		hc->max = s;
		weight = 1 << 16;
	} else {
		weight = exp_neg((__s64)hc->max - s) >> 16;
	}
	hc->mass += weight;
	hc->alpha = (__s64)((weight << 24) / hc->mass);
	bpf_loop(wk->hd, update_one, hc, 0);
	return 0;
}

static long attend_head(__u32 h, struct wctx *cx)
{
	struct work *wk = cx->wk;
	__u32 group = wk->heads / (wk->kv_heads ? wk->kv_heads : 1);
	/* Accumulators start from `zero` read from the map rather than the constant 0: with
	 * constants the verifier follows each bpf_loop iteration's exact values and gives up
	 * ("sequence of jumps is too complex"); unknown scalars converge at once. */
	struct head_ctx hc = { .wk = wk, .h = h, .kvh = h / (group ? group : 1) };
	hc.mass = wk->zero;
	hc.max = (__s32)wk->zero;
	for (__u32 i = 0; i < HD; i++)
		if (i < wk->hd)
			wk->d[(h * wk->hd + i) & M] = 0;
	__u32 positions = wk->pos + 1;
	return bpf_loop(positions, attend_position, &hc, 0) == positions ? 0 : 1;
}

static long store_kv(__u32 kvh, struct wctx *cx)
{
	struct work *wk = cx->wk;
	__u32 slot = wk->slot0 + wk->pos * wk->stride + kvh;
	struct kv *kv = bpf_map_lookup_elem(&kvcache, &slot);
	if (!kv)
		return 1;
	for (__u32 i = 0; i < HD; i++) {
		if (i >= wk->hd)
			break;
		kv->k[i] = wk->b[(kvh * wk->hd + i) & M];
		kv->v[i] = wk->c[(kvh * wk->hd + i) & M];
	}
	return 0;
}

static long qnorm_head(__u32 h, struct wctx *cx)
{
	return norm_range(cx->wk, cx->wk->a, h * cx->wk->hd, cx->wk->hd, 0);
}

static long knorm_head(__u32 h, struct wctx *cx)
{
	return norm_range(cx->wk, cx->wk->b, h * cx->wk->hd, cx->wk->hd, cx->wk->hd);
}

/* q in a (heads·hd), this token's k and v in b and c (kv_heads·hd); with QKNORM and ROPE those
 * come first. Writes k and v to the cache at `pos` (a slot holds up to HD of each), then each
 * head's softmax-weighted values to d. */
SEC("socket")
int qwen3_attention(struct __sk_buff *skb)
{
	struct work *wk = get_work();
	if (!wk || !heads_fit(wk, wk->heads) || !heads_fit(wk, wk->kv_heads))
		return 0;
	struct wctx cx = { .wk = wk };
	if (wk->flags & QKNORM) {
		if (bpf_loop(wk->heads, qnorm_head, &cx, 0) != wk->heads ||
		    bpf_loop(wk->kv_heads, knorm_head, &cx, 0) != wk->kv_heads)
			return 0;
	}
	if (wk->flags & ROPE) {
		struct rope_ctx rq = { .wk = wk, .vec = wk->a }, rk = { .wk = wk, .vec = wk->b };
		if (bpf_loop(wk->heads, rope_head, &rq, 0) != wk->heads ||
		    bpf_loop(wk->kv_heads, rope_head, &rk, 0) != wk->kv_heads)
			return 0;
	}
	if (bpf_loop(wk->kv_heads, store_kv, &cx, 0) != wk->kv_heads)
		return 0;
	return bpf_loop(wk->heads, attend_head, &cx, 0) == wk->heads;
}
