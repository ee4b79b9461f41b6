#include "qwengpu.h"
/* Σ x[i]² of one block: squares into shared memory, then thread 0 adds them up. */
__global__ void sum_squares(const int *x, int *out, int n)
{
	__shared__ int s[16];
	int t = threadIdx.x;
	s[t] = t < n ? x[t] * x[t] : 0;
	__syncthreads();
	if (t == 0) {
		int acc = 0;
		for (int k = 0; k < blockDim.x; k++)
			acc += s[k];
		*out = acc;
	}
}
