/*
 * Concurrent calls (docs/safety.md section 3: no mutable global state, so calls
 * on distinct buffers may run at once). Built into every configuration; the
 * ThreadSanitizer build (preset tsan, OpenMP off) is where it means most.
 *
 *   1. a few problems (SDPA f32 / f16 causal / bf16 window + seqlens_k + GQA,
 *      MTA with a conv), each run once on one thread, forward then backward,
 *      on REF and on the CPU backend: the expected bits;
 *   2. THREADS pthreads started at once (a barrier), each running ROUNDS calls
 *      of every problem on both backends, in an order of its own, with its own
 *      outputs and workspace (the inputs are shared, read-only); every output
 *      must be memcmp-equal to step 1's.
 * With OpenMP the CPU calls use 2 threads each (a team per pthread). Failures are
 * counted per thread and reported by the main thread (TA_CHECK's counter is
 * not atomic).
 * Usage: test_threads [--threads N] [--rounds N]
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_check.h"
#include "test_util.h"
#include "tileattn.h"

#define N_PROBLEMS 4
#define N_BACKENDS 2
static const ta_backend backends[N_BACKENDS] = {TA_BACKEND_REF, TA_BACKEND_CPU};

typedef struct shared_state {
    tcase tc[N_PROBLEMS];
    run_out expect[N_PROBLEMS][N_BACKENDS];
    int rounds;
    pthread_barrier_t start;
} shared_state;

typedef struct worker {
    shared_state *s;
    int id;
    uint64_t seed;
    long calls, mismatches, bad_status;
} worker;

/* Problem x: small, so that ThreadSanitizer's slowdown stays at seconds. */
static void make_problem(ta_rng *r, int x, tcase *tc) {
    ta_problem *p = &tc->p;
    memset(tc, 0, sizeof *tc);
    p->batch = 1 + (x == 2), p->heads_q = 2, p->heads_kv = x == 2 ? 1 : 2;
    p->seq_q = 37 + 11 * x, p->seq_k = 53 - 5 * x;
    p->head_dim = 8 + 9 * x, p->head_dim_v = 5 + 4 * x;
    p->dtype = (ta_dtype)(x % 3);
    p->num_threads = 2; /* CPU with OpenMP: a team of two per calling thread */
    if (x == 1) p->flags = TA_CAUSAL;
    if (x == 2) {
        p->flags = TA_WINDOW, p->window_left = 7, p->window_right = 3;
        tc->seqlens = (int32_t *)malloc(2 * sizeof(int32_t));
        tc->seqlens[0] = 0, tc->seqlens[1] = 29;
    }
    if (x == 3) p->flags = TA_CAUSAL, p->seq_q = p->seq_k = 40, p->conv_q = 3, p->conv_k = 5;
    ta_oc_make_buffers(r, tc);
    if (tc->n_w) ta_fill_uniform(r, tc->conv_w, TA_F32, tc->n_w, -0.5f, 0.5f);
}

static void *worker_main(void *arg) {
    worker *w = (worker *)arg;
    shared_state *s = w->s;
    ta_rng r;
    run_out out[N_PROBLEMS];
    int x, b, round;
    ta_rng_seed(&r, w->seed);
    for (x = 0; x < N_PROBLEMS; ++x)
        ta_oc_alloc_out(&s->tc[x], &out[x]);
    pthread_barrier_wait(&s->start);
    for (round = 0; round < s->rounds; ++round)
        for (x = 0; x < N_PROBLEMS; ++x)
            for (b = 0; b < N_BACKENDS; ++b) {
                /* an order of this thread's own: problem and backend rotate with id */
                const int px = (x + w->id + round) % N_PROBLEMS;
                const int bx = (b + w->id) % N_BACKENDS;
                const tcase *tc = &s->tc[px];
                const ta_status st =
                    ta_oc_run_step_on(backends[bx], &r, tc, &tc->p, &out[px], (int)(r.s & 1));
                ++w->calls;
                if (st != TA_OK)
                    ++w->bad_status;
                else if (!ta_oc_same_outputs(tc, &out[px], &s->expect[px][bx]))
                    ++w->mismatches;
            }
    for (x = 0; x < N_PROBLEMS; ++x)
        ta_oc_free_out(&out[x]);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 8, a, x, b, t;
    shared_state s;
    worker *w;
    pthread_t *tid;
    ta_rng r;
    uint64_t seed;
    memset(&s, 0, sizeof s);
    s.rounds = 3;
    for (a = 1; a + 1 < argc; a += 2) {
        if (strcmp(argv[a], "--threads") == 0) threads = atoi(argv[a + 1]);
        if (strcmp(argv[a], "--rounds") == 0) s.rounds = atoi(argv[a + 1]);
    }
    if (threads < 1 || s.rounds < 1) return 2;
    seed = ta_test_seed("test_threads");
    ta_rng_seed(&r, seed);
    /* 1. the expected bits, one thread */
    for (x = 0; x < N_PROBLEMS; ++x) {
        make_problem(&r, x, &s.tc[x]);
        for (b = 0; b < N_BACKENDS; ++b) {
            ta_oc_alloc_out(&s.tc[x], &s.expect[x][b]);
            TA_CHECK(ta_oc_run_step_on(backends[b], &r, &s.tc[x], &s.tc[x].p, &s.expect[x][b], 0) ==
                         TA_OK,
                     "problem %d backend %d: single-threaded call failed", x, b);
        }
        TA_CHECK(ta_oc_same_outputs(&s.tc[x], &s.expect[x][0], &s.expect[x][1]),
                 "problem %d: CPU differs from REF", x);
    }
    /* 2. many threads at once */
    w = (worker *)calloc((size_t)threads, sizeof *w);
    tid = (pthread_t *)calloc((size_t)threads, sizeof *tid);
    pthread_barrier_init(&s.start, NULL, (unsigned)threads);
    for (t = 0; t < threads; ++t) {
        w[t].s = &s, w[t].id = t, w[t].seed = seed + 1u + (uint64_t)t;
        TA_CHECK(pthread_create(&tid[t], NULL, worker_main, &w[t]) == 0, "pthread_create %d", t);
    }
    for (t = 0; t < threads; ++t) {
        pthread_join(tid[t], NULL);
        TA_CHECK(w[t].bad_status == 0 && w[t].mismatches == 0 && w[t].calls > 0,
                 "thread %d: %ld calls, %ld failed, %ld differ from the single-threaded run", t,
                 w[t].calls, w[t].bad_status, w[t].mismatches);
    }
    printf("test_threads: %d threads x %d rounds x %d problems x REF, CPU: %ld calls each\n",
           threads, s.rounds, N_PROBLEMS, w[0].calls);
    pthread_barrier_destroy(&s.start);
    for (x = 0; x < N_PROBLEMS; ++x) {
        for (b = 0; b < N_BACKENDS; ++b)
            ta_oc_free_out(&s.expect[x][b]);
        ta_oc_free_case(&s.tc[x]);
    }
    free(w);
    free(tid);
    return ta_test_finish("test_threads");
}
