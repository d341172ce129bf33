/*
 * No heap allocation inside any library call (docs/design.md section 4).
 *
 * Everything the calls need is allocated first. Then the program writes the
 * marker line TA_NOALLOC_BEGIN to stderr with write(2) (unbuffered, no stdio),
 * makes the library calls (size queries, ta_fwd, ta_bwd on several problems,
 * SDPA and the MTA conv, sliding windows on strided tensors, refused calls,
 * the caller-run tasks: plans, prepare calls and every task of a forward and
 * a backward,
 * ta_tune_fwd refused on REF, ta_status_string, ta_backend_available), stores their statuses,
 * writes TA_NOALLOC_END, and only then checks the statuses.
 *
 * The CPU backend runs on OpenMP, whose runtime allocates its thread pool and
 * team on the first parallel region (and again when the team size changes).
 * So before the markers every shape runs one CPU forward and backward (the
 * warm-up), and every CPU call uses the same fixed thread count
 * (CPU_THREADS): inside the window the library itself must allocate nothing.
 * In a build without OpenMP the warm-up changes nothing and there is no pool.
 *
 * Two witnesses of "no allocation":
 *   - test/check_valgrind_noalloc.cmake runs this program under
 *     `valgrind --trace-malloc=yes --log-fd=2`: valgrind's trace lines go to the
 *     same fd as the markers, so any allocator call between them is seen.
 *   - run directly on glibc without a sanitizer, this executable interposes
 *     malloc, calloc, realloc, free, aligned_alloc, posix_memalign, memalign and
 *     valloc (forwarding to glibc's __libc_* entry points) and counts the calls
 *     made between the markers; it must count none. A calibration malloc/free
 *     first checks that the counter is live (under valgrind it is not: valgrind
 *     replaces the executable's malloc too, and is then the witness itself).
 *
 * TA_NOALLOC_SELFTEST=1 makes the program itself malloc and free once between
 * the markers: the interposer must then count exactly those two calls (the
 * program still passes), and the valgrind check must fail. This shows both
 * witnesses can see an allocation.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "tileattn.h"

/* ---- Allocation counter (glibc, no sanitizer runtime that owns malloc) ---- */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) ||                         \
    __has_feature(thread_sanitizer) || __has_feature(leak_sanitizer)
#define TA_SANITIZER_MALLOC 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TA_SANITIZER_MALLOC 1
#endif
#if defined(__GLIBC__) && !defined(TA_SANITIZER_MALLOC) && !defined(TA_NOALLOC_NO_INTERPOSE)
#define TA_INTERPOSE 1
#else
#define TA_INTERPOSE 0
#endif

static volatile int g_counting;        /* 1 between the markers */
static volatile unsigned long g_count; /* allocator calls while counting */

#if TA_INTERPOSE
/* glibc's own implementations, exported for exactly this use. */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t n);
extern void *__libc_valloc(size_t n);
void *memalign(size_t align, size_t n);
void *valloc(size_t n);

static void counted(void) {
    if (g_counting) g_count = g_count + 1;
}
void *malloc(size_t n) {
    counted();
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
    counted();
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
    counted();
    return __libc_realloc(p, n);
}
void free(void *p) {
    counted();
    __libc_free(p);
}
void *aligned_alloc(size_t align, size_t n) {
    counted();
    return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
    counted();
    return __libc_memalign(align, n);
}
void *valloc(size_t n) {
    counted();
    return __libc_valloc(n);
}
int posix_memalign(void **out, size_t align, size_t n) {
    void *p;
    counted();
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
    p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
#endif

static void marker(const char *s) {
    const size_t n = strlen(s);
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(2, s + done, n - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
}

/* ---- The calls ---- */

typedef struct shape {
    int32_t b, h, hkv, sq, sk, d, dv;
    ta_dtype dt;
    uint32_t flags;
    int use_seqlens, use_trace;
    int32_t cq, ck; /* MTA conv size, 0 x 0 for SDPA */
    int32_t wl, wr; /* window bounds (with TA_WINDOW in flags) */
    int bshd;       /* 1: every tensor in the [B, S, H, D] layout (ta_strides) */
} shape;

static const shape k_shapes[] = {
    {2, 4, 2, 33, 47, 16, 8, TA_F32, TA_CAUSAL, 1, 1, 0, 0, 0, 0, 0},
    {1, 2, 1, 70, 70, 64, 64, TA_F16, TA_CAUSAL, 0, 0, 0, 0, 0, 0, 0},
    {1, 3, 3, 5, 130, 24, 40, TA_BF16, 0, 1, 0, 0, 0, 0, 0, 0},
    {1, 1, 1, 1, 1, 1, 1, TA_F32, 0, 0, 1, 0, 0, 0, 0, 0},
    {2, 4, 2, 75, 90, 32, 16, TA_F32, TA_CAUSAL, 1, 1, 6, 11, 0, 0, 0},
    {1, 2, 1, 150, 150, 64, 64, TA_BF16, TA_CAUSAL, 0, 0, 3, 3, 0, 0, 0},
    /* a sliding window on strided tensors: SDPA, then MTA */
    {2, 4, 2, 100, 120, 32, 48, TA_F32, TA_WINDOW, 1, 0, 0, 0, 23, 6, 1},
    {1, 2, 1, 130, 130, 32, 32, TA_F16, TA_CAUSAL | TA_WINDOW, 0, 0, 3, 5, 40, -1, 1},
};
#define N_SHAPES    ((int)(sizeof k_shapes / sizeof k_shapes[0]))
#define N_RESULTS   26
#define CPU_THREADS 2 /* every CPU call: one team size, so the pool is reused */
#define TRACE_CAP   4096

typedef struct bufs {
    ta_problem p;
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv, *ws;
    float *lse, *w, *dw; /* w, dw: [H, c_q, c_k] with a conv, else NULL */
    int32_t *seqlens;
    size_t ws_bytes;
    ta_problem cpu_p;     /* p with num_threads = CPU_THREADS */
    ta_status cuda_query; /* the CUDA size query's status, asked before the markers */
    void *cpu_ws;
    size_t cpu_ws_bytes;
    ta_trace trace;
    ta_tune_result tune;     /* a refused ta_tune_fwd's out (REF has nothing to tune) */
    ta_status st[N_RESULTS]; /* statuses, checked after the END marker */
    ta_status expect[N_RESULTS];
    size_t bytes_fwd, bytes_bwd;
    ta_task_plan task_fwd, task_bwd; /* caller-run tasks: plans, sized before the markers */
    ta_task_plan task_out;           /* the plans asked again inside */
    void *task_shared, *task_scratch;
} bufs;

static size_t zu(int32_t v) { return (size_t)v; }

/* Strides of a [B, heads, S, dim] tensor held as [B, S, heads, dim] (no gaps),
 * or zeros (contiguous). */
static ta_strides layout_of(const shape *s, int32_t heads, int32_t seq, int32_t dim) {
    ta_strides st;
    memset(&st, 0, sizeof st);
    return s->bshd ? ta_test_strides_bshd(heads, seq, dim) : st;
}

/* Every tensor's strides of shape s into the arguments. */
static void set_layouts(const shape *s, ta_fwd_args *fa, ta_bwd_args *ba) {
    fa->q_strides = ba->q_strides = ba->dq_strides = layout_of(s, s->h, s->sq, s->d);
    fa->k_strides = ba->k_strides = ba->dk_strides = layout_of(s, s->hkv, s->sk, s->d);
    fa->v_strides = ba->v_strides = ba->dv_strides = layout_of(s, s->hkv, s->sk, s->dv);
    fa->o_strides = ba->o_strides = ba->d_o_strides = layout_of(s, s->h, s->sq, s->dv);
}

static void *alloc_filled(ta_rng *rng, ta_dtype dt, size_t n) {
    void *p = ta_test_alloc(n * ta_dtype_size(dt));
    ta_fill_uniform(rng, p, dt, n, -1.0f, 1.0f);
    return p;
}

static void setup(bufs *x, const shape *s, ta_rng *rng) {
    const size_t nl = zu(s->b) * zu(s->h) * zu(s->sq), nq = nl * zu(s->d), no = nl * zu(s->dv);
    const size_t nk = zu(s->b) * zu(s->hkv) * zu(s->sk) * zu(s->d);
    const size_t nv = zu(s->b) * zu(s->hkv) * zu(s->sk) * zu(s->dv);
    size_t fw = 0, bw = 0;
    int32_t i;
    memset(x, 0, sizeof *x);
    x->p.batch = s->b;
    x->p.heads_q = s->h;
    x->p.heads_kv = s->hkv;
    x->p.seq_q = s->sq;
    x->p.seq_k = s->sk;
    x->p.head_dim = s->d;
    x->p.head_dim_v = s->dv;
    x->p.dtype = s->dt;
    x->p.flags = s->flags;
    x->p.conv_q = s->cq;
    x->p.conv_k = s->ck;
    x->p.window_left = s->wl;
    x->p.window_right = s->wr;
    if (s->cq) {
        x->w = (float *)alloc_filled(rng, TA_F32, zu(s->h) * zu(s->cq) * zu(s->ck));
        x->dw = (float *)alloc_filled(rng, TA_F32, zu(s->h) * zu(s->cq) * zu(s->ck));
    }
    x->q = alloc_filled(rng, s->dt, nq);
    x->k = alloc_filled(rng, s->dt, nk);
    x->v = alloc_filled(rng, s->dt, nv);
    x->o = alloc_filled(rng, s->dt, no);
    x->d_o = alloc_filled(rng, s->dt, no);
    x->dq = alloc_filled(rng, s->dt, nq);
    x->dk = alloc_filled(rng, s->dt, nk);
    x->dv = alloc_filled(rng, s->dt, nv);
    x->lse = (float *)alloc_filled(rng, TA_F32, nl);
    x->seqlens = (int32_t *)ta_test_alloc((size_t)s->b * sizeof(int32_t));
    for (i = 0; i < s->b; ++i)
        x->seqlens[i] = ta_rng_int(rng, 1, s->sk);
    /* sizes are queried here too, outside the markers, to size the workspace */
    TA_CHECK(ta_fwd_workspace_size(&x->p, TA_BACKEND_REF, &fw) == TA_OK, "fwd size");
    TA_CHECK(ta_bwd_workspace_size(&x->p, TA_BACKEND_REF, &bw) == TA_OK, "bwd size");
    x->ws_bytes = fw > bw ? fw : bw;
    x->ws = ta_test_alloc(x->ws_bytes);
    x->cuda_query = ta_fwd_workspace_size(&x->p, TA_BACKEND_CUDA, &fw);
    x->cpu_p = x->p;
    x->cpu_p.num_threads = CPU_THREADS;
    TA_CHECK(ta_fwd_workspace_size(&x->cpu_p, TA_BACKEND_CPU, &fw) == TA_OK, "cpu fwd size");
    TA_CHECK(ta_bwd_workspace_size(&x->cpu_p, TA_BACKEND_CPU, &bw) == TA_OK, "cpu bwd size");
    x->cpu_ws_bytes = fw > bw ? fw : bw;
    x->cpu_ws = ta_test_alloc(x->cpu_ws_bytes);
    x->trace.entries = (ta_trace_entry *)ta_test_alloc(TRACE_CAP * sizeof(ta_trace_entry));
    x->trace.capacity = TRACE_CAP;
    TA_CHECK(ta_fwd_task_plan(&x->cpu_p, TA_BACKEND_CPU, &x->task_fwd) == TA_OK, "fwd task plan");
    TA_CHECK(ta_bwd_task_plan(&x->cpu_p, TA_BACKEND_CPU, &x->task_bwd) == TA_OK, "bwd task plan");
    x->task_shared = ta_test_alloc(x->task_fwd.shared_bytes > x->task_bwd.shared_bytes
                                       ? x->task_fwd.shared_bytes
                                       : x->task_bwd.shared_bytes);
    x->task_scratch = ta_test_alloc(x->task_fwd.scratch_bytes > x->task_bwd.scratch_bytes
                                        ? x->task_fwd.scratch_bytes
                                        : x->task_bwd.scratch_bytes);
}

/* Every task of the call prepared in shared, phase by phase, ascending on this
 * thread: the first status that is not TA_OK, or TA_OK. */
static ta_status run_all_tasks(void *shared, const ta_task_plan *tp, void *scratch) {
    int32_t ph;
    int64_t t;
    for (ph = 0; ph < tp->num_phases; ++ph)
        for (t = 0; t < tp->num_tasks[ph]; ++t) {
            const ta_status st = ta_task_run(shared, ph, t, scratch, tp->scratch_bytes);
            if (st != TA_OK) return st;
        }
    return TA_OK;
}

static void teardown(bufs *x) {
    ta_test_free(x->q);
    ta_test_free(x->k);
    ta_test_free(x->v);
    ta_test_free(x->o);
    ta_test_free(x->d_o);
    ta_test_free(x->dq);
    ta_test_free(x->dk);
    ta_test_free(x->dv);
    ta_test_free(x->lse);
    if (x->w) ta_test_free(x->w);
    if (x->dw) ta_test_free(x->dw);
    ta_test_free(x->seqlens);
    ta_test_free(x->ws);
    ta_test_free(x->cpu_ws);
    ta_test_free(x->trace.entries);
    ta_test_free(x->task_shared);
    ta_test_free(x->task_scratch);
}

/* The library calls of one shape: no stdio, no allocation of our own in here. */
static void run_calls(bufs *x, const shape *s) {
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_problem bad = x->p;
    int n = 0;
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    fa.q = ba.q = x->q;
    fa.k = ba.k = x->k;
    fa.v = ba.v = x->v;
    fa.o = x->o;
    fa.lse = x->lse;
    fa.seqlens_k = ba.seqlens_k = s->use_seqlens ? x->seqlens : NULL;
    fa.trace = ba.trace = s->use_trace ? &x->trace : NULL;
    fa.conv_w = ba.conv_w = x->w;
    ba.dconv_w = x->dw;
    ba.o = x->o;
    ba.d_o = x->d_o;
    ba.lse = x->lse;
    ba.dq = x->dq;
    ba.dk = x->dk;
    ba.dv = x->dv;
    set_layouts(s, &fa, &ba);
    bad.head_dim = 0;
#define CALL(expected, expr)                                                                       \
    do {                                                                                           \
        x->expect[n] = (expected);                                                                 \
        x->st[n++] = (expr);                                                                       \
    } while (0)
    CALL(TA_OK, ta_fwd_workspace_size(&x->p, TA_BACKEND_REF, &x->bytes_fwd));
    CALL(TA_OK, ta_fwd(&x->p, TA_BACKEND_REF, &fa, x->ws, x->ws_bytes, NULL));
    CALL(TA_OK, ta_bwd_workspace_size(&x->p, TA_BACKEND_REF, &x->bytes_bwd));
    CALL(TA_OK, ta_bwd(&x->p, TA_BACKEND_REF, &ba, x->ws, x->ws_bytes, NULL));
    CALL(TA_ERR_BAD_SHAPE, ta_fwd_workspace_size(&bad, TA_BACKEND_REF, &x->bytes_fwd));
    CALL(TA_ERR_BAD_SHAPE, ta_bwd(&bad, TA_BACKEND_REF, &ba, x->ws, x->ws_bytes, NULL));
    CALL(TA_ERR_WORKSPACE_SIZE, ta_fwd(&x->p, TA_BACKEND_REF, &fa, x->ws, 1, NULL));
    CALL(TA_ERR_NULL_ARG, ta_bwd(&x->p, TA_BACKEND_REF, NULL, x->ws, x->ws_bytes, NULL));
    CALL(TA_ERR_UNSUPPORTED,
         ta_tune_fwd(&x->p, TA_BACKEND_REF, &fa, x->ws, x->ws_bytes, NULL, 1, &x->tune));
    /* the CUDA size query (it needs no device; in a build without CUDA it may
     * refuse): whatever it answers, the same as before the markers, and
     * without allocating */
    CALL(x->cuda_query, ta_fwd_workspace_size(&x->p, TA_BACKEND_CUDA, &x->bytes_fwd));
    CALL(ta_backend_available(TA_BACKEND_CPU) ? TA_ERR_BAD_ARG : TA_ERR_BACKEND_UNAVAILABLE,
         ta_fwd(&x->p, TA_BACKEND_CPU, &fa, x->ws, x->ws_bytes, (void *)x->ws));
    /* the CPU backend (threads, vector paths), trace-less: it takes none */
    fa.trace = ba.trace = NULL;
    CALL(TA_OK, ta_fwd_workspace_size(&x->cpu_p, TA_BACKEND_CPU, &x->bytes_fwd));
    CALL(TA_OK, ta_fwd(&x->cpu_p, TA_BACKEND_CPU, &fa, x->cpu_ws, x->cpu_ws_bytes, NULL));
    CALL(TA_OK, ta_bwd_workspace_size(&x->cpu_p, TA_BACKEND_CPU, &x->bytes_bwd));
    CALL(TA_OK, ta_bwd(&x->cpu_p, TA_BACKEND_CPU, &ba, x->cpu_ws, x->cpu_ws_bytes, NULL));
    CALL(TA_ERR_WORKSPACE_SIZE, ta_bwd(&x->cpu_p, TA_BACKEND_CPU, &ba, x->cpu_ws, 64, NULL));
    /* caller-run tasks (no OpenMP at all): plans, prepare, every task, a refused task */
    CALL(TA_OK, ta_fwd_task_plan(&x->cpu_p, TA_BACKEND_CPU, &x->task_out));
    CALL(TA_OK, ta_fwd_tasks_prepare(&x->cpu_p, TA_BACKEND_CPU, &fa, x->task_shared,
                                     x->task_fwd.shared_bytes));
    CALL(TA_OK, run_all_tasks(x->task_shared, &x->task_fwd, x->task_scratch));
    CALL(TA_OK, ta_bwd_task_plan(&x->cpu_p, TA_BACKEND_CPU, &x->task_out));
    CALL(TA_OK, ta_bwd_tasks_prepare(&x->cpu_p, TA_BACKEND_CPU, &ba, x->task_shared,
                                     x->task_bwd.shared_bytes));
    CALL(TA_OK, run_all_tasks(x->task_shared, &x->task_bwd, x->task_scratch));
    CALL(TA_ERR_BAD_ARG, ta_task_run(x->task_shared, 0, x->task_bwd.num_tasks[0],
                                     x->task_scratch, x->task_bwd.scratch_bytes));
    CALL(TA_OK, ta_status_string(TA_ERR_DEVICE) != NULL ? TA_OK : TA_ERR_DEVICE);
    CALL(TA_OK, ta_version_string() != NULL ? TA_OK : TA_ERR_DEVICE);
#undef CALL
    while (n < N_RESULTS) {
        x->expect[n] = TA_OK;
        x->st[n++] = TA_OK;
    }
}

/* Before the markers: one CPU forward and backward per shape, so that the
 * OpenMP runtime has created its pool and team (see the header comment). */
static void warm_up_cpu(bufs *x, const shape *s) {
    ta_fwd_args fa;
    ta_bwd_args ba;
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    fa.q = ba.q = x->q;
    fa.k = ba.k = x->k;
    fa.v = ba.v = x->v;
    fa.o = x->o;
    ba.o = x->o;
    fa.lse = x->lse;
    fa.seqlens_k = ba.seqlens_k = s->use_seqlens ? x->seqlens : NULL;
    fa.conv_w = ba.conv_w = x->w;
    ba.dconv_w = x->dw;
    ba.d_o = x->d_o;
    ba.lse = x->lse;
    ba.dq = x->dq;
    ba.dk = x->dk;
    ba.dv = x->dv;
    set_layouts(s, &fa, &ba);
    TA_CHECK(ta_fwd(&x->cpu_p, TA_BACKEND_CPU, &fa, x->cpu_ws, x->cpu_ws_bytes, NULL) == TA_OK,
             "cpu warm-up fwd");
    TA_CHECK(ta_bwd(&x->cpu_p, TA_BACKEND_CPU, &ba, x->cpu_ws, x->cpu_ws_bytes, NULL) == TA_OK,
             "cpu warm-up bwd");
}

static int all_finite(const float *p, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (!isfinite(p[i]) && !(isinf(p[i]) && p[i] < 0)) return 0;
    return 1;
}

int main(void) {
    static bufs x[N_SHAPES];
    const char *selftest = getenv("TA_NOALLOC_SELFTEST");
    const int self = selftest && strcmp(selftest, "1") == 0;
    void *(*volatile self_malloc)(size_t) = malloc; /* not elided by the optimiser */
    void (*volatile self_free)(void *) = free;
    ta_rng rng;
    unsigned long counted_calls;
    int s, i, live;
    ta_rng_seed(&rng, ta_test_seed("test_noalloc"));
    for (s = 0; s < N_SHAPES; ++s)
        setup(&x[s], &k_shapes[s], &rng);
    /* Is the counter live? Under valgrind its own malloc replaces ours. */
    g_count = 0;
    g_counting = 1;
    self_free(self_malloc(16));
    g_counting = 0;
    live = TA_INTERPOSE && g_count == 2;
    for (s = 0; s < N_SHAPES; ++s)
        warm_up_cpu(&x[s], &k_shapes[s]);
    fflush(stdout);

    marker("TA_NOALLOC_BEGIN\n");
    g_count = 0;
    g_counting = 1;
    for (s = 0; s < N_SHAPES; ++s)
        run_calls(&x[s], &k_shapes[s]);
    if (self) self_free(self_malloc(1000)); /* TA_NOALLOC_SELFTEST: a deliberate allocation */
    g_counting = 0;
    counted_calls = g_count;
    marker("TA_NOALLOC_END\n");

    for (s = 0; s < N_SHAPES; ++s) {
        for (i = 0; i < N_RESULTS; ++i)
            TA_CHECK(x[s].st[i] == x[s].expect[i], "shape %d call %d: %s, expected %s", s, i,
                     ta_status_string(x[s].st[i]), ta_status_string(x[s].expect[i]));
        TA_CHECK(all_finite(x[s].lse, zu(k_shapes[s].b) * zu(k_shapes[s].h) * zu(k_shapes[s].sq)),
                 "shape %d: lse has NaN", s);
    }
    if (live) {
        const unsigned long expected = self ? 2ul : 0ul;
        printf("test_noalloc: %lu allocator calls counted between the markers%s\n", counted_calls,
               self ? " (self-test: 2 expected)" : "");
        TA_CHECK(counted_calls == expected, "%lu allocator calls inside library calls",
                 counted_calls);
    } else {
        printf("test_noalloc: allocator calls not counted here (%s); the valgrind check "
               "is the witness\n",
               TA_INTERPOSE ? "another allocator replaced ours, e.g. valgrind's"
                            : "sanitizer or non-glibc build");
    }
    for (s = 0; s < N_SHAPES; ++s)
        teardown(&x[s]);
    return ta_test_finish("test_noalloc");
}
