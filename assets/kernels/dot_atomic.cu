#include "qwengpu.h"
/* *out += a[i] · b[i] from every thread with atomicAdd. */
__global__ void dot_atomic(const int *a, const int *b, int *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		atomicAdd(out, a[i] * b[i]);
}
