#include "qwengpu.h"
/* CUDA's integer intrinsics beyond the bit instructions, as qwengpu.h defines them. */
__global__ void abs_ffs_sad(const int *a, const int *b, unsigned *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	out[4 * i] = (unsigned)abs(a[i]);
	out[4 * i + 1] = (unsigned)__ffs(a[i]);
	out[4 * i + 2] = __sad(a[i], b[i], 5u);
	out[4 * i + 3] = __usad((unsigned)a[i], (unsigned)b[i], 1u);
}

__global__ void funnel(const unsigned *a, const unsigned *b, unsigned *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	unsigned x = a[i], y = b[i];
	out[i] = __funnelshift_l(x, y, i * 5) ^ __funnelshift_r(x, y, i * 7) ^ __funnelshift_lc(x, y, i * 9) ^
		 __funnelshift_rc(y, x, i * 9);
}

__global__ void halves(const unsigned *a, const unsigned *b, unsigned *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	unsigned x = a[i], y = b[i];
	unsigned r = (unsigned)__mul24((int)x, (int)y) + __umul24(x, y) + (unsigned)__hadd((int)x, (int)y) + __urhadd(x, y) * 3u;
	out[i] = r + umin(x, y) * 5u + umax(x, y) + (unsigned)__rhadd((int)x, (int)y) * 7u + __uhadd(x, y) * 11u;
}

/* A kernel written for a 2-D launch, run 1-D: y and z index 0 of extent 1, as in CUDA. */
__global__ void launch_dims(int *out, int *left, int n)
{
	int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x * blockDim.y + threadIdx.y * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	out[i] = i * 10000 + threadIdx.z * 1000 + blockDim.z * 100 + blockIdx.z * 10 + gridDim.y;
	atomicSub(&left[0], i);
}
