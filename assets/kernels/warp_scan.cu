#include "qwengpu.h"
/* Inclusive scan within each warp with __shfl_up_sync. */
__global__ void warp_scan(const int *x, int *y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	int lane = threadIdx.x & (warpSize - 1);
	int v = x[i];
	for (int d = 1; d < warpSize; d <<= 1) {
		int u = __shfl_up_sync(0xf, v, d);
		if (lane >= d)
			v += u;
	}
	y[i] = v;
}
