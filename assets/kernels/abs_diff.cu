#include "qwengpu.h"
/* |a − b| by an if/else on which is larger: lanes take different arms. */
__global__ void abs_diff(const int *a, const int *b, int *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	int d;
	if (a[i] > b[i]) {
		d = a[i] - b[i];
		c[i] = d;
	} else {
		d = b[i] - a[i];
		c[i] = d + 0;
	}
}
