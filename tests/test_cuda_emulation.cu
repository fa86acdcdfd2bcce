/* The CUDA emulation's own tests (make test-cuda; optimized/cuda/README.md section 5): that it can
 * tell a right kernel from a wrong one, since make test-cuda's verdict on
 * builtin:cuda rests on it. Compiled by the host C++ compiler with
 * -DLACS_CUDA_EMULATION, like the kernels; prints one line per test, exits 1
 * on a failure.
 *   1. a barrier orders shared memory: with it, each thread reads its
 *      neighbour's value; without it, some thread reads the NaN fill; and a
 *      race on data that is not the fill (a loop's second pass) gives
 *      different results under the forward and the reverse schedule, while
 *      the same loop with its barrier gives the same bits under both (rule 2);
 *   2. lacs_block_gemm (WMMA for bf16, the CUDA cores for fp32, in its 4 x 4,
 *      2 x 2 and 1 x 1 register tiles) in its three layouts equals a plain
 *      triple loop, bit for bit; lacs_load_tile's 16-byte and element paths
 *      give the same padded tile;
 *   3. a warp's butterfly reduction by __shfl_xor_sync gives every lane the sum;
 *   4. a barrier that one thread skips aborts the process; a shuffle or
 *      __syncwarp with a partial mask aborts, naming rule 4; a block that is
 *      not whole warps fails to launch (each checked in a child);
 *   5. the mutants' selector reads LACS_CUDA_MUTANT (and is 0 without it);
 *   6. a misaligned 16-byte access or WMMA pointer aborts, as the device faults.
 * Rules 1 and 3 are compile-time: tests/test_cuda_rules.cu (make test-cuda
 * compiles it and expects each violation to be refused, naming the rule).
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

/* A loop whose second pass reads a neighbour's slot with or without the
 * barrier between the write and the read: without it the value read is the
 * neighbour's first-pass value in one schedule and its second-pass value in
 * the other (never the NaN fill after the first pass). */
__global__ void loop_kernel(float *out, int with_barrier)
{
    float *shared = (float *)lacs_shared_memory();
    const int t = (int)threadIdx.x, n = (int)blockDim.x;
    float sum = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        shared[t] = (float)(t + 1 + 100 * pass);
        if (with_barrier || pass == 0)
            __syncthreads();
        sum += shared[(t + 1) % n];
        __syncthreads();
    }
    out[blockIdx.x * n + t] = sum;
}

static void run_loop(float *out, int with_barrier, const char *schedule)
{
    setenv("LACS_CUDA_EMULATION_SCHEDULE", schedule, 1);
    lacs_launch(loop_kernel, dim3(2), dim3(64), 64 * sizeof(float), out, with_barrier);
    unsetenv("LACS_CUDA_EMULATION_SCHEDULE");
}

static void test_schedules(void)
{
    float forward[128], reverse[128];
    for (int with_barrier = 1; with_barrier >= 0; with_barrier--) {
        run_loop(forward, with_barrier, "forward");
        run_loop(reverse, with_barrier, "reverse");
        const bool same = memcmp(forward, reverse, sizeof forward) == 0;
        if (with_barrier)
            report("with the barrier, the forward and reverse schedules give the same bits", same, "");
        else
            report("without it, the two schedules disagree (a race on data that is not the NaN fill)", !same, "");
    }
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

template <bool TransA, bool TransB, typename Op> static void test_gemm(const char *name, int M, int N, int K)
{
    static Op A[64 * 64], B[64 * 64];
    static float C[64 * 64];
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
    char full[160];
    snprintf(full, sizeof full, "%s, %d x %d x %d", name, M, N, K);
    name = full;
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

/* lacs_load_tile: a bf16 input into bf16 operands, rows of 24 (16-byte path)
 * and 20 (element path) values, both padded to 32 columns and 16 rows. */
__global__ void tile_kernel(const unsigned short *input, int cols, unsigned short *out)
{
    unsigned short *tile = (unsigned short *)lacs_shared_memory();
    const lacs_view view = {input, 1};
    lacs_load_tile(tile, 32, 16, view, 8, 40, 12, cols);
    __syncthreads();
    for (int e = (int)threadIdx.x; e < 16 * 32; e += (int)blockDim.x)
        out[e] = tile[e];
}

static void test_load_tile(void)
{
    alignas(16) static unsigned short input[16 * 40 + 8], out[16 * 32];
    for (int i = 0; i < 16 * 40 + 8; i++)
        input[i] = (unsigned short)(0x3f80 + i); /* bf16 values near 1, all distinct */
    int wrong = 0;
    for (int cols = 24; cols >= 20; cols -= 4) {
        lacs_launch(tile_kernel, dim3(1), dim3(64), 16 * 32 * 2, (const unsigned short *)input, cols, out);
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 32; c++)
                wrong += out[r * 32 + c] != (r < 12 && c < cols ? input[8 + r * 40 + c] : 0);
    }
    char detail[64];
    snprintf(detail, sizeof detail, "%d elements wrong", wrong);
    report("lacs_load_tile: the 16-byte and the element paths give the padded tile", wrong == 0, detail);
}

/* 4. divergence */
__global__ void divergent_kernel(void)
{
    if (threadIdx.x != 0)
        __syncthreads();
}

/* Runs launch() in a child with stderr to a pipe; true when the child aborts
 * and its message contains `words`. */
static bool aborts_saying(void (*launch)(void), const char *words)
{
    fflush(stdout);
    int pipe_fd[2];
    if (pipe(pipe_fd) != 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipe_fd[1], 2);
        close(pipe_fd[0]);
        launch();
        _exit(0);
    }
    close(pipe_fd[1]);
    char message[1024] = "";
    size_t got = 0;
    ssize_t n;
    while (got < sizeof message - 1 && (n = read(pipe_fd[0], message + got, sizeof message - 1 - got)) > 0)
        got += (size_t)n;
    message[got] = 0;
    close(pipe_fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(message, words) != nullptr;
}

__global__ void partial_shuffle_kernel(float *out)
{
    out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 1);
}

__global__ void partial_syncwarp_kernel(void) { __syncwarp(0x0000ffffu); }

static void launch_partial_shuffle(void)
{
    static float out[32];
    lacs_launch(partial_shuffle_kernel, dim3(1), dim3(32), 0, out);
}

static void launch_partial_syncwarp(void) { lacs_launch(partial_syncwarp_kernel, dim3(1), dim3(32), 0); }

static void test_rule_4(void)
{
    report("rule 4: a shuffle with a partial mask aborts, naming the rule",
           aborts_saying(launch_partial_shuffle, "rule 4"), "");
    report("rule 4: __syncwarp with a partial mask aborts, naming the rule",
           aborts_saying(launch_partial_syncwarp, "rule 4"), "");
    if (!freopen("/dev/null", "w", stderr)) /* the launch's own message, expected */
        return;
    const cudaError_t e = lacs_launch(partial_syncwarp_kernel, dim3(1), dim3(48), 0);
    report("rule 4: a block of 48 threads (not whole warps) fails to launch", e != cudaSuccess, "");
}

/* A 16-byte copy to an address 8 bytes past a 16-byte boundary, and a WMMA
 * load from one 16 bytes past a 32-byte boundary: the device faults on both. */
__global__ void misaligned_copy_kernel(float *out)
{
    lacs_copy_rows(out + 2, 0, out + 8, 0, 1, 16);
}

__global__ void misaligned_wmma_kernel(float *out)
{
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    nvcuda::wmma::load_matrix_sync(acc, out + 4, 16, nvcuda::wmma::mem_row_major);
}

static void launch_misaligned_copy(void)
{
    alignas(32) static float out[512];
    lacs_launch(misaligned_copy_kernel, dim3(1), dim3(32), 0, out);
}

static void launch_misaligned_wmma(void)
{
    alignas(32) static float out[512];
    lacs_launch(misaligned_wmma_kernel, dim3(1), dim3(32), 0, out);
}

static void test_alignment(void)
{
    report("a misaligned 16-byte access aborts (the device faults)",
           aborts_saying(launch_misaligned_copy, "not 16-byte aligned"), "");
    report("a WMMA load from a pointer not 32-byte aligned aborts",
           aborts_saying(launch_misaligned_wmma, "not 32-byte aligned"), "");
}

static void test_mutant_selector(void)
{
    unsetenv("LACS_CUDA_MUTANT");
    report("without LACS_CUDA_MUTANT no mutant is selected", lacs_cuda_mutant_selected() == 0, "");
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
    test_schedules();
    test_gemm<false, false, unsigned short>("WMMA bf16 product, A B", 32, 48, 64);
    test_gemm<false, true, unsigned short>("WMMA bf16 product, A B^T", 32, 48, 64);
    test_gemm<true, false, unsigned short>("WMMA bf16 product, A^T B", 32, 48, 64);
    const int shapes[3][3] = {{64, 64, 48}, {32, 48, 64}, {16, 16, 32}}; /* fp32 tiles of 4, 2 and 1 */
    for (int s = 0; s < 3; s++) {
        test_gemm<false, false, float>("fp32 product, A B", shapes[s][0], shapes[s][1], shapes[s][2]);
        test_gemm<false, true, float>("fp32 product, A B^T", shapes[s][0], shapes[s][1], shapes[s][2]);
        test_gemm<true, false, float>("fp32 product, A^T B", shapes[s][0], shapes[s][1], shapes[s][2]);
    }
    test_load_tile();
    test_shuffle();
    test_mutant_selector();
    test_divergence();
    test_alignment();
    test_rule_4(); /* last: it sends stderr to /dev/null */
    return failures ? 1 : 0;
}
