#include "qwengpu.h"
/* The high words of signed products (mul.hi.s32) and the low words. */
__global__ void mulhi(const int *a, const int *b, int *hi, int *lo, int n)
{
	int i = threadIdx.x;
	if (i < n) {
		hi[i] = __mulhi(a[i], b[i]);
		lo[i] = (int)((unsigned)a[i] * (unsigned)b[i]);
	}
}
