#include "qwengpu.h"
/* A small rotate-xor-multiply hash of x[i], `rounds` times. */
__global__ void rotate_hash(const unsigned *x, unsigned *h, int rounds, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	unsigned v = x[i];
	for (int r = 0; r < rounds; r++) {
		v = (v << 5) | (v >> 27);
		v ^= 0x9e3779b9u + (unsigned)r;
		v *= 0x85ebca6bu;
	}
	h[i] = v;
}
