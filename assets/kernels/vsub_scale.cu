#include "qwengpu.h"
/* c[i] = (a[i] - b[i]) * k, wrapping. */
__global__ void vsub_scale(const int *a, const int *b, int *c, int k, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = (a[i] - b[i]) * k;
}
