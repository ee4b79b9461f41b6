#include "qwengpu.h"
/* Unsigned and signed bit fields of x[i]: single bits, a nibble, a byte moved into y[i]. */
__global__ void bit_fields(const unsigned *x, unsigned *y, int *s, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	unsigned v = x[i];
	unsigned bits = 0;
	for (int k = 0; k < 6; k++)
		bits += (v >> k) & 1u;
	unsigned nibble = (v >> 3) & 0xfu;
	unsigned byte = (v >> 12) & 0xffu;
	y[i] = (y[i] & ~(0xffu << 8)) | (byte << 8) | (nibble << 28) | bits;
	s[i] = ((int)(v << 20)) >> 24;
}
