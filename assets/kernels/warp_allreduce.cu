#include "qwengpu.h"
/* Butterfly all-reduce with __shfl_xor_sync: every lane ends with its warp's sum. */
__global__ void warp_allreduce(const int *x, int *y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	int v = x[i];
	for (int m = 1; m < warpSize; m <<= 1)
		v += __shfl_xor_sync(0xf, v, m);
	y[i] = v;
}
