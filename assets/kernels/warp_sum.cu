#include "qwengpu.h"
/* Each warp sums its 4 values with __shfl_down_sync; lane 0 writes the warp's sum. */
__global__ void warp_sum(const int *x, int *out)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	int v = x[i];
	for (int d = warpSize / 2; d > 0; d /= 2)
		v += __shfl_down_sync(0xf, v, d);
	if ((threadIdx.x & (warpSize - 1)) == 0)
		out[i / warpSize] = v;
}
