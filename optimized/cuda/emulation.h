/* builtin:cuda under emulation: the CUDA kernels of optimized/cuda/ compiled
 * by the host C++ compiler and run on the CPU (optimized/cuda/README.md section 5).
 *
 * Why: most machines that build lacs have no GPU, CI never has one, and a
 * kernel nobody ran is a kernel nobody knows to be right. Compiled with
 * -DLACS_CUDA_EMULATION, cuda_common.cuh includes this file instead of the
 * CUDA headers, and every launch runs here: the blocks one after another, the
 * threads of a block as cooperative fibers (ucontext) on one OS thread, each
 * running until it waits at a barrier. What it proves: the algorithm, the
 * indexing, the shared-memory carve-up, the barriers (a missing one reads
 * memory another thread has not written yet: shared memory starts filled with
 * NaN bytes) and the numerics (every bf16 rounding the kernels make). What it
 * cannot prove: anything about the hardware (timing, bank conflicts, the
 * tensor cores' own accumulation order, memory-model subtleties below a
 * barrier). Kernels written for it keep the four rules of
 * optimized/cuda/README.md section 5, and the emulation enforces each:
 *   1. shared memory is dynamic only (lacs_shared_memory()): __shared__ is
 *      defined here as a name that does not compile
 *      (lacs_rule_1_static_shared_memory_is_not_emulated);
 *   2. a __syncthreads() (or __syncwarp() within a warp) separates every write
 *      to shared memory from every read of it by another thread, WMMA loads
 *      and stores included: shared memory starts each block as NaN bytes, and
 *      LACS_CUDA_EMULATION_SCHEDULE=reverse runs the blocks and the threads of
 *      each round in the opposite order, so that a read that races with a
 *      write sees the other value (make test-cuda runs both schedules);
 *   3. WMMA fragments are touched only through load/store/mma/fill, never
 *      element by element (only lane 0 of a warp computes them here): a
 *      fragment's x and num_elements do not compile
 *      (lacs_rule_3_fragment_elements_are_not_emulated);
 *   4. block sizes are whole warps, and every lane of a warp takes part in a
 *      shuffle or __syncwarp with the full mask: another block size fails the
 *      launch, another mask or width aborts, naming the rule.
 * A barrier that not every thread reaches (divergence) is reported and the
 * process aborts, as the hardware would hang.
 *
 * This header is test machinery, not a CUDA implementation: it defines the
 * CUDA keywords away (the one place lacs uses macros so), the few runtime
 * calls the host code makes, and the WMMA API at 16 x 16 x 16.
 */
#ifndef LACS_CUDA_EMULATION_H
#define LACS_CUDA_EMULATION_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <type_traits>

/* ---- keywords ---- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(threads)
/* Rule 1: static shared memory is not emulated (every block's would be one array here). */
#define __shared__ lacs_rule_1_static_shared_memory_is_not_emulated

/* ---- the built-in variables ---- */

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* The running fiber's coordinates: set by the scheduler before each switch. */
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

/* ---- the runtime API the host code uses ---- */

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInvalidValue = 1 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDevAttrMultiProcessorCount };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

/* The emulated device: 227 KiB of shared memory per block (an H100's), 4 SMs (few, so that the
 * kernels' choices for a device their grid would not fill are exercised by small cases too). */
const int lacs_emulated_shared_memory_per_block = 227 * 1024;

/* Device memory is 256-byte aligned, as cudaMalloc's, and starts as NaN bytes,
 * as shared memory does: a kernel that reads what no kernel wrote sees NaN. */
static inline cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256); /* cudaMalloc's alignment */
    if (*p)
        memset(*p, 0xFF, n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { if (n) memcpy(d, s, n); return cudaSuccess; }
static inline cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
static inline const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
static inline cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int)
{
    *value = attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? lacs_emulated_shared_memory_per_block : 4;
    return cudaSuccess;
}
template <typename Kernel> cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int) { return cudaSuccess; }

/* ---- fibers ---- */

/* Runs body() as a grid of `grid` blocks of `block` threads with `shared_bytes`
 * of dynamic shared memory (filled with 0xFF bytes, NaN as floats, at each
 * block's start). Returns cudaErrorInvalidValue (with a message on stderr)
 * for a block that is not whole warps or shared memory over the device's. */
cudaError_t lacs_emulate_launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()> &body);

/* The mutant LACS_CUDA_MUTANT names (0: none; cuda_common.cuh's lacs_cuda_mutant_kind). */
int lacs_cuda_mutant_selected(void);

/* The running block's dynamic shared memory. */
unsigned char *lacs_emulated_shared_memory(void);

/* Barriers: every thread of the block; every lane of the running thread's warp
 * (rule 4: the full mask, else the process aborts). */
void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);

/* Aborts, naming the rule, when a warp operation is not over the full warp. */
void lacs_emulated_full_warp(const char *what, unsigned mask, int width);

/* A warp shuffle: the value of lane (lane ^ lane_mask), every lane taking part. */
float lacs_emulated_shuffle_xor(float value, int lane_mask);
static inline float __shfl_xor_sync(unsigned mask, float value, int lane_mask, int width = 32)
{
    lacs_emulated_full_warp("__shfl_xor_sync", mask, width);
    return lacs_emulated_shuffle_xor(value, lane_mask);
}
/* A double as two 32-bit halves, each moved as a float's bits (the device
 * has the double overload). */
static inline double __shfl_xor_sync(unsigned mask, double value, int lane_mask, int width = 32)
{
    float halves[2];
    memcpy(halves, &value, sizeof value);
    halves[0] = __shfl_xor_sync(mask, halves[0], lane_mask, width);
    halves[1] = __shfl_xor_sync(mask, halves[1], lane_mask, width);
    memcpy(&value, halves, sizeof value);
    return value;
}

/* ---- alignment ----
 * The device faults on a vector access (16 bytes) or a WMMA load or store
 * (32 bytes, a leading dimension a multiple of 16 bytes) that is not aligned;
 * the host would not. The kernels' 16-byte accesses and the WMMA calls check
 * here, and a misaligned one aborts, naming it. */
void lacs_emulated_misaligned(const void *p, size_t alignment, const char *what);
static inline void lacs_emulated_aligned(const void *p, size_t alignment, const char *what)
{
    if ((uintptr_t)p % alignment != 0)
        lacs_emulated_misaligned(p, alignment, what);
}

/* ---- device math ---- */

static inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, sizeof i); return i; }
static inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, sizeof x); return x; }
template <typename T> static inline T __ldg(const T *p) { return *p; }

/* ---- bf16 ---- */

struct __nv_bfloat16 { unsigned short x; };

/* ---- WMMA at 16 x 16 x 16 (bf16 operands, fp32 accumulator) ---- */

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/* Rule 3: what a kernel that reads a fragment's elements meets instead of them. */
struct lacs_rule_3_fragment_elements_are_not_emulated {};

/* The whole tile, row-major (a: m x k, b: k x n, accumulator: m x n), held by lane 0. */
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    float tile[256];
    lacs_rule_3_fragment_elements_are_not_emulated x;
    static constexpr lacs_rule_3_fragment_elements_are_not_emulated num_elements{};
};

int lacs_emulated_lane(void);

static inline float fragment_value(float v) { return v; }
static inline float fragment_value(__nv_bfloat16 v)
{
    unsigned bits = (unsigned)v.x << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm)
{
    lacs_emulated_aligned(p, 32, "wmma::load_matrix_sync's pointer");
    lacs_emulated_aligned((const void *)(uintptr_t)(ldm * sizeof(T)), 16, "wmma::load_matrix_sync's leading dimension");
    if (lacs_emulated_lane() != 0)
        return;
    const bool col = std::is_same<Layout, col_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.tile[r * 16 + c] = fragment_value(col ? p[c * ldm + r] : p[r * ldm + c]);
}

template <typename T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const float *p, unsigned ldm, layout_t layout)
{
    lacs_emulated_aligned(p, 32, "wmma::load_matrix_sync's pointer");
    lacs_emulated_aligned((const void *)(uintptr_t)(ldm * sizeof(float)), 16,
                          "wmma::load_matrix_sync's leading dimension");
    if (lacs_emulated_lane() != 0)
        return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.tile[r * 16 + c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
}

template <typename T>
void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm, layout_t layout)
{
    lacs_emulated_aligned(p, 32, "wmma::store_matrix_sync's pointer");
    lacs_emulated_aligned((const void *)(uintptr_t)(ldm * sizeof(float)), 16,
                          "wmma::store_matrix_sync's leading dimension");
    if (lacs_emulated_lane() != 0)
        return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.tile[r * 16 + c];
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float value)
{
    if (lacs_emulated_lane() != 0)
        return;
    for (int i = 0; i < 256; i++)
        f.tile[i] = value;
}

/* d = a b + c, each product exact (bf16 x bf16 fits fp32), summed in fp32 in k order. */
template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LayoutA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB> &b, const fragment<accumulator, 16, 16, 16, float> &c)
{
    if (lacs_emulated_lane() != 0)
        return;
    float out[256];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float sum = c.tile[i * 16 + j];
            for (int p = 0; p < 16; p++)
                sum += a.tile[i * 16 + p] * b.tile[p * 16 + j];
            out[i * 16 + j] = sum;
        }
    memcpy(d.tile, out, sizeof out);
}
} // namespace wmma
} // namespace nvcuda

#endif
