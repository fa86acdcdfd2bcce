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

/* A 16-byte access's address: checked by the emulation (emulation.h), which
 * aborts on a misaligned one as the device would fault; nothing on the device. */
#ifdef LACS_CUDA_EMULATION
#define LACS_ALIGNED16(p) lacs_emulated_aligned((const void *)(p), 16, "a 16-byte access")
#else
#define LACS_ALIGNED16(p) ((void)0)
#endif

/* A loop the device compiler unrolls (so that small arrays indexed by its
 * counter stay in registers); the host compiler of the emulation decides. */
#ifdef LACS_CUDA_EMULATION
#define LACS_UNROLL
#else
#define LACS_UNROLL _Pragma("unroll")
#endif

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
__host__ __device__ inline size_t lacs_shared_round(size_t bytes) { return (bytes + 127) / 128 * 128; }

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

/* ---- the workspace ----
 * The cached device workspace (lacs_cuda_workspace_acquire, device.cu) cut
 * into n parts of bytes[i] bytes, each 256-byte aligned (NULL for 0 bytes).
 * false, with nothing held, when the device is out of memory; else the caller
 * ends with lacs_cuda_workspace_release(), which waits for its kernels. */
static inline bool lacs_workspace_carve(const size_t *bytes, void **parts, int n, size_t *total_bytes)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (bytes[i] + 255) / 256 * 256;
    *total_bytes = total;
    char *base = (char *)lacs_cuda_workspace_acquire(total);
    if (!base)
        return false;
    for (int i = 0; i < n; i++) {
        parts[i] = bytes[i] ? base : nullptr;
        base += (bytes[i] + 255) / 256 * 256;
    }
    return true;
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

/* fp32 operands: each thread computes R x R outputs at a time (R = 4, 2 or
 * 1: the largest that still gives every thread a tile), each output summed
 * over p = 0 .. K - 1 in order with fmaf: the same bits whatever R is. R x R
 * tiles read 2 R values of shared memory per R^2 fused multiply-adds. */
template <int R, bool TransA, bool TransB>
__device__ __forceinline__ void lacs_block_gemm_fp32_tiles(const float *A, int lda, const float *B, int ldb, float *C,
                                                           int ldc, int M, int N, int K, bool accumulate)
{
    const int tiles_n = N / R, tiles = (M / R) * tiles_n;
    for (int tile = (int)threadIdx.x; tile < tiles; tile += (int)blockDim.x) {
        const int i0 = tile / tiles_n * R, j0 = tile % tiles_n * R;
        float acc[R][R];
        LACS_UNROLL
        for (int r = 0; r < R; r++)
            LACS_UNROLL
            for (int c = 0; c < R; c++)
                acc[r][c] = accumulate ? C[(size_t)(i0 + r) * ldc + j0 + c] : 0.0f;
        for (int p = 0; p < K; p++) {
            float a[R], b[R];
            LACS_UNROLL
            for (int r = 0; r < R; r++)
                a[r] = TransA ? A[(size_t)p * lda + i0 + r] : A[(size_t)(i0 + r) * lda + p];
            LACS_UNROLL
            for (int c = 0; c < R; c++)
                b[c] = TransB ? B[(size_t)(j0 + c) * ldb + p] : B[(size_t)p * ldb + j0 + c];
            LACS_UNROLL
            for (int r = 0; r < R; r++)
                LACS_UNROLL
                for (int c = 0; c < R; c++)
                    acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
        }
        LACS_UNROLL
        for (int r = 0; r < R; r++)
            LACS_UNROLL
            for (int c = 0; c < R; c++)
                C[(size_t)(i0 + r) * ldc + j0 + c] = acc[r][c];
    }
}

template <bool TransA, bool TransB>
__device__ void lacs_block_gemm(const float *A, int lda, const float *B, int ldb, float *C, int ldc, int M, int N,
                                int K, bool accumulate)
{
    const int threads = (int)blockDim.x;
    if ((M / 4) * (N / 4) >= threads)
        lacs_block_gemm_fp32_tiles<4, TransA, TransB>(A, lda, B, ldb, C, ldc, M, N, K, accumulate);
    else if ((M / 2) * (N / 2) >= threads)
        lacs_block_gemm_fp32_tiles<2, TransA, TransB>(A, lda, B, ldb, C, ldc, M, N, K, accumulate);
    else
        lacs_block_gemm_fp32_tiles<1, TransA, TransB>(A, lda, B, ldb, C, ldc, M, N, K, accumulate);
}

/* ---- one warp's 16 x 16 tile ----
 * C [16 x 16] (fp32, row-major, ldc, shared memory) += A [16 x K] B [K x 16],
 * the operands stored as lacs_block_gemm's (A row-major [16 x K] or, with
 * TransA, its transpose [K x 16]; B [K x 16] or, with TransB, [16 x K]); K a
 * multiple of 16. Only the calling warp takes part, every lane of it; it
 * starts and ends with __syncwarp, so that the warp's lanes may write C
 * before and read it after without a block-wide barrier. bf16: WMMA, fp32
 * accumulation; fp32: lane l computes row l % 16, columns 8 (l / 16) .. + 7,
 * each summed in k order with fmaf (the same bits as lacs_block_gemm). */
template <bool TransA, bool TransB>
__device__ void lacs_warp_tile_gemm(const unsigned short *A, int lda, const unsigned short *B, int ldb, float *C,
                                    int ldc, int K)
{
    using namespace nvcuda;
    typedef typename std::conditional<TransA, wmma::col_major, wmma::row_major>::type layout_a;
    typedef typename std::conditional<TransB, wmma::col_major, wmma::row_major>::type layout_b;
    const __nv_bfloat16 *a16 = reinterpret_cast<const __nv_bfloat16 *>(A);
    const __nv_bfloat16 *b16 = reinterpret_cast<const __nv_bfloat16 *>(B);
    __syncwarp();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, C, (unsigned)ldc, wmma::mem_row_major);
    for (int p = 0; p < K; p += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, layout_a> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, layout_b> b;
        wmma::load_matrix_sync(a, TransA ? a16 + (size_t)p * lda : a16 + p, (unsigned)lda);
        wmma::load_matrix_sync(b, TransB ? b16 + p : b16 + (size_t)p * ldb, (unsigned)ldb);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C, acc, (unsigned)ldc, wmma::mem_row_major);
    __syncwarp();
}

template <bool TransA, bool TransB>
__device__ void lacs_warp_tile_gemm(const float *A, int lda, const float *B, int ldb, float *C, int ldc, int K)
{
    const int lane = (int)(threadIdx.x % 32), i = lane % 16, j0 = lane / 16 * 8;
    __syncwarp();
    float acc[8];
    LACS_UNROLL
    for (int c = 0; c < 8; c++)
        acc[c] = C[(size_t)i * ldc + j0 + c];
    for (int p = 0; p < K; p++) {
        const float a = TransA ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
        LACS_UNROLL
        for (int c = 0; c < 8; c++)
            acc[c] = fmaf(a, TransB ? B[(size_t)(j0 + c) * ldb + p] : B[(size_t)p * ldb + j0 + c], acc[c]);
    }
    __syncwarp(); /* every lane has read C before any writes it */
    LACS_UNROLL
    for (int c = 0; c < 8; c++)
        C[(size_t)i * ldc + j0 + c] = acc[c];
    __syncwarp();
}

/* ---- tiles between global and shared memory ----
 * lacs_load_tile: dst [padded_rows x ld] (the operand type) = rows of an
 * input, zero past `rows` and `cols`: dst[r][c] = src[base + r row_stride + c],
 * rounded to the operand type (exact when the input has that type). When the
 * input has the operand's type and every row starts on a 16-byte boundary,
 * each thread moves 16 bytes at a time (8 bf16 or 4 fp32 values), else one
 * value. ld is a multiple of 16 and dst 128-byte aligned (lacs_shared_round).
 * read_only: the input is not written during the launch, so the loads may
 * take the read-only data path (__ldg); memory the kernel itself writes must
 * not (the path is not coherent with the launch's own stores). */
template <typename Op>
__device__ void lacs_load_tile(Op *dst, int ld, int padded_rows, lacs_view src, int64_t base, int64_t row_stride,
                               int rows, int cols, bool read_only = true)
{
    const int per16 = 16 / (int)sizeof(Op);
    const bool same_type = (sizeof(Op) == 2) == (src.bf16 != 0);
    if (same_type && cols % per16 == 0 && base % per16 == 0 && row_stride % per16 == 0) {
        const int vectors = ld / per16;
        const Op *from = (const Op *)src.data;
        uint4 *to = reinterpret_cast<uint4 *>(dst);
        for (int e = (int)threadIdx.x; e < padded_rows * vectors; e += (int)blockDim.x) {
            const int r = e / vectors, c = e % vectors * per16;
            uint4 value = make_uint4(0u, 0u, 0u, 0u);
            if (r < rows && c < cols) {
                const uint4 *at = reinterpret_cast<const uint4 *>(from + base + r * row_stride + c);
                LACS_ALIGNED16(at);
                value = read_only ? __ldg(at) : *at;
            }
            LACS_ALIGNED16(&to[e]);
            to[e] = value;
        }
        return;
    }
    for (int e = (int)threadIdx.x; e < padded_rows * ld; e += (int)blockDim.x) {
        const int r = e / ld, c = e % ld;
        lacs_store_operand(&dst[e], r < rows && c < cols ? lacs_view_at(src, base + r * row_stride + c) : 0.0f);
    }
}

/* Copies `rows` rows of `row_bytes` bytes (a multiple of 16; both pointers and
 * strides 16-byte aligned) from src (stride src_stride bytes) to dst (stride
 * dst_stride bytes), 16 bytes per thread at a time: shared memory to the
 * workspace and back. */
__device__ __forceinline__ void lacs_copy_rows(void *dst, size_t dst_stride, const void *src, size_t src_stride,
                                               int rows, size_t row_bytes)
{
    const int vectors = (int)(row_bytes / 16);
    for (int e = (int)threadIdx.x; e < rows * vectors; e += (int)blockDim.x) {
        const int r = e / vectors, c = e % vectors;
        uint4 *to = reinterpret_cast<uint4 *>((char *)dst + r * dst_stride) + c;
        const uint4 *from = reinterpret_cast<const uint4 *>((const char *)src + r * src_stride) + c;
        LACS_ALIGNED16(to);
        LACS_ALIGNED16(from);
        *to = *from;
    }
}

/* ---- the deliberately wrong twins (make test-cuda) ----
 * Built only into build/liblacs_cuda_mutant.so, which is compiled for the
 * emulation with -DLACS_CUDA_MUTANTS: LACS_CUDA_MUTANT=<name> in the
 * environment selects one bug, and the suite must reject every one
 * (optimized/cuda/README.md section 5). In every other build LACS_MUTANT(x)
 * is false and the bug's code is dead. */
enum lacs_cuda_mutant_kind {
    LACS_MUTANT_NONE = 0,
    LACS_MUTANT_STATE_BF16,         /* recurrent family: the state kept in bf16 between chunks */
    LACS_MUTANT_GATE_PER_TOKEN,     /* recurrent family: gk's chunk sums restart at every sub-chunk */
    LACS_MUTANT_NO_RESCALE,         /* attention: the accumulator not rescaled when the row maximum grows */
    LACS_MUTANT_SECH2_FROM_TANH,    /* norms: sech^2 as 1 - tanh^2 in dyt_vjp and softcap_vjp */
    LACS_MUTANT_MESA_STALE_STATE,   /* mesa_net: o read from the states before the token's update */
    LACS_MUTANT_VJP_NO_ERASE,       /* delta rule VJPs: dbeta = du . v, the erase term -du . p dropped */
    LACS_MUTANT_VJP_DG_OF_FACTOR,   /* recurrent VJPs: the gate's gradient taken for the factor exp(g), not g */
    LACS_MUTANT_ATTN_VJP_NO_ROW_SUM, /* attention VJPs: the softmax's adjoint dS = P (.) dP, without - D */
    LACS_MUTANT_ATTN_VJP_GATE_SIGN,  /* attention VJPs: dG_t = +(column sum of t), the key's sign for the query's */
};
#ifdef LACS_CUDA_MUTANTS
#ifndef LACS_CUDA_EMULATION
#error "the mutants are built for the emulation only"
#endif
#define LACS_MUTANT(kind) (lacs_cuda_mutant_selected() == (kind))
#else
#define LACS_MUTANT(kind) false
#endif

#endif
