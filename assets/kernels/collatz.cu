#include "qwengpu.h"
/* Steps of the Collatz sequence from x[i] to 1 (capped): a data-dependent loop with a divergent
 * branch inside, lanes leaving at different iterations. */
__global__ void collatz(const unsigned *x, unsigned *steps, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	unsigned v = x[i], k = 0;
	while (v > 1 && k < 200) {
		if (v & 1)
			v = 3 * v + 1;
		else
			v >>= 1;
		k++;
	}
	steps[i] = k;
}
