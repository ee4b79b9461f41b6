/* The suite's kernels on a real NVIDIA GPU: `native-host qwengpu nvcc --emit` puts this file in
 * place of qwengpu.h. nvcc's own CUDA headers give threadIdx, atomicAdd, __syncthreads, min, max
 * and __mulhi; only the warp differs. The machine's warps are 4 lanes wide, so warpSize is 4 and
 * every shuffle reads within its 4-lane group of the hardware warp (width 4: the same edge rules
 * as the machine, a source lane outside the group gives the lane's own value). The mask is the
 * active lanes: the suite's masks (0xf) name machine lanes, and a block of 8, 12 or 16 threads
 * leaves the rest of the hardware warp empty. */
#define warpSize 4
#define __shfl_sync(mask, v, lane) __shfl_sync(__activemask(), (v), (lane), 4)
#define __shfl_down_sync(mask, v, d) __shfl_down_sync(__activemask(), (v), (d), 4)
#define __shfl_up_sync(mask, v, d) __shfl_up_sync(__activemask(), (v), (d), 4)
#define __shfl_xor_sync(mask, v, m) __shfl_xor_sync(__activemask(), (v), (m), 4)
