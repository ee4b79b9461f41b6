#include "qwengpu.h"
/* Euclid's gcd with %, trip counts differing per lane. */
__global__ void gcd(const unsigned *a, const unsigned *b, unsigned *g, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned x = a[i], y = b[i];
	while (y != 0) {
		unsigned t = x % y;
		x = y;
		y = t;
	}
	g[i] = x;
}
