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
