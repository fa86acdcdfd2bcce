/* The emulation's compile-time rules (optimized/cuda/README.md section 5):
 * make test-cuda compiles this file for the emulation three times and
 * expects -DLACS_RULE=0 (a kernel that keeps the rules) to compile, and
 * -DLACS_RULE=1 (static __shared__ memory) and -DLACS_RULE=3 (a fragment's
 * elements read and written) to be refused, the compiler's message naming
 * the rule (lacs_rule_1_..., lacs_rule_3_...). A kernel that breaks rule 2
 * or 4 compiles and is caught when it runs (tests/test_cuda_emulation.cu). */
#include "cuda_common.cuh"

#if LACS_RULE == 1
__global__ void static_shared_kernel(float *out)
{
    __shared__ float cache[32];
    cache[threadIdx.x % 32] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = cache[0];
}
#elif LACS_RULE == 3
__global__ void fragment_elements_kernel(float *out)
{
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    nvcuda::wmma::fill_fragment(acc, 1.0f);
    for (int i = 0; i < acc.num_elements; i++)
        acc.x[i] *= 2.0f; /* the layout of a fragment's elements is the hardware's, unknown here */
    nvcuda::wmma::store_matrix_sync(out, acc, 16, nvcuda::wmma::mem_row_major);
}
#else
__global__ void right_kernel(float *out)
{
    float *cache = (float *)lacs_shared_memory();
    cache[threadIdx.x] = 1.0f;
    __syncthreads();
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    nvcuda::wmma::load_matrix_sync(acc, cache, 16, nvcuda::wmma::mem_row_major);
    nvcuda::wmma::store_matrix_sync(out, acc, 16, nvcuda::wmma::mem_row_major);
}
#endif
