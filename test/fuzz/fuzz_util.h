/*
 * Shared pieces of the libFuzzer harnesses (test/fuzz/, CTest label `fuzz`):
 * a reader that turns the fuzzer's bytes into values (edge values favoured),
 * guarded buffers (canaries on both sides), and the check that an explanation
 * is well formed. A failed check aborts, which libFuzzer reports with the input
 * (replay: `fuzz_x crash-file`, or `-seed=N` as printed in its log).
 */
#ifndef TA_FUZZ_UTIL_H
#define TA_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tileattn.h"

#define FZ_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz check failed: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ---- The fuzzer's bytes as values; past the end every read gives 0. ---- */
typedef struct fz {
    const uint8_t *p;
    size_t n;
} fz;

static inline uint64_t fz_bits(fz *f, int bytes) {
    uint64_t v = 0;
    int i;
    for (i = 0; i < bytes; ++i) {
        v = (v << 8) | (f->n ? *f->p : 0u);
        if (f->n) {
            ++f->p;
            --f->n;
        }
    }
    return v;
}

/* Uniform-ish in [lo, hi] (hi - lo < 2^32); lo when hi < lo. */
static inline int32_t fz_range(fz *f, int32_t lo, int32_t hi) {
    const uint64_t span = hi < lo ? 1 : (uint64_t)((int64_t)hi - lo) + 1;
    return (int32_t)((int64_t)lo + (int64_t)(fz_bits(f, span > 256 ? 4 : 1) % span));
}

/* An int32 for a size field: edge values half of the time, else in [lo, hi]. */
static inline int32_t fz_size(fz *f, int32_t lo, int32_t hi) {
    static const int32_t edges[] = {0,
                                    1,
                                    -1,
                                    2,
                                    3,
                                    7,
                                    8,
                                    9,
                                    16,
                                    31,
                                    32,
                                    33,
                                    255,
                                    256,
                                    257,
                                    1 << 16,
                                    1 << 20,
                                    TA_SEQ_MAX,
                                    TA_SEQ_MAX + 1,
                                    INT32_MAX,
                                    INT32_MIN,
                                    -64};
    const uint32_t sel = (uint32_t)fz_bits(f, 1);
    if (sel & 1u) return edges[(sel >> 1) % (sizeof edges / sizeof edges[0])];
    return fz_range(f, lo, hi);
}

/* ---- A small valid problem: every option drawn, sizes up to max_seq / max_dim. ---- */
static inline void fz_small_problem(fz *f, ta_problem *p, int32_t max_seq, int32_t max_dim) {
    memset(p, 0, sizeof *p);
    p->batch = fz_range(f, 1, 2);
    p->heads_kv = fz_range(f, 1, 2);
    p->heads_q = p->heads_kv * fz_range(f, 1, 2);
    p->seq_q = fz_range(f, 1, max_seq);
    p->seq_k = fz_range(f, 1, max_seq);
    p->head_dim = fz_range(f, 1, max_dim);
    p->head_dim_v = fz_range(f, 1, max_dim);
    p->dtype = (ta_dtype)fz_range(f, 0, 2);
    p->flags = (uint32_t)fz_range(f, 0, 3);
    if (p->flags & TA_WINDOW) {
        p->window_left = fz_range(f, -1, max_seq / 3);
        p->window_right = fz_range(f, -1, max_seq / 3);
    }
    if ((p->flags & TA_CAUSAL) && fz_range(f, 0, 1)) {
        p->conv_q = fz_range(f, 1, 4);
        p->conv_k = 2 * fz_range(f, 0, 3) + 1;
    }
    if (fz_range(f, 0, 1)) p->block_q = fz_range(f, TA_BLOCK_MIN, 64);
    if (fz_range(f, 0, 1)) p->block_k = fz_range(f, TA_BLOCK_MIN, 64);
    p->num_threads = fz_range(f, 1, 3);
}

/* ---- splitmix64: input values from a seed the bytes give (small corpus). ---- */
static inline uint64_t fz_mix(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* ---- Guarded buffers: [canary 64][data, 64-aligned][canary 64]. ---- */
#define FZ_GUARD  64
#define FZ_CANARY 0xA5
typedef struct fz_buf {
    unsigned char *raw; /* malloc'd, 64-aligned start */
    size_t bytes;       /* data bytes */
} fz_buf;

static inline void *fz_buf_alloc(fz_buf *b, size_t bytes) {
    const size_t data = (bytes + 63u) & ~(size_t)63u;
    b->bytes = bytes;
    b->raw = (unsigned char *)aligned_alloc(64, data + 2 * FZ_GUARD);
    FZ_CHECK(b->raw != NULL, "out of memory (%zu bytes)", bytes);
    memset(b->raw, FZ_CANARY, data + 2 * FZ_GUARD);
    return b->raw + FZ_GUARD;
}
static inline void *fz_data(const fz_buf *b) { return b->raw + FZ_GUARD; }
/* 1 if the guard bytes on both sides are untouched. */
static inline int fz_guards_intact(const fz_buf *b) {
    const size_t data = (b->bytes + 63u) & ~(size_t)63u;
    size_t i;
    for (i = 0; i < FZ_GUARD; ++i)
        if (b->raw[i] != FZ_CANARY) return 0;
    for (i = FZ_GUARD + b->bytes; i < data + 2 * FZ_GUARD; ++i)
        if (b->raw[i] != FZ_CANARY) return 0;
    return 1;
}
static inline void fz_buf_free(fz_buf *b) {
    free(b->raw);
    b->raw = NULL;
}

/* An explanation is one terminated line, names a check (never the "no
 * explanation recorded" fallback), and ends with the status's name. */
static inline void fz_check_message(const char *msg, size_t cap, ta_status st) {
    const char *name = ta_status_string(st);
    const size_t len = strlen(msg), name_len = (size_t)(strchr(name, ':') - name);
    FZ_CHECK(len < cap, "message not terminated");
    if (st == TA_OK) {
        FZ_CHECK(strcmp(msg, "ok: every check passed") == 0, "OK explained as \"%s\"", msg);
        return;
    }
    FZ_CHECK(strncmp(msg, "no explanation", 14) != 0, "unrecorded refusal: \"%s\"", msg);
    FZ_CHECK(strchr(msg, '\n') == NULL, "message has a newline: \"%s\"", msg);
    /* "... (TA_ERR_X)" unless cut by the buffer */
    if (len + 1 < cap)
        FZ_CHECK(len > name_len + 2 && msg[len - 1] == ')' &&
                     strncmp(msg + len - 1 - name_len, name, name_len) == 0,
                 "message \"%s\" does not end with (%.*s)", msg, (int)name_len, name);
}

#endif /* TA_FUZZ_UTIL_H */
