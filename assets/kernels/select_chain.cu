#include "qwengpu.h"
/* Nested conditional expressions (selects, no branches). */
__global__ void select_chain(const int *a, const int *b, int *c, int n)
{
	int i = threadIdx.x;
	if (i < n) {
		int x = a[i], y = b[i];
		c[i] = x > y ? (x & 1 ? x : y) : (y & 2 ? x + y : x - y);
	}
}
