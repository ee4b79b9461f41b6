#include "qwengpu.h"
/* CUDA's vector types: an int4 read with one ld.v4 and an int2 written with one st.v2, the
 * load inside a device function clang keeps (so its vector operand is inlined too). */
__device__ __noinline__ int4 fetch(const int4 *v, int i) { return v[i]; }
__global__ void vectors(const int4 *v, int2 *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	int4 q = fetch(v, i);
	out[i] = make_int2(q.x + q.y * 2 + q.z * 3 + q.w * 4, q.w - q.x);
}

/* A struct passed to and returned from a device function by value (its words at offsets of
 * the parameter and of the result). */
struct Pair {
	int lo, hi;
};
__device__ __noinline__ Pair order(Pair p, int bias)
{
	if (p.lo > p.hi) {
		int t = p.lo;
		p.lo = p.hi;
		p.hi = t;
	}
	p.hi += bias;
	return p;
}
__global__ void ordered(const int *x, int *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	Pair p = {x[2 * i], x[2 * i + 1]};
	Pair q = order(p, i);
	y[2 * i] = q.lo;
	y[2 * i + 1] = q.hi * 10;
}
