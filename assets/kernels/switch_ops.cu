#include "qwengpu.h"
/* A switch of six arms: many ROM blocks, lanes spread over all arms. */
__global__ void switch_ops(const unsigned *op, const unsigned *a, unsigned *y, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned v = a[i], r;
	switch (op[i] % 6) {
	case 0: r = v + 11; break;
	case 1: r = v * 3; break;
	case 2: r = v ^ 0x5a5a; break;
	case 3: r = v >> 3; break;
	case 4: r = v - 7; break;
	default: r = v | 0x100; break;
	}
	y[i] = r;
}
