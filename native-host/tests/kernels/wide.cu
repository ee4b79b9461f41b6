#include "qwengpu.h"
/* 64-bit integers: a fixed-point product, the high word of an unsigned one, comparisons and
 * min/max of values past 32 bits, a long long accumulator over a long index, 64-bit loads and
 * stores, shifts by 32 and more. */
__global__ void fixed(const int *x, const int *y, int *out, unsigned *hi, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	long long p = (long long)x[i] * y[i];
	out[i] = (int)(p >> 20);
	unsigned long long u = (unsigned long long)(unsigned)x[i] * (unsigned)y[i];
	hi[i] = (unsigned)(u >> 32) ^ (unsigned)(u >> 40);
}

__global__ void compare(const int *x, const int *y, int *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	long long a = (long long)x[i] << 33, b = (long long)y[i] * 3000000000LL;
	out[i] = (a < b) + 2 * (a == b) + 4 * ((unsigned long long)a > (unsigned long long)b) +
		 8 * (int)((a > b ? a : b) >> 35);
}

__global__ void sums(const int *x, long long *total, long n)
{
	long long s = 0;
	for (long i = threadIdx.x; i < n; i += blockDim.x)
		s += (long long)x[i] * x[i];
	total[threadIdx.x] = s;
}

__global__ void scale(const long long *v, long long *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = (v[i] >> 3) + (v[i] << 29) - (long long)((unsigned long long)v[i] >> 61);
}
