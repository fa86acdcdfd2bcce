/* builtin:cuda, MesaNet (H15; SPEC.md 4.13; optimized/cuda/README.md section 8):
 * the recurrence token by token, by the reference's method.
 *
 *   H_t = exp(g_t) H_{t-1} + beta_t k_t k_t^T      (K x K, fp32)
 *   h_t = exp(g_t) h_{t-1} + beta_t k_t v_t^T      (K x V, fp32)
 *   o_t = h_t^T (H_t + diag(lambda))^{-1} q_t      (no scale on q, as fla)
 *
 * One CTA per (sequence, value head), of 32, 64 or 128 threads (one thread
 * per row of the K x K system up to K = 128, fewer threads each taking rows
 * i = tid, tid + threads, ...). The states are fp32, rounded at every token
 * (SPEC.md 11.1), H in shared memory and h in a device workspace [K x V] per
 * (sequence, value head), each thread owning the columns j = tid, tid +
 * threads, ... The system is solved as the reference and builtin:cpu solve
 * it (optimized/cpu/README.md section 3): Cholesky in double, column after
 * column (left-looking: thread i forms L_ij = (A_ij - sum_{p<j} L_ip L_jp) /
 * L_jj; two barriers per column), then the two triangular solves
 * column-oriented (one barrier per column), then o_j = sum_c h_cj x_c in
 * double. H_t + diag(lambda) can be
 * ill-conditioned (small lambda), which is why the factorisation is in
 * double, as builtin:cpu's. A pivot that is not positive stops that
 * (sequence, head) and is the reference's LACS_ERR_PARAM, naming the token.
 *
 * The walk is sequential in the tokens, 4 K + 4 barriers per token: MesaNet
 * is built for correctness here, not speed (it is not among the benchmark's
 * configurations).
 */
#include <math.h>
#include <string.h>

#include "cuda_common.cuh"

struct mesa_args {
    lacs_view q, k, v, g, beta, lambda, h0, h0_kk;
    const int64_t *cu_seqlens;
    int64_t T;
    int H, HV, K, V;
    float *o, *ht, *ht_kk;   /* ht, ht_kk: NULL when not asked for */
    float *h;                /* [n_seqs x HV][K x V] */
    int64_t *failed;         /* [n_seqs x HV]: -1, or the local token whose pivot failed */
    int *failed_pivot;       /* [n_seqs x HV] */
};

__host__ __device__ inline size_t mesa_round(size_t bytes) { return (bytes + 127) / 128 * 128; }

struct mesa_layout {
    size_t Hkk, L, root, r, y, qkv, bytes;
};

__host__ __device__ inline mesa_layout mesa_layout_of(int K, int V)
{
    mesa_layout l;
    size_t at = 0;
    l.Hkk = at, at += mesa_round((size_t)K * K * 4);
    l.L = at, at += mesa_round((size_t)K * K * 8);
    l.root = at, at += mesa_round((size_t)K * 8);
    l.r = at, at += mesa_round((size_t)K * 8);
    l.y = at, at += mesa_round((size_t)K * 8);
    l.qkv = at, at += mesa_round((size_t)(2 * K + V) * 4);
    l.bytes = at;
    return l;
}

__global__ void __launch_bounds__(128) mesa_kernel(mesa_args a)
{
    const int K = a.K, V = a.V, tid = (int)threadIdx.x, threads = (int)blockDim.x;
    const mesa_layout l = mesa_layout_of(K, V);
    unsigned char *smem = lacs_shared_memory();
    float *Hkk = (float *)(smem + l.Hkk), *qv = (float *)(smem + l.qkv), *kv = qv + K, *vv = kv + K;
    double *L = (double *)(smem + l.L), *root = (double *)(smem + l.root), *r = (double *)(smem + l.r);
    double *y = (double *)(smem + l.y);
    const int64_t seq = blockIdx.x;
    const int hv = (int)blockIdx.y, h = hv / (a.HV / a.H);
    const int64_t item = seq * a.HV + hv;
    const int64_t start = a.cu_seqlens ? a.cu_seqlens[seq] : seq * a.T;
    const int64_t length = a.cu_seqlens ? a.cu_seqlens[seq + 1] - start : a.T;
    float *hstate = a.h + item * (int64_t)K * V;

    for (int idx = tid; idx < K * K; idx += threads)
        Hkk[idx] = a.h0_kk.data ? lacs_view_at(a.h0_kk, item * K * K + idx) : 0.0f;
    for (int j = tid; j < V; j += threads)
        for (int c = 0; c < K; c++)
            hstate[c * V + j] = a.h0.data ? lacs_view_at(a.h0, item * K * V + c * V + j) : 0.0f;
    if (tid == 0)
        a.failed[item] = -1;
    __syncthreads();

    for (int64_t step = 0; step < length; step++) {
        const int64_t t = start + step;
        for (int c = tid; c < K; c += threads) {
            qv[c] = lacs_view_at(a.q, (t * a.H + h) * K + c);
            kv[c] = lacs_view_at(a.k, (t * a.H + h) * K + c);
        }
        for (int j = tid; j < V; j += threads)
            vv[j] = lacs_view_at(a.v, (t * a.HV + hv) * V + j);
        const float gamma = a.g.data ? expf(lacs_view_at(a.g, t * a.HV + hv)) : 1.0f;
        const float beta = a.beta.data ? lacs_view_at(a.beta, t * a.HV + hv) : 1.0f;
        __syncthreads();

        /* H_t (fp32, rounded), and A = H_t + diag(lambda) into L's lower triangle, in double */
        for (int idx = tid; idx < K * K; idx += threads) {
            const int i = idx / K, j = idx % K;
            Hkk[idx] = gamma * Hkk[idx] + (beta * kv[i]) * kv[j];
            if (j <= i)
                L[idx] = (double)Hkk[idx] + (i == j ? (double)lacs_view_at(a.lambda, (int64_t)hv * K + i) : 0.0);
        }
        __syncthreads();

        /* Cholesky, left-looking: column j's entries t_i = A_ij - sum_{p<j} L_ip L_jp (i >= j), then
         * L_ij = t_i / sqrt(t_j); the diagonal's square roots kept apart in root */
        for (int j = 0; j < K; j++) {
            for (int i = j + tid; i < K; i += threads) {
                double sum = L[i * K + j];
                for (int p = 0; p < j; p++)
                    sum -= L[i * K + p] * L[j * K + p];
                L[i * K + j] = sum;
            }
            __syncthreads();
            const double pivot = L[j * K + j];
            if (!(pivot > 0.0)) {
                if (tid == 0) {
                    a.failed[item] = step;
                    a.failed_pivot[item] = j;
                }
                return; /* every thread reads the same pivot: the whole block returns */
            }
            const double root_j = sqrt(pivot);
            for (int i = j + 1 + tid; i < K; i += threads)
                L[i * K + j] /= root_j;
            if (tid == 0)
                root[j] = root_j;
            __syncthreads();
        }

        /* L y = q, column by column: y_p = r_p / L_pp, then r_i -= L_ip y_p (i > p) */
        for (int i = tid; i < K; i += threads)
            r[i] = qv[i];
        __syncthreads();
        for (int p = 0; p < K; p++) {
            const double yp = r[p] / root[p];
            for (int i = p + 1 + tid; i < K; i += threads)
                r[i] -= L[i * K + p] * yp;
            if (tid == p % threads)
                y[p] = yp;
            __syncthreads();
        }
        /* L^T x = y, from the last row: x_p = y_p / L_pp, then y_i -= L_pi x_p (i < p); x into r */
        for (int p = K - 1; p >= 0; p--) {
            const double xp = y[p] / root[p];
            for (int i = tid; i < p; i += threads)
                y[i] -= L[p * K + i] * xp;
            if (tid == p % threads)
                r[p] = xp;
            __syncthreads();
        }

        /* h_t, and o_j = sum_c h_cj x_c in double (the mutant reads h_{t-1}: rejected) */
        const bool stale = LACS_MUTANT(LACS_MUTANT_MESA_STALE_STATE);
        for (int j = tid; j < V; j += threads) {
            double out = 0.0;
            for (int c = 0; c < K; c++) {
                const float before = hstate[c * V + j];
                const float after = gamma * before + (beta * kv[c]) * vv[j];
                hstate[c * V + j] = after;
                out += (double)(stale ? before : after) * r[c];
            }
            a.o[(t * a.HV + hv) * V + j] = (float)out;
        }
        __syncthreads();
    }

    if (a.ht)
        for (int j = tid; j < V; j += threads)
            for (int c = 0; c < K; c++)
                a.ht[item * K * V + c * V + j] = hstate[c * V + j];
    if (a.ht_kk)
        for (int idx = tid; idx < K * K; idx += threads)
            a.ht_kk[item * K * K + idx] = Hkk[idx];
}

/* ---- the host side ---- */

/* A value of a host input, F32 or BF16. */
static float host_value(const lacs_cuda_tensor *t, int64_t i)
{
    if (t->dtype == LACS_BF16) {
        const unsigned bits = (unsigned)((const unsigned short *)t->host)[i] << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        return v;
    }
    return ((const float *)t->host)[i];
}

int lacs_cuda_mesa(const lacs_cuda_call *c)
{
    const char *op = c->op;
    if (strcmp(op, "mesa_net") != 0)
        return lacs_cuda_unsupported(op, "not mesa_net");
    const lacs_cuda_tensor *q = lacs_cuda_input(c, "q"), *v = lacs_cuda_input(c, "v");
    const lacs_cuda_tensor *lambda = lacs_cuda_input(c, "lambda"), *beta = lacs_cuda_input(c, "beta");
    const lacs_cuda_tensor *cu = lacs_cuda_input(c, "cu_seqlens");
    lacs_cuda_tensor *o = lacs_cuda_output(c, "o"), *ht = lacs_cuda_output(c, "ht"), *ht_kk = lacs_cuda_output(c, "ht_kk");
    if (!o)
        return lacs_cuda_error(LACS_ERR_INPUT, op, "output 'o' is required");
    mesa_args a;
    memset(&a, 0, sizeof a);
    a.q = lacs_view_of(q);
    a.k = lacs_view_of(lacs_cuda_input(c, "k"));
    a.v = lacs_view_of(v);
    a.g = lacs_view_of(lacs_cuda_input(c, "g"));
    a.beta = lacs_view_of(beta);
    a.lambda = lacs_view_of(lambda);
    a.h0 = lacs_view_of(lacs_cuda_input(c, "h0"));
    a.h0_kk = lacs_view_of(lacs_cuda_input(c, "h0_kk"));
    a.cu_seqlens = cu ? (const int64_t *)cu->device : nullptr;
    a.T = q->shape[1];
    a.H = (int)q->shape[2];
    a.K = (int)q->shape[3];
    a.HV = (int)v->shape[2];
    a.V = (int)v->shape[3];
    a.o = (float *)o->device;
    a.ht = ht ? (float *)ht->device : nullptr;
    a.ht_kk = ht_kk ? (float *)ht_kk->device : nullptr;

    /* The reference's domain (SPEC.md 4.13): lambda finite and >= 0, beta >= 0 (builtin:cpu's messages). */
    for (int64_t i = 0; i < lacs_cuda_count(lambda); i++) {
        const float x = host_value(lambda, i);
        if (!(x >= 0.0f) || isinf(x))
            return lacs_cuda_error(LACS_ERR_PARAM, op, "lambda[%lld] = %g: the regulariser must be finite and >= 0",
                                   (long long)i, (double)x);
    }
    for (int64_t i = 0; beta && i < lacs_cuda_count(beta); i++)
        if (!(host_value(beta, i) >= 0.0f))
            return lacs_cuda_error(LACS_ERR_PARAM, op, "beta[%lld] = %g must be >= 0: H_t must stay positive "
                                   "semidefinite", (long long)i, (double)host_value(beta, i));

    const int64_t n_seqs = cu ? cu->shape[0] - 1 : q->shape[0], items = n_seqs * a.HV;
    if (items == 0 || a.V == 0)
        return LACS_OK;
    const size_t shared = mesa_layout_of(a.K, a.V).bytes;
    if (shared > (size_t)c->max_shared_bytes)
        return lacs_cuda_unsupported(op, "K = %d: the K x K system and its factor need %zu bytes of shared memory; "
                                         "the device allows %d", a.K, shared, c->max_shared_bytes);
    if (n_seqs > 2147483647LL)
        return lacs_cuda_unsupported(op, "%lld sequences: more than one grid dimension holds", (long long)n_seqs);

    int64_t *failed_host = (int64_t *)malloc((size_t)items * sizeof *failed_host);
    int *pivot_host = (int *)malloc((size_t)items * sizeof *pivot_host);
    void *h = nullptr, *failed = nullptr, *pivots = nullptr;
    int rc = LACS_OK;
    if (!failed_host || !pivot_host)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "out of host memory");
    else if (cudaMalloc(&h, (size_t)items * a.K * a.V * sizeof(float)) != cudaSuccess ||
             cudaMalloc(&failed, (size_t)items * sizeof(int64_t)) != cudaSuccess ||
             cudaMalloc(&pivots, (size_t)items * sizeof(int)) != cudaSuccess)
        rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "out of device memory for the states (%lld x %d x %d floats)",
                             (long long)items, a.K, a.V);
    if (rc == LACS_OK) {
        a.h = (float *)h;
        a.failed = (int64_t *)failed;
        a.failed_pivot = (int *)pivots;
        const int threads = a.K <= 32 ? 32 : a.K <= 64 ? 64 : 128;
        cudaError_t e = lacs_launch(mesa_kernel, dim3((unsigned)n_seqs, (unsigned)a.HV), dim3(threads), shared, a);
        if (e != cudaSuccess)
            rc = lacs_cuda_launch_failed(op, "mesa_kernel", e);
        else if ((e = cudaDeviceSynchronize()) != cudaSuccess)
            rc = lacs_cuda_error(LACS_ERR_INPUT, op, "mesa_kernel failed: %s", cudaGetErrorString(e));
        else if (cudaMemcpy(failed_host, failed, (size_t)items * sizeof(int64_t), cudaMemcpyDeviceToHost) !=
                     cudaSuccess ||
                 cudaMemcpy(pivot_host, pivots, (size_t)items * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess)
            rc = lacs_cuda_error(LACS_ERR_INPUT, op, "cannot read the factorisations' status back");
        for (int64_t i = 0; rc == LACS_OK && i < items; i++)
            if (failed_host[i] >= 0)
                rc = lacs_cuda_error(LACS_ERR_PARAM, op,
                                     "sequence %lld, value head %lld, token %lld: H_t + diag(lambda) is not positive "
                                     "definite to working precision (Cholesky pivot %d); give lambda > 0",
                                     (long long)(i / a.HV), (long long)(i % a.HV), (long long)failed_host[i],
                                     pivot_host[i]);
    }
    cudaFree(h);
    cudaFree(failed);
    cudaFree(pivots);
    free(failed_host);
    free(pivot_host);
    return rc;
}
