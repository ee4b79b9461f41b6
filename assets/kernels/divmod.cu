#include "qwengpu.h"
/* Signed quotient and remainder (divisors never 0), and unsigned ones. */
__global__ void divmod(const int *a, const int *b, int *q, int *r, unsigned *uq, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		q[i] = a[i] / b[i];
		r[i] = a[i] % b[i];
		uq[i] = (unsigned)a[i] / (unsigned)b[i] + (unsigned)a[i] % (unsigned)b[i];
	}
}
