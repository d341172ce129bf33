/*
 * Non-finite scores (docs/exactness.md section 8), shared by test_nonfinite
 * (REF == CPU) and test_cuda_equiv (REF == CUDA): problems whose scores
 * overflow to +-inf or are NaN, and the checks of the documented rules.
 *
 * The rules, per query row (forward), over the row's visible scores:
 *   - a NaN or a +inf score: o (every element) and lse are NaN;
 *   - else, every score -inf (or no visible key): o = 0, lse = -inf;
 *   - else o and lse are finite (-inf scores have weight 0).
 * Backends agree bit for bit except in NaN payloads (section 7 there): nf_same
 * compares NaN positions, every other bit exactly.
 */
#ifndef TA_TEST_NONFINITE_H
#define TA_TEST_NONFINITE_H

#include <stddef.h>
#include <stdint.h>

#include "test_util.h"
#include "tileattn.h"

typedef struct nf_case {
    char name[256];
    ta_problem p;
    size_t n_q, n_k, n_v, n_o, n_lse, n_w, eb;
    void *q, *k, *v, *d_o; /* storage dtype, contiguous */
    float *w;              /* [H, c_q, c_k]; NULL without a conv */
    int32_t *seqlens;      /* [B] or NULL */
} nf_case;

typedef struct nf_out {
    void *o, *dq, *dk, *dv;
    float *lse, *dw;
} nf_out;

/* Fixed cases: issue 15's MTA repro and hand-made SDPA rows (f32). */
int nf_fixed_count(void);
void nf_make_fixed(int which, ta_rng *r, nf_case *c);
/* A random problem (SDPA, or MTA with mta) whose q and k mix ordinary values
 * with huge ones (scores overflow to +-inf, dot products and convs give
 * inf - inf = NaN) and a few NaNs; v and d_o finite. */
void nf_make_random(ta_rng *r, nf_case *c, int mta);
void nf_free_case(nf_case *c);

void nf_alloc_out(const nf_case *c, nf_out *o); /* poisoned (0xFF: NaN) */
void nf_free_out(nf_out *o);

/* Forward into out, then the backward from (o_in, lse_in) (NULL: out's own
 * o, lse) into out, on a host backend; the workspace is filled with random
 * bytes. Returns the first status that is not TA_OK. */
ta_status nf_run_host(ta_backend be, ta_rng *r, const nf_case *c, nf_out *out, const void *o_in,
                      const float *lse_in);

/* 1 if n elements of dtype dt agree: both NaN, or the same bits. *payload
 * counts NaN pairs whose bits differ (not a failure). */
int nf_same(ta_dtype dt, const void *a, const void *b, size_t n, size_t *payload);
/* Every output of a and b (nf_same); reports mismatches under `what`. */
int nf_same_all(const char *what, const nf_case *c, const nf_out *a, const nf_out *b,
                size_t *payload);

/* The documented rules on out (forward; and the backward's dq rows of NaN
 * rows and rows that see nothing): row by row, lse NaN <=> every o element
 * NaN; lse = -inf => o = 0 (and dq = 0); else no NaN in o. For f32 SDPA
 * without a window it also recomputes every visible score in f32 as the
 * library specifies it (scale * the fmaf chain) and checks the row's class.
 * Counts NaN / empty rows into *nan_rows, *empty_rows. Returns failures. */
int nf_check_rules(const nf_case *c, const nf_out *out, size_t *nan_rows, size_t *empty_rows);

#endif /* TA_TEST_NONFINITE_H */
