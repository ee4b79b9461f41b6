#include "qwengpu.h"
/* A do-while loop: halves until below 10, counting steps (at least one). */
__global__ void countdown(const unsigned *x, unsigned *y, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned v = x[i], k = 0;
	do {
		v /= 2;
		k++;
	} while (v >= 10);
	y[i] = k * 1000 + v;
}
