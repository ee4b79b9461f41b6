#include "qwengpu.h"
/* A whole bitonic sort of n (a power of two, ≤ 16) values in shared memory: nested loops, a
 * barrier per step. The loops run to n, not to a constant, so clang keeps them loops. */
__global__ void bitonic_sort(int *x, unsigned n)
{
	__shared__ int s[16];
	unsigned i = threadIdx.x;
	s[i] = x[i];
	__syncthreads();
	for (unsigned k = 2; k <= n; k <<= 1) {
		for (unsigned j = k >> 1; j > 0; j >>= 1) {
			unsigned p = i ^ j;
			if (p > i) {
				int a = s[i], b = s[p];
				if ((a > b) == ((i & k) == 0)) {
					s[i] = b;
					s[p] = a;
				}
			}
			__syncthreads();
		}
	}
	x[i] = s[i];
}
