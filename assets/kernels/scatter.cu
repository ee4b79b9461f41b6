#include "qwengpu.h"
/* y[perm[i]] = x[i] * 3 for a permutation perm. */
__global__ void scatter(const int *x, const unsigned *perm, int *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[perm[i]] = x[i] * 3;
}
