#include "qwengpu.h"
/* y[i] = x[i−1] + 2·x[i] + x[i+1], the ends repeating their neighbour. */
__global__ void stencil3(const int *x, int *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	int l = i > 0 ? x[i - 1] : x[i];
	int r = i < n - 1 ? x[i + 1] : x[i];
	y[i] = l + 2 * x[i] + r;
}
