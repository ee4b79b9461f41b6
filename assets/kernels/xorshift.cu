#include "qwengpu.h"
/* Three steps of Marsaglia's xorshift32 per thread: shifts and xors. */
__global__ void xorshift(const unsigned *x, unsigned *y, int n)
{
	int i = threadIdx.x;
	if (i < n) {
		unsigned v = x[i];
		for (int k = 0; k < 3; k++) {
			v ^= v << 13;
			v ^= v >> 17;
			v ^= v << 5;
		}
		y[i] = v;
	}
}
