/*
 * Test helpers: a portable PRNG (same stream on every compiler and machine),
 * random fills in each storage dtype, canary/poison buffers, and a tiny check
 * framework. Tests may allocate; the library may not.
 */
#ifndef TA_TEST_UTIL_H
#define TA_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tileattn.h"

/* splitmix64: portable, seedable, no libc rand(). */
typedef struct ta_rng { uint64_t s; } ta_rng;
void ta_rng_seed(ta_rng *r, uint64_t seed);
uint64_t ta_rng_u64(ta_rng *r);
/* uniform integer in [lo, hi] inclusive */
int32_t ta_rng_int(ta_rng *r, int32_t lo, int32_t hi);
/* uniform float in [lo, hi), from 24 random bits */
float ta_rng_uniform(ta_rng *r, float lo, float hi);

/* Seed for a test run: $TA_SEED if set, else from the clock (printed, so a
 * failure can be replayed). */
uint64_t ta_test_seed(const char *test_name);

/* Bytes of one element of dt. */
size_t ta_dtype_size(ta_dtype dt);
/* Fill n elements of dt with uniform values in [lo, hi), rounded to dt. */
void ta_fill_uniform(ta_rng *r, void *buf, ta_dtype dt, size_t n, float lo, float hi);
/* Element i of a dt buffer, widened to double. */
double ta_get(const void *buf, ta_dtype dt, size_t i);

/* Poison: a byte pattern that is a NaN in f32, f16 and bf16 (0xFF bytes). */
void ta_poison(void *buf, size_t bytes);
/* Canary: fill with a fixed pattern; check it is untouched. */
#define TA_CANARY_BYTE 0xA5
void ta_canary_fill(void *buf, size_t bytes);
int ta_canary_intact(const void *buf, size_t bytes);

/* 64-byte aligned host allocation (tests only); free with ta_test_free. */
void *ta_test_alloc(size_t bytes);
void ta_test_free(void *p);

/* With probability percent/100: TA_WINDOW on p, each bound unbounded (-1), 0,
 * small (1..16) or up to past the longer length (set seq_q, seq_k first). */
void ta_test_random_window(ta_rng *r, ta_problem *p, int percent);

/* A [n_b, n_h, n_s, dim] tensor's layout in a test (test_strides, test_cuda_equiv):
 * contiguous, or strided [B, H, S, D] or [B, S, H, D] (one draw) with random gaps
 * (0, 1, 3 or 16 elements) after each row, head and batch entry. */
typedef struct ta_test_layout {
    int32_t n_b, n_h, n_s, dim;
    ta_strides st;          /* resolved strides */
    ta_strides arg;         /* what a call passes: zeros when contiguous */
    size_t extent;          /* elements from the base to one past the last */
    unsigned char *is_elem; /* [extent] 1 where an element lives; NULL when contiguous */
    int bshd;               /* strided and [B, S, H, D] */
} ta_test_layout;
void ta_test_layout_make(ta_rng *r, ta_test_layout *x, int32_t n_b, int32_t n_h, int32_t n_s,
                         int32_t dim, int strided);
void ta_test_layout_free(ta_test_layout *x);
/* dst (x's layout) = the contiguous tensor src; gap bytes are left as they are. */
void ta_test_layout_scatter(void *dst, const void *src, const ta_test_layout *x, size_t eb);
/* contiguous dst = the elements of src (x's layout). */
void ta_test_layout_gather(void *dst, const void *src, const ta_test_layout *x, size_t eb);
/* Gap bytes of buf (x's layout) that differ from byte. */
size_t ta_test_layout_bad_gaps(const void *buf, const ta_test_layout *x, size_t eb, int byte);
/* Strides of a [B, heads, S, dim] tensor held as [B, S, heads, dim] without gaps. */
ta_strides ta_test_strides_bshd(int32_t heads, int32_t seq, int32_t dim);
/* The explicit strides of a contiguous [B, heads, seq, dim] tensor (what zero
 * strides mean). */
ta_strides ta_test_strides_bhsd(int32_t heads, int32_t seq, int32_t dim);
/* Rows [r0, r0 + rows) of every head of x ([heads, S, D] f32) into dst
 * ([heads, rows, D]): a chunk of a sequence, as one device of a ring holds it. */
void ta_test_rows_of(float *dst, const float *x, size_t heads, size_t S, size_t D, size_t r0,
                     size_t rows);

/* One forward call that a bad-input case expects to end with `want`: ta_fwd
 * on backend be returns it, ta_explain_fwd returns the same and names `field`
 * in its line, and a->o (f32, [B, H, S_q, D_v], canary-filled first) is
 * untouched unless want is TA_OK. `what` names the case in a failure. */
void ta_test_expect_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a, void *ws,
                        size_t ws_bytes, ta_status want, const char *field, const char *what);

/* ta_fwd of p on the CPU backend through the caller-run tasks (docs/api.md,
 * "Caller-run tasks"): plan, prepare, then every task on this thread, the last
 * first, with poisoned shared and scratch buffers. Returns the first failure. */
ta_status ta_test_fwd_tasks(const ta_problem *p, const ta_fwd_args *a);
/* ta_bwd the same way: each phase's tasks, the last first, phase by phase. */
ta_status ta_test_bwd_tasks(const ta_problem *p, const ta_bwd_args *a);

/* Check framework: count failures, print the first few. */
extern int ta_test_failures;
#define TA_CHECK(cond, ...)                                                                 \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            if (ta_test_failures++ < 20) {                                                  \
                fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);    \
                fprintf(stderr, __VA_ARGS__);                                               \
                fputc('\n', stderr);                                                        \
            }                                                                               \
        }                                                                                   \
    } while (0)
/* Exit status for main: 0 if no failure, 1 otherwise (prints a summary). */
int ta_test_finish(const char *test_name);
/* CTest SKIP_RETURN_CODE */
#define TA_TEST_SKIP 77

#endif /* TA_TEST_UTIL_H */
