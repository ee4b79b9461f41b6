#include "qwengpu.h"
/* Every special register: thread, block, block size, block count. */
__global__ void specials(int *y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	y[i] = threadIdx.x + 10 * blockIdx.x + 100 * blockDim.x + 1000 * gridDim.x;
}
