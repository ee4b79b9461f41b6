#include "qwengpu.h"
/* The largest value and its first index, by a tree of (value, index) pairs in shared memory. */
__global__ void argmax(const int *x, int *best, int n)
{
	__shared__ int v[16];
	__shared__ int at[16];
	int t = threadIdx.x;
	v[t] = t < n ? x[t] : -2147483647;
	at[t] = t;
	__syncthreads();
	for (int k = blockDim.x / 2; k > 0; k >>= 1) {
		if (t < k && (v[t + k] > v[t] || (v[t + k] == v[t] && at[t + k] < at[t]))) {
			v[t] = v[t + k];
			at[t] = at[t + k];
		}
		__syncthreads();
	}
	if (t == 0) {
		best[0] = v[0];
		best[1] = at[0];
	}
}
