/* builtin:cuda: the device helpers every family file uses (optimized/cuda/README.md section 1).
 *
 * Compiled by nvcc for the GPU, or with -DLACS_CUDA_EMULATION by the host C++
 * compiler for the emulation (emulation.h, whose four rules every kernel
 * keeps). Read top to bottom: the headers, bf16 as bits, reading an input of
 * either dtype, dynamic shared memory, the launch, and the block-wide
 * products on shared memory (bf16 on tensor cores through WMMA, fp32 on the
 * CUDA cores).
 */
#ifndef LACS_CUDA_COMMON_CUH
#define LACS_CUDA_COMMON_CUH

#ifdef LACS_CUDA_EMULATION
#include "emulation.h"
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#endif

#include <stdint.h>
#include <type_traits>

#include "cuda.h"
#include "lacs/types.h"

/* ---- bf16 as 16 bits ----
 * Inputs and operands are kept as unsigned short, the bf16 bit pattern, and
 * converted by these two functions: the widening is exact, the narrowing rounds to nearest even as the generators'
 * lacs_f32_to_bf16 does, NaN stays NaN. */

__device__ __forceinline__ float lacs_bf16_to_float(unsigned short bits)
{
    return __uint_as_float((unsigned)bits << 16);
}

__device__ __forceinline__ unsigned short lacs_float_to_bf16(float x)
{
    const unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((u >> 16) | 0x40u); /* quiet NaN */
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* An operand handed to a product: fp32 tier float, bf16 tier bf16 bits. */
__device__ __forceinline__ void lacs_store_operand(float *p, float x) { *p = x; }
__device__ __forceinline__ void lacs_store_operand(unsigned short *p, float x) { *p = lacs_float_to_bf16(x); }
__device__ __forceinline__ float lacs_operand_value(float x) { return x; }
__device__ __forceinline__ float lacs_operand_value(unsigned short x) { return lacs_bf16_to_float(x); }

/* ---- an input of either dtype ---- */

struct lacs_view {
    const void *data; /* device memory; NULL when the input is absent */
    int bf16;
};

static inline lacs_view lacs_view_of(const lacs_cuda_tensor *t)
{
    lacs_view v = {t ? t->device : nullptr, t ? t->dtype == LACS_BF16 : 0};
    return v;
}

__device__ __forceinline__ float lacs_view_at(lacs_view v, int64_t i)
{
    return v.bf16 ? lacs_bf16_to_float(((const unsigned short *)v.data)[i]) : ((const float *)v.data)[i];
}

/* ---- dynamic shared memory ---- */

#ifdef LACS_CUDA_EMULATION
__device__ __forceinline__ unsigned char *lacs_shared_memory(void) { return lacs_emulated_shared_memory(); }
#else
__device__ __forceinline__ unsigned char *lacs_shared_memory(void)
{
    extern __shared__ __align__(128) unsigned char lacs_dynamic_shared[];
    return lacs_dynamic_shared;
}
#endif

/* Carving shared memory: each buffer starts 128-byte aligned (WMMA wants 32). */
static inline size_t lacs_shared_round(size_t bytes) { return (bytes + 127) / 128 * 128; }

/* ---- the launch ----
 * One call for the GPU and the emulation: grid, block, dynamic shared memory
 * (above 48 KiB the kernel is allowed it first), then the kernel's arguments. */

template <typename... Params, typename... Args>
cudaError_t lacs_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, Args... args)
{
#ifdef LACS_CUDA_EMULATION
    return lacs_emulate_launch(grid, block, shared_bytes, [&]() { kernel(args...); });
#else
    if (shared_bytes > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared_bytes);
        if (e != cudaSuccess)
            return e;
    }
    kernel<<<grid, block, shared_bytes>>>(args...);
    return cudaGetLastError();
#endif
}

/* A failed launch as an lacs error naming the kernel. */
static inline int lacs_cuda_launch_failed(const char *op, const char *kernel, cudaError_t e)
{
    return lacs_cuda_error(LACS_ERR_INPUT, op, "CUDA kernel %s failed to launch: %s", kernel, cudaGetErrorString(e));
}

/* ---- block-wide products on shared memory ----
 * C[M x N] (+)= A[M x K] B[K x N], every thread of the block taking part,
 * with A stored row-major [M x K] (lda), or as its transpose [K x M] when
 * TransA; B stored [K x N] (ldb), or as its transpose [N x K] when TransB.
 * C is fp32, row-major (ldc). M, N, K are multiples of 16 (the caller pads
 * with zeros); leading dimensions are multiples of 16, buffers 128-byte
 * aligned. The caller puts a __syncthreads() before (the operands are
 * written) and after (C is read).
 *
 * bf16 operands: WMMA 16 x 16 x 16 tiles on the tensor cores, fp32
 * accumulation, one warp per output tile. fp32 operands: the CUDA cores,
 * one output per thread at a time, summed in k order with fmaf. */

template <bool TransA, bool TransB>
__device__ void lacs_block_gemm(const unsigned short *A, int lda, const unsigned short *B, int ldb, float *C,
                                int ldc, int M, int N, int K, bool accumulate)
{
    using namespace nvcuda;
    typedef typename std::conditional<TransA, wmma::col_major, wmma::row_major>::type layout_a;
    typedef typename std::conditional<TransB, wmma::col_major, wmma::row_major>::type layout_b;
    const __nv_bfloat16 *a16 = reinterpret_cast<const __nv_bfloat16 *>(A);
    const __nv_bfloat16 *b16 = reinterpret_cast<const __nv_bfloat16 *>(B);
    const int warp = (int)(threadIdx.x / 32), warps = (int)(blockDim.x / 32);
    const int tiles_n = N / 16, tiles = (M / 16) * tiles_n;
    for (int tile = warp; tile < tiles; tile += warps) {
        const int tm = tile / tiles_n, tn = tile % tiles_n;
        float *c = C + (size_t)tm * 16 * ldc + tn * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        if (accumulate)
            wmma::load_matrix_sync(acc, c, (unsigned)ldc, wmma::mem_row_major);
        else
            wmma::fill_fragment(acc, 0.0f);
        for (int p = 0; p < K; p += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, layout_a> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, layout_b> b;
            const __nv_bfloat16 *pa = TransA ? a16 + (size_t)p * lda + tm * 16 : a16 + (size_t)tm * 16 * lda + p;
            const __nv_bfloat16 *pb = TransB ? b16 + (size_t)tn * 16 * ldb + p : b16 + (size_t)p * ldb + tn * 16;
            wmma::load_matrix_sync(a, pa, (unsigned)lda);
            wmma::load_matrix_sync(b, pb, (unsigned)ldb);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(c, acc, (unsigned)ldc, wmma::mem_row_major);
    }
}

template <bool TransA, bool TransB>
__device__ void lacs_block_gemm(const float *A, int lda, const float *B, int ldb, float *C, int ldc, int M, int N,
                                int K, bool accumulate)
{
    for (int idx = (int)threadIdx.x; idx < M * N; idx += (int)blockDim.x) {
        const int i = idx / N, j = idx % N;
        float sum = accumulate ? C[(size_t)i * ldc + j] : 0.0f;
        for (int p = 0; p < K; p++) {
            const float a = TransA ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
            const float b = TransB ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
            sum = fmaf(a, b, sum);
        }
        C[(size_t)i * ldc + j] = sum;
    }
}

#endif
