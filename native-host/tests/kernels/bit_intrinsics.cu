#include "qwengpu.h"
/* CUDA's bit intrinsics on x[i] and z[i]: population count, bit reversal, leading zeros, a byte
 * permutation and the high word of the product. */
__global__ void bit_intrinsics(const unsigned *x, const unsigned *z, unsigned *out, int n)
{
	int i = threadIdx.x;
	if (i >= n)
		return;
	unsigned a = x[i], b = z[i];
	out[5 * i + 0] = __popc(a);
	out[5 * i + 1] = __brev(a);
	out[5 * i + 2] = __clz(a);
	out[5 * i + 3] = __byte_perm(a, b, 0x0123);
	out[5 * i + 4] = __umulhi(a, b) + b;
}
