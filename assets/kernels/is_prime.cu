#include "qwengpu.h"
/* 1 if x[i] is prime, by trial division up to its square root (an early-exit loop). */
__global__ void is_prime(const unsigned *x, unsigned *y, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned v = x[i], p = v >= 2;
	for (unsigned d = 2; d * d <= v; d++) {
		if (v % d == 0) {
			p = 0;
			break;
		}
	}
	y[i] = p;
}
