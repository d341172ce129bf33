/*
 * Edge problems for the CPU backend's kernels (issue 15, branch coverage):
 * fixed shapes that random problems (test_cpu_equiv) reach rarely, run with
 * fresh random values on REF and on the CPU backend under every ISA path the
 * machine has (TA_CPU_ISA) with 1 and 3 threads, forward then backward from
 * REF's o and lse; every output memcmp-equal to REF's.
 *
 *   windows   rows whose key intervals are staggered within a register block
 *             (k2's per-row heads, its "no common key" path, k3 and the
 *             softmax with intervals): window (0, 0), (1, 0), (3, 1), (7, 2),
 *             (-1, 0), (5, -1), causal or not, S_q != S_k, tiles of 8 to 24
 *   empty     a grouped task whose union of K tiles holds tiles no row of it
 *             sees (windows with 4 Q tiles per task), seqlens_k of 0 and 1
 *   mta_ck    the MTA conv with c_k = 1, 3, ..., 13, 23, 25, 31 (every case of
 *             the dconv_w kernel's 12-wide column blocks) and c_q 1 to 16
 *   mta_mask  MTA with seqlens_k 0, 1, 2 and with windows
 *   mta_narrow MTA with windows of 1 to 4 keys, 16-key tiles, S_q 160 and 6
 * f32, f16 and bf16. Seeds printed (TA_SEED replays).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ta_cpu.h"
#include "oracle_check.h"
#include "test_util.h"
#include "tileattn.h"

static long g_runs;

/* REF, then the CPU backend on every ISA path and 1 and 3 threads: same bits. */
static void run_edge(ta_rng *r, tcase *tc, const char *what) {
    const ta_cpu_isa best = ta_cpu_isa_best();
    run_out ref, cpu;
    int isa, threads;
    ta_status st;
    ta_oc_alloc_out(tc, &ref);
    st = ta_oc_run_step_on(TA_BACKEND_REF, r, tc, &tc->p, &ref, 1);
    TA_CHECK(st == TA_OK, "%s: REF status %d", what, (int)st);
    for (isa = TA_CPU_ISA_SCALAR; st == TA_OK && isa <= (int)best; ++isa)
        for (threads = 1; threads <= 3; threads += 2) {
            ta_problem p = tc->p;
            ta_status s1, s2;
            p.num_threads = threads;
            setenv("TA_CPU_ISA", ta_cpu_isa_name((ta_cpu_isa)isa), 1);
            ta_oc_alloc_out(tc, &cpu);
            s1 = ta_oc_run_fwd_on(TA_BACKEND_CPU, r, tc, &p, &cpu, threads == 1, NULL);
            s2 = ta_oc_run_bwd_on(TA_BACKEND_CPU, r, tc, &p, ref.o, ref.lse, &cpu, threads == 1,
                                  NULL);
            TA_CHECK(s1 == TA_OK && s2 == TA_OK && ta_oc_same_outputs(tc, &ref, &cpu),
                     "%s: cpu %s, %d thread(s): status %d / %d or outputs differ from REF", what,
                     ta_cpu_isa_name((ta_cpu_isa)isa), threads, (int)s1, (int)s2);
            ta_oc_free_out(&cpu);
            ++g_runs;
        }
    unsetenv("TA_CPU_ISA");
    ta_oc_free_out(&ref);
}

static void edge(ta_rng *r, const ta_problem *p, const int32_t *seqlens, const char *tag) {
    tcase tc;
    char what[256];
    memset(&tc, 0, sizeof tc);
    tc.p = *p;
    ta_oc_make_buffers(r, &tc);
    if (seqlens) {
        tc.seqlens = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
        memcpy(tc.seqlens, seqlens, (size_t)p->batch * sizeof(int32_t));
    }
    if (tc.n_w) ta_fill_uniform(r, tc.conv_w, TA_F32, tc.n_w, -0.5f, 0.5f);
    ta_oc_describe(&tc, what, sizeof what);
    {
        char full[320];
        snprintf(full, sizeof full, "%s: %s", tag, what);
        run_edge(r, &tc, full);
    }
    ta_oc_free_case(&tc);
}

static ta_problem shape(int32_t s_q, int32_t s_k, int32_t d, int32_t dv, ta_dtype dt) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 2, p.heads_q = 2, p.heads_kv = 1;
    p.seq_q = s_q, p.seq_k = s_k, p.head_dim = d, p.head_dim_v = dv, p.dtype = dt;
    return p;
}

int main(void) {
    static const int32_t windows[6][2] = {{0, 0}, {1, 0}, {3, 1}, {7, 2}, {-1, 0}, {5, -1}};
    static const int32_t cks[10] = {1, 3, 5, 7, 9, 11, 13, 23, 25, 31};
    static const int32_t cqs[4] = {1, 2, 6, 16};
    ta_rng r;
    int i;
    ta_rng_seed(&r, ta_test_seed("test_cpu_edges"));
    /* windows: staggered row intervals */
    for (i = 0; i < 6; ++i) {
        ta_problem p = shape(i % 2 ? 37 : 100, i % 2 ? 90 : 100, 5, 19, (ta_dtype)(i % 3));
        p.flags = TA_WINDOW | (i >= 3 ? TA_CAUSAL : 0u);
        p.window_left = windows[i][0], p.window_right = windows[i][1];
        p.block_q = 8 + 8 * (i % 3), p.block_k = 24 - 8 * (i % 3);
        edge(&r, &p, NULL, "window");
    }
    /* empty: tiles of a grouped task that none of its rows see; tiny key lengths */
    {
        static const int32_t sl0[2] = {0, 1}, sl1[2] = {1, 256};
        ta_problem p = shape(256, 256, 3, 17, TA_F32);
        p.flags = TA_WINDOW, p.window_left = 3, p.window_right = 0;
        p.block_q = p.block_k = 16;
        edge(&r, &p, NULL, "empty");
        p.flags = TA_CAUSAL, p.window_left = p.window_right = 0;
        edge(&r, &p, sl0, "empty");
        p.dtype = TA_BF16, p.flags = TA_WINDOW, p.window_left = 0, p.window_right = 40;
        edge(&r, &p, sl1, "empty");
    }
    /* mta_ck: every column-block width of the dconv_w kernel */
    for (i = 0; i < 10; ++i) {
        ta_problem p = shape(48 + 3 * i, 48 + 3 * i, 4 + i, 6, (ta_dtype)(i % 3));
        p.flags = TA_CAUSAL, p.conv_q = cqs[i % 4], p.conv_k = cks[i];
        edge(&r, &p, NULL, "mta_ck");
    }
    /* mta_mask: key lengths 0, 1, 2 and windows */
    {
        static const int32_t sl[3][2] = {{0, 2}, {1, 0}, {2, 70}};
        for (i = 0; i < 3; ++i) {
            ta_problem p = shape(70, 70, 8, 8, (ta_dtype)i);
            p.flags = TA_CAUSAL, p.conv_q = 3, p.conv_k = 5;
            edge(&r, &p, sl[i], "mta_mask");
            p.flags |= TA_WINDOW, p.window_left = 2 + 5 * i, p.window_right = -1;
            edge(&r, &p, i == 2 ? sl[i] : NULL, "mta_mask");
        }
    }
    /* mta_narrow: MTA with windows narrower than a register block of rows and
     * small tiles, so that row vectors and K tiles of a task see no key */
    for (i = 0; i < 4; ++i) {
        static const int32_t sl[2] = {150, 3};
        ta_problem p = shape(i < 2 ? 160 : 6, 160, 6, 5, (ta_dtype)(i % 3));
        p.flags = TA_CAUSAL | TA_WINDOW, p.conv_q = 2 + i % 2, p.conv_k = 3;
        p.window_left = i, p.window_right = -1;
        p.block_q = 16 + 8 * (i % 2), p.block_k = 16;
        edge(&r, &p, i % 2 ? sl : NULL, "mta_narrow");
    }
    printf("test_cpu_edges: %ld CPU runs (forward + backward) equal to REF\n", g_runs);
    return ta_test_finish("test_cpu_edges");
}
