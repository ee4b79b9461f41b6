#include "qwengpu.h"
/* Row sums of a matrix stored with a row stride, indexed through 64-bit pointers. */
__global__ void strided_rows(const unsigned *m, unsigned *sums, unsigned stride, unsigned cols, int rows)
{
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= rows)
		return;
	const unsigned *row = m + (unsigned long long)r * stride;
	unsigned s = 0;
	for (unsigned c = 0; c < cols; c++)
		s += row[c] * (c + 1);
	sums[r] = s;
}
