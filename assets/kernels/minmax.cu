#include "qwengpu.h"
/* Signed max − min (inputs below 2^30: no overflow, which C leaves undefined) and unsigned max. */
__global__ void minmax(const int *a, const int *b, int *c, unsigned *d, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		c[i] = max(a[i], b[i]) - min(a[i], b[i]);
		d[i] = max((unsigned)a[i], (unsigned)b[i]);
	}
}
