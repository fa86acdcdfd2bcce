/* The CUDA emulation's own tests (make test-cuda; optimized/cuda/README.md section 5): that it can
 * tell a right kernel from a wrong one, since make test-cuda's verdict on
 * builtin:cuda rests on it. Compiled by the host C++ compiler with
 * -DLACS_CUDA_EMULATION, like the kernels; prints one line per test, exits 1
 * on a failure.
 *   1. a barrier orders shared memory: with it, each thread reads its
 *      neighbour's value; without it, some thread reads the NaN fill;
 *   2. lacs_block_gemm (WMMA for bf16, the CUDA cores for fp32) in its three
 *      layouts equals a plain triple loop, bit for bit;
 *   3. a warp's butterfly reduction by __shfl_xor_sync gives every lane the sum;
 *   4. a barrier that one thread skips aborts the process (checked in a child).
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_common.cuh"

static int failures = 0;

static void report(const char *name, bool ok, const char *detail)
{
    printf("%s  %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
    if (!ok)
        failures++;
}

/* 1. neighbours through shared memory */
__global__ void neighbour_kernel(float *out, int with_barrier)
{
    float *shared = (float *)lacs_shared_memory();
    const int t = (int)threadIdx.x, n = (int)blockDim.x;
    shared[t] = (float)(t + 1);
    if (with_barrier)
        __syncthreads();
    out[blockIdx.x * n + t] = shared[(t + 1) % n];
}

static void test_barrier(void)
{
    const int n = 64, blocks = 2;
    float out[blocks * n];
    for (int with_barrier = 1; with_barrier >= 0; with_barrier--) {
        lacs_launch(neighbour_kernel, dim3(blocks), dim3(n), n * sizeof(float), out, with_barrier);
        int right = 0;
        for (int i = 0; i < blocks * n; i++)
            right += out[i] == (float)((i % n + 1) % n + 1);
        char detail[128];
        snprintf(detail, sizeof detail, "%d of %d reads right", right, blocks * n);
        if (with_barrier)
            report("with a barrier, every thread reads its neighbour's value", right == blocks * n, detail);
        else
            report("without it, the emulation shows the missing barrier", right < blocks * n, detail);
    }
}

/* 2. block products against a triple loop */
template <bool TransA, bool TransB, typename Op>
__global__ void gemm_kernel(const Op *A, const Op *B, float *C, int M, int N, int K)
{
    unsigned char *shared = lacs_shared_memory();
    Op *a = (Op *)shared, *b = (Op *)(shared + lacs_shared_round((size_t)M * K * sizeof(Op)));
    float *c = (float *)(shared + lacs_shared_round((size_t)M * K * sizeof(Op)) +
                         lacs_shared_round((size_t)K * N * sizeof(Op)));
    for (int i = (int)threadIdx.x; i < M * K; i += (int)blockDim.x)
        a[i] = A[i];
    for (int i = (int)threadIdx.x; i < K * N; i += (int)blockDim.x)
        b[i] = B[i];
    for (int i = (int)threadIdx.x; i < M * N; i += (int)blockDim.x)
        c[i] = 1.0f; /* accumulated onto */
    __syncthreads();
    lacs_block_gemm<TransA, TransB>(a, TransA ? M : K, b, TransB ? K : N, c, N, M, N, K, true);
    __syncthreads();
    for (int i = (int)threadIdx.x; i < M * N; i += (int)blockDim.x)
        C[i] = c[i];
}

static float value_of(float x) { return x; }
static float value_of(unsigned short bits)
{
    unsigned u = (unsigned)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

template <bool TransA, bool TransB, typename Op> static void test_gemm(const char *name)
{
    const int M = 32, N = 48, K = 64;
    static Op A[M * K], B[K * N];
    static float C[M * N];
    unsigned seed = 12345;
    for (int i = 0; i < M * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        const float x = (float)((int)(seed >> 9) % 255 - 127) / 64.0f; /* exact in bf16: at most 7 significant bits */
        if (sizeof(Op) == 2) {
            unsigned u;
            memcpy(&u, &x, sizeof u);
            memcpy(&A[i], (const char *)&u + 2, 2); /* the high half: truncation, exact for these values */
        } else
            memcpy(&A[i], &x, sizeof x);
    }
    for (int i = 0; i < K * N; i++)
        B[i] = A[(i * 7) % (M * K)];
    const size_t shared = lacs_shared_round((size_t)M * K * sizeof(Op)) + lacs_shared_round((size_t)K * N * sizeof(Op)) +
                          (size_t)M * N * 4;
    lacs_launch(gemm_kernel<TransA, TransB, Op>, dim3(1), dim3(128), shared, (const Op *)A, (const Op *)B, C, M, N, K);
    int wrong = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float sum = 1.0f;
            for (int p = 0; p < K; p++) {
                const float a = value_of(TransA ? A[p * M + i] : A[i * K + p]);
                const float b = value_of(TransB ? B[j * K + p] : B[p * N + j]);
                sum = sizeof(Op) == 2 ? sum + a * b : fmaf(a, b, sum);
            }
            wrong += C[i * N + j] != sum;
        }
    char detail[64];
    snprintf(detail, sizeof detail, "%d of %d outputs differ", wrong, M * N);
    report(name, wrong == 0, detail);
}

/* 3. a warp's sum by shuffles */
__global__ void shuffle_kernel(float *out)
{
    float v = (float)(threadIdx.x % 32 + 1);
    for (int mask = 16; mask > 0; mask /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, mask);
    out[threadIdx.x] = v;
}

static void test_shuffle(void)
{
    float out[64];
    lacs_launch(shuffle_kernel, dim3(1), dim3(64), 0, out);
    int right = 0;
    for (int i = 0; i < 64; i++)
        right += out[i] == 528.0f; /* 1 + ... + 32 */
    report("__shfl_xor_sync: every lane of each warp has the warp's sum", right == 64, "");
}

/* 4. divergence */
__global__ void divergent_kernel(void)
{
    if (threadIdx.x != 0)
        __syncthreads();
}

static void test_divergence(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr))
            _exit(2);
        lacs_launch(divergent_kernel, dim3(1), dim3(32), 0);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    report("a barrier one thread skips aborts the process", WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "");
}

/* The families' error function, which cuda_common.cuh's launch helper names (dispatch.c has the real one). */
extern "C" int lacs_cuda_error(int code, const char *op, const char *fmt, ...)
{
    (void)op;
    (void)fmt;
    return code;
}

int main(void)
{
    test_barrier();
    test_gemm<false, false, unsigned short>("WMMA bf16 product, A B");
    test_gemm<false, true, unsigned short>("WMMA bf16 product, A B^T");
    test_gemm<true, false, unsigned short>("WMMA bf16 product, A^T B");
    test_gemm<false, false, float>("fp32 product, A B");
    test_gemm<false, true, float>("fp32 product, A B^T");
    test_gemm<true, false, float>("fp32 product, A^T B");
    test_shuffle();
    test_divergence();
    return failures ? 1 : 0;
}
