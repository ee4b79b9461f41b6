#include "qwengpu.h"
/* p(x[i]) = c[0] + c[1]·x + … + c[deg]·x^deg by Horner's rule, wrapping. */
__global__ void horner(const unsigned *c, int deg, const unsigned *x, unsigned *y, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned acc = c[deg];
	for (int k = deg - 1; k >= 0; k--)
		acc = acc * x[i] + c[k];
	y[i] = acc;
}
