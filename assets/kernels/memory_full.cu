#include "qwengpu.h"
/* Three arrays of 42 words fill all 126 words of global memory: c = a ^ b, then thread 0
 * writes one word past c's end, which wraps to word 0, a[0] (memory never faults). */
__global__ void memory_full(const unsigned *a, const unsigned *b, unsigned *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] ^ b[i];
	if (i == 0)
		c[n] = 7;
}
