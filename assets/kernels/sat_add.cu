#include "qwengpu.h"
/* Saturating signed add: the wrapped sum, or INT_MAX / INT_MIN where it overflowed. */
__global__ void sat_add(const int *a, const int *b, int *c, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	int s = (int)((unsigned)a[i] + (unsigned)b[i]);
	if (a[i] >= 0 && b[i] >= 0 && s < 0)
		s = 0x7fffffff;
	else if (a[i] < 0 && b[i] < 0 && s >= 0)
		s = (int)0x80000000u;
	c[i] = s;
}
