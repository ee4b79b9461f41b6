#include "qwengpu.h"
/* Device functions that clang keeps as PTX functions (__noinline__): a loop with an early
 * return, a call from a device function, a void function storing through a generic pointer,
 * and a call whose result is dropped. */
__device__ __noinline__ int digits(unsigned v, unsigned base) {
  if (base < 2) return -1;
  int n = 0;
  do { v /= base; n++; } while (v);
  return n;
}
__device__ __noinline__ int weigh(unsigned v, unsigned base) { return digits(v, base) * 100 + (int)(v & 7); }
__device__ __noinline__ void put(int *out, int i, int v) { if (v & 1) out[i] = v; else out[i] = -v; }
__device__ __noinline__ int bump(int *counter) { return atomicAdd(counter, 1); }
__global__ void device_calls(const unsigned *x, int *y, int *count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  bump(count);
  put(y, i, weigh(x[i], i % 3 + 9));
}
