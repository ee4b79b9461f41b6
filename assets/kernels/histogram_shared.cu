#include "qwengpu.h"
/* A histogram in shared memory (atomicAdd on shared), then added to global (atomicAdd). */
__global__ void histogram_shared(const unsigned *x, unsigned *h, int n)
{
	__shared__ unsigned s[8];
	int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
	if (t < 8)
		s[t] = 0;
	__syncthreads();
	if (i < n)
		atomicAdd(&s[x[i] % 8], 1u);
	__syncthreads();
	if (t < 8)
		atomicAdd(&h[t], s[t]);
}
