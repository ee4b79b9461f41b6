#include "qwengpu.h"
/* Inclusive prefix sum of one block in shared memory (Hillis–Steele, double-buffered). */
__global__ void prefix_scan(const int *x, int *y, int n)
{
	__shared__ int buf[2][16];
	int t = threadIdx.x, src = 0;
	buf[0][t] = t < n ? x[t] : 0;
	__syncthreads();
	for (int d = 1; d < blockDim.x; d <<= 1) {
		int v = buf[src][t];
		if (t >= d)
			v += buf[src][t - d];
		buf[1 - src][t] = v;
		src = 1 - src;
		__syncthreads();
	}
	if (t < n)
		y[t] = buf[src][t];
}
