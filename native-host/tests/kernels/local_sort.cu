#include "qwengpu.h"
/* Each thread sorts its own four values in a local array (insertion sort, indices known only
 * at run time) and writes them back in order. */
__global__ void local_sort(const int *in, int *out, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  int a[4];
  for (int k = 0; k < 4; k++) a[k] = in[4 * t + k];
  for (int i = 1; i < 4; i++) {
    int v = a[i], j = i - 1;
    while (j >= 0 && a[j] > v) { a[j + 1] = a[j]; j--; }
    a[j + 1] = v;
  }
  for (int k = 0; k < 4; k++) out[4 * t + k] = a[k];
}
