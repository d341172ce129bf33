#include "test_util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ta_math.h"

int ta_test_failures = 0;

void ta_rng_seed(ta_rng *r, uint64_t seed) { r->s = seed; }

uint64_t ta_rng_u64(ta_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int32_t ta_rng_int(ta_rng *r, int32_t lo, int32_t hi) {
    const uint64_t span = (uint64_t)((int64_t)hi - (int64_t)lo) + 1u;
    return (int32_t)((int64_t)lo + (int64_t)(ta_rng_u64(r) % span));
}

float ta_rng_uniform(ta_rng *r, float lo, float hi) {
    const float u = (float)(ta_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
    return lo + (hi - lo) * u;
}

uint64_t ta_test_seed(const char *test_name) {
    const char *env = getenv("TA_SEED");
    uint64_t seed;
    if (env && *env) {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        timespec_get(&ts, TIME_UTC);
        seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    printf("%s: seed %llu (replay with TA_SEED=%llu)\n", test_name, (unsigned long long)seed,
           (unsigned long long)seed);
    return seed;
}

size_t ta_dtype_size(ta_dtype dt) { return dt == TA_F32 ? 4u : 2u; }

void ta_fill_uniform(ta_rng *r, void *buf, ta_dtype dt, size_t n, float lo, float hi) {
    size_t i;
    for (i = 0; i < n; ++i) {
        const float x = ta_rng_uniform(r, lo, hi);
        switch (dt) {
        case TA_F32: ((float *)buf)[i] = x; break;
        case TA_F16: ((uint16_t *)buf)[i] = ta_f32_to_f16(x); break;
        case TA_BF16: ((uint16_t *)buf)[i] = ta_f32_to_bf16(x); break;
        }
    }
}

double ta_get(const void *buf, ta_dtype dt, size_t i) {
    switch (dt) {
    case TA_F16: return (double)ta_f16_to_f32(((const uint16_t *)buf)[i]);
    case TA_BF16: return (double)ta_bf16_to_f32(((const uint16_t *)buf)[i]);
    case TA_F32: break;
    }
    return (double)((const float *)buf)[i];
}

void ta_poison(void *buf, size_t bytes) { memset(buf, 0xFF, bytes); }

void ta_canary_fill(void *buf, size_t bytes) { memset(buf, TA_CANARY_BYTE, bytes); }

int ta_canary_intact(const void *buf, size_t bytes) {
    const unsigned char *p = (const unsigned char *)buf;
    size_t i;
    for (i = 0; i < bytes; ++i)
        if (p[i] != TA_CANARY_BYTE) return 0;
    return 1;
}

void *ta_test_alloc(size_t bytes) {
    const size_t rounded = (bytes + 63u) & ~(size_t)63u;
    return aligned_alloc(64, rounded ? rounded : 64u);
}

void ta_test_free(void *p) { free(p); }

int ta_test_finish(const char *test_name) {
    if (ta_test_failures) {
        fprintf(stderr, "%s: FAILED (%d checks)\n", test_name, ta_test_failures);
        return 1;
    }
    printf("%s: passed\n", test_name);
    return 0;
}

void ta_test_random_window(ta_rng *r, ta_problem *p, int percent) {
    const int32_t reach = p->seq_k > p->seq_q ? p->seq_k : p->seq_q;
    if (ta_rng_int(r, 0, 99) >= percent) return;
    p->flags |= TA_WINDOW;
    /* each bound: unbounded, 0, small, or up to the length (and past it) */
    p->window_left = ta_rng_int(r, 0, 4) == 0 ? -1 : ta_rng_int(r, 0, 3) == 0 ? 0 :
                     ta_rng_int(r, 0, 1) ? ta_rng_int(r, 1, 16) : ta_rng_int(r, 1, reach + 2);
    p->window_right = ta_rng_int(r, 0, 3) == 0 ? -1 : ta_rng_int(r, 0, 3) == 0 ? 0 :
                      ta_rng_int(r, 0, 1) ? ta_rng_int(r, 1, 16) : ta_rng_int(r, 1, reach + 2);
}
