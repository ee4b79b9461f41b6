#include "qwengpu.h"
/* The (x[i] mod 48)-th Fibonacci number, wrapping at 32 bits. */
__global__ void fib(const unsigned *x, unsigned *y, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned a = 0, b = 1, k = x[i] % 48;
	for (unsigned j = 0; j < k; j++) {
		unsigned t = a + b;
		a = b;
		b = t;
	}
	y[i] = a;
}
