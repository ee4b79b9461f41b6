#include "qwengpu.h"
/* A 4×4 tile transposed through shared memory: write by row, sync, read by column. */
__global__ void transpose(const int *a, int *b)
{
	__shared__ int tile[16];
	int t = threadIdx.x, r = t / 4, c = t % 4;
	tile[r * 4 + c] = a[t];
	__syncthreads();
	b[t] = tile[c * 4 + r];
}
