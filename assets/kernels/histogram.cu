#include "qwengpu.h"
/* h[x[i] mod bins] += 1 with atomicAdd on global memory. */
__global__ void histogram(const unsigned *x, unsigned *h, int n, unsigned bins)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		atomicAdd(&h[x[i] % bins], 1u);
}
