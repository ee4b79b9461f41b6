#include "qwengpu.h"
/* Four blocks each sum their 8 values in shared memory (which each block gets fresh). */
__global__ void block_sums(const int *x, int *out)
{
	__shared__ int s[8];
	int t = threadIdx.x;
	s[t] = x[blockIdx.x * blockDim.x + t];
	__syncthreads();
	if (t == 0) {
		int acc = 0;
		for (int k = 0; k < 8; k++)
			acc += s[k];
		out[blockIdx.x] = acc;
	}
}
