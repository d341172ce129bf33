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

/* ---- Test layouts (strided tensors) ---- */

static int64_t pick_gap(ta_rng *r) {
    static const int64_t gaps[5] = {0, 0, 1, 3, 16};
    return gaps[ta_rng_int(r, 0, 4)];
}

void ta_test_layout_make(ta_rng *r, ta_test_layout *x, int32_t n_b, int32_t n_h, int32_t n_s, int32_t dim,
                        int strided) {
    int32_t b, h, s;
    memset(x, 0, sizeof *x);
    x->n_b = n_b, x->n_h = n_h, x->n_s = n_s, x->dim = dim;
    if (!strided) {
        x->st.seq = dim;
        x->st.head = (int64_t)n_s * dim;
        x->st.batch = x->st.head * n_h;
        x->extent = (size_t)n_b * (size_t)n_h * (size_t)n_s * (size_t)dim;
        return;
    }
    x->bshd = ta_rng_int(r, 0, 1);
    if (x->bshd) { /* [B, S, H, D]: heads inside a row */
        x->st.head = dim + pick_gap(r);
        x->st.seq = n_h * x->st.head + pick_gap(r);
        x->st.batch = n_s * x->st.seq + pick_gap(r);
    } else {
        x->st.seq = dim + pick_gap(r);
        x->st.head = n_s * x->st.seq + pick_gap(r);
        x->st.batch = n_h * x->st.head + pick_gap(r);
    }
    x->arg = x->st;
    x->extent = (size_t)((int64_t)(n_b - 1) * x->st.batch + (int64_t)(n_h - 1) * x->st.head +
                         (int64_t)(n_s - 1) * x->st.seq + dim);
    x->is_elem = (unsigned char *)calloc(x->extent, 1);
    if (!x->is_elem) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (b = 0; b < n_b; ++b)
        for (h = 0; h < n_h; ++h)
            for (s = 0; s < n_s; ++s)
                memset(x->is_elem + b * x->st.batch + h * x->st.head + s * x->st.seq, 1,
                       (size_t)dim);
}

/* Element offset of row (b, h, s) of x. */
static size_t layout_row(const ta_test_layout *x, int32_t b, int32_t h, int32_t s) {
    return (size_t)(b * x->st.batch + h * x->st.head + s * x->st.seq);
}

void ta_test_layout_scatter(void *dst, const void *src, const ta_test_layout *x, size_t eb) {
    int32_t b, h, s;
    size_t row = 0;
    for (b = 0; b < x->n_b; ++b)
        for (h = 0; h < x->n_h; ++h)
            for (s = 0; s < x->n_s; ++s, ++row)
                memcpy((char *)dst + layout_row(x, b, h, s) * eb,
                       (const char *)src + row * (size_t)x->dim * eb, (size_t)x->dim * eb);
}

void ta_test_layout_gather(void *dst, const void *src, const ta_test_layout *x, size_t eb) {
    int32_t b, h, s;
    size_t row = 0;
    for (b = 0; b < x->n_b; ++b)
        for (h = 0; h < x->n_h; ++h)
            for (s = 0; s < x->n_s; ++s, ++row)
                memcpy((char *)dst + row * (size_t)x->dim * eb,
                       (const char *)src + layout_row(x, b, h, s) * eb, (size_t)x->dim * eb);
}

size_t ta_test_layout_bad_gaps(const void *buf, const ta_test_layout *x, size_t eb, int byte) {
    const unsigned char *p = (const unsigned char *)buf;
    size_t i, bad = 0, j;
    if (!x->is_elem) return 0;
    for (i = 0; i < x->extent; ++i)
        if (!x->is_elem[i])
            for (j = 0; j < eb; ++j)
                bad += p[i * eb + j] != (unsigned char)byte;
    return bad;
}

void ta_test_layout_free(ta_test_layout *x) {
    free(x->is_elem);
    x->is_elem = NULL;
}

ta_strides ta_test_strides_bshd(int32_t heads, int32_t seq, int32_t dim) {
    ta_strides st;
    st.head = dim;
    st.seq = (int64_t)heads * dim;
    st.batch = (int64_t)seq * heads * dim;
    return st;
}

ta_strides ta_test_strides_bhsd(int32_t heads, int32_t seq, int32_t dim) {
    ta_strides st;
    st.seq = dim;
    st.head = (int64_t)seq * dim;
    st.batch = (int64_t)heads * st.head;
    return st;
}

void ta_test_expect_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a, void *ws,
                        size_t ws_bytes, ta_status want, const char *field, const char *what) {
    char why[256];
    const size_t o_bytes = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q *
                           (size_t)p->head_dim_v * sizeof(float);
    ta_status st, ex;
    ta_canary_fill(a->o, o_bytes);
    st = ta_fwd(p, be, a, ws, ws_bytes, NULL);
    ex = ta_explain_fwd(p, be, a, ws, ws_bytes, NULL, why, sizeof why);
    TA_CHECK(st == want, "%s: ta_fwd gave %s, want %s", what, ta_status_string(st),
             ta_status_string(want));
    TA_CHECK(ex == st, "%s: explain gave %s, ta_fwd %s", what, ta_status_string(ex),
             ta_status_string(st));
    TA_CHECK(strstr(why, field) != NULL, "%s: explanation \"%s\" does not name %s", what, why,
             field);
    TA_CHECK(st == TA_OK || ta_canary_intact(a->o, o_bytes), "%s: o written on error", what);
}

/* The caller-run tasks of ta_fwd (fa) or ta_bwd (ba): each phase's tasks,
 * the last first. */
static ta_status ta_test_tasks(const ta_problem *p, const ta_fwd_args *fa, const ta_bwd_args *ba) {
    ta_task_plan tp;
    void *shared, *scratch;
    int64_t t;
    int32_t ph;
    ta_status st = fa ? ta_fwd_task_plan(p, TA_BACKEND_CPU, &tp)
                      : ta_bwd_task_plan(p, TA_BACKEND_CPU, &tp);
    if (st != TA_OK) return st;
    shared = ta_test_alloc(tp.shared_bytes ? tp.shared_bytes : 1);
    scratch = ta_test_alloc(tp.scratch_bytes ? tp.scratch_bytes : 1);
    ta_poison(shared, tp.shared_bytes);
    ta_poison(scratch, tp.scratch_bytes);
    st = fa ? ta_fwd_tasks_prepare(p, TA_BACKEND_CPU, fa, shared, tp.shared_bytes)
            : ta_bwd_tasks_prepare(p, TA_BACKEND_CPU, ba, shared, tp.shared_bytes);
    for (ph = 0; st == TA_OK && ph < tp.num_phases; ++ph)
        for (t = tp.num_tasks[ph] - 1; st == TA_OK && t >= 0; --t)
            st = ta_task_run(shared, ph, t, scratch, tp.scratch_bytes);
    ta_test_free(shared);
    ta_test_free(scratch);
    return st;
}

ta_status ta_test_fwd_tasks(const ta_problem *p, const ta_fwd_args *a) {
    return ta_test_tasks(p, a, NULL);
}

ta_status ta_test_bwd_tasks(const ta_problem *p, const ta_bwd_args *a) {
    return ta_test_tasks(p, NULL, a);
}

void ta_test_rows_of(float *dst, const float *x, size_t heads, size_t S, size_t D, size_t r0,
                     size_t rows) {
    size_t h;
    for (h = 0; h < heads; ++h)
        memcpy(dst + h * rows * D, x + (h * S + r0) * D, rows * D * sizeof(float));
}
