#include "qwengpu.h"
/* Bits set in x[i], by a loop that runs as many times as x[i] has significant bits. */
__global__ void popcount(const unsigned *x, unsigned *y, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned v = x[i], c = 0;
	while (v) {
		c += v & 1;
		v >>= 1;
	}
	y[i] = c;
}
