/* What a CUDA kernel for the qwenGPU machine needs, without the CUDA toolkit: clang's own
 * threadIdx/blockIdx/blockDim/gridDim, and atomics and warp shuffles on its NVVM builtins.
 * The machine's warps are 4 lanes wide: warpSize is 4, and shuffles read within those 4 lanes.
 * Compile: clang-19 --cuda-device-only --cuda-gpu-arch=sm_75 -nocudainc -nocudalib -O2 -S */
#include <__clang_cuda_builtin_vars.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __attribute__((always_inline))
#define warpSize 4
/* __syncthreads is a clang builtin already. */
static __device__ __forceinline__ int atomicAdd(int *p, int v) { return __nvvm_atom_add_gen_i(p, v); }
static __device__ __forceinline__ unsigned atomicAdd(unsigned *p, unsigned v)
{
	return (unsigned)__nvvm_atom_add_gen_i((int *)p, (int)v);
}
/* The mask is accepted for source compatibility; the machine's shuffles read the whole warp. */
static __device__ __forceinline__ int __shfl_sync(unsigned mask, int v, int lane) { return __nvvm_shfl_idx_i32(v, lane, 0x1f); }
static __device__ __forceinline__ int __shfl_down_sync(unsigned mask, int v, unsigned d) { return __nvvm_shfl_down_i32(v, d, 0x1f); }
static __device__ __forceinline__ int __shfl_up_sync(unsigned mask, int v, unsigned d) { return __nvvm_shfl_up_i32(v, d, 0); }
static __device__ __forceinline__ int __shfl_xor_sync(unsigned mask, int v, int m) { return __nvvm_shfl_bfly_i32(v, m, 0x1f); }
static __device__ __forceinline__ int min(int a, int b) { return a < b ? a : b; }
static __device__ __forceinline__ int max(int a, int b) { return a > b ? a : b; }
static __device__ __forceinline__ unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static __device__ __forceinline__ unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
/* The high word of the signed 64-bit product (mul.hi.s32). */
static __device__ __forceinline__ int __mulhi(int a, int b) { return __nvvm_mulhi_i(a, b); }
/* CUDA's bit intrinsics, on clang's generic builtins (popc, brev and clz in PTX). */
static __device__ __forceinline__ int __popc(unsigned x) { return __builtin_popcount(x); }
static __device__ __forceinline__ unsigned __brev(unsigned x) { return __builtin_bitreverse32(x); }
static __device__ __forceinline__ int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static __device__ __forceinline__ unsigned __byte_perm(unsigned a, unsigned b, unsigned s) { return __nvvm_prmt(a, b, s); }
static __device__ __forceinline__ unsigned __umulhi(unsigned a, unsigned b) { return __nvvm_mulhi_ui(a, b); }
