#include "qwengpu.h"
/* *count = how many x[i] exceed t, by atomicAdd of a comparison. */
__global__ void count_if(const int *x, unsigned *count, int t, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n && x[i] > t)
		atomicAdd(count, 1u);
}
