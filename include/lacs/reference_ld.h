/* lacs reference, in long double: the same source as lacs/reference.h compiled
 * with real = long double (x87 extended, 64-bit significand on x86-64). Used to
 * certify the double reference: their difference bounds the golden outputs' own
 * error. Inputs stay double (golden inputs are exact in double); outputs and
 * every intermediate are long double. Each function is documented in
 * lacs/reference.h under the name without _ld. */
#ifndef LACS_REFERENCE_LD_H
#define LACS_REFERENCE_LD_H

#include <stddef.h>
#include "lacs/types.h"

#ifdef __cplusplus
extern "C" {
#endif

int lacs_ref_linear_attn_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_linear_attn_postnorm_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_retention_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_simple_gla_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_gla_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_linear_attn_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_retention_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_simple_gla_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_gla_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);

int lacs_ref_delta_rule_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_delta_rule_ut_ld(const lacs_dims *d, const lacs_inputs *in, int64_t chunk, long double *o, long double *ht);
int lacs_ref_delta_rule_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);

int lacs_ref_gated_delta_rule_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_gated_delta_rule_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_comba_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);

long double lacs_ref_efla_coefficient_ld(long double beta, long double knorm2);
int lacs_ref_efla_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
int lacs_ref_efla_ode_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);

int lacs_ref_softmax_attn_ld(const lacs_dims *d, const lacs_inputs *in, long double *o);
int lacs_ref_softmax_attn_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o);

int lacs_ref_fox_ld(const lacs_dims *d, const lacs_inputs *in, long double *o);
int lacs_ref_fox_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o);
int lacs_ref_deltaformer_ld(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form form,
                            long double *o);
int lacs_ref_deltaformer_matrix_ld(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form form,
                                   long double *o);
int lacs_ref_deltaformer_neumann_ld(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form form,
                                    int64_t terms, long double *o);
int lacs_ref_path_attn_ld(const lacs_dims *d, const lacs_inputs *in, long double *o);
int lacs_ref_path_attn_recursive_ld(const lacs_dims *d, const lacs_inputs *in, long double *o);
int lacs_ref_path_attn_matrix_ld(const lacs_dims *d, const lacs_inputs *in, long double *o);
int lacs_ref_mesa_net_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht,
                         long double *ht_kk);
int lacs_ref_mesa_net_parallel_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht,
                                  long double *ht_kk);

typedef struct {
    long double *dq, *dk, *dv, *dbeta, *dg, *dgk, *dg_gamma, *dh0, *dw, *dlambda, *dh0_kk;
} lacs_ref_grads_ld;
int lacs_ref_linear_attn_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                                const lacs_ref_grads_ld *gr);
int lacs_ref_retention_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                              const lacs_ref_grads_ld *gr);
int lacs_ref_simple_gla_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                               const lacs_ref_grads_ld *gr);
int lacs_ref_gla_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                        const lacs_ref_grads_ld *gr);
int lacs_ref_delta_rule_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                               const lacs_ref_grads_ld *gr);
int lacs_ref_gated_delta_rule_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                                     const lacs_ref_grads_ld *gr);
int lacs_ref_comba_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                          const lacs_ref_grads_ld *gr);
int lacs_ref_efla_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                         const lacs_ref_grads_ld *gr);
void lacs_ref_efla_coefficient_derivatives_ld(long double beta, long double knorm2, long double *dc_dbeta,
                                              long double *dc_dknorm2);
int lacs_ref_softmax_attn_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                                 const lacs_ref_grads_ld *gr);
int lacs_ref_fox_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                        const lacs_ref_grads_ld *gr);
int lacs_ref_path_attn_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                              const lacs_ref_grads_ld *gr);
int lacs_ref_deltaformer_vjp_ld(const lacs_dims *d, const lacs_inputs *in, lacs_deltaformer_form form,
                                const lacs_cotangents *ct, const lacs_ref_grads_ld *gr);

int lacs_ref_rmsnorm_ld(const double *x, int64_t rows, int64_t dim, double eps, const double *weight,
                        long double *y);
int lacs_ref_rmsnorm_jacobian_ld(const double *x, int64_t dim, double eps, long double *J);
int lacs_ref_rmsnorm_vjp_ld(const double *x, const double *dy, int64_t rows, int64_t dim, double eps,
                            const double *weight, long double *dx, long double *dweight);
int lacs_ref_dyt_ld(const double *x, int64_t rows, int64_t dim, double alpha, const double *weight,
                    const double *bias, long double *y);
int lacs_ref_dyt_vjp_ld(const double *x, const double *dy, int64_t rows, int64_t dim, double alpha,
                        const double *weight, long double *dx, long double *dalpha, long double *dweight,
                        long double *dbias);
int lacs_ref_dyisru_ld(const double *x, int64_t rows, int64_t dim, double C, const double *weight,
                       const double *bias, long double *y);
int lacs_ref_dyisru_vjp_ld(const double *x, const double *dy, int64_t rows, int64_t dim, double C,
                           const double *weight, long double *dx, long double *dC, long double *dweight,
                           long double *dbias);
int lacs_ref_softcap_ld(const double *x, int64_t n, double cap, long double *y);
int lacs_ref_softcap_vjp_ld(const double *x, const double *dy, int64_t n, double cap, long double *dx,
                            long double *dcap);
int lacs_ref_l2norm_vjp_ld(const double *x, const double *dy, int64_t rows, int64_t dim, double eps,
                           lacs_l2norm_convention convention, long double *dx);

int lacs_ref_l2norm_ld(const double *x, int64_t rows, int64_t dim, double eps,
                       lacs_l2norm_convention convention, long double *y);
void lacs_ref_sigmoid_ld(const double *x, int64_t n, long double *y);

typedef struct {
    const char *name;
    long double (*value)(long double x);
    long double (*divided_difference)(long double s);
} lacs_analytic_fn_ld;
void lacs_ref_rank1_function_ld(const lacs_analytic_fn_ld *f, int64_t n, const long double *x,
                                const long double *y, long double *out);
int lacs_ref_expm_psi_ld(int64_t n, const long double *X, long double *expX, long double *psiX);
int lacs_ref_symmetric_eigenvalues_ld(int64_t n, const long double *A, long double *eigenvalues);
long double lacs_ref_ttt_loss_ld(lacs_ttt_loss_kind kind, int64_t K, int64_t V, const long double *h,
                                 const long double *k, const long double *v, long double gamma,
                                 long double eta);

#ifdef __cplusplus
}
#endif

#endif
