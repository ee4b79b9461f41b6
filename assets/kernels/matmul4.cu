#include "qwengpu.h"
/* C = A·B for 4×4 matrices, one thread per element. */
__global__ void matmul4(const int *A, const int *B, int *C)
{
	int t = threadIdx.x, r = t / 4, c = t % 4, acc = 0;
	for (int k = 0; k < 4; k++)
		acc += A[r * 4 + k] * B[k * 4 + c];
	C[t] = acc;
}
