#include "qwengpu.h"
/* One compare-exchange step (j, k) of a bitonic sort on global memory. */
__global__ void bitonic_step(int *x, int j, int k)
{
	unsigned i = threadIdx.x, p = i ^ j;
	if (p > i) {
		int a = x[i], b = x[p];
		int up = (i & k) == 0;
		if ((a > b) == up) {
			x[i] = b;
			x[p] = a;
		}
	}
}
