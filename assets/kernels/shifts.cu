#include "qwengpu.h"
/* Logical and arithmetic shifts by data-dependent amounts. */
__global__ void shifts(const int *a, const unsigned *s, int *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		unsigned k = s[i] & 31;
		c[i] = (int)((unsigned)a[i] << k) ^ (int)((unsigned)a[i] >> (k & 7)) ^ (a[i] >> (31 - k));
	}
}
