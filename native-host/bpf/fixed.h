/* qwen3-ebpf's integer arithmetic shared by the programs; each function is the C twin of the
 * one of the same name in kernels_wasm::qwen3::fixed (the golden model). */
#ifndef SUBSTRATES_FIXED_H
#define SUBSTRATES_FIXED_H

/* Newton: 24 steps from 2^20, the low bit forced to 1 after each (never 0). */
static __always_inline __u64 isqrt(__u64 v)
{
	__u64 root = 1 << 20;
	for (int i = 0; i < 24; i++) {
		root = (root + v / root) >> 1;
		root |= 1;
	}
	return root;
}

/* e^-d for a Q16 d, in Q32: (1 - d/1024)^1024 by ten squarings. */
static __always_inline __u64 exp_neg(__s64 d)
{
	if (d <= 0)
		return 1ULL << 32;
	if (d >= (16LL << 16))
		return 0;
	__u64 r = (1ULL << 32) - ((__u64)d << 6);
	for (int i = 0; i < 10; i++)
		r = (r * r) >> 32;
	return r;
}

/* x · sigmoid(x), Q16. */
static __always_inline __s32 silu(__s32 x)
{
	if (x >= (16 << 16))
		return x;
	if (x <= -(16 << 16))
		return 0;
	__u64 e = exp_neg(x < 0 ? -(__s64)x : x);
	__u64 sig = x >= 0 ? (1ULL << 48) / ((1ULL << 32) + e) : (e << 16) / ((1ULL << 32) + e);
	return (__s32)(((__s64)x * (__s64)sig) >> 16);
}

/* The normalised value of x (Q16) given the row's 2^32/rms and its Q20 scale. */
static __always_inline __s32 norm_one(__s32 x, __u64 inv, __s32 w)
{
	__s64 normed = ((__s64)x * (__s64)inv) >> 16;
	return (__s32)((normed * w) >> 20);
}

#endif
