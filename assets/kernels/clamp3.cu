#include "qwengpu.h"
/* A three-way if / else if / else chain with a store in each arm. */
__global__ void clamp3(const int *x, int *y, int lo, int hi, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	int v = x[i];
	if (v < lo)
		y[i] = lo * 2;
	else if (v > hi)
		y[i] = hi + v;
	else
		y[i] = v;
}
