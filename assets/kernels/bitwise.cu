#include "qwengpu.h"
/* c[i] = (a & b) ^ (a | ~b): and, or, not, xor. */
__global__ void bitwise(const unsigned *a, const unsigned *b, unsigned *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = (a[i] & b[i]) ^ (a[i] | ~b[i]);
}
