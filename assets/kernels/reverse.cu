#include "qwengpu.h"
/* y[n − 1 − i] = x[i]. */
__global__ void reverse(const int *x, int *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[n - 1 - i] = x[i];
}
