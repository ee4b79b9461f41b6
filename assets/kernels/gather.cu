#include "qwengpu.h"
/* y[i] = x[idx[i]]. */
__global__ void gather(const int *x, const unsigned *idx, int *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = x[idx[i]];
}
