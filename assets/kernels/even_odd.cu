#include "qwengpu.h"
/* Odd threads double, even ones add 100: the lanes of every warp split in two. */
__global__ void even_odd(const int *x, int *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	if (i & 1)
		y[i] = x[i] * 2;
	else
		y[i] = x[i] + 100;
}
