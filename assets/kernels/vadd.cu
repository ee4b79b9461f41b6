#include "qwengpu.h"
/* c[i] = a[i] + b[i], one thread per element, guarded. */
__global__ void vadd(const int *a, const int *b, int *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
}
