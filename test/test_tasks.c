/*
 * Caller-run CPU tasks (issue 15 item 6; docs/api.md "Caller-run tasks",
 * docs/cpu.md section 3a): the caller's own threads run the tasks of a call,
 * in any order, and get the bits of the ordinary call.
 *
 * For each problem (SDPA in every dtype, causal, GQA, sliding windows,
 * seqlens_k, explicit tiles; the MTA conv, whose backward has two phases;
 * a third of them split-K forwards, num_splits 2-4 or TA_SPLITS_AUTO, whose
 * parts are tasks of their own and whose last part merges):
 *   1. expected: ta_fwd, then ta_bwd from its o and lse, on TA_BACKEND_CPU
 *      (OpenMP, num_threads 0 = the runtime's default); a split-K forward
 *      also on TA_BACKEND_REF, bit for bit the same;
 *   2. for several worker counts W (ta_problem.num_threads = W, which sets
 *      the task grouping): ta_fwd_task_plan, ta_fwd_tasks_prepare, then W
 *      pthreads, each with its own scratch (random bytes), take the tasks of
 *      phase 0 in a shuffled order (Fisher-Yates from the run's seed) from a
 *      shared counter, wait at a barrier, then phase 1 (the MTA backward's
 *      dconv_w merge) the same way; the same for the backward from step 1's o
 *      and lse. Outputs poisoned before, shared workspace random bytes before
 *      the prepare call; every output must be memcmp-equal to step 1's. One
 *      run per problem uses one worker and the reversed order.
 *   3. refused calls (statuses of include/tileattn.h, outputs untouched;
 *      every prepare's status also from ta_explain_*_tasks_prepare, whose
 *      line names the failed check):
 *      another backend, NULL and short or misaligned shared workspaces, an
 *      unprepared or moved one, phase and task out of range, phase 1 before
 *      phase 0 has finished, scratch NULL, short, misaligned or overlapping a
 *      tensor or the shared workspace.
 *   4. latent attention (docs/api.md "Latent attention and the reciprocal
 *      band"): random problems with the band (TA_RBAND: alpha, sometimes 0,
 *      width W, a quarter decode-like forwards with q_history history rows),
 *      the fused projections (latent_dim, w_qlat, w_vup; the backward's
 *      dw_qlat, dw_vup) or both. The OpenMP call must equal REF bit for bit,
 *      then the caller-run forward and backward (two phases: the weight
 *      gradients' and d_alpha's sums) the OpenMP call, as in step 2.
 * Fresh seed per run (printed; TA_SEED replays).
 *
 *   test_tasks [--quick]      (--quick: fewer problems and worker counts; valgrind)
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_check.h"
#include "test_util.h"
#include "tileattn.h"

/* ---- One caller-run call on W pthreads ---- */

typedef struct pool {
    void *shared;
    const ta_task_plan *tp;
    int64_t *order[TA_TASK_PHASES_MAX]; /* each phase's tasks, shuffled */
    atomic_llong next[TA_TASK_PHASES_MAX];
    atomic_int bad;  /* tasks that did not return TA_OK */
    pthread_barrier_t phase_done;
} pool;

typedef struct worker {
    pool *pl;
    void *scratch;
} worker;

static void *worker_main(void *arg) {
    worker *w = (worker *)arg;
    pool *pl = w->pl;
    int32_t ph;
    for (ph = 0; ph < pl->tp->num_phases; ++ph) {
        long long i;
        while ((i = atomic_fetch_add(&pl->next[ph], 1)) < pl->tp->num_tasks[ph]) {
            const ta_status st = ta_task_run(pl->shared, ph, pl->order[ph][i], w->scratch,
                                             pl->tp->scratch_bytes);
            if (st != TA_OK) atomic_fetch_add(&pl->bad, 1);
        }
        pthread_barrier_wait(&pl->phase_done); /* phase ph done before ph + 1 starts */
    }
    return NULL;
}

/* Random bytes (ta_oc_workspace's kind 1), 64-byte aligned. */
static void *random_bytes(ta_rng *r, size_t bytes) { return ta_oc_workspace(r, bytes, 1); }

/* Runs every task of the prepared call in shared on `workers` threads, each
 * phase in a shuffled order (reversed: in descending order instead). Returns
 * the number of tasks that failed. */
static int run_pool(ta_rng *r, void *shared, const ta_task_plan *tp, int workers, int reversed) {
    pool pl;
    worker w[8];
    pthread_t th[8];
    int32_t ph;
    int i, bad;
    memset(&pl, 0, sizeof pl);
    pl.shared = shared, pl.tp = tp;
    for (ph = 0; ph < tp->num_phases; ++ph) {
        const int64_t n = tp->num_tasks[ph];
        int64_t t;
        pl.order[ph] = (int64_t *)malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        for (t = 0; t < n; ++t)
            pl.order[ph][t] = reversed ? n - 1 - t : t;
        for (t = n - 1; !reversed && t > 0; --t) { /* Fisher-Yates */
            const int64_t u = (int64_t)(ta_rng_u64(r) % (uint64_t)(t + 1));
            const int64_t x = pl.order[ph][t];
            pl.order[ph][t] = pl.order[ph][u], pl.order[ph][u] = x;
        }
        atomic_init(&pl.next[ph], 0);
    }
    atomic_init(&pl.bad, 0);
    pthread_barrier_init(&pl.phase_done, NULL, (unsigned)workers);
    for (i = 0; i < workers; ++i) {
        w[i].pl = &pl;
        w[i].scratch = random_bytes(r, tp->scratch_bytes);
        TA_CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0, "pthread_create");
    }
    for (i = 0; i < workers; ++i) {
        pthread_join(th[i], NULL);
        ta_test_free(w[i].scratch);
    }
    pthread_barrier_destroy(&pl.phase_done);
    for (ph = 0; ph < tp->num_phases; ++ph)
        free(pl.order[ph]);
    bad = atomic_load(&pl.bad);
    return bad;
}

static void fill_fwd(const tcase *tc, run_out *out, ta_fwd_args *fa) {
    memset(fa, 0, sizeof *fa);
    fa->q = tc->q, fa->k = tc->k, fa->v = tc->v, fa->seqlens_k = tc->seqlens;
    fa->conv_w = tc->p.conv_q ? tc->conv_w : NULL;
    fa->o = out->o, fa->lse = out->lse;
}

static void fill_bwd(const tcase *tc, const run_out *in, run_out *out, ta_bwd_args *ba) {
    memset(ba, 0, sizeof *ba);
    ba->q = tc->q, ba->k = tc->k, ba->v = tc->v, ba->o = in->o, ba->d_o = tc->d_o;
    ba->lse = in->lse, ba->seqlens_k = tc->seqlens;
    ba->conv_w = tc->p.conv_q ? tc->conv_w : NULL;
    ba->dq = out->dq, ba->dk = out->dk, ba->dv = out->dv;
    ba->dconv_w = tc->p.conv_q ? out->dw : NULL;
}

static void poison_out(const tcase *tc, run_out *out) {
    ta_poison(out->o, tc->n_o * tc->eb), ta_poison(out->lse, tc->n_lse * sizeof(float));
    ta_poison(out->dq, tc->n_q * tc->eb), ta_poison(out->dk, tc->n_k * tc->eb);
    ta_poison(out->dv, tc->n_v * tc->eb);
    if (out->dw) ta_poison(out->dw, tc->n_w * sizeof(float));
}

static long g_calls, g_tasks, g_lat_calls, g_lat_bwd_calls, g_split;

/* Forward and backward of tc as caller-run tasks on `workers` threads; compares with exp. */
static void run_tasks(ta_rng *r, const tcase *tc, const run_out *exp, int workers, int reversed,
                      const char *desc) {
    ta_problem p = tc->p;
    ta_task_plan tp;
    ta_fwd_args fa;
    ta_bwd_args ba;
    run_out out;
    void *shared;
    ta_status st;
    int bad;
    p.num_threads = workers;
    ta_oc_alloc_out(tc, &out);
    poison_out(tc, &out);
    /* forward */
    st = ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tp);
    TA_CHECK(st == TA_OK && tp.num_phases == 1 && tp.num_tasks[0] > 0 && tp.num_tasks[1] == 0,
             "%s: fwd plan: status %d, %d phases", desc, (int)st, (int)tp.num_phases);
    if (st != TA_OK) goto done;
    shared = random_bytes(r, tp.shared_bytes);
    fill_fwd(tc, &out, &fa);
    st = ta_fwd_tasks_prepare(&p, TA_BACKEND_CPU, &fa, shared, tp.shared_bytes);
    TA_CHECK(st == TA_OK, "%s: fwd prepare: status %d", desc, (int)st);
    bad = st == TA_OK ? run_pool(r, shared, &tp, workers, reversed) : 0;
    TA_CHECK(bad == 0, "%s: %d forward tasks failed", desc, bad);
    TA_CHECK(ta_oc_same_fwd(tc, exp, &out), "%s: forward (W = %d) differs from ta_fwd", desc,
             workers);
    g_tasks += tp.num_tasks[0];
    ta_test_free(shared);
    /* backward from the expected o and lse */
    st = ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp);
    TA_CHECK(st == TA_OK && tp.num_phases == (p.conv_q ? 2 : 1) &&
                 (!p.conv_q || tp.num_tasks[1] == p.heads_q),
             "%s: bwd plan: status %d, %d phases", desc, (int)st, (int)tp.num_phases);
    if (st != TA_OK) goto done;
    shared = random_bytes(r, tp.shared_bytes);
    fill_bwd(tc, exp, &out, &ba);
    st = ta_bwd_tasks_prepare(&p, TA_BACKEND_CPU, &ba, shared, tp.shared_bytes);
    TA_CHECK(st == TA_OK, "%s: bwd prepare: status %d", desc, (int)st);
    bad = st == TA_OK ? run_pool(r, shared, &tp, workers, reversed) : 0;
    TA_CHECK(bad == 0, "%s: %d backward tasks failed", desc, bad);
    TA_CHECK(ta_oc_same_dqkv(tc, exp, &out) &&
                 (!tc->n_w || memcmp(exp->dw, out.dw, tc->n_w * sizeof(float)) == 0),
             "%s: backward (W = %d) differs from ta_bwd", desc, workers);
    g_tasks += tp.num_tasks[0] + tp.num_tasks[1];
    ta_test_free(shared);
    ++g_calls;
done:
    ta_oc_free_out(&out);
}

/* ---- Problems ---- */

static void make_problem(ta_rng *r, int x, tcase *tc) {
    ta_problem *p = &tc->p;
    memset(tc, 0, sizeof *tc);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 2);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->seq_q = ta_rng_int(r, 1, 150), p->seq_k = ta_rng_int(r, 1, 150);
    p->head_dim = ta_rng_int(r, 1, 40), p->head_dim_v = ta_rng_int(r, 1, 40);
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    if (ta_rng_int(r, 0, 1)) p->block_k = ta_rng_int(r, 8, 64);
    if (ta_rng_int(r, 0, 1)) p->block_q = ta_rng_int(r, 8, 64);
    switch (x % 4) {
    case 0: break;
    case 1: p->flags = TA_CAUSAL; break;
    case 2: ta_test_random_window(r, p, 100); break;
    default: /* MTA: causal, a conv, tiles that leave effective rows in the backward */
        p->flags = TA_CAUSAL;
        p->seq_q = p->seq_k = ta_rng_int(r, 1, 120);
        p->conv_q = ta_rng_int(r, 1, 6), p->conv_k = 2 * ta_rng_int(r, 0, 5) + 1;
        p->block_q = p->block_k = 0;
        break;
    }
    if (x % 3 == 1) { /* split-K (every mask in turn): 2-4 parts or the library's choice */
        const int n = ta_rng_int(r, 1, 4);
        p->num_splits = n == 1 ? TA_SPLITS_AUTO : n;
    }
    ta_oc_make_buffers(r, tc);
    if (x % 4 != 3 && ta_rng_int(r, 0, 2) == 0) ta_oc_random_seqlens(r, tc);
    if (tc->n_w) ta_fill_uniform(r, tc->conv_w, TA_F32, tc->n_w, -0.5f, 0.5f);
}

static void describe(const tcase *tc, int x, char *buf, size_t n) {
    const ta_problem *p = &tc->p;
    snprintf(buf, n,
             "problem %d: B=%d H=%d/%d S=%d/%d D=%d/%d dt=%d flags=%u win=%d,%d conv=%dx%d "
             "bq=%d bk=%d seqlens=%d splits=%d",
             x, (int)p->batch, (int)p->heads_q, (int)p->heads_kv, (int)p->seq_q, (int)p->seq_k,
             (int)p->head_dim, (int)p->head_dim_v, (int)p->dtype, (unsigned)p->flags,
             (int)p->window_left, (int)p->window_right, (int)p->conv_q, (int)p->conv_k,
             (int)p->block_q, (int)p->block_k, tc->seqlens != NULL, (int)p->num_splits);
}

/* ---- Refused calls ---- */

static int outputs_poisoned(const tcase *tc, const run_out *out) {
    const unsigned char *bufs[5] = {(const unsigned char *)out->o, (const unsigned char *)out->dq,
                                    (const unsigned char *)out->dk, (const unsigned char *)out->dv,
                                    (const unsigned char *)out->lse};
    const size_t n[5] = {tc->n_o * tc->eb, tc->n_q * tc->eb, tc->n_k * tc->eb, tc->n_v * tc->eb,
                         tc->n_lse * sizeof(float)};
    size_t b, i;
    for (b = 0; b < 5; ++b)
        for (i = 0; i < n[b]; ++i)
            if (bufs[b][i] != 0xFF) return 0;
    for (i = 0; out->dw && i < tc->n_w * sizeof(float); ++i)
        if (((const unsigned char *)out->dw)[i] != 0xFF) return 0;
    return 1;
}

#define EXPECT(want, call)                                                                         \
    do {                                                                                           \
        const ta_status st_ = (call);                                                              \
        TA_CHECK(st_ == (want), "%s gave %d, expected %d", #call, (int)st_, (int)(want));          \
    } while (0)

/* A refused (or accepted) prepare call, and its explanation: the same status,
 * and a line that names `field` (ta_explain_*_tasks_prepare; docs/api.md,
 * "Diagnostics"). fa NULL: the backward, with ba. */
static void expect_prepare(ta_status want, const char *field, const ta_problem *p, ta_backend be,
                           const ta_fwd_args *fa, const ta_bwd_args *ba, void *shared,
                           size_t bytes) {
    char why[256];
    const ta_status st = fa ? ta_fwd_tasks_prepare(p, be, fa, shared, bytes)
                            : ta_bwd_tasks_prepare(p, be, ba, shared, bytes);
    const ta_status ex = fa ? ta_explain_fwd_tasks_prepare(p, be, fa, shared, bytes, why, sizeof why)
                            : ta_explain_bwd_tasks_prepare(p, be, ba, shared, bytes, why, sizeof why);
    TA_CHECK(st == want && ex == want && strstr(why, field) != NULL,
             "%s prepare (%s): status %d, explained %d \"%s\"; expected %d naming %s",
             fa ? "fwd" : "bwd", field, (int)st, (int)ex, why, (int)want, field);
}

static void bad_cases(ta_rng *r) {
    tcase tc;
    run_out exp, out;
    ta_task_plan tp, tf;
    ta_fwd_args fa;
    ta_bwd_args ba;
    unsigned char *shared, *scratch, *moved;
    ta_problem p;
    make_problem(r, 3, &tc); /* MTA: two backward phases */
    p = tc.p;
    p.num_threads = 2;
    ta_oc_alloc_out(&tc, &exp);
    ta_oc_alloc_out(&tc, &out);
    TA_CHECK(ta_oc_run_step_on(TA_BACKEND_CPU, r, &tc, &tc.p, &exp, 1) == TA_OK, "expected run");
    poison_out(&tc, &out);
    /* plans */
    EXPECT(TA_ERR_NULL_ARG, ta_fwd_task_plan(NULL, TA_BACKEND_CPU, &tp));
    EXPECT(TA_ERR_NULL_ARG, ta_bwd_task_plan(&p, TA_BACKEND_CPU, NULL));
    EXPECT(TA_ERR_UNSUPPORTED, ta_fwd_task_plan(&p, TA_BACKEND_REF, &tp));
    EXPECT(TA_ERR_UNSUPPORTED, ta_bwd_task_plan(&p, TA_BACKEND_CUDA, &tp));
    EXPECT(TA_ERR_BAD_ARG, ta_fwd_task_plan(&p, (ta_backend)7, &tp));
    {
        ta_problem q = p;
        q.heads_kv = 0;
        EXPECT(TA_ERR_BAD_SHAPE, ta_fwd_task_plan(&q, TA_BACKEND_CPU, &tp));
        q = p, q.num_threads = -1;
        EXPECT(TA_ERR_BAD_ARG, ta_bwd_task_plan(&q, TA_BACKEND_CPU, &tp));
        /* split-K: each part a task of its own (the backward ignores num_splits) */
        memset(&q, 0, sizeof q);
        q.batch = q.heads_q = q.heads_kv = 1;
        q.seq_q = q.seq_k = 300; /* several key tiles at any default block_k */
        q.head_dim = q.head_dim_v = 16;
        q.dtype = TA_F32;
        q.num_splits = 1;
        EXPECT(TA_OK, ta_fwd_task_plan(&q, TA_BACKEND_CPU, &tf));
        q.num_splits = 2;
        EXPECT(TA_OK, ta_fwd_task_plan(&q, TA_BACKEND_CPU, &tp));
        /* one Q tile per unit, two parts each: twice as many tasks as Q tiles */
        TA_CHECK(tp.num_phases == 1 && tp.num_tasks[0] % 2 == 0 &&
                     tp.num_tasks[0] >= 2 * tf.num_tasks[0] && tp.shared_bytes > tf.shared_bytes,
                 "split-K plan: %d phases, %lld tasks (unsplit %lld), shared %zu (unsplit %zu)",
                 (int)tp.num_phases, (long long)tp.num_tasks[0], (long long)tf.num_tasks[0],
                 tp.shared_bytes, tf.shared_bytes);
        EXPECT(TA_OK, ta_bwd_task_plan(&q, TA_BACKEND_CPU, &tp));
    }
    EXPECT(TA_OK, ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tf));
    EXPECT(TA_OK, ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp));
    TA_CHECK(tp.num_phases == 2 && tp.num_tasks[1] == p.heads_q && tp.reserved == 0,
             "MTA backward: 2 phases, H merge tasks");
    /* big enough for the forward's shared workspace too (checked below) */
    shared = (unsigned char *)random_bytes(
        r, (tp.shared_bytes > tf.shared_bytes ? tp.shared_bytes : tf.shared_bytes) + 64);
    moved = (unsigned char *)random_bytes(r, tp.shared_bytes);
    scratch = (unsigned char *)random_bytes(r, tp.scratch_bytes + 64);
    fill_fwd(&tc, &out, &fa);
    fill_bwd(&tc, &exp, &out, &ba);
    /* prepare: the call's checks, then the shared workspace's */
    expect_prepare(TA_ERR_UNSUPPORTED, "TA_BACKEND_CPU only", &p, TA_BACKEND_REF, NULL, &ba,
                   shared, tp.shared_bytes);
    expect_prepare(TA_ERR_NULL_ARG, "args", &p, TA_BACKEND_CPU, NULL, NULL, shared,
                   tp.shared_bytes);
    expect_prepare(TA_ERR_NULL_ARG, "problem", NULL, TA_BACKEND_CPU, NULL, &ba, shared,
                   tp.shared_bytes);
    expect_prepare(TA_ERR_NULL_ARG, "workspace", &p, TA_BACKEND_CPU, NULL, &ba, NULL,
                   tp.shared_bytes);
    expect_prepare(TA_ERR_WORKSPACE_SIZE, "workspace", &p, TA_BACKEND_CPU, NULL, &ba, shared,
                   tp.shared_bytes - 1);
    expect_prepare(TA_ERR_WORKSPACE_ALIGN, "workspace", &p, TA_BACKEND_CPU, NULL, &ba, shared + 8,
                   tp.shared_bytes);
    expect_prepare(TA_ERR_WORKSPACE_SIZE, "workspace", &p, TA_BACKEND_CPU, &fa, NULL, shared,
                   tf.shared_bytes - 64);
    /* CUDA: unavailable without a device (ta_fwd's status first), else unsupported */
    expect_prepare(ta_backend_available(TA_BACKEND_CUDA) ? TA_ERR_UNSUPPORTED
                                                         : TA_ERR_BACKEND_UNAVAILABLE,
                   "backend", &p, TA_BACKEND_CUDA, &fa, NULL, shared, tf.shared_bytes);
    {
        ta_bwd_args b2 = ba;
        ta_problem q = p;
        b2.dconv_w = NULL;
        expect_prepare(TA_ERR_NULL_ARG, "dconv_w", &p, TA_BACKEND_CPU, NULL, &b2, shared,
                       tp.shared_bytes);
        b2 = ba, b2.dq = shared; /* an output inside the shared workspace */
        expect_prepare(TA_ERR_BAD_ARG, "dq", &p, TA_BACKEND_CPU, NULL, &b2, shared,
                       tp.shared_bytes);
        /* split-K: the shared workspace holds the parts (a short one is refused,
         * the planned size taken). A buffer of its own: the parts can need far
         * more than the backward's `shared`, and a range past the end of an
         * allocation may overlap an argument (refused as such, not as short). */
        q = p;
        q.num_splits = 3;
        EXPECT(TA_OK, ta_fwd_task_plan(&q, TA_BACKEND_CPU, &tf));
        {
            unsigned char *parts = (unsigned char *)random_bytes(r, tf.shared_bytes);
            expect_prepare(TA_ERR_WORKSPACE_SIZE, "workspace", &q, TA_BACKEND_CPU, &fa, NULL,
                           parts, tf.shared_bytes - 64);
            expect_prepare(TA_OK, "ok", &q, TA_BACKEND_CPU, &fa, NULL, parts, tf.shared_bytes);
            ta_test_free(parts);
        }
        EXPECT(TA_OK, ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tf));
    }
    /* never prepared */
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 0, 0, scratch, tp.scratch_bytes));
    TA_CHECK(outputs_poisoned(&tc, &out), "a refused prepare or task wrote an output");
    expect_prepare(TA_OK, "ok", &p, TA_BACKEND_CPU, NULL, &ba, shared, tp.shared_bytes);
    /* task_run checks, in their order */
    EXPECT(TA_ERR_NULL_ARG, ta_task_run(NULL, 0, 0, scratch, tp.scratch_bytes));
    EXPECT(TA_ERR_WORKSPACE_ALIGN, ta_task_run(shared + 32, 0, 0, scratch, tp.scratch_bytes));
    memcpy(moved, shared, tp.shared_bytes); /* a copy is not the prepared call */
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(moved, 0, 0, scratch, tp.scratch_bytes));
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, -1, 0, scratch, tp.scratch_bytes));
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 2, 0, scratch, tp.scratch_bytes));
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 0, -1, scratch, tp.scratch_bytes));
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 0, tp.num_tasks[0], scratch, tp.scratch_bytes));
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 1, tp.num_tasks[1], scratch, tp.scratch_bytes));
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 1, 0, scratch, tp.scratch_bytes)); /* too early */
    EXPECT(TA_ERR_NULL_ARG, ta_task_run(shared, 0, 0, NULL, tp.scratch_bytes));
    EXPECT(TA_ERR_WORKSPACE_SIZE, ta_task_run(shared, 0, 0, scratch, tp.scratch_bytes - 1));
    EXPECT(TA_ERR_WORKSPACE_ALIGN, ta_task_run(shared, 0, 0, scratch + 16, tp.scratch_bytes));
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 0, 0, shared, tp.scratch_bytes));
    if (tc.n_q * tc.eb >= 64) { /* scratch over an output tensor (dq is 64-aligned) */
        EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 0, 0, out.dq, tp.scratch_bytes));
    }
    TA_CHECK(outputs_poisoned(&tc, &out), "a refused prepare or task wrote an output");
    /* the refused calls changed nothing: the whole call still gives the bits */
    TA_CHECK(run_pool(r, shared, &tp, 2, 0) == 0, "tasks after refused calls");
    TA_CHECK(ta_oc_same_dqkv(&tc, &exp, &out) &&
                 memcmp(exp.dw, out.dw, tc.n_w * sizeof(float)) == 0,
             "backward after refused calls differs");
    /* a second prepare starts over (phase 1 is refused again) */
    EXPECT(TA_OK, ta_bwd_tasks_prepare(&p, TA_BACKEND_CPU, &ba, shared, tp.shared_bytes));
    EXPECT(TA_ERR_BAD_ARG, ta_task_run(shared, 1, 0, scratch, tp.scratch_bytes));
    ta_test_free(shared), ta_test_free(moved), ta_test_free(scratch);
    ta_oc_free_out(&exp), ta_oc_free_out(&out);
    ta_oc_free_case(&tc);
}

/* ---- Latent attention: the reciprocal band and the fused projections ---- */

/* One problem of docs/api.md "Latent attention and the reciprocal band": the
 * band (TA_CAUSAL | TA_RBAND), the fused projections (latent_dim L > 0, f32
 * weights), or both. Inputs in the storage dtype; k, v have L columns with
 * the projections. bwd: S_q = S_k, the backward runs too; else a decode-like
 * forward with q_history = min(S_k - S_q, W) history rows in hist. */
typedef struct lat_case {
    ta_problem p;
    int bwd;
    size_t n_q, n_h, n_k, n_v, n_o, n_lse, n_wq, n_wv, eb;
    void *q, *hist, *k, *v, *d_o;
    float *wq, *wv; /* [H, D, L], [H, L, D_v]; NULL without the projections */
} lat_case;

/* One call's outputs: o, lse; dq, dk, dv, dw_qlat, dw_vup, d_alpha [1]. */
typedef struct lat_out {
    void *o, *dq, *dk, *dv;
    float *lse, *dwq, *dwv, *da;
} lat_out;

static int lat_band(const lat_case *c) { return (c->p.flags & TA_RBAND) != 0; }
static int lat_proj(const lat_case *c) { return c->p.latent_dim > 0; }

static void *lat_tensor(ta_rng *r, ta_dtype dt, size_t n) {
    void *x = ta_test_alloc((n ? n : 1) * ta_dtype_size(dt));
    ta_fill_uniform(r, x, dt, n, -1.0f, 1.0f);
    return x;
}

/* kind 0: the band alone; 1: the projections and the band; 2: the projections,
 * causal or not, no band. A band problem is forward-only (history rows) 1 in 4. */
static void lat_make(ta_rng *r, int kind, lat_case *c) {
    ta_problem *p = &c->p;
    const int band = kind != 2, proj = kind != 0;
    const int32_t prefix = band && ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 40) : 0;
    int32_t wk, wv;
    memset(c, 0, sizeof *c);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 0, 2) ? 1 : 2; /* latent attention: one kv head */
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->seq_q = ta_rng_int(r, 1, 150), p->seq_k = p->seq_q + prefix;
    p->head_dim = ta_rng_int(r, 1, 40), p->head_dim_v = ta_rng_int(r, 1, 40);
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    if (ta_rng_int(r, 0, 1)) p->block_k = ta_rng_int(r, 8, 64);
    if (ta_rng_int(r, 0, 1)) p->block_q = ta_rng_int(r, 8, 64);
    if (ta_rng_int(r, 0, 2) == 0) p->scale = ta_rng_uniform(r, 0.05f, 0.6f);
    p->flags = band || ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    if (band) {
        p->flags |= TA_RBAND;
        p->rband_width =
            ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 0, 2) : ta_rng_int(r, 0, p->seq_k + 3);
        p->rband_alpha = ta_rng_int(r, 0, 5) == 0 ? 0.0f : ta_rng_uniform(r, -1.5f, 1.5f);
        p->q_history = prefix < p->rband_width ? prefix : p->rband_width;
    }
    if (proj) p->latent_dim = ta_rng_int(r, 1, 40);
    c->bwd = p->seq_q == p->seq_k;
    wk = proj ? p->latent_dim : p->head_dim, wv = proj ? p->latent_dim : p->head_dim_v;
    c->eb = ta_dtype_size(p->dtype);
    c->n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * (size_t)p->head_dim;
    c->n_h = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->q_history * (size_t)p->head_dim;
    c->n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)wk;
    c->n_v = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)wv;
    c->n_o = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * (size_t)p->head_dim_v;
    c->n_lse = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    c->q = lat_tensor(r, p->dtype, c->n_q), c->hist = lat_tensor(r, p->dtype, c->n_h);
    c->k = lat_tensor(r, p->dtype, c->n_k), c->v = lat_tensor(r, p->dtype, c->n_v);
    c->d_o = lat_tensor(r, p->dtype, c->n_o);
    if (proj) {
        c->n_wq = (size_t)p->heads_q * (size_t)p->head_dim * (size_t)p->latent_dim;
        c->n_wv = (size_t)p->heads_q * (size_t)p->latent_dim * (size_t)p->head_dim_v;
        c->wq = (float *)ta_test_alloc(c->n_wq * sizeof(float));
        c->wv = (float *)ta_test_alloc(c->n_wv * sizeof(float));
        ta_fill_uniform(r, c->wq, TA_F32, c->n_wq, -1.5f / sqrtf((float)p->head_dim),
                        1.5f / sqrtf((float)p->head_dim));
        ta_fill_uniform(r, c->wv, TA_F32, c->n_wv, -1.0f / sqrtf((float)p->latent_dim),
                        1.0f / sqrtf((float)p->latent_dim));
    }
}

static void lat_free(lat_case *c) {
    ta_test_free(c->q), ta_test_free(c->hist), ta_test_free(c->k), ta_test_free(c->v);
    ta_test_free(c->d_o), ta_test_free(c->wq), ta_test_free(c->wv);
}

static void lat_describe(const lat_case *c, int x, char *buf, size_t n) {
    const ta_problem *p = &c->p;
    snprintf(buf, n,
             "latent problem %d: B=%d H=%d/%d S=%d/%d D=%d/%d L=%d dt=%d flags=%u W=%d "
             "alpha=%a q_history=%d scale=%a bq=%d bk=%d%s",
             x, (int)p->batch, (int)p->heads_q, (int)p->heads_kv, (int)p->seq_q, (int)p->seq_k,
             (int)p->head_dim, (int)p->head_dim_v, (int)p->latent_dim, (int)p->dtype,
             (unsigned)p->flags, (int)p->rband_width, (double)p->rband_alpha, (int)p->q_history,
             (double)p->scale, (int)p->block_q, (int)p->block_k, c->bwd ? "" : " (forward only)");
}

/* Every output allocated (one element at least) and poisoned (NaN). */
static void lat_alloc_out(const lat_case *c, lat_out *out) {
    const size_t eb = c->eb, f = sizeof(float);
    out->o = ta_test_alloc(c->n_o * eb + 1), out->dq = ta_test_alloc(c->n_q * eb + 1);
    out->dk = ta_test_alloc(c->n_k * eb + 1), out->dv = ta_test_alloc(c->n_v * eb + 1);
    out->lse = (float *)ta_test_alloc(c->n_lse * f + 1);
    out->dwq = (float *)ta_test_alloc(c->n_wq * f + 1);
    out->dwv = (float *)ta_test_alloc(c->n_wv * f + 1);
    out->da = (float *)ta_test_alloc(f);
    ta_poison(out->o, c->n_o * eb), ta_poison(out->dq, c->n_q * eb);
    ta_poison(out->dk, c->n_k * eb), ta_poison(out->dv, c->n_v * eb);
    ta_poison(out->lse, c->n_lse * f), ta_poison(out->dwq, c->n_wq * f);
    ta_poison(out->dwv, c->n_wv * f), ta_poison(out->da, f);
}

static void lat_free_out(lat_out *out) {
    ta_test_free(out->o), ta_test_free(out->dq), ta_test_free(out->dk), ta_test_free(out->dv);
    ta_test_free(out->lse), ta_test_free(out->dwq), ta_test_free(out->dwv), ta_test_free(out->da);
}

static void lat_fill_fwd(const lat_case *c, lat_out *out, ta_fwd_args *fa) {
    memset(fa, 0, sizeof *fa);
    fa->q = c->q, fa->k = c->k, fa->v = c->v, fa->o = out->o, fa->lse = out->lse;
    fa->q_hist = c->p.q_history > 0 ? c->hist : NULL;
    fa->w_qlat = c->wq, fa->w_vup = c->wv;
}

/* The backward from in's o and lse into out. */
static void lat_fill_bwd(const lat_case *c, const lat_out *in, lat_out *out, ta_bwd_args *ba) {
    memset(ba, 0, sizeof *ba);
    ba->q = c->q, ba->k = c->k, ba->v = c->v, ba->o = in->o, ba->d_o = c->d_o, ba->lse = in->lse;
    ba->dq = out->dq, ba->dk = out->dk, ba->dv = out->dv;
    ba->d_alpha = lat_band(c) ? out->da : NULL;
    ba->w_qlat = c->wq, ba->w_vup = c->wv;
    ba->dw_qlat = lat_proj(c) ? out->dwq : NULL, ba->dw_vup = lat_proj(c) ? out->dwv : NULL;
}

/* ta_fwd, then (bwd) ta_bwd from its o and lse, on be; workspaces random bytes. */
static ta_status lat_call(ta_rng *r, const lat_case *c, ta_backend be, lat_out *out) {
    ta_fwd_args fa;
    ta_bwd_args ba;
    size_t bytes = 0;
    void *ws;
    ta_status st;
    lat_fill_fwd(c, out, &fa);
    if ((st = ta_fwd_workspace_size(&c->p, be, &bytes)) != TA_OK) return st;
    ws = random_bytes(r, bytes);
    st = ta_fwd(&c->p, be, &fa, ws, bytes, NULL);
    ta_test_free(ws);
    if (st != TA_OK || !c->bwd) return st;
    lat_fill_bwd(c, out, out, &ba);
    if ((st = ta_bwd_workspace_size(&c->p, be, &bytes)) != TA_OK) return st;
    ws = random_bytes(r, bytes);
    st = ta_bwd(&c->p, be, &ba, ws, bytes, NULL);
    ta_test_free(ws);
    return st;
}

/* The forward's outputs (part 0) or the backward's (part 1) of a and b are the same bits. */
static int lat_same(const lat_case *c, const lat_out *a, const lat_out *b, int part) {
    if (part == 0)
        return memcmp(a->o, b->o, c->n_o * c->eb) == 0 &&
               memcmp(a->lse, b->lse, c->n_lse * sizeof(float)) == 0;
    return memcmp(a->dq, b->dq, c->n_q * c->eb) == 0 && memcmp(a->dk, b->dk, c->n_k * c->eb) == 0 &&
           memcmp(a->dv, b->dv, c->n_v * c->eb) == 0 &&
           memcmp(a->dwq, b->dwq, c->n_wq * sizeof(float)) == 0 &&
           memcmp(a->dwv, b->dwv, c->n_wv * sizeof(float)) == 0 &&
           (!lat_band(c) || memcmp(a->da, b->da, sizeof(float)) == 0);
}

/* Forward and (c->bwd) backward of c as caller-run tasks on `workers`
 * threads, against exp (the backward from exp's o and lse). */
static void lat_run_tasks(ta_rng *r, const lat_case *c, const lat_out *exp, int workers,
                          int reversed, const char *desc) {
    ta_problem p = c->p;
    ta_task_plan tp;
    ta_fwd_args fa;
    ta_bwd_args ba;
    lat_out out;
    void *shared;
    ta_status st;
    int bad;
    p.num_threads = workers;
    lat_alloc_out(c, &out);
    st = ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tp);
    TA_CHECK(st == TA_OK && tp.num_phases == 1 && tp.num_tasks[0] > 0,
             "%s: fwd plan: status %d, %d phases", desc, (int)st, (int)tp.num_phases);
    if (st != TA_OK) goto done;
    shared = random_bytes(r, tp.shared_bytes);
    lat_fill_fwd(c, &out, &fa);
    st = ta_fwd_tasks_prepare(&p, TA_BACKEND_CPU, &fa, shared, tp.shared_bytes);
    TA_CHECK(st == TA_OK, "%s: fwd prepare: status %d", desc, (int)st);
    bad = st == TA_OK ? run_pool(r, shared, &tp, workers, reversed) : 0;
    TA_CHECK(bad == 0, "%s: %d forward tasks failed", desc, bad);
    TA_CHECK(lat_same(c, exp, &out, 0), "%s: forward (W = %d) differs from ta_fwd", desc, workers);
    g_tasks += tp.num_tasks[0];
    ta_test_free(shared);
    ++g_lat_calls;
    if (!c->bwd) goto done;
    /* two phases: the dq tasks leave their rows' shares, phase 1 sums the
     * weight gradients per head and d_alpha (docs/cpu.md section 3c) */
    st = ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp);
    TA_CHECK(st == TA_OK && tp.num_phases == 2 &&
                 tp.num_tasks[1] == (lat_proj(c) ? p.heads_q : 0) + (lat_band(c) ? 1 : 0),
             "%s: bwd plan: status %d, %d phases, %lld phase-1 tasks", desc, (int)st,
             (int)tp.num_phases, (long long)tp.num_tasks[1]);
    if (st != TA_OK) goto done;
    shared = random_bytes(r, tp.shared_bytes);
    lat_fill_bwd(c, exp, &out, &ba);
    st = ta_bwd_tasks_prepare(&p, TA_BACKEND_CPU, &ba, shared, tp.shared_bytes);
    TA_CHECK(st == TA_OK, "%s: bwd prepare: status %d", desc, (int)st);
    bad = st == TA_OK ? run_pool(r, shared, &tp, workers, reversed) : 0;
    TA_CHECK(bad == 0, "%s: %d backward tasks failed", desc, bad);
    TA_CHECK(lat_same(c, exp, &out, 1), "%s: backward (W = %d) differs from ta_bwd", desc, workers);
    g_tasks += tp.num_tasks[0] + tp.num_tasks[1];
    ++g_lat_bwd_calls;
    ta_test_free(shared);
done:
    lat_free_out(&out);
}

/* Problem x: the OpenMP call (num_threads 0) == REF bit for bit, then the
 * caller-run tasks == the OpenMP call on each worker count, and once on
 * one worker in reversed order. */
static void lat_problem(ta_rng *r, int x, const int *workers, int n_workers) {
    lat_case c;
    lat_out exp, ref;
    char desc[320];
    const int before = ta_test_failures;
    int wi;
    ta_status st;
    lat_make(r, x % 3, &c);
    lat_describe(&c, x, desc, sizeof desc);
    lat_alloc_out(&c, &exp), lat_alloc_out(&c, &ref);
    st = lat_call(r, &c, TA_BACKEND_CPU, &exp);
    TA_CHECK(st == TA_OK, "%s: CPU ta_fwd / ta_bwd: status %d", desc, (int)st);
    st = lat_call(r, &c, TA_BACKEND_REF, &ref);
    TA_CHECK(st == TA_OK, "%s: REF ta_fwd / ta_bwd: status %d", desc, (int)st);
    TA_CHECK(lat_same(&c, &ref, &exp, 0) && (!c.bwd || lat_same(&c, &ref, &exp, 1)),
             "%s: CPU differs from REF", desc);
    for (wi = 0; wi < n_workers; ++wi)
        lat_run_tasks(r, &c, &exp, workers[wi], 0, desc);
    lat_run_tasks(r, &c, &exp, 1, 1, desc);
    if (ta_test_failures != before) fprintf(stderr, "  in %s\n", desc);
    lat_free_out(&exp), lat_free_out(&ref);
    lat_free(&c);
}

int main(int argc, char **argv) {
    static const int workers_full[] = {1, 2, 3, 5, 8};
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int n_problems = quick ? 4 : 24, n_workers = quick ? 2 : 5, n_lat = quick ? 3 : 36;
    ta_rng r;
    int x, wi;
    ta_rng_seed(&r, ta_test_seed("test_tasks"));
    for (x = 0; x < n_problems; ++x) {
        tcase tc;
        run_out exp;
        char desc[256];
        const int before = ta_test_failures;
        make_problem(&r, x, &tc);
        describe(&tc, x, desc, sizeof desc);
        ta_oc_alloc_out(&tc, &exp);
        TA_CHECK(ta_oc_run_step_on(TA_BACKEND_CPU, &r, &tc, &tc.p, &exp, 1) == TA_OK,
                 "%s: ta_fwd / ta_bwd", desc);
        if (tc.p.num_splits != 0) { /* split-K: the OpenMP call is REF's bits */
            run_out ref;
            ta_oc_alloc_out(&tc, &ref);
            TA_CHECK(ta_oc_run_fwd_on(TA_BACKEND_REF, &r, &tc, &tc.p, &ref, 1, NULL) == TA_OK &&
                         ta_oc_same_fwd(&tc, &ref, &exp),
                     "%s: split-K forward: CPU differs from REF", desc);
            ++g_split;
            ta_oc_free_out(&ref);
        }
        for (wi = 0; wi < n_workers; ++wi)
            run_tasks(&r, &tc, &exp, workers_full[quick ? wi + 1 : wi], 0, desc);
        run_tasks(&r, &tc, &exp, 1, 1, desc);
        if (ta_test_failures != before) fprintf(stderr, "  in %s\n", desc);
        ta_oc_free_out(&exp);
        ta_oc_free_case(&tc);
    }
    for (x = 0; x < n_lat; ++x)
        lat_problem(&r, x, workers_full + (quick ? 1 : 0), n_workers);
    bad_cases(&r);
    printf("test_tasks: %d problems (%ld split-K forwards, CPU == REF), %ld caller-run forward + "
           "backward pairs; %d latent problems (band, projections), %ld caller-run forwards, %ld "
           "backwards (%ld tasks in all) compared with ta_fwd / ta_bwd (== REF)\n",
           n_problems, g_split, g_calls, n_lat, g_lat_calls, g_lat_bwd_calls, g_tasks);
    TA_CHECK(g_split > 0, "no split-K problem drawn");
    return ta_test_finish("test_tasks");
}
