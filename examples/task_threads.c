/*
 * Caller-run tasks: the CPU backend's work on threads the program owns
 * (docs/api.md, "Caller-run tasks"). A real-time engine keeps its own pinned
 * worker pool and wants no OpenMP runtime in its loop; here the pool is a few
 * pthreads started once, and every call hands them the tasks of one pass.
 *
 * At start-up: ta_fwd_task_plan / ta_bwd_task_plan give the phases, the task
 * counts and the two workspace sizes (checked against static arenas). For
 * each call: ta_*_tasks_prepare validates it and records it in the shared
 * workspace; then every thread of the pool (the main thread is one of them)
 * takes tasks of phase 0 from a shared counter and runs them with its own
 * scratch, waits at a barrier, and goes on with phase 1 (the MTA backward's
 * dconv_w sums) the same way.
 *
 * The program runs an MTA forward and backward this way and through ta_fwd /
 * ta_bwd (OpenMP inside the call), then a split-K decode step (one new query
 * row per head against the 96 keys, its keys cut into 3 parts: each part a
 * task, the last one in merges), and compares: the caller-run tasks give the
 * same bits. Exit status 0 iff every call returned TA_OK and every output is
 * equal.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tileattn.h>

/* 2 sequences, 4 query heads sharing 2 kv heads, 96 tokens, head dim 32, a 3 x 5 conv. */
enum { B = 2, H = 4, HKV = 2, S = 96, D = 32, CQ = 3, CK = 5, WORKERS = 3 };
#define N_Q ((size_t)B * H * S * D)
#define N_KV ((size_t)B * HKV * S * D)
#define N_LSE ((size_t)B * H * S)
#define N_W ((size_t)H * CQ * CK)
#define SHARED_BYTES ((size_t)1 << 16)  /* sized offline; checked against the plans */
#define SCRATCH_BYTES ((size_t)1 << 20) /* per worker */
#define ARENA_BYTES ((size_t)4 << 20)   /* ta_fwd / ta_bwd's workspace, for the comparison */

static float q[N_Q], k[N_KV], v[N_KV], d_o[N_Q], conv_w[N_W];
/* [0]: caller-run tasks, [1]: ta_fwd / ta_bwd */
static float o[2][N_Q], lse[2][N_LSE], dq[2][N_Q], dk[2][N_KV], dv[2][N_KV], dconv_w[2][N_W];
/* the decode step: one new row per (b, h) [B, H, 1, D]; [0] tasks, [1] ta_fwd */
static float q_new[B * H * D], o_new[2][B * H * D], lse_new[2][B * H];
static _Alignas(TA_WORKSPACE_ALIGN) unsigned char shared_ws[SHARED_BYTES];
static _Alignas(TA_WORKSPACE_ALIGN) unsigned char scratch[WORKERS][SCRATCH_BYTES];
static _Alignas(TA_WORKSPACE_ALIGN) unsigned char arena[ARENA_BYTES];

/* The pool: WORKERS - 1 pthreads and the main thread. */
typedef struct pool {
    pthread_barrier_t start, phase_done;
    const ta_task_plan *tp; /* the pass to run; NULL: quit */
    atomic_llong next[TA_TASK_PHASES_MAX];
    atomic_int failed;
} pool;
static pool g_pool;

/* Every phase of the prepared pass: take tasks until none is left, then wait
 * for the other workers (a phase starts only after the one before it ends).
 * The phase count is read once, before the first barrier: after the last one
 * the caller may return and its task plan (often a local) be gone, so no
 * worker may read tp then (ASan: stack-use-after-scope in a CI run). */
static void run_phases(int worker) {
    const ta_task_plan *tp = g_pool.tp;
    const int32_t n_phases = tp->num_phases;
    int32_t ph;
    for (ph = 0; ph < n_phases; ++ph) {
        long long t;
        while ((t = atomic_fetch_add(&g_pool.next[ph], 1)) < tp->num_tasks[ph])
            if (ta_task_run(shared_ws, ph, t, scratch[worker], SCRATCH_BYTES) != TA_OK)
                atomic_fetch_add(&g_pool.failed, 1);
        pthread_barrier_wait(&g_pool.phase_done);
    }
}

static void *worker_main(void *arg) {
    const int worker = (int)(intptr_t)arg;
    for (;;) {
        pthread_barrier_wait(&g_pool.start);
        if (!g_pool.tp) return NULL;
        run_phases(worker);
    }
}

/* Runs the pass prepared in shared_ws on the pool; TA_OK iff every task did. */
static ta_status run_pass(const ta_task_plan *tp) {
    int ph;
    for (ph = 0; ph < TA_TASK_PHASES_MAX; ++ph)
        atomic_store(&g_pool.next[ph], 0);
    atomic_store(&g_pool.failed, 0);
    g_pool.tp = tp;
    pthread_barrier_wait(&g_pool.start); /* the workers see tp after this */
    run_phases(0);
    return atomic_load(&g_pool.failed) ? TA_ERR_BAD_ARG : TA_OK;
}

static void fill(float *x, size_t n, uint32_t *state) {
    size_t i;
    for (i = 0; i < n; ++i) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)(*state >> 8) * (2.0f / 16777216.0f) - 1.0f; /* [-1, 1) */
    }
}

static int report(const char *what, ta_status st) {
    if (st != TA_OK) fprintf(stderr, "task_threads: %s: %s\n", what, ta_status_string(st));
    return st != TA_OK;
}

/* A decode step with split-K on the pool and through ta_fwd: SDPA, one new
 * query row per head against the S cached keys, the keys cut into 3 parts.
 * Each part is a task of phase 0; the task that finishes a row block's last
 * part merges them, so there is still one phase. 0 iff both match. */
static int decode_step(const ta_problem *prefill) {
    ta_problem p = *prefill;
    ta_task_plan tp;
    size_t bytes = 0;
    const ta_fwd_args fa[2] = {{.q = q_new, .k = k, .v = v, .o = o_new[0], .lse = lse_new[0]},
                               {.q = q_new, .k = k, .v = v, .o = o_new[1], .lse = lse_new[1]}};
    p.conv_q = p.conv_k = 0;
    p.seq_q = 1; /* bottom-right: the new row sees every cached key */
    p.block_k = 32;   /* 3 K tiles of the 96 keys: a part each (a part is whole K tiles) */
    p.num_splits = 3; /* more parts than K tiles would be clamped to their number */
    if (report("decode ta_fwd_task_plan", ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tp)) ||
        report("decode ta_fwd_workspace_size",
               ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &bytes)))
        return 1;
    if (tp.shared_bytes > SHARED_BYTES || tp.scratch_bytes > SCRATCH_BYTES || bytes > ARENA_BYTES)
        return report("decode plan", TA_ERR_WORKSPACE_SIZE);
    memset(o_new[0], 0xff, sizeof o_new[0]), memset(lse_new[0], 0xff, sizeof lse_new[0]);
    if (report("decode ta_fwd_tasks_prepare",
               ta_fwd_tasks_prepare(&p, TA_BACKEND_CPU, &fa[0], shared_ws, SHARED_BYTES)) ||
        report("decode tasks", run_pass(&tp)) ||
        report("decode ta_fwd", ta_fwd(&p, TA_BACKEND_CPU, &fa[1], arena, ARENA_BYTES, NULL)))
        return 1;
    printf("task_threads: decode step, 3 key parts: %lld tasks in %d phase(s), shared %zu "
           "bytes\n", (long long)tp.num_tasks[0], (int)tp.num_phases, tp.shared_bytes);
    return memcmp(o_new[0], o_new[1], sizeof o_new[0]) != 0 ||
           memcmp(lse_new[0], lse_new[1], sizeof lse_new[0]) != 0;
}

int main(void) {
    ta_problem p;
    ta_task_plan fwd_tp, bwd_tp;
    size_t fwd_bytes = 0, bwd_bytes = 0;
    pthread_t threads[WORKERS];
    uint32_t state = 11u;
    int w, c, bad = 0;

    /* 1. plan once: the task counts and the two workspaces of both passes */
    memset(&p, 0, sizeof p);
    p.batch = B;
    p.heads_q = H;
    p.heads_kv = HKV;
    p.seq_q = p.seq_k = S;
    p.head_dim = p.head_dim_v = D;
    p.flags = TA_CAUSAL; /* the MTA conv is causal */
    p.conv_q = CQ;
    p.conv_k = CK;
    p.num_threads = WORKERS; /* how finely the tasks are cut (never a bit) */
    if (report("ta_fwd_task_plan", ta_fwd_task_plan(&p, TA_BACKEND_CPU, &fwd_tp)) ||
        report("ta_bwd_task_plan", ta_bwd_task_plan(&p, TA_BACKEND_CPU, &bwd_tp)) ||
        report("ta_fwd_workspace_size", ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &fwd_bytes)) ||
        report("ta_bwd_workspace_size", ta_bwd_workspace_size(&p, TA_BACKEND_CPU, &bwd_bytes)))
        return 1;
    if (fwd_tp.shared_bytes > SHARED_BYTES || bwd_tp.shared_bytes > SHARED_BYTES ||
        fwd_tp.scratch_bytes > SCRATCH_BYTES || bwd_tp.scratch_bytes > SCRATCH_BYTES ||
        fwd_bytes > ARENA_BYTES || bwd_bytes > ARENA_BYTES) {
        fprintf(stderr, "task_threads: a static buffer is smaller than the plan needs\n");
        return 1;
    }
    printf("task_threads: forward %lld tasks, backward %lld + %lld tasks; shared %zu / %zu "
           "bytes, scratch %zu / %zu bytes per worker\n",
           (long long)fwd_tp.num_tasks[0], (long long)bwd_tp.num_tasks[0],
           (long long)(bwd_tp.num_phases > 1 ? bwd_tp.num_tasks[1] : 0), fwd_tp.shared_bytes,
           bwd_tp.shared_bytes, fwd_tp.scratch_bytes, bwd_tp.scratch_bytes);

    fill(q, N_Q, &state);
    fill(k, N_KV, &state);
    fill(v, N_KV, &state);
    fill(d_o, N_Q, &state);
    fill(conv_w, N_W, &state);
    fill(q_new, (size_t)B * H * D, &state);
    /* the pool's outputs start as NaN bits: a value it never wrote cannot compare equal */
    memset(o[0], 0xff, sizeof o[0]), memset(lse[0], 0xff, sizeof lse[0]);
    memset(dq[0], 0xff, sizeof dq[0]), memset(dk[0], 0xff, sizeof dk[0]);
    memset(dv[0], 0xff, sizeof dv[0]), memset(dconv_w[0], 0xff, sizeof dconv_w[0]);

    /* 2. the pool, started once */
    if (pthread_barrier_init(&g_pool.start, NULL, WORKERS) ||
        pthread_barrier_init(&g_pool.phase_done, NULL, WORKERS))
        return 1;
    for (w = 1; w < WORKERS; ++w)
        if (pthread_create(&threads[w], NULL, worker_main, (void *)(intptr_t)w)) return 1;

    /* 3. the forward and the backward on the pool ([0]), then through ta_fwd / ta_bwd ([1]) */
    for (c = 0; c < 2 && !bad; ++c) {
        const ta_fwd_args fa = {.q = q, .k = k, .v = v, .conv_w = conv_w, .o = o[c],
                                .lse = lse[c]};
        const ta_bwd_args ba = {.q = q, .k = k, .v = v, .o = o[c], .d_o = d_o, .lse = lse[c],
                                .conv_w = conv_w, .dq = dq[c], .dk = dk[c], .dv = dv[c],
                                .dconv_w = dconv_w[c]};
        if (c == 0) {
            bad = report("ta_fwd_tasks_prepare",
                         ta_fwd_tasks_prepare(&p, TA_BACKEND_CPU, &fa, shared_ws, SHARED_BYTES)) ||
                  report("forward tasks", run_pass(&fwd_tp)) ||
                  report("ta_bwd_tasks_prepare",
                         ta_bwd_tasks_prepare(&p, TA_BACKEND_CPU, &ba, shared_ws, SHARED_BYTES)) ||
                  report("backward tasks", run_pass(&bwd_tp));
        } else {
            bad = report("ta_fwd", ta_fwd(&p, TA_BACKEND_CPU, &fa, arena, ARENA_BYTES, NULL)) ||
                  report("ta_bwd", ta_bwd(&p, TA_BACKEND_CPU, &ba, arena, ARENA_BYTES, NULL));
        }
    }

    /* 4. a split-K decode step on the pool and through ta_fwd */
    if (!bad && decode_step(&p)) {
        fprintf(stderr, "task_threads: the decode step's tasks DIFFER from ta_fwd's bits\n");
        bad = 2;
    }

    /* 5. stop the pool */
    g_pool.tp = NULL;
    pthread_barrier_wait(&g_pool.start);
    for (w = 1; w < WORKERS; ++w)
        pthread_join(threads[w], NULL);
    pthread_barrier_destroy(&g_pool.start);
    pthread_barrier_destroy(&g_pool.phase_done);
    if (bad) return 1;

    bad = memcmp(o[0], o[1], sizeof o[0]) != 0 || memcmp(lse[0], lse[1], sizeof lse[0]) != 0 ||
          memcmp(dq[0], dq[1], sizeof dq[0]) != 0 || memcmp(dk[0], dk[1], sizeof dk[0]) != 0 ||
          memcmp(dv[0], dv[1], sizeof dv[0]) != 0 ||
          memcmp(dconv_w[0], dconv_w[1], sizeof dconv_w[0]) != 0;
    printf("task_threads: %d workers: o, lse, dq, dk, dv, dconv_w %s ta_fwd / ta_bwd's bits\n",
           WORKERS, bad ? "DIFFER from" : "equal to");
    return bad ? 1 : 0;
}
