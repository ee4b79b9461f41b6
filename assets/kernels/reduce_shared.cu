#include "qwengpu.h"
/* Tree reduction in shared memory with __syncthreads between levels; thread 0 adds the block's
 * sum to *out with atomicAdd (several blocks). */
__global__ void reduce_shared(const int *x, int *out, int n)
{
	__shared__ int s[16];
	int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
	s[t] = i < n ? x[i] : 0;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k >>= 1) {
		if (t < k)
			s[t] += s[t + k];
		__syncthreads();
	}
	if (t == 0)
		atomicAdd(out, s[0]);
}
