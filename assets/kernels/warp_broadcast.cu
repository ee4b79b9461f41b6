#include "qwengpu.h"
/* Every lane takes lane (src mod 4)'s value with __shfl_sync, plus its own. */
__global__ void warp_broadcast(const int *x, int *y, int src)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	int v = x[i];
	y[i] = __shfl_sync(0xf, v, src) + v;
}
