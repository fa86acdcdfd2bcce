/* builtin:cuda: what the attention forms share (attention.cu: path_attn;
 * flash.cu: softmax_attn, fox, deltaformer; optimized/cuda/README.md section 4):
 * a warp's maximum and sum by shuffles, and the log forget gate's prefix sums
 * with hard resets.
 */
#ifndef LACS_CUDA_ATTENTION_COMMON_CUH
#define LACS_CUDA_ATTENTION_COMMON_CUH

#include "cuda_common.cuh"

__device__ __forceinline__ float lacs_warp_max(float x)
{
    for (int mask = 16; mask > 0; mask >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, mask));
    return x;
}

__device__ __forceinline__ float lacs_warp_sum(float x)
{
    for (int mask = 16; mask > 0; mask >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, mask);
    return x;
}

/* The gates, per (sequence, value head): G_t, the fp32 prefix sum of g
 * since the sequence's start or the last hard reset (g_t = -inf), and that
 * reset's token first_visible[t] (key j is visible from query i iff
 * first_visible[i] <= j <= i, so that -inf - (-inf) never occurs). Args has
 * g, cu_seqlens, T, HV, tokens, gate_sum [HV][tokens] and first_visible
 * [HV][tokens]; launched on (sequences, HV) with 256 threads and
 * lacs_shared_round(256 * 4) + 256 * 8 bytes of shared memory.
 *
 * One CTA per (sequence, value head), chunks of blockDim tokens: the
 * inclusive scan of the pairs (sum, reset) under "a then b" = b if b starts
 * a segment (b.reset >= 0), else (a.sum + b.sum, a.reset). A token starts a
 * segment at the sequence's start or where g_t = -inf (SPEC 4.10's hard
 * reset: every earlier key weighted 0), with sum 0: g_reset never enters a
 * difference (tau >= j + 1). The sums are fp32 in the scan's order, as
 * SPEC 11.1 permits (over the whole sequence for the attention forms). */
template <typename Args> __global__ void __launch_bounds__(256) lacs_gate_scan_kernel(Args a)
{
    unsigned char *smem = lacs_shared_memory();
    float *sums = reinterpret_cast<float *>(smem);
    int64_t *resets = reinterpret_cast<int64_t *>(smem + lacs_shared_round(blockDim.x * sizeof(float)));
    const int64_t n = blockIdx.x;
    const int hv = (int)blockIdx.y, tid = (int)threadIdx.x, threads = (int)blockDim.x;
    const int64_t start = a.cu_seqlens ? a.cu_seqlens[n] : n * a.T;
    const int64_t end = a.cu_seqlens ? a.cu_seqlens[n + 1] : start + a.T;
    float carry_sum = 0.0f; /* the scan of the chunks before, as every thread sees it */
    int64_t carry_reset = start;
    for (int64_t chunk = start; chunk < end; chunk += threads) {
        const int64_t t = chunk + tid;
        float sum = 0.0f;
        int64_t reset = -1;
        if (t < end) {
            const float gate = lacs_view_at(a.g, t * a.HV + hv);
            if (t == start || gate == -INFINITY)
                reset = t;
            else
                sum = gate;
        }
        sums[tid] = sum;
        resets[tid] = reset;
        __syncthreads();
        for (int offset = 1; offset < threads; offset *= 2) {
            float earlier_sum = 0.0f;
            int64_t earlier_reset = 0;
            if (tid >= offset) {
                earlier_sum = sums[tid - offset];
                earlier_reset = resets[tid - offset];
            }
            __syncthreads();
            if (tid >= offset && reset < 0) {
                sum = earlier_sum + sum;
                reset = earlier_reset;
            }
            sums[tid] = sum;
            resets[tid] = reset;
            __syncthreads();
        }
        if (reset < 0) {
            sum = carry_sum + sum;
            reset = carry_reset;
        }
        if (t < end) {
            a.gate_sum[(int64_t)hv * a.tokens + t] = sum;
            a.first_visible[(int64_t)hv * a.tokens + t] = reset;
        }
        const float last_sum = sums[threads - 1];
        const int64_t last_reset = resets[threads - 1];
        if (last_reset >= 0) {
            carry_sum = last_sum;
            carry_reset = last_reset;
        } else {
            carry_sum = carry_sum + last_sum;
        }
        __syncthreads(); /* every thread has read the last pair before the next chunk overwrites it */
    }
}

/* What lacs_gate_scan_kernel reads and writes, by its names (flash.cu's forward, attention_vjp.cu's
 * gradients), and its launch: a CTA of 256 threads per (sequence, value head). */
struct lacs_gate_scan_args {
    lacs_view g;
    const int64_t *cu_seqlens;
    int64_t T, tokens;
    int HV;
    float *gate_sum;
    int64_t *first_visible;
};

static inline cudaError_t lacs_gate_scan(const lacs_gate_scan_args &a, int64_t n_seqs)
{
    const size_t bytes = lacs_shared_round(256 * sizeof(float)) + 256 * sizeof(int64_t);
    return lacs_launch(lacs_gate_scan_kernel<lacs_gate_scan_args>, dim3((unsigned)n_seqs, (unsigned)a.HV), dim3(256),
                       bytes, a);
}

#endif
