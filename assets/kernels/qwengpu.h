/* What a CUDA kernel for the qwenGPU machine needs, without the CUDA toolkit: clang's own
 * threadIdx/blockIdx/blockDim/gridDim, and atomics and warp shuffles on its NVVM builtins.
 * The machine's warps are 4 lanes wide: warpSize is 4, and shuffles read within those 4 lanes.
 * Compile: clang-19 --cuda-device-only --cuda-gpu-arch=sm_75 -nocudainc -nocudalib -O2 -S */
#include <__clang_cuda_builtin_vars.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __attribute__((always_inline))
/* A __constant__ table is read-only global memory here (the host lays it out after the arguments). */
#define __constant__ __attribute__((constant))
#define warpSize 4
/* CUDA's integer vector types, aligned as CUDA aligns them (clang loads an aligned one with one
 * ld.v2/ld.v4), with their make_ functions. */
typedef struct __attribute__((aligned(8))) { int x, y; } int2;
typedef struct __attribute__((aligned(8))) { unsigned x, y; } uint2;
typedef struct __attribute__((aligned(16))) { int x, y, z, w; } int4;
typedef struct __attribute__((aligned(16))) { unsigned x, y, z, w; } uint4;
static __device__ __forceinline__ int2 make_int2(int x, int y) { int2 v = {x, y}; return v; }
static __device__ __forceinline__ uint2 make_uint2(unsigned x, unsigned y) { uint2 v = {x, y}; return v; }
static __device__ __forceinline__ int4 make_int4(int x, int y, int z, int w) { int4 v = {x, y, z, w}; return v; }
static __device__ __forceinline__ uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { uint4 v = {x, y, z, w}; return v; }
/* __syncthreads is a clang builtin already. */
static __device__ __forceinline__ int atomicAdd(int *p, int v) { return __nvvm_atom_add_gen_i(p, v); }
static __device__ __forceinline__ unsigned atomicAdd(unsigned *p, unsigned v)
{
	return (unsigned)__nvvm_atom_add_gen_i((int *)p, (int)v);
}
static __device__ __forceinline__ int atomicSub(int *p, int v) { return atomicAdd(p, -v); }
static __device__ __forceinline__ unsigned atomicSub(unsigned *p, unsigned v) { return atomicAdd(p, 0u - v); }
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
/* The rest of CUDA's integer intrinsics, written as C so clang emits the instructions it would. */
static __device__ __forceinline__ int abs(int x) { return x < 0 ? -x : x; }
static __device__ __forceinline__ unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static __device__ __forceinline__ unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
/* The position of the least significant set bit, from 1; 0 for 0. */
static __device__ __forceinline__ int __ffs(int x) { return __builtin_ffs(x); }
/* |a − b| + c, the difference taken without overflow. */
static __device__ __forceinline__ unsigned __sad(int a, int b, unsigned c) { return (a > b ? (unsigned)a - (unsigned)b : (unsigned)b - (unsigned)a) + c; }
static __device__ __forceinline__ unsigned __usad(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }
/* The product of the low 24 bits (sign-extended for __mul24). */
static __device__ __forceinline__ int __mul24(int a, int b) { return ((a << 8) >> 8) * ((b << 8) >> 8); }
static __device__ __forceinline__ unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffff) * (b & 0xffffff); }
/* (a + b) >> 1 and (a + b + 1) >> 1 without the intermediate overflowing. */
static __device__ __forceinline__ int __hadd(int a, int b) { return (a >> 1) + (b >> 1) + (a & b & 1); }
static __device__ __forceinline__ int __rhadd(int a, int b) { return (a >> 1) + (b >> 1) + ((a | b) & 1); }
static __device__ __forceinline__ unsigned __uhadd(unsigned a, unsigned b) { return (a >> 1) + (b >> 1) + (a & b & 1); }
static __device__ __forceinline__ unsigned __urhadd(unsigned a, unsigned b) { return (a >> 1) + (b >> 1) + ((a | b) & 1); }
/* Funnel shifts of the 64-bit hi:lo: the high word after a left shift, the low word after a
 * right shift, by n & 31 (wrap) or by min(n, 32) (clamp, the _lc and _rc forms). */
static __device__ __forceinline__ unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned n) { n &= 31; return n ? (hi << n) | (lo >> (32 - n)) : hi; }
static __device__ __forceinline__ unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned n) { n &= 31; return n ? (lo >> n) | (hi << (32 - n)) : lo; }
static __device__ __forceinline__ unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned n) { return n >= 32 ? lo : __funnelshift_l(lo, hi, n); }
static __device__ __forceinline__ unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned n) { return n >= 32 ? hi : __funnelshift_r(lo, hi, n); }
