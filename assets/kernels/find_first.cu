#include "qwengpu.h"
/* The first index j with x[j] == key[i] (or n): a loop with a break. */
__global__ void find_first(const int *x, const int *key, int *at, int n, int m)
{
	int i = threadIdx.x;
	if (i >= m)
		return;
	int j = 0;
	for (; j < n; j++)
		if (x[j] == key[i])
			break;
	at[i] = j;
}
