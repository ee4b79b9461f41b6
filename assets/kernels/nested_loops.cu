#include "qwengpu.h"
/* y[i] = Σ_{j < x[i]} Σ_{k < j} (j xor k): nested loops with per-lane trip counts. */
__global__ void nested_loops(const unsigned *x, unsigned *y, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned acc = 0;
	for (unsigned j = 0; j < x[i]; j++)
		for (unsigned k = 0; k < j; k++)
			acc += j ^ k;
	y[i] = acc;
}
