/* make bench-cuda: builtin:cuda's speed against the GPU's own limits,
 * measured in the same run (optimized/cuda/README.md section 7, bench/README.md).
 *
 * Anchors: cuBLAS bf16 GEMM (8192^3, fp32 accumulation) in TFLOP/s, and a
 * device-to-device copy (1 GiB) in GB/s (bytes read + bytes written). Then
 * each configuration: the family entry point (lacs_cuda_recurrent, _norm,
 * _attention) on tensors already on the device, timed with CUDA events over
 * repetitions after a warm-up, one line each:
 *   op tier shape  time_ms  TFLOP/s (ratio to the GEMM)  or  GB/s (ratio to the copy)
 * The chunked kernels count the flops of their products (optimized/cuda/README.md section 2); the
 * norms count the bytes they must move (inputs read, F32 outputs written).
 * Targets (the issue): gated_delta_rule bf16 at T = 16384, H = HV = 16,
 * K = V = 128 at >= 0.30 of the GEMM (and at least fla's Triton throughput:
 * tests/device/fla_bench.py); dyt and dyisru at >= 0.80 of the copy. The
 * recurrent family, the softmax attention forms, PaTH and the norms are all
 * measured, and gated_delta_rule_vjp (time and tokens per second, no target)
 * and softmax_attn_vjp bf16 (time and TFLOP/s by 2.5 T^2 (K + V) a head, no
 * target); mesa_net (a sequential walk built for correctness) is not.
 * Without a device it says why and exits 2: it measures nothing.
 */
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

static int failures = 0;

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "lacs-bench-cuda: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

/* ---- device tensors with deterministic contents ---- */

static uint64_t prng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) /* [0, 1) */
{
    prng_state = prng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(prng_state >> 11) / 9007199254740992.0;
}

static unsigned short to_bf16_bits(float x)
{
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

typedef enum { FILL_NORMAL, FILL_UNIT_ROWS, FILL_BETA, FILL_GATE } fill_kind;

/* A tensor on the device: values by kind, stored as dtype. FILL_UNIT_ROWS: rows of `row` entries of norm 1. */
static lacs_cuda_tensor device_tensor(const char *name, lacs_dtype dtype, int ndim, const int64_t *shape,
                                      fill_kind kind, int64_t row)
{
    lacs_cuda_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (t.shape[d] = shape[d]);
    float *values = (float *)malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double x = 0;
        switch (kind) {
        case FILL_NORMAL:
        case FILL_UNIT_ROWS:
            x = sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform());
            break;
        case FILL_BETA:
            x = 0.1 + 0.8 * uniform();
            break;
        case FILL_GATE:
            x = -0.1 * uniform();
            break;
        }
        values[i] = (float)x;
    }
    if (kind == FILL_UNIT_ROWS)
        for (int64_t r = 0; r < n / row; r++) {
            double s = 0;
            for (int64_t c = 0; c < row; c++)
                s += (double)values[r * row + c] * values[r * row + c];
            for (int64_t c = 0; c < row; c++)
                values[r * row + c] = (float)(values[r * row + c] / sqrt(s));
        }
    const size_t bytes = (size_t)n * (dtype == LACS_BF16 ? 2 : 4);
    void *host = malloc(bytes);
    for (int64_t i = 0; i < n; i++) {
        if (dtype == LACS_BF16)
            ((unsigned short *)host)[i] = to_bf16_bits(values[i]);
        else
            ((float *)host)[i] = values[i];
    }
    check(cudaMalloc(&t.device, bytes), "cudaMalloc");
    check(cudaMemcpy(t.device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    free(values);
    t.host = host; /* kept: the families read small tables on the host */
    return t;
}

static lacs_cuda_tensor device_output(const char *name, int ndim, const int64_t *shape)
{
    lacs_cuda_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = LACS_F32;
    t.ndim = ndim;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (t.shape[d] = shape[d]);
    check(cudaMalloc(&t.device, (size_t)n * 4), "cudaMalloc");
    return t;
}

static void free_tensors(lacs_cuda_tensor *t, int n)
{
    for (int i = 0; i < n; i++) {
        cudaFree(t[i].device);
        free((void *)t[i].host);
    }
}

/* ---- timing ---- */

typedef int (*family_fn)(const lacs_cuda_call *c);

/* Milliseconds per call of fn(c): a warm-up, then enough repetitions for ~0.2 s. */
static double time_call(family_fn fn, const lacs_cuda_call *c)
{
    if (fn(c) != LACS_OK) {
        fprintf(stderr, "lacs-bench-cuda: %s failed: %s\n", c->op, lacs_last_error());
        failures++;
        return -1;
    }
    check(cudaDeviceSynchronize(), c->op);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    int reps = 1;
    float ms = 0;
    for (;;) {
        cudaEventRecord(start);
        for (int r = 0; r < reps; r++)
            fn(c);
        cudaEventRecord(stop);
        check(cudaEventSynchronize(stop), c->op);
        cudaEventElapsedTime(&ms, start, stop);
        if (ms > 200 || reps >= 1 << 16)
            break;
        reps *= ms < 20 ? 10 : 2;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / reps;
}

/* ---- anchors ---- */

static double gemm_tflops(void)
{
    const int n = 8192;
    void *a, *b, *c;
    check(cudaMalloc(&a, (size_t)n * n * 2), "cudaMalloc");
    check(cudaMalloc(&b, (size_t)n * n * 2), "cudaMalloc");
    check(cudaMalloc(&c, (size_t)n * n * 4), "cudaMalloc");
    cudaMemset(a, 0x3c, (size_t)n * n * 2); /* bf16 ~ 0.01 */
    cudaMemset(b, 0x3c, (size_t)n * n * 2);
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "lacs-bench-cuda: cublasCreate failed\n");
        exit(1);
    }
    const float one = 1, zero = 0;
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    float ms = 0;
    const int reps = 20;
    for (int pass = 0; pass < 2; pass++) { /* the first pass warms up */
        cudaEventRecord(start);
        for (int r = 0; r < reps; r++)
            if (cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                             &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) !=
                CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "lacs-bench-cuda: cublasGemmEx failed\n");
                exit(1);
            }
        cudaEventRecord(stop);
        check(cudaEventSynchronize(stop), "cuBLAS");
        cudaEventElapsedTime(&ms, start, stop);
    }
    cublasDestroy(handle);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return 2.0 * n * n * (double)n * reps / (ms * 1e-3) / 1e12;
}

static double copy_gbs(void)
{
    const size_t bytes = (size_t)1 << 30;
    void *a, *b;
    check(cudaMalloc(&a, bytes), "cudaMalloc");
    check(cudaMalloc(&b, bytes), "cudaMalloc");
    cudaMemset(a, 1, bytes);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    float ms = 0;
    const int reps = 10;
    for (int pass = 0; pass < 2; pass++) {
        cudaEventRecord(start);
        for (int r = 0; r < reps; r++)
            cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(stop);
        check(cudaEventSynchronize(stop), "copy");
        cudaEventElapsedTime(&ms, start, stop);
    }
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)bytes * reps / (ms * 1e-3) / 1e9;
}

/* ---- the configurations ---- */

/* The chunk algorithm's product flops for one head over T tokens (recurrent.cu). */
static double chunk_flops(int64_t T, int64_t K, int64_t V)
{
    double flops = 0;
    for (int64_t t0 = 0; t0 < T; t0 += 64) {
        const double n = (double)(T - t0 < 64 ? T - t0 : 64);
        flops += 6 * n * K * V + 6 * n * n * K + 4 * n * n * V + n * n * n / 3;
    }
    return flops;
}

/* The recurrent family: gate "g", "gk" (per channel: KDA, GLA), "g_gamma" or "" (none). */
static void bench_recurrent(const char *op, const char *gate, int bf16, int64_t B, int64_t T, int64_t H, int64_t K,
                            int64_t V, int max_shared, double gemm, int target)
{
    const lacs_dtype dt = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t qk[4] = {B, T, H, K}, vs[4] = {B, T, H, V}, bs[3] = {B, T, H}, hs[4] = {B, H, K, V};
    const int64_t gks[4] = {B, T, H, K}, heads[1] = {H};
    lacs_cuda_tensor in[6];
    int n_in = 0;
    in[n_in++] = device_tensor("q", dt, 4, qk, FILL_UNIT_ROWS, K);
    in[n_in++] = device_tensor("k", dt, 4, qk, FILL_UNIT_ROWS, K);
    in[n_in++] = device_tensor("v", dt, 4, vs, FILL_NORMAL, V);
    const int delta = strcmp(op, "delta_rule") == 0 || strcmp(op, "gated_delta_rule") == 0 ||
                      strcmp(op, "comba") == 0 || strcmp(op, "efla") == 0;
    if (delta)
        in[n_in++] = device_tensor("beta", dt, 3, bs, FILL_BETA, 1);
    if (strcmp(gate, "g") == 0)
        in[n_in++] = device_tensor("g", dt, 3, bs, FILL_GATE, 1);
    else if (strcmp(gate, "gk") == 0)
        in[n_in++] = device_tensor("gk", dt, 4, gks, FILL_GATE, 1);
    else if (strcmp(gate, "g_gamma") == 0)
        in[n_in++] = device_tensor("g_gamma", dt, 1, heads, FILL_GATE, 1);
    lacs_cuda_tensor out[2] = {device_output("o", 4, vs), device_output("ht", 4, hs)};
    lacs_cuda_call c = {op, bf16, in, n_in, nullptr, 0, out, 2, max_shared};
    const double ms = time_call(lacs_cuda_recurrent, &c);
    if (ms > 0) {
        const double tflops = chunk_flops(T, K, V) * B * H / (ms * 1e-3) / 1e12;
        char name[40];
        snprintf(name, sizeof name, "%s%s", op, strcmp(gate, "gk") == 0 && strcmp(op, "gla") != 0 ? " gk" : "");
        printf("%-20s %-4s B=%lld T=%lld H=HV=%lld K=%lld V=%lld  %9.3f ms  %7.1f TFLOP/s  %.3f x GEMM%s\n", name,
               bf16 ? "bf16" : "fp32", (long long)B, (long long)T, (long long)H, (long long)K, (long long)V, ms,
               tflops, tflops / gemm,
               target ? (tflops / gemm >= 0.30 ? "  target >= 0.30: PASS" : "  target >= 0.30: NOT MET") : "");
    }
    free_tensors(in, n_in);
    free_tensors(out, 2);
}

/* The recurrent family's gradients (recurrent_vjp.cu, README section 9): gated_delta_rule_vjp with g or gk,
 * h0 and dht, every gradient asked for; the time per call and the tokens per second (B T H / time). The
 * kernels walk the tokens one by one: no flop count, no target yet. */
static void bench_recurrent_vjp(const char *gate, int bf16, int64_t B, int64_t T, int64_t H, int64_t K, int64_t V,
                                int max_shared)
{
    const lacs_dtype dt = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t qk[4] = {B, T, H, K}, vs[4] = {B, T, H, V}, bs[3] = {B, T, H}, hs[4] = {B, H, K, V};
    const int channel = strcmp(gate, "gk") == 0;
    lacs_cuda_tensor in[8] = {
        device_tensor("q", dt, 4, qk, FILL_UNIT_ROWS, K), device_tensor("k", dt, 4, qk, FILL_UNIT_ROWS, K),
        device_tensor("v", dt, 4, vs, FILL_NORMAL, V),    device_tensor("beta", dt, 3, bs, FILL_BETA, 1),
        channel ? device_tensor("gk", dt, 4, qk, FILL_GATE, 1) : device_tensor("g", dt, 3, bs, FILL_GATE, 1),
        device_tensor("do", dt, 4, vs, FILL_NORMAL, V),   device_tensor("h0", LACS_F32, 4, hs, FILL_NORMAL, V),
        device_tensor("dht", LACS_F32, 4, hs, FILL_NORMAL, V)};
    lacs_cuda_tensor out[6] = {device_output("dq", 4, qk),   device_output("dk", 4, qk),
                               device_output("dv", 4, vs),   device_output("dbeta", 3, bs),
                               channel ? device_output("dgk", 4, qk) : device_output("dg", 3, bs),
                               device_output("dh0", 4, hs)};
    lacs_cuda_call c = {"gated_delta_rule_vjp", bf16, in, 8, nullptr, 0, out, 6, max_shared};
    const double ms = time_call(lacs_cuda_recurrent_vjp, &c);
    if (ms > 0)
        printf("%-20s %-4s B=%lld T=%lld H=HV=%lld K=%lld V=%lld  %9.3f ms  %7.2f Mtoken-heads/s\n",
               channel ? "gated_delta_rule_vjp gk" : "gated_delta_rule_vjp", bf16 ? "bf16" : "fp32", (long long)B,
               (long long)T, (long long)H, (long long)K, (long long)V, ms, (double)(B * T * H) / (ms * 1e-3) / 1e6);
    free_tensors(in, 8);
    free_tensors(out, 6);
}

/* Decoding: B sequences of one token from a state (memory-bound: the state is read and written once). */
static void bench_decode(int bf16, int64_t B, int64_t H, int64_t K, int64_t V, int max_shared, double copy)
{
    const lacs_dtype dt = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t qk[4] = {B, 1, H, K}, vs[4] = {B, 1, H, V}, bs[3] = {B, 1, H}, hs[4] = {B, H, K, V};
    lacs_cuda_tensor in[6] = {device_tensor("q", dt, 4, qk, FILL_UNIT_ROWS, K),
                              device_tensor("k", dt, 4, qk, FILL_UNIT_ROWS, K),
                              device_tensor("v", dt, 4, vs, FILL_NORMAL, V),
                              device_tensor("beta", dt, 3, bs, FILL_BETA, 1),
                              device_tensor("g", dt, 3, bs, FILL_GATE, 1),
                              device_tensor("h0", LACS_F32, 4, hs, FILL_NORMAL, V)};
    lacs_cuda_tensor out[2] = {device_output("o", 4, vs), device_output("ht", 4, hs)};
    lacs_cuda_call c = {"gated_delta_rule", bf16, in, 6, nullptr, 0, out, 2, max_shared};
    const double ms = time_call(lacs_cuda_recurrent, &c);
    if (ms > 0) {
        const double gbs = 2.0 * B * H * K * V * 4 / (ms * 1e-3) / 1e9;
        printf("%-20s %-4s B=%lld T=1 H=HV=%lld K=%lld V=%lld  %9.3f ms  %7.1f GB/s (state)  %.3f x copy\n",
               "gdr decode", bf16 ? "bf16" : "fp32", (long long)B, (long long)H, (long long)K, (long long)V, ms, gbs,
               gbs / copy);
    }
    free_tensors(in, 6);
    free_tensors(out, 2);
}

static void bench_norm(const char *op, int bf16, int64_t rows, int64_t dim, int max_shared, double copy,
                       int target)
{
    const lacs_dtype dt = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t xs[2] = {rows, dim}, one[1] = {1}, ws[1] = {dim};
    lacs_cuda_tensor in[3];
    int n_in = 0;
    in[n_in++] = device_tensor("x", dt, 2, xs, FILL_NORMAL, dim);
    if (strcmp(op, "dyt") == 0)
        in[n_in++] = device_tensor("alpha", dt, 1, one, FILL_BETA, 1);
    if (strcmp(op, "dyisru") == 0)
        in[n_in++] = device_tensor("C", dt, 1, one, FILL_BETA, 1);
    if (strcmp(op, "dyt") == 0 || strcmp(op, "dyisru") == 0 || strcmp(op, "rmsnorm") == 0)
        in[n_in++] = device_tensor("weight", dt, 1, ws, FILL_NORMAL, dim);
    /* softcap's cap, l2norm's eps and convention (fla's sqrt(sum x^2 + eps), eps 1e-6) */
    const lacs_param softcap_params[1] = {{"cap", 15.0}}, l2norm_params[2] = {{"eps", 1e-6}, {"convention", 0}};
    const lacs_param *params = strcmp(op, "softcap") == 0 ? softcap_params
                               : strcmp(op, "l2norm") == 0 ? l2norm_params
                                                           : nullptr;
    const int n_params = strcmp(op, "softcap") == 0 ? 1 : strcmp(op, "l2norm") == 0 ? 2 : 0;
    lacs_cuda_tensor out[1] = {device_output("y", 2, xs)};
    lacs_cuda_call c = {op, bf16, in, n_in, params, n_params, out, 1, max_shared};
    const double ms = time_call(lacs_cuda_norm, &c);
    if (ms > 0) {
        const double bytes = (double)rows * dim * ((bf16 ? 2 : 4) + 4);
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        printf("%-20s %-4s %lldx%lld  %9.3f ms  %7.1f GB/s  %.3f x copy%s\n", op, bf16 ? "bf16" : "fp32",
               (long long)rows, (long long)dim, ms, gbs, gbs / copy,
               target ? (gbs / copy >= 0.80 ? "  target >= 0.80: PASS" : "  target >= 0.80: NOT MET") : "");
    }
    free_tensors(in, n_in);
    free_tensors(out, 1);
}

/* softmax_attn, fox (g) and deltaformer: causal attention, T^2 (K + V) flops per head (the two products
 * over the causal half); DeltaFormer's first stage doubles it. */
static void bench_flash(const char *op, int bf16, int64_t T, int64_t H, int64_t K, int64_t V, int max_shared,
                        double gemm)
{
    const lacs_dtype dt = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t qk[4] = {1, T, H, K}, vs[4] = {1, T, H, V}, bs[3] = {1, T, H};
    lacs_cuda_tensor in[4];
    int n_in = 0;
    in[n_in++] = device_tensor("q", dt, 4, qk, FILL_UNIT_ROWS, K);
    in[n_in++] = device_tensor("k", dt, 4, qk, FILL_UNIT_ROWS, K);
    in[n_in++] = device_tensor("v", dt, 4, vs, FILL_NORMAL, V);
    if (strcmp(op, "fox") == 0)
        in[n_in++] = device_tensor("g", dt, 3, bs, FILL_GATE, 1);
    if (strcmp(op, "deltaformer") == 0)
        in[n_in++] = device_tensor("beta", dt, 3, bs, FILL_BETA, 1);
    lacs_cuda_tensor out[1] = {device_output("o", 4, vs)};
    lacs_cuda_call c = {op, bf16, in, n_in, nullptr, 0, out, 1, max_shared};
    const double ms = time_call(lacs_cuda_attention, &c);
    if (ms > 0) {
        const double flops = (double)T * T * (K + V) * H * (strcmp(op, "deltaformer") == 0 ? 2 : 1);
        const double tflops = flops / (ms * 1e-3) / 1e12;
        printf("%-20s %-4s T=%lld H=HV=%lld K=%lld V=%lld  %9.3f ms  %7.1f TFLOP/s (T^2 (K + V))  %.3f x GEMM\n", op,
               bf16 ? "bf16" : "fp32", (long long)T, (long long)H, (long long)K, (long long)V, ms, tflops,
               tflops / gemm);
    }
    free_tensors(in, n_in);
    free_tensors(out, 1);
}

/* softmax_attn_vjp (attention_vjp.cu, README section 10): q, k, v, do; dq, dk, dv. FlashAttention's backward
 * count, 2.5 times the causal forward's T^2 (K + V) per head (bench_flash's): 2.5 T^2 (K + V). The first
 * version's kernels recompute every weight on the CUDA cores: no target yet. */
static void bench_attention_vjp(int bf16, int64_t T, int64_t H, int64_t K, int64_t V, int max_shared, double gemm)
{
    const lacs_dtype dt = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t qk[4] = {1, T, H, K}, vs[4] = {1, T, H, V};
    lacs_cuda_tensor in[4] = {device_tensor("q", dt, 4, qk, FILL_UNIT_ROWS, K),
                              device_tensor("k", dt, 4, qk, FILL_UNIT_ROWS, K),
                              device_tensor("v", dt, 4, vs, FILL_NORMAL, V), device_tensor("do", dt, 4, vs, FILL_NORMAL, V)};
    lacs_cuda_tensor out[3] = {device_output("dq", 4, qk), device_output("dk", 4, qk), device_output("dv", 4, vs)};
    lacs_cuda_call c = {"softmax_attn_vjp", bf16, in, 4, nullptr, 0, out, 3, max_shared};
    const double ms = time_call(lacs_cuda_attention_vjp, &c);
    if (ms > 0) {
        const double tflops = 2.5 * (double)T * T * (K + V) * H / (ms * 1e-3) / 1e12;
        printf("%-20s %-4s T=%lld H=HV=%lld K=%lld V=%lld  %9.3f ms  %7.2f TFLOP/s (2.5 T^2 (K + V))  %.3f x GEMM\n",
               "softmax_attn_vjp", bf16 ? "bf16" : "fp32", (long long)T, (long long)H, (long long)K, (long long)V, ms,
               tflops, tflops / gemm);
    }
    free_tensors(in, 4);
    free_tensors(out, 3);
}

static void bench_path(int bf16, int64_t T, int64_t H, int64_t K, int64_t V, int max_shared, double gemm)
{
    const lacs_dtype dt = bf16 ? LACS_BF16 : LACS_F32;
    const int64_t qk[4] = {1, T, H, K}, vs[4] = {1, T, H, V}, bs[3] = {1, T, H};
    lacs_cuda_tensor in[5] = {device_tensor("q", dt, 4, qk, FILL_UNIT_ROWS, K),
                              device_tensor("k", dt, 4, qk, FILL_UNIT_ROWS, K),
                              device_tensor("v", dt, 4, vs, FILL_NORMAL, V),
                              device_tensor("w", dt, 4, qk, FILL_UNIT_ROWS, K),
                              device_tensor("beta", dt, 3, bs, FILL_BETA, 1)};
    lacs_cuda_tensor out[1] = {device_output("o", 4, vs)};
    lacs_cuda_call c = {"path_attn", bf16, in, 5, nullptr, 0, out, 1, max_shared};
    const double ms = time_call(lacs_cuda_attention, &c);
    if (ms > 0) {
        /* causal attention's two products (QK^T, PV) plus carrying the queries through each block: ~ T^2 (2K + V) per head */
        const double tflops = (double)T * T * (2.0 * K + V) * H / (ms * 1e-3) / 1e12;
        printf("%-20s %-4s T=%lld H=HV=%lld K=%lld V=%lld  %9.3f ms  %7.1f TFLOP/s (T^2 (2K + V))  %.3f x GEMM\n",
               "path_attn", bf16 ? "bf16" : "fp32", (long long)T, (long long)H, (long long)K, (long long)V, ms,
               tflops, tflops / gemm);
    }
    free_tensors(in, 5);
    free_tensors(out, 1);
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    char device[512], why[512];
    int max_shared = 0;
    if (!lacs_cuda_describe_device(device, sizeof device) || lacs_cuda_device_open(&max_shared, why, sizeof why)) {
        fprintf(stderr, "lacs-bench-cuda: %s: nothing measured\n", device);
        return 2;
    }
    printf("device: %s\n", device);
    const double gemm = gemm_tflops(), copy = copy_gbs();
    printf("anchor: cuBLAS bf16 GEMM 8192^3 (fp32 accumulation)  %.1f TFLOP/s\n", gemm);
    printf("anchor: device-to-device copy 1 GiB                   %.1f GB/s (read + write)\n", copy);

    const int64_t T = quick ? 4096 : 16384;
    bench_recurrent("gated_delta_rule", "g", 1, 1, T, 16, 128, 128, max_shared, gemm, 1);
    bench_recurrent("gated_delta_rule", "g", 0, 1, T, 16, 128, 128, max_shared, gemm, 0);
    bench_recurrent("gated_delta_rule", "g", 1, 1, 8192, 8, 128, 128, max_shared, gemm, 0); /* fla's reported shape */
    bench_recurrent("gated_delta_rule", "gk", 1, 1, T, 16, 128, 128, max_shared, gemm, 0); /* KDA */
    bench_recurrent("delta_rule", "", 1, 1, T, 16, 128, 128, max_shared, gemm, 0);
    bench_recurrent("efla", "", 1, 1, T, 16, 128, 128, max_shared, gemm, 0);
    bench_recurrent("comba", "g", 1, 1, T, 16, 128, 128, max_shared, gemm, 0);
    bench_recurrent("gla", "gk", 1, 1, T, 16, 128, 128, max_shared, gemm, 0);
    bench_recurrent("simple_gla", "g", 1, 1, T, 16, 128, 128, max_shared, gemm, 0);
    bench_decode(1, 64, 16, 128, 128, max_shared, copy);
    bench_recurrent_vjp("g", 1, 1, quick ? 1024 : 4096, 16, 128, 128, max_shared);
    bench_recurrent_vjp("g", 0, 1, quick ? 1024 : 4096, 16, 128, 128, max_shared);
    bench_recurrent_vjp("gk", 1, 1, quick ? 1024 : 4096, 16, 128, 128, max_shared);
    for (int bf16 = 1; bf16 >= 0; bf16--) {
        bench_norm("dyt", bf16, 4096, 4096, max_shared, copy, 1);
        bench_norm("dyisru", bf16, 4096, 4096, max_shared, copy, 1);
        bench_norm("rmsnorm", bf16, 4096, 4096, max_shared, copy, 0);
        bench_norm("softcap", bf16, 4096, 4096, max_shared, copy, 0);
        bench_norm("l2norm", bf16, 4096, 4096, max_shared, copy, 0);
    }
    bench_flash("softmax_attn", 1, quick ? 1024 : 4096, 16, 128, 128, max_shared, gemm);
    bench_flash("fox", 1, quick ? 1024 : 4096, 16, 128, 128, max_shared, gemm);
    bench_flash("deltaformer", 1, quick ? 512 : 2048, 4, 64, 64, max_shared, gemm);
    bench_attention_vjp(1, quick ? 1024 : 4096, 16, 128, 128, max_shared, gemm);
    bench_path(1, quick ? 1024 : 4096, 4, 64, 64, max_shared, gemm);
    bench_path(0, quick ? 1024 : 4096, 4, 64, 64, max_shared, gemm);
    return failures ? 1 : 0;
}
