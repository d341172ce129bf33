/*
 * CPU backend (TA_BACKEND_CPU): entry points, workspace layout, instruction
 * set dispatch and the OpenMP task loops. The arithmetic is in the
 * ta_cpu_*.inc pieces, compiled once per ISA (ta_cpu_scalar.c, ..._avx2.c,
 * ..._avx512.c); docs/cpu.md describes the whole design.
 *
 * Threads: ta_problem.num_threads, or omp_get_max_threads() capped at
 * TA_THREADS_MAX when it is 0 (read by the size query and again by the call).
 * The workspace holds one slab of tile buffers per thread; thread t uses slab t
 * only. Results never depend on the thread count: every task owns its output
 * rows and computes them in the reference's order (no reduction across
 * threads). MTA (a conv) runs the same way with the conv kernels
 * (ta_cpu_mta.inc); its backward runs in one pass (one task per (b, kv
 * head)) or two (ta_cpu_mta_one_pass); its one cross-task sum, dconv_w, is
 * merged from per-Q-tile sums in the reference's order by tasks taking turns
 * (ta_cpu_dw_merge).
 * Latent attention is the SDPA tasks with stages: the reciprocal band's
 * scores and transposed terms, the fused projections' loads and stores; its
 * backward's call sums (d_alpha, dw_qlat, dw_vup) are added the same way
 * (ta_cpu_sums_dq_task).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define TA_OMP(directive) _Pragma(directive)
#else
#define TA_OMP(directive)
#endif

/* The task counter threads take work from (an integer; no floating-point
 * atomics anywhere). C11 atomics where the compiler has them, else an OpenMP
 * atomic capture, else (no threads at all) a plain counter. */
#if !defined(__STDC_NO_ATOMICS__)
#include <stdatomic.h>
#define TA_CPU_TASK_COUNTER atomic_llong
#define TA_CPU_TASK_INIT(c) atomic_init((c), 0)
#define TA_CPU_TASK_TAKE(c) ((int64_t)atomic_fetch_add_explicit((c), 1, memory_order_relaxed))
/* The dconv_w merge's turn counters (one per head): acquire / release. */
#define TA_CPU_TURN_LOAD(c)     ((int64_t)atomic_load_explicit((c), memory_order_acquire))
#define TA_CPU_TURN_STORE(c, v) atomic_store_explicit((c), (v), memory_order_release)
/* Split-K's finished parts per unit: acquire and release, so the task that
 * counts a unit's last part sees every part written before it. */
#define TA_CPU_COUNT_DONE(c) ((int64_t)atomic_fetch_add_explicit((c), 1, memory_order_acq_rel))
#else
#define TA_CPU_TASK_COUNTER     int64_t
#define TA_CPU_TASK_INIT(c)     (*(c) = 0)
#define TA_CPU_TASK_TAKE(c)     ta_cpu_task_take(c)
static int64_t ta_cpu_task_take(int64_t *c) {
    int64_t v;
    TA_OMP("omp atomic capture")
    v = (*c)++;
    return v;
}
#define TA_CPU_TURN_LOAD(c)     ta_cpu_turn_load(c)
#define TA_CPU_TURN_STORE(c, v) ta_cpu_turn_store((c), (v))
static int64_t ta_cpu_turn_load(int64_t *c) {
    int64_t v;
    TA_OMP("omp atomic read")
    v = *c;
    TA_OMP("omp flush")
    return v;
}
static void ta_cpu_turn_store(int64_t *c, int64_t v) {
    int64_t old; /* an atomic capture: gcc misreads v as unused in `omp atomic write` */
    TA_OMP("omp flush")
    TA_OMP("omp atomic capture") {
        old = *c;
        *c = v;
    }
    (void)old;
}
#define TA_CPU_COUNT_DONE(c) ta_cpu_count_done(c)
static int64_t ta_cpu_count_done(int64_t *c) {
    int64_t v;
    TA_OMP("omp flush")
    TA_OMP("omp atomic capture")
    v = (*c)++;
    TA_OMP("omp flush")
    return v;
}
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TA_CPU_SPIN_PAUSE() _mm_pause()
#else
#define TA_CPU_SPIN_PAUSE() ((void)0)
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sched.h>
#define TA_CPU_YIELD() ((void)sched_yield())
#else
#define TA_CPU_YIELD() ((void)0)
#endif

/* Keeps a task's locals out of ta_cpu_do_task's frame, which lies on the
 * deepest stack path (test/stack_usage.py, docs/safety.md section 2). */
#if defined(__GNUC__)
#define TA_CPU_NOINLINE __attribute__((noinline))
#else
#define TA_CPU_NOINLINE
#endif

#include "ta_cpu.h"
#include "ta_internal.h"
#include "ta_ref.h"
#include "ta_sum2.h"

/* ---------------------------------------------------------------------- */
/* Workspace                                                                */
/* ---------------------------------------------------------------------- */

static size_t ta_cpu_round_pad(int32_t n) {
    return ((size_t)n + (TA_CPU_PAD - 1)) / TA_CPU_PAD * TA_CPU_PAD;
}

void ta_cpu_dims_of(const ta_plan *plan, const ta_tiling *t, int32_t q_group, ta_cpu_dims *dm) {
    dm->d = plan->dim_k; /* head_dim, head_dim_v; L with the fused projections */
    dm->dv = plan->dim_v;
    dm->lat_w = plan->p.latent_dim > 0
                    ? ta_tiling_max_i32(plan->p.latent_dim,
                                        ta_tiling_max_i32(plan->p.head_dim, plan->p.head_dim_v))
                    : 0;
    dm->d_pad = ta_cpu_round_pad(dm->d);
    dm->dv_pad = ta_cpu_round_pad(dm->dv);
    dm->rows_max = q_group * t->block_q;
    dm->block_k = t->block_k;
    dm->bq_pad = ta_cpu_round_pad(dm->rows_max);
    dm->bk_pad = ta_cpu_round_pad(t->block_k);
}

int32_t ta_cpu_q_group(const ta_plan *plan, const ta_tiling *t, int32_t n_threads) {
    const int64_t n_q = t->num_q_tiles;
    const int64_t units = (int64_t)plan->p.batch * plan->p.heads_q;
    int32_t g = TA_CPU_Q_GROUP_MAX;
    if (t->num_splits > 1) return 1; /* split-K: one Q tile's parts per task */
    while (g > 1 && (g > n_q || g * t->block_q > 256 ||
                     units * ((n_q + g - 1) / g) < 2 * (int64_t)n_threads))
        --g;
    return g;
}

int32_t ta_cpu_head_pack(const ta_plan *plan, int32_t n_threads) {
    const ta_tiling *t = &plan->fwd;
    const int32_t rows = ta_tiling_min_i32(t->rows_eff, t->seq_q); /* a Q tile's, at most */
    /* split-K: every part is a task of its own */
    const int64_t units = (int64_t)plan->p.batch * plan->p.heads_kv * t->num_q_tiles *
                          (t->num_splits > 1 ? t->num_splits : 1);
    /* MTA: only into the lanes-over-keys path (TA_CPU_KEYLANE_MTA_PACK_ROWS
     * effective rows, their loaded rows within the qr and srm tiles) */
    const int32_t loaded = rows + (plan->has_conv ? plan->p.conv_q - 1 : 0);
    const int32_t max_rows = plan->has_conv ? TA_CPU_KEYLANE_MTA_PACK_ROWS : 256;
    int32_t pk;
    if (plan->stages.score == TA_SCORE_RBAND || plan->p.latent_dim > 0 ||
        (!plan->has_conv && t->q_history > 0) ||
        (plan->has_conv && plan->stages.load == TA_LOAD_ROPE) ||
        ta_cpu_q_group(plan, t, n_threads) > 1)
        return 1;
    for (pk = ta_tiling_min_i32(plan->group, TA_CPU_HEAD_PACK_MAX); pk > 1; --pk)
        if (plan->group % pk == 0 && (int64_t)pk * rows <= max_rows &&
            (!plan->has_conv || (int64_t)pk * loaded <= TA_CPU_KEYLANE_MTA_LOADED) &&
            units * (plan->group / pk) >= (int64_t)n_threads)
            break;
    return pk;
}

/* The forward slab's dims: q_group Q tiles, or head_pack heads' rows of one
 * Q tile (MTA: their loaded rows, history and halo rows included). */
static void ta_cpu_fwd_dims(const ta_plan *plan, int32_t n_threads, ta_cpu_dims *dm,
                            int32_t *head_pack) {
    const int32_t pk = ta_cpu_head_pack(plan, n_threads);
    ta_cpu_dims_of(plan, &plan->fwd, ta_cpu_q_group(plan, &plan->fwd, n_threads), dm);
    if (pk > 1) { /* MTA: the Q^T lanes hold every head's loaded rows */
        const int32_t rows =
            pk * (ta_tiling_min_i32(plan->fwd.rows_eff, plan->fwd.seq_q) +
                  (plan->has_conv ? plan->p.conv_q - 1 : 0));
        dm->rows_max = ta_tiling_max_i32(dm->rows_max, rows);
        dm->bq_pad = ta_cpu_round_pad(dm->rows_max);
    }
    *head_pack = pk;
}

/* The lane stride of a tile held transposed ([feature or key][row]) with
 * bq_pad lanes: bq_pad, plus one vector of 16 floats if that makes the row an
 * odd number of 64-byte lines. With an even number (256 lanes: 1 KiB) the
 * rows of a column fall into a few L1 sets (64 sets x 64 bytes = 4 KiB repeat)
 * and evict each other; measured on the forward: up to 35% faster. */
static size_t ta_cpu_lane_ld(size_t bq_pad) {
    return bq_pad + ((bq_pad / TA_CPU_PAD) % 2 == 0 ? TA_CPU_PAD : 0);
}

/* The three per-thread layouts (ta_cpu.h draws them). Each region is a
 * multiple of 64 bytes and starts on a 64-byte boundary (ta_ws_take). */
void ta_cpu_carve_fwd(const ta_cpu_dims *dm, int conv, int band, ta_ws_cursor *c,
                      ta_cpu_fwd_ws *ws) {
    const size_t bq = (size_t)dm->rows_max, bk = (size_t)dm->block_k;
    /* the lanes-over-keys tiles' rows: loaded (qr, srm) and effective (sr);
     * MTA's packed heads take more (TA_CPU_KEYLANE_MTA_PACK_ROWS) */
    const size_t kl_load = conv ? TA_CPU_KEYLANE_MTA_LOADED : TA_CPU_KEYLANE_ROWS + TA_CPU_PAD;
    const size_t kl_rows = conv ? TA_CPU_KEYLANE_MTA_PACK_ROWS : TA_CPU_KEYLANE_ROWS;
    ws->dm = *dm;
    ws->ld = ta_cpu_lane_ld(dm->bq_pad);
    ws->qt = TA_WS_TAKE(c, float, (size_t)dm->d * ws->ld);
    ws->k = TA_WS_TAKE(c, float, bk * dm->d_pad);
    ws->v = TA_WS_TAKE(c, float, bk * dm->dv_pad);
    ws->st = TA_WS_TAKE(c, float, bk * ws->ld);
    ws->acc = TA_WS_TAKE(c, float, bq * dm->dv_pad);
    ws->m = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->l = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->alpha = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->nvis = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->lse = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->ld_sraw = conv ? dm->bq_pad + TA_CPU_PAD : 0;
    ws->sraw = conv ? TA_WS_TAKE(c, float, bk * ws->ld_sraw) : NULL;
    ws->nlo = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    /* MTA: the loaded rows' intervals (lane = sraw lane), or with packed heads
     * one head's loaded rows' then every head's effective rows' (n_ld + P r) */
    ws->row_lo = TA_WS_TAKE(c, int32_t, conv ? ws->ld_sraw + dm->bq_pad : dm->bq_pad);
    ws->row_hi = TA_WS_TAKE(c, int32_t, conv ? ws->ld_sraw + dm->bq_pad : dm->bq_pad);
    ws->acc_lo = TA_WS_TAKE(c, float, bq * dm->dv_pad);
    ws->part = TA_WS_TAKE(c, float, bq * dm->dv_pad);
    ws->l_lo = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->n_splits = 1, ws->part_rows = 0; /* split-K: the call's parts (ta_cpu_layout) */
    ws->head_pack = 1;
    ws->part_o = ws->part_lse = NULL;
    ws->lat_in = dm->lat_w ? TA_WS_TAKE(c, float, ta_cpu_round_pad(dm->lat_w)) : NULL;
    ws->lat_out = dm->lat_w ? TA_WS_TAKE(c, float, ta_cpu_round_pad(dm->lat_w)) : NULL;
    ws->qlat = band ? TA_WS_TAKE(c, float, bk * dm->d_pad) : NULL;
    ws->qlat_t = band ? TA_WS_TAKE(c, float, (size_t)dm->d * dm->bk_pad) : NULL;
    ws->k_rows = band ? TA_WS_TAKE(c, float, (size_t)TA_CPU_RBAND_ROWS * dm->d_pad) : NULL;
    ws->tvec = band ? TA_WS_TAKE(c, float, (size_t)TA_CPU_RBAND_ROWS * dm->bk_pad) : NULL;
    ws->kt = TA_WS_TAKE(c, float, dm->d_pad * dm->bk_pad);
    ws->qr = TA_WS_TAKE(c, float, (size_t)kl_load * dm->d_pad);
    ws->sr = TA_WS_TAKE(c, float, (size_t)kl_rows * dm->bk_pad);
    ws->ld_srm = conv ? dm->bk_pad + TA_CPU_PAD : 0;
    ws->srm = conv ? TA_WS_TAKE(c, float, (size_t)kl_load * ws->ld_srm) : NULL;
}

/* The dk/dv pairs' lo words and row-chunk partials of `group` slots (after
 * every other region of a pass-1 slab: the older offsets stay). */
static void ta_cpu_carve_dkdv_pairs(const ta_cpu_dims *dm, int32_t group, ta_ws_cursor *c,
                                    float **dk_lo, float **dv_lo, float **dk_part,
                                    float **dv_part) {
    const size_t bk = (size_t)dm->block_k;
    int32_t g;
    for (g = 0; g < TA_CPU_DKDV_GROUP_MAX; ++g) {
        const int mine = g < group;
        dk_lo[g] = mine ? TA_WS_TAKE(c, float, bk * dm->d_pad) : NULL;
        dk_part[g] = mine ? TA_WS_TAKE(c, float, bk * dm->d_pad) : NULL;
        dv_lo[g] = mine ? TA_WS_TAKE(c, float, bk * dm->dv_pad) : NULL;
        dv_part[g] = mine ? TA_WS_TAKE(c, float, bk * dm->dv_pad) : NULL;
    }
}

void ta_cpu_carve_mta_bwd(const ta_plan *plan, const ta_cpu_dims *dm, int32_t group, int one_pass,
                          ta_ws_cursor *c, ta_cpu_mta_bwd_ws *ws) {
    const size_t bq = (size_t)dm->rows_max, bk = (size_t)dm->block_k;
    const size_t ld = dm->bq_pad + TA_CPU_PAD;
    const int32_t c_q = plan->p.conv_q, c_k = plan->p.conv_k;
    float **const all[6] = {&ws->dk_all, &ws->dk_all_lo, &ws->dk_all_part, /* one pass */
                            &ws->dv_all, &ws->dv_all_lo, &ws->dv_all_part};
    int32_t g;
    if (one_pass) group = 0; /* no pass-1 slots: the sums over all keys, below */
    ws->dm = *dm;
    ws->ld = ld;
    ws->group = group;
    ws->qt = TA_WS_TAKE(c, float, (size_t)dm->d *ld);
    ws->dot = TA_WS_TAKE(c, float, (size_t)dm->dv *ld);
    ws->q = TA_WS_TAKE(c, float, bq * dm->d_pad);
    ws->d_o = TA_WS_TAKE(c, float, bq * dm->dv_pad);
    ws->o = TA_WS_TAKE(c, float, bq * dm->dv_pad);
    ws->k = TA_WS_TAKE(c, float, bk * dm->d_pad);
    ws->v = TA_WS_TAKE(c, float, bk * dm->dv_pad);
    ws->st = TA_WS_TAKE(c, float, bk *ld);
    ws->ct = TA_WS_TAKE(c, float, bk *ld);
    ws->dct = TA_WS_TAKE(c, float, bk *ld);
    ws->dst = TA_WS_TAKE(c, float, bk *ld);
    ws->lse = TA_WS_TAKE(c, float, ld);
    ws->delta = TA_WS_TAKE(c, float, ld);
    ws->nlo = TA_WS_TAKE(c, int32_t, ld);
    ws->nvis = TA_WS_TAKE(c, int32_t, ld);
    ws->row_lo = TA_WS_TAKE(c, int32_t, ld);
    ws->row_hi = TA_WS_TAKE(c, int32_t, ld);
    ws->dq_acc = TA_WS_TAKE(c, float, bq * dm->d_pad);
    ws->dw_part = TA_WS_TAKE(c, float, (size_t)c_q *(size_t)c_k);
    ws->dw_sum = TA_WS_TAKE(c, float, (size_t)c_q *(size_t)c_k);
    ws->dw_sum_lo = TA_WS_TAKE(c, float, (size_t)c_q *(size_t)c_k);
    for (g = 0; g < TA_CPU_DKDV_GROUP_MAX; ++g) {
        const int mine = g < group;
        ws->dk_acc[g] = mine ? TA_WS_TAKE(c, float, bk * dm->d_pad) : NULL;
        ws->dv_acc[g] = mine ? TA_WS_TAKE(c, float, bk * dm->dv_pad) : NULL;
    }
    ws->dq_lo = TA_WS_TAKE(c, float, bq * dm->d_pad);
    ws->dq_part = TA_WS_TAKE(c, float, bq * dm->d_pad);
    ws->seg_lo = TA_WS_TAKE(c, int32_t, ld);
    ws->seg_n = TA_WS_TAKE(c, int32_t, ld);
    ta_cpu_carve_dkdv_pairs(dm, group, c, ws->dk_lo, ws->dv_lo, ws->dk_part, ws->dv_part);
    ws->lds = dm->bk_pad + TA_CPU_PAD;
    ws->srm = TA_WS_TAKE(c, float, bq * ws->lds);
    ws->one_pass = one_pass;
    for (g = 0; g < 6; ++g)
        *all[g] = NULL;
    ws->kv_chunk = NULL, ws->dw_r = NULL, ws->dw_r_add = NULL;
    if (one_pass) {
        const size_t n_q = (size_t)plan->bwd.num_q_tiles, n_w = (size_t)c_q * (size_t)c_k;
        size_t nk_d = 0, nk_dv = 0, nq_w = 0;
        if (!ta_mul_size((size_t)plan->bwd.seq_k, dm->d_pad, &nk_d) ||
            !ta_mul_size((size_t)plan->bwd.seq_k, dm->dv_pad, &nk_dv) ||
            !ta_mul_size(n_q, n_w, &nq_w)) {
            c->overflow = 1;
            return;
        }
        for (g = 0; g < 6; ++g) /* dk's three, then dv's */
            *all[g] = TA_WS_TAKE(c, float, g < 3 ? nk_d : nk_dv);
        ws->kv_chunk = TA_WS_TAKE(c, int64_t, (size_t)plan->bwd.num_k_tiles);
        ws->dw_r = TA_WS_TAKE(c, float, nq_w);
        ws->dw_r_add = TA_WS_TAKE(c, int32_t, n_q);
    }
}

/*
 * The MTA backward in one pass or two (docs/cpu.md section 9). One pass
 * computes each tile pair's S, C, P, dC and dS once (two passes: twice) but
 * has one task per (b, kv head), T = B H_kv of them, each O(S) workspace.
 * It is taken when those tasks keep the threads at least 3/4 busy, T / (n
 * ceil(T / n)) >= 3/4 (n = 1: always), and one slab's sums over all keys,
 * 3 S_k (d_pad + dv_pad) floats, stay within TA_CPU_MTA_ONE_PASS_MAX bytes.
 * The problem and n only: the size query and the call decide alike.
 */
#define TA_CPU_MTA_ONE_PASS_MAX ((size_t)64 << 20)
int ta_cpu_mta_one_pass(const ta_plan *plan, int32_t n_threads) {
    const int64_t tasks = (int64_t)plan->p.batch * plan->p.heads_kv, n = n_threads;
    const int64_t rounds = (tasks + n - 1) / n;
    ta_cpu_dims dm;
    ta_cpu_dims_of(plan, &plan->bwd, 1, &dm);
    if (!plan->has_conv || 4 * tasks < 3 * n * rounds) return 0;
    return (size_t)plan->bwd.seq_k * (dm.d_pad + dm.dv_pad) * 3 * sizeof(float) <=
           TA_CPU_MTA_ONE_PASS_MAX;
}

/* The band's and the projections' backward stages (ta_cpu.h draws them);
 * all NULL without either. dq: 1 carves the ctx~ pairs too (the dq slab,
 * with the projections). */
static void ta_cpu_carve_lat(const ta_cpu_dims *dm, int band, int dq, ta_ws_cursor *c,
                             ta_cpu_lat_ws *lat) {
    const size_t bk = (size_t)dm->block_k;
    const int32_t dmax = ta_tiling_max_i32(dm->d, dm->dv);
    const size_t w_pad = ta_cpu_round_pad(dm->lat_w ? dm->lat_w : dmax);
    memset(lat, 0, sizeof *lat);
    if (dm->lat_w == 0 && !band) return;
    lat->wt = dm->lat_w ? TA_WS_TAKE(c, float, (size_t)dm->lat_w * (size_t)dm->lat_w) : NULL;
    lat->lat_in = TA_WS_TAKE(c, float, w_pad);
    lat->lat_out = TA_WS_TAKE(c, float, w_pad);
    lat->qlat = TA_WS_TAKE(c, float, bk * dm->d_pad);
    lat->xq = TA_WS_TAKE(c, float, bk * dm->d_pad);
    lat->xdo = TA_WS_TAKE(c, float, bk * dm->dv_pad);
    lat->yq = TA_WS_TAKE(c, float, (size_t)TA_SUM2_CHUNK * dm->d_pad);
    lat->ydo = TA_WS_TAKE(c, float, (size_t)TA_SUM2_CHUNK * dm->dv_pad);
    lat->ydelta = TA_WS_TAKE(c, float, (size_t)TA_SUM2_CHUNK);
    lat->ylse = TA_WS_TAKE(c, float, (size_t)TA_SUM2_CHUNK);
    lat->x_delta = TA_WS_TAKE(c, float, dm->bk_pad);
    lat->x_lse = TA_WS_TAKE(c, float, dm->bk_pad);
    lat->bt = TA_WS_TAKE(c, float, (size_t)3 * (size_t)dmax * (size_t)TA_SUM2_CHUNK);
    lat->adl = TA_WS_TAKE(c, float, (size_t)TA_SUM2_CHUNK);
    lat->qlat_t = TA_WS_TAKE(c, float, (size_t)dm->d * dm->bk_pad);
    lat->k_rows = TA_WS_TAKE(c, float, (size_t)TA_CPU_RBAND_ROWS * dm->d_pad);
    lat->tvec = TA_WS_TAKE(c, float, (size_t)TA_CPU_RBAND_ROWS * dm->bk_pad);
    if (!dq || dm->lat_w == 0) return;
    lat->ctx_hi = TA_WS_TAKE(c, float, (size_t)dm->rows_max * dm->dv_pad);
    lat->ctx_lo = TA_WS_TAKE(c, float, (size_t)dm->rows_max * dm->dv_pad);
    lat->ctx_part = TA_WS_TAKE(c, float, (size_t)dm->rows_max * dm->dv_pad);
}

void ta_cpu_carve_dkdv(const ta_cpu_dims *dm, int32_t group, int band, ta_ws_cursor *c,
                       ta_cpu_dkdv_ws *ws) {
    const size_t bq = (size_t)dm->rows_max, bk = (size_t)dm->block_k;
    int32_t g;
    ws->dm = *dm;
    ws->group = group;
    ws->q = TA_WS_TAKE(c, float, bq * dm->d_pad);
    ws->d_o = TA_WS_TAKE(c, float, bq * dm->dv_pad);
    ws->o = TA_WS_TAKE(c, float, bq * dm->dv_pad);
    ws->p = TA_WS_TAKE(c, float, bq * dm->bk_pad);
    ws->ds = TA_WS_TAKE(c, float, bq * dm->bk_pad);
    ws->lse = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->delta = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->nlo = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->nvis = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->row_lo = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->row_hi = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    for (g = 0; g < TA_CPU_DKDV_GROUP_MAX; ++g) {
        const int mine = g < group;
        ws->kt[g] = mine ? TA_WS_TAKE(c, float, (size_t)dm->d * dm->bk_pad) : NULL;
        ws->vt[g] = mine ? TA_WS_TAKE(c, float, (size_t)dm->dv * dm->bk_pad) : NULL;
        ws->dk_acc[g] = mine ? TA_WS_TAKE(c, float, bk * dm->d_pad) : NULL;
        ws->dv_acc[g] = mine ? TA_WS_TAKE(c, float, bk * dm->dv_pad) : NULL;
    }
    ta_cpu_carve_dkdv_pairs(dm, group, c, ws->dk_lo, ws->dv_lo, ws->dk_part, ws->dv_part);
    ta_cpu_carve_lat(dm, band, 0, c, &ws->lat);
}

int32_t ta_cpu_dkdv_group(const ta_plan *plan, int32_t n_threads) {
    const int64_t n_k = plan->bwd.num_k_tiles;
    const int64_t units = (int64_t)plan->p.batch * plan->p.heads_kv;
    int32_t g = TA_CPU_DKDV_GROUP_MAX;
    while (g > 1 && (g > n_k || units * ((n_k + g - 1) / g) < 2 * (int64_t)n_threads))
        --g;
    return g;
}

void ta_cpu_carve_dq(const ta_cpu_dims *dm, int band, ta_ws_cursor *c, ta_cpu_dq_ws *ws) {
    const size_t bq = (size_t)dm->rows_max, bk = (size_t)dm->block_k;
    ws->dm = *dm;
    ws->ld = ta_cpu_lane_ld(dm->bq_pad);
    ws->qt = TA_WS_TAKE(c, float, (size_t)dm->d * ws->ld);
    ws->dot = TA_WS_TAKE(c, float, (size_t)dm->dv * ws->ld);
    ws->ot = TA_WS_TAKE(c, float, (size_t)dm->dv * ws->ld);
    ws->k = TA_WS_TAKE(c, float, bk * dm->d_pad);
    ws->v = TA_WS_TAKE(c, float, bk * dm->dv_pad);
    ws->st = TA_WS_TAKE(c, float, bk * ws->ld);
    ws->dpt = TA_WS_TAKE(c, float, bk * ws->ld);
    ws->lse = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->delta = TA_WS_TAKE(c, float, dm->bq_pad);
    ws->nlo = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->nvis = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->row_lo = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->row_hi = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->dq_acc = TA_WS_TAKE(c, float, bq * dm->d_pad);
    ws->dq_lo = TA_WS_TAKE(c, float, bq * dm->d_pad);
    ws->dq_part = TA_WS_TAKE(c, float, bq * dm->d_pad);
    ws->seg_lo = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->seg_n = TA_WS_TAKE(c, int32_t, dm->bq_pad);
    ws->tt = band ? TA_WS_TAKE(c, float, bk * ws->ld) : NULL;
    ws->da_hi = band ? TA_WS_TAKE(c, float, dm->bq_pad) : NULL;
    ws->da_lo = band ? TA_WS_TAKE(c, float, dm->bq_pad) : NULL;
    ws->da_part = band ? TA_WS_TAKE(c, float, dm->bq_pad) : NULL;
    ta_cpu_carve_lat(dm, band, 1, c, &ws->lat);
}

/* Threads a call uses (and its workspace is sized for). */
static int32_t ta_cpu_threads(const ta_plan *plan) {
#ifdef _OPENMP
    /* num_threads is validated in [0, TA_THREADS_MAX]; the OpenMP default is capped
     * to the same bound, so no call ever asks the runtime for more */
    const int n = plan->p.num_threads > 0 ? plan->p.num_threads : omp_get_max_threads();
    return n < 1 ? 1 : n > TA_THREADS_MAX ? TA_THREADS_MAX : (int32_t)n;
#else
    (void)plan;
    return 1; /* built without OpenMP: one thread, whatever num_threads says */
#endif
}

/*
 * Split-K's regions of a forward's call (n = plan->fwd.num_splits > 1), after
 * the slabs (OpenMP) or in the shared workspace (caller-run tasks), shared by
 * every thread:
 *
 *   +--------------------------------------+---------------------------+--------------+
 *   | part_o [U, n, R, dv_pad] f32         | part_lse [U, n, R] f32    | done [U]     |
 *   +--------------------------------------+---------------------------+--------------+
 *   U = B (H / head_pack) n_q units (b, head pack, Q tile), R = head_pack
 *   min(rows_eff, S_q) lanes of a part; done: each unit's finished parts.
 *
 * One task per part (any thread, any order); the task whose part completes a
 * unit merges its n parts in ascending order (kern->fwd.merge), so the bits
 * are those of one thread running the parts in turn. O(B H S_q n D_v): the
 * partials the split-K keeps in the caller's workspace, as on CUDA.
 */
typedef struct ta_cpu_splits {
    float *part_o, *part_lse;
    TA_CPU_TASK_COUNTER *done;
    size_t part_rows;
    int64_t units;
} ta_cpu_splits;

/* A pass's per-thread tiles: forward, or backward (both of its layouts share
 * one slab: a thread runs one task at a time). With a conv (MTA, section 9 of
 * docs/cpu.md) the forward adds the raw-score tile and the backward has its
 * own layout, plus H turn counters shared by all threads after the slabs. */
typedef struct ta_cpu_slab {
    ta_cpu_fwd_ws fwd;     /* forward (SDPA; MTA with sraw) */
    ta_cpu_dkdv_ws dkdv;   /* SDPA backward (the band's and the projections' stages too) */
    ta_cpu_dq_ws dq;
    ta_cpu_mta_bwd_ws mta; /* MTA backward, both passes */
    TA_CPU_TASK_COUNTER *dw_turn; /* MTA backward: [H] next (b, Q tile) to merge per head */
    float *dw_lo; /* MTA backward: [H, c_q c_k] lo words of dconv_w's pairs (src/ta_sum2.h) */
    /* the backward's call sums (the band's d_alpha, the projections' weight
     * gradients): [1] the next (b, h, Q-tile group) to add its share */
    TA_CPU_TASK_COUNTER *sum_turn;
    float *da_g; /* the band: [2] d_alpha's pair (hi, lo) */
    ta_cpu_lat_sums lat_sums; /* the projections: dw_qlat's, dw_vup's lo words and partials */
    ta_cpu_splits splits; /* split-K forward: the call's parts and counters */
} ta_cpu_slab;

/* The split-K regions from a cursor (nothing without split-K); n_threads
 * sets the head packing (ta_cpu_head_pack) as for the slabs. */
static void ta_cpu_carve_splits(const ta_plan *plan, int32_t n_threads, ta_ws_cursor *c,
                                ta_cpu_splits *sp) {
    const ta_tiling *t = &plan->fwd;
    const int32_t pk = ta_cpu_head_pack(plan, n_threads);
    size_t slots, n_o, n_lse;
    memset(sp, 0, sizeof *sp);
    if (t->num_splits <= 1) return;
    sp->part_rows = (size_t)pk * (size_t)ta_tiling_min_i32(t->rows_eff, t->seq_q);
    sp->units = (int64_t)plan->p.batch * (plan->p.heads_q / pk) * t->num_q_tiles;
    if (!ta_mul_size((size_t)sp->units, (size_t)t->num_splits, &slots) ||
        !ta_mul_size(slots, sp->part_rows, &n_lse) ||
        !ta_mul_size(n_lse, ta_cpu_round_pad(plan->dim_v), &n_o)) {
        c->overflow = 1;
        return;
    }
    sp->part_o = TA_WS_TAKE(c, float, n_o);
    sp->part_lse = TA_WS_TAKE(c, float, n_lse);
    sp->done = TA_WS_TAKE(c, TA_CPU_TASK_COUNTER, (size_t)sp->units);
}

/* A slab's view of the call's split-K regions. */
static void ta_cpu_slab_splits(const ta_cpu_splits *sp, ta_cpu_slab *slab) {
    slab->splits = *sp;
    if (!sp->done) return;
    slab->fwd.part_o = sp->part_o, slab->fwd.part_lse = sp->part_lse;
    slab->fwd.part_rows = sp->part_rows;
}

/* Before a call's tasks: no unit has a finished part. */
static void ta_cpu_splits_reset(const ta_cpu_splits *sp) {
    int64_t u;
    for (u = 0; u < sp->units; ++u)
        TA_CPU_TASK_INIT(sp->done + u);
}

/* The backward's call sums of latent attention (docs/cpu.md section 3c):
 * the band's d_alpha and the fused projections' dw_qlat, dw_vup. The dq
 * tasks compute their rows' shares and add them in REF's (b, h, Q tile)
 * order, taking turns (ta_cpu_sums_dq_task). */
static int ta_cpu_bwd_turns(const ta_plan *plan, int backward) {
    return backward && !plan->has_conv &&
           (plan->stages.score == TA_SCORE_RBAND || plan->p.latent_dim > 0);
}

/* One thread's slab at base (NULL: size only); its bytes (a multiple of 64),
 * or 0 if a size overflows. one_pass: the MTA backward's one-pass slab
 * (ta_cpu_mta_one_pass). */
static size_t ta_cpu_carve_slab(const ta_plan *plan, int backward, int32_t n_threads,
                                int one_pass, void *base, ta_cpu_slab *slab) {
    ta_cpu_dims dm;
    ta_ws_cursor c;
    size_t bytes;
    ta_ws_begin(&c, base);
    if (!backward) {
        int32_t pk;
        ta_cpu_fwd_dims(plan, n_threads, &dm, &pk);
        ta_cpu_carve_fwd(&dm, plan->has_conv, plan->stages.score == TA_SCORE_RBAND, &c, &slab->fwd);
        slab->fwd.head_pack = pk;
        slab->fwd.n_splits = plan->fwd.num_splits > 1 ? plan->fwd.num_splits : 1;
        return c.overflow ? 0 : c.used;
    }
    if (plan->has_conv) { /* MTA: one Q tile x one K tile per step */
        ta_cpu_dims_of(plan, &plan->bwd, 1, &dm);
        ta_cpu_carve_mta_bwd(plan, &dm, ta_cpu_dkdv_group(plan, n_threads), one_pass, &c,
                             &slab->mta);
        return c.overflow ? 0 : c.used;
    }
    ta_cpu_dims_of(plan, &plan->bwd, 1, &dm);
    ta_cpu_carve_dkdv(&dm, ta_cpu_dkdv_group(plan, n_threads),
                      plan->stages.score == TA_SCORE_RBAND, &c, &slab->dkdv);
    if (c.overflow) return 0;
    bytes = c.used;
    ta_ws_begin(&c, base); /* the dq layout overlays the dk/dv one */
    ta_cpu_dims_of(plan, &plan->bwd, ta_cpu_q_group(plan, &plan->bwd, n_threads), &dm);
    ta_cpu_carve_dq(&dm, plan->stages.score == TA_SCORE_RBAND, &c, &slab->dq);
    if (c.overflow) return 0;
    return c.used > bytes ? c.used : bytes;
}

/*
 * The one layout routine, for the size query (base NULL) and the call:
 *
 *   workspace = n_threads x slab, slab = one thread's tiles (64-byte multiple)
 *   +-----------------+-----------------+-- ... --+-----------------+---------------------------+
 *   | slab, thread 0  | slab, thread 1  |         | slab, thread n-1| dw_turn, dw_lo (conv, bwd)|
 *   +-----------------+-----------------+-- ... --+-----------------+---------------------------+
 *
 * With a conv the backward adds dw_turn: H integer counters shared by all
 * threads, the in-order dconv_w merge (ta_cpu_dw_merge), and dw_lo: the lo
 * words of the merge's pairs, H c_q c_k floats (dconv_w holds the hi words).
 * Latent attention's backward adds one turn counter, with the band
 * d_alpha's pair, with the projections dw_qlat's and dw_vup's lo words and
 * row-chunk partials (O(H D L), ta_cpu_lat_sums).
 * A split-K forward adds the call's parts (ta_cpu_splits, O(B H S_q n D_v)).
 * Nothing else grows with B, and nothing with S but the MTA backward's one-pass
 * slab (its sums over all keys, O(S_k (D + D_v)), capped by
 * ta_cpu_mta_one_pass): every other region is O(tile), or O(H) for these.
 * With a base, carves thread tid's slab into *slab. Returns the total size.
 */
static ta_status ta_cpu_layout(const ta_plan *plan, int backward, int32_t n_threads, void *base,
                               int32_t tid, ta_cpu_slab *slab, size_t *total) {
    const int one_pass = backward && ta_cpu_mta_one_pass(plan, n_threads);
    const size_t slab_bytes = ta_cpu_carve_slab(plan, backward, n_threads, one_pass, NULL, slab);
    size_t slabs_bytes;
    ta_ws_cursor c;
    TA_CPU_TASK_COUNTER *turn = NULL, *sum_turn = NULL;
    float *dw_lo = NULL, *da_g = NULL;
    ta_cpu_lat_sums ls;
    ta_cpu_splits sp;
    memset(&ls, 0, sizeof ls);
    memset(&sp, 0, sizeof sp);
    if (slab_bytes == 0 || !ta_mul_size(slab_bytes, (size_t)n_threads, &slabs_bytes))
        return TA_ERR_OVERFLOW;
    ta_ws_begin(&c, base);
    (void)TA_WS_TAKE(&c, unsigned char, slabs_bytes);
    if (!backward) ta_cpu_carve_splits(plan, n_threads, &c, &sp);
    if (backward && plan->has_conv) {
        turn = TA_WS_TAKE(&c, TA_CPU_TASK_COUNTER, (size_t)plan->p.heads_q);
        dw_lo = TA_WS_TAKE(&c, float, plan->n_conv);
    }
    if (ta_cpu_bwd_turns(plan, backward)) {
        const size_t lat = (size_t)plan->p.latent_dim;
        sum_turn = TA_WS_TAKE(&c, TA_CPU_TASK_COUNTER, 1);
        if (plan->stages.score == TA_SCORE_RBAND) da_g = TA_WS_TAKE(&c, float, 2);
        if (lat > 0) {
            ls.dwq_lo = TA_WS_TAKE(&c, float, plan->n_wq);
            ls.dwv_lo = TA_WS_TAKE(&c, float, plan->n_wv);
            ls.dwq_part = TA_WS_TAKE(&c, float, (size_t)plan->p.head_dim * lat);
            ls.dwv_part = TA_WS_TAKE(&c, float, lat * (size_t)plan->p.head_dim_v);
        }
    }
    if (c.overflow) return TA_ERR_OVERFLOW;
    *total = c.used;
    if (base) {
        (void)ta_cpu_carve_slab(plan, backward, n_threads, one_pass,
                                (unsigned char *)base + (size_t)tid * slab_bytes, slab);
        slab->dw_turn = turn;
        slab->dw_lo = dw_lo;
        slab->sum_turn = sum_turn;
        slab->da_g = da_g;
        slab->lat_sums = ls;
        ta_cpu_slab_splits(&sp, slab);
    }
    return TA_OK;
}

static ta_status ta_cpu_fwd_size(const ta_plan *plan, size_t *bytes) {
    ta_cpu_slab slab;
    return ta_cpu_layout(plan, 0, ta_cpu_threads(plan), NULL, 0, &slab, bytes);
}

static ta_status ta_cpu_bwd_size(const ta_plan *plan, size_t *bytes) {
    ta_cpu_slab slab;
    return ta_cpu_layout(plan, 1, ta_cpu_threads(plan), NULL, 0, &slab, bytes);
}

/* ---------------------------------------------------------------------- */
/* Instruction set                                                          */
/* ---------------------------------------------------------------------- */

ta_cpu_isa ta_cpu_isa_best(void) {
#if defined(TA_CPU_X86)
    /* libgcc / compiler-rt fill this table at start-up (a constructor) and
     * check OS support (XCR0) for the AVX and AVX-512 register state. */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        return TA_CPU_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return TA_CPU_ISA_AVX2;
#endif
    return TA_CPU_ISA_SCALAR;
}

ta_cpu_isa ta_cpu_isa_resolve(void) {
    const ta_cpu_isa best = ta_cpu_isa_best();
    const char *env = getenv("TA_CPU_ISA");
    ta_cpu_isa want = best;
    if (env && strcmp(env, "scalar") == 0) want = TA_CPU_ISA_SCALAR;
    if (env && strcmp(env, "avx2") == 0) want = TA_CPU_ISA_AVX2;
    if (env && strcmp(env, "avx512") == 0) want = TA_CPU_ISA_AVX512;
    return want < best ? want : best;
}

const char *ta_cpu_isa_name(ta_cpu_isa isa) {
    switch (isa) {
    case TA_CPU_ISA_SCALAR: return "scalar";
    case TA_CPU_ISA_AVX2: return "avx2";
    case TA_CPU_ISA_AVX512: return "avx512";
    }
    return "unknown";
}

static const ta_cpu_kernels *ta_cpu_kernels_for(ta_cpu_isa isa) {
#if defined(TA_CPU_X86)
    if (isa == TA_CPU_ISA_AVX512) return &ta_cpu_kernels_avx512;
    if (isa == TA_CPU_ISA_AVX2) return &ta_cpu_kernels_avx2;
#else
    (void)isa;
#endif
    return &ta_cpu_kernels_scalar;
}

/* ---------------------------------------------------------------------- */
/* Entry points                                                             */
/* ---------------------------------------------------------------------- */

static int ta_cpu_available(void) { return 1; }

/* SDPA, MTA and latent attention, every plan: any mask (causal, key lengths,
 * sliding windows) and any strides; the tasks read the per-tile context
 * (docs/cpu.md). */
static int ta_cpu_supports(const ta_plan *plan) {
    (void)plan;
    return 1;
}

/*
 * One call's tasks. The backward's dk/dv tasks (b, kv head, a group of
 * consecutive K tiles) and dq tasks (b, h, a group of Q tiles) are independent
 * (they write different tensors), so they share one task list: dk/dv first
 * (each covers a whole query group), K tiles ascending (under the causal mask
 * the first ones see the most rows); then dq. Forward and dq tasks are
 * numbered last Q tiles first (the longest under the causal mask).
 */
typedef struct ta_cpu_run {
    const ta_plan *plan;
    const ta_fwd_args *fa; /* forward: set; backward: NULL */
    const ta_bwd_args *ba;
    void *workspace;
    const ta_cpu_kernels *kern;
    int32_t n_threads;
    int64_t n_dkdv; /* backward: dk/dv tasks come first */
    int one_pass;   /* MTA backward: one task per (b, kv head), ta_cpu_mta_one_pass */
    int64_t n_tasks;
    int32_t k_group, q_group;
    int32_t h_pack; /* forward: query heads per task (ta_cpu_head_pack); else 1 */
    TA_CPU_TASK_COUNTER next; /* the next task to hand out */
} ta_cpu_run;

/* Spins until the turn counter *next reaches turn (the in-order merges). */
static void ta_cpu_turn_wait(TA_CPU_TASK_COUNTER *next, int64_t turn) {
    int spins = 0;
    while (TA_CPU_TURN_LOAD(next) != turn) {
        TA_CPU_SPIN_PAUSE();
        if (++spins % 256 == 0) TA_CPU_YIELD(); /* more threads than cores */
    }
}

/*
 * dconv_w[h] += R(b, qt), in the reference's order (ta_ref_bwd; docs/mta.md
 * backward step 5), into the pairs (dconv_w[h], lo) (src/ta_sum2.h): per head, b ascending, Q tiles ascending, for the tiles
 * that see a K tile (add = 1; the others are skipped but keep their turn).
 * `turn` is the (b, Q tile) ordinal b n_q + qt: the task waits until every
 * earlier (b, Q tile) of head h has been added. Per element that is the
 * reference's sequence of additions (dconv_w zeroed first), whatever thread
 * runs which tile. No deadlock: dq tasks are handed out in ascending
 * (b, Q tile) order, so every earlier turn belongs to a task that a running
 * thread has already taken, and the earliest unfinished one never waits.
 * The one-pass tasks (b, kv head), b outer, merge a head's Q tiles after
 * the head: the earlier turns belong to the same kv head of batches before
 * b, tasks taken earlier, and the task of the smallest b never waits.
 */
static void ta_cpu_dw_merge(const ta_plan *plan, const ta_bwd_args *a, TA_CPU_TASK_COUNTER *next,
                            float *lo, int32_t h, int64_t turn, const float *r, int add) {
    const size_t n_w = (size_t)plan->p.conv_q * (size_t)plan->p.conv_k;
    float *dw = a->dconv_w + (size_t)h * n_w; /* [c_q, c_k] of head h: the hi words */
    float *dw_lo = lo + (size_t)h * n_w;
    size_t n;
    ta_cpu_turn_wait(next, turn);
    for (n = 0; add && n < n_w; ++n)
        ta_sum2_add(dw + n, dw_lo + n, 1.0f, r[n]);
    TA_CPU_TURN_STORE(next, turn + 1);
}

/* An MTA backward task: pass 1 (b, kv head, a group of K tiles), or pass 2
 * (b, Q tile, h), numbered (b, Q tile) ascending with the heads inside, which
 * computes R(b, qt) in its slab and merges it into dconv_w[h] in order; or,
 * in one pass (run->one_pass), (b, kv head) with b outer: per head of the
 * group its dq and R(b, qt) of every Q tile, then its merge, and the
 * group's dk, dv. */
static void ta_cpu_do_mta_bwd_task(const ta_cpu_run *run, const ta_cpu_slab *slab, int64_t task) {
    const ta_plan *plan = run->plan;
    if (run->one_pass) { /* (b, kv head): every head of the group, all of dq, dk, dv */
        const int32_t b = (int32_t)(task / plan->p.heads_kv);
        const int32_t h_kv = (int32_t)(task % plan->p.heads_kv);
        const int32_t n_q = plan->bwd.num_q_tiles;
        const size_t n_w = (size_t)plan->p.conv_q * (size_t)plan->p.conv_k;
        int32_t g, qt;
        for (g = 0; g < plan->group; ++g) { /* then head h's R(b, qt), Q tiles ascending */
            const int32_t h = h_kv * plan->group + g;
            run->kern->mta_bwd1(plan, run->ba, &slab->mta, b, h_kv, g);
            for (qt = 0; qt < n_q; ++qt)
                ta_cpu_dw_merge(plan, run->ba, slab->dw_turn + h, slab->dw_lo, h,
                                (int64_t)b * n_q + qt, slab->mta.dw_r + (size_t)qt * n_w,
                                slab->mta.dw_r_add[qt]);
        }
    } else if (task < run->n_dkdv) { /* pass 1: (b, kv head, a group of K tiles) */
        const int64_t n_bhkv = (int64_t)plan->p.batch * plan->p.heads_kv;
        const int64_t bh = task % n_bhkv;
        const int32_t kt = (int32_t)(task / n_bhkv) * run->k_group;
        const int32_t kt_end =
            kt + run->k_group < plan->bwd.num_k_tiles ? kt + run->k_group : plan->bwd.num_k_tiles;
        run->kern->dkdv.mta(plan, run->ba, &slab->mta, (int32_t)(bh / plan->p.heads_kv),
                            (int32_t)(bh % plan->p.heads_kv), kt, kt_end);
    } else { /* pass 2: (b, Q tile) ascending, heads inside */
        const int64_t rest = task - run->n_dkdv, turn = rest / plan->p.heads_q;
        const int32_t h = (int32_t)(rest % plan->p.heads_q);
        const int32_t b = (int32_t)(turn / plan->bwd.num_q_tiles);
        const int32_t qt = (int32_t)(turn % plan->bwd.num_q_tiles);
        const int add = run->kern->dq.mta(plan, run->ba, &slab->mta, b, h, qt);
        ta_cpu_dw_merge(plan, run->ba, slab->dw_turn + h, slab->dw_lo, h, turn, slab->mta.dw_sum,
                        add);
    }
}

/*
 * A dq task of latent attention's backward, numbered in REF's order: (b, h)
 * outer, Q-tile groups ascending (turn = the number). The task computes dq,
 * its rows' d_alpha pairs (band) and their dq~ and ctx~ rows (projections)
 * (cpu_sdpa_dq_task), waits for its turn (as ta_cpu_dw_merge: tasks are
 * handed out in ascending order, so no deadlock) and adds its shares: the
 * rows' d_alpha hi words to the call's pair, rows ascending, and its rows'
 * weight-gradient terms (kern->lat_dw): REF's sequence
 * (ta_ref_bwd_q_tile_merge).
 */
/* The dq task with number `turn` among the turn-ordered ones: (b, h),
 * its Q tiles [qt, qt_end), which it computes (cpu_sdpa_dq_task) in slab. */
typedef struct ta_cpu_turn_tiles {
    int32_t b, h, qt, qt_end, rows;
} ta_cpu_turn_tiles;

static ta_cpu_turn_tiles ta_cpu_turn_dq(const ta_cpu_run *run, const ta_cpu_slab *slab,
                                        int64_t turn) {
    const ta_plan *plan = run->plan;
    const ta_tiling *t = &plan->bwd;
    const int32_t n_q = t->num_q_tiles, n_groups = (n_q + run->q_group - 1) / run->q_group;
    const int64_t bh = turn / n_groups;
    ta_cpu_turn_tiles tt;
    tt.b = (int32_t)(bh / plan->p.heads_q), tt.h = (int32_t)(bh % plan->p.heads_q);
    tt.qt = (int32_t)(turn % n_groups) * run->q_group;
    tt.qt_end = tt.qt + run->q_group < n_q ? tt.qt + run->q_group : n_q;
    tt.rows = ta_tile_row_eff_end(t, tt.qt_end - 1) - ta_tile_row_eff_begin(t, tt.qt);
    run->kern->dq.sdpa(plan, run->ba, &slab->dq, tt.b, tt.h, tt.qt, tt.qt_end);
    return tt;
}

TA_CPU_NOINLINE static void ta_cpu_sums_dq_task(const ta_cpu_run *run, const ta_cpu_slab *slab,
                                                int64_t turn) {
    const ta_plan *plan = run->plan;
    const ta_cpu_turn_tiles tt = ta_cpu_turn_dq(run, slab, turn);
    int32_t r;
    ta_cpu_turn_wait(slab->sum_turn, turn);
    for (r = 0; slab->da_g && r < tt.rows; ++r)
        ta_sum2_add(slab->da_g, slab->da_g + 1, 1.0f, slab->dq.da_hi[r]);
    if (plan->p.latent_dim > 0)
        run->kern->lat_dw(plan, run->ba, &slab->dq, &slab->lat_sums, tt.b, tt.h, tt.qt,
                          tt.qt_end);
    TA_CPU_TURN_STORE(slab->sum_turn, turn + 1);
}

/* Runs task number `task` of the call. */
static void ta_cpu_do_task(const ta_cpu_run *run, const ta_cpu_slab *slab, int64_t task) {
    const ta_plan *plan = run->plan;
    const ta_tiling *t = run->fa ? &plan->fwd : &plan->bwd;
    const int32_t n_hp = plan->p.heads_q / run->h_pack; /* head packs per batch entry */
    const int64_t n_bh = (int64_t)plan->p.batch * n_hp;
    const int32_t n_q = t->num_q_tiles;
    const int32_t n_q_groups = (n_q + run->q_group - 1) / run->q_group;
    if (plan->has_conv && !run->fa) {
        ta_cpu_do_mta_bwd_task(run, slab, task);
        return;
    }
    if (task < run->n_dkdv) { /* backward, dk/dv */
        const int64_t n_bhkv = (int64_t)plan->p.batch * plan->p.heads_kv;
        const int64_t bh = task % n_bhkv;
        const int32_t kt = (int32_t)(task / n_bhkv) * run->k_group;
        const int32_t kt_end =
            kt + run->k_group < t->num_k_tiles ? kt + run->k_group : t->num_k_tiles;
        run->kern->dkdv.sdpa(plan, run->ba, &slab->dkdv, (int32_t)(bh / plan->p.heads_kv),
                             (int32_t)(bh % plan->p.heads_kv), kt, kt_end);
    } else if (ta_cpu_bwd_turns(plan, run->fa == NULL)) { /* dq, then the call sums in turn */
        ta_cpu_sums_dq_task(run, slab, task - run->n_dkdv);
    } else { /* forward, or backward dq: q_group Q tiles of one (b, h) (forward: h_pack heads) */
        /* several threads: last Q groups first across all (b, h) (the longest
         * under a causal mask first, for balance); one thread: (b, h) outer,
         * so consecutive tasks share the same K and V rows (cache reuse).
         * Split-K: a unit's n parts are consecutive tasks */
        const int32_t n_parts = run->fa && t->num_splits > 1 ? t->num_splits : 1;
        const int64_t rest = (task - run->n_dkdv) / n_parts;
        const int32_t split = n_parts > 1 ? (int32_t)((task - run->n_dkdv) % n_parts) : -1;
        const int64_t bh = run->n_threads > 1 ? rest % n_bh : rest / n_q_groups;
        const int32_t qg = (int32_t)(run->n_threads > 1 ? rest / n_bh : rest % n_q_groups);
        const int32_t qt = (n_q_groups - 1 - qg) * run->q_group;
        const int32_t qt_end = qt + run->q_group < n_q ? qt + run->q_group : n_q;
        const int32_t b = (int32_t)(bh / n_hp), h = (int32_t)(bh % n_hp) * run->h_pack;
        if (run->fa && plan->has_conv)
            run->kern->fwd.mta(plan, run->fa, &slab->fwd, b, h, qt, qt_end, split);
        else if (run->fa)
            run->kern->fwd.sdpa(plan, run->fa, &slab->fwd, b, h, qt, qt_end, split);
        else
            run->kern->dq.sdpa(plan, run->ba, &slab->dq, b, h, qt, qt_end);
        /* the unit's last part in (acquire: every other part's stores seen) */
        if (split >= 0 &&
            TA_CPU_COUNT_DONE(slab->splits.done + ta_cpu_split_unit(plan, run->h_pack, b, h, qt)) ==
                n_parts - 1)
            run->kern->fwd.merge(plan, run->fa, &slab->fwd, b, h, qt);
    }
}

/* One thread's share: its slab, then tasks from the shared counter until none
 * is left (dynamic scheduling; any assignment gives the same bits). */
static void ta_cpu_worker(ta_cpu_run *run, int32_t tid) {
    ta_cpu_slab slab;
    size_t total;
    int64_t task;
    (void)ta_cpu_layout(run->plan, run->fa == NULL, run->n_threads, run->workspace, tid, &slab,
                        &total);
    while ((task = TA_CPU_TASK_TAKE(&run->next)) < run->n_tasks)
        ta_cpu_do_task(run, &slab, task);
}

/*
 * All tasks of a call on n_threads threads. One thread: no parallel region at
 * all. Several: one `omp parallel`, tasks handed out by an integer counter
 * rather than `omp for`: LLVM's libomp allocates heap memory in every
 * worksharing loop (measured: 8 allocations per `schedule(static)` loop, 634
 * per `schedule(dynamic)` loop of 100 iterations on 2 threads), and both
 * runtimes allocate in every parallel region of one thread (libgomp 1,
 * libomp 2); a plain parallel region of a fixed team size allocates nothing
 * once the pool exists, in either runtime.
 */
static void ta_cpu_parallel(ta_cpu_run *run) {
#ifdef _OPENMP
    const int n = run->n_threads;
    if (n > 1) {
        TA_OMP("omp parallel num_threads(n)")
        ta_cpu_worker(run, (int32_t)omp_get_thread_num());
        return;
    }
#endif
    ta_cpu_worker(run, 0);
}

/* tasks: 1 for the caller-run tasks, which keep the MTA backward's two passes. */
static ta_status ta_cpu_start(ta_cpu_run *run, const ta_plan *plan, int backward, void *workspace,
                              int32_t n_threads, int tasks) {
    ta_cpu_slab probe;
    size_t total;
    const ta_tiling *t = backward ? &plan->bwd : &plan->fwd;
    ta_status st;
    int64_t n_bh;
    run->plan = plan;
    run->workspace = workspace;
    run->kern = ta_cpu_kernels_for(ta_cpu_isa_resolve()); /* reads TA_CPU_ISA once */
    run->n_threads = n_threads;
    run->q_group = plan->has_conv && backward ? 1 : ta_cpu_q_group(plan, t, run->n_threads);
    run->k_group = backward ? ta_cpu_dkdv_group(plan, run->n_threads) : 1;
    run->h_pack = backward ? 1 : ta_cpu_head_pack(plan, run->n_threads);
    n_bh = (int64_t)plan->p.batch * (plan->p.heads_q / run->h_pack);
    run->n_dkdv = backward ? (int64_t)plan->p.batch * plan->p.heads_kv *
                                 ((t->num_k_tiles + run->k_group - 1) / run->k_group)
                           : 0;
    run->n_tasks = run->n_dkdv + n_bh * ((t->num_q_tiles + run->q_group - 1) / run->q_group) *
                                     (!backward && t->num_splits > 1 ? t->num_splits : 1);
    run->one_pass = backward && !tasks && ta_cpu_mta_one_pass(plan, n_threads);
    if (run->one_pass) { /* (b, kv head), b outer: the dconv_w merge's order */
        run->n_dkdv = 0;
        run->n_tasks = (int64_t)plan->p.batch * plan->p.heads_kv;
    }
    TA_CPU_TASK_INIT(&run->next);
    st = ta_cpu_layout(plan, backward, run->n_threads, NULL, 0, &probe, &total);
    return st;
}

/* Split-K: every unit's count of finished parts to 0 (before the tasks).
 * Out of line: its slab stays off the tasks' stack path. */
TA_CPU_NOINLINE static void ta_cpu_splits_begin(const ta_plan *plan, void *workspace,
                                                int32_t n_threads) {
    ta_cpu_slab slab; /* thread 0's: the split-K regions' pointers */
    size_t total;
    (void)ta_cpu_layout(plan, 0, n_threads, workspace, 0, &slab, &total);
    ta_cpu_splits_reset(&slab.splits);
}

/* Forward: one task per (b, h, group of Q tiles); split-K: per (unit, part). */
static ta_status ta_cpu_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace,
                            void *stream) {
    ta_cpu_run run;
    const ta_status st = ta_cpu_start(&run, plan, 0, workspace, ta_cpu_threads(plan), 0);
    (void)stream;
    if (st != TA_OK) return st;
    run.fa = a;
    run.ba = NULL;
    if (plan->fwd.num_splits > 1) ta_cpu_splits_begin(plan, workspace, run.n_threads);
    ta_cpu_parallel(&run);
    return TA_OK;
}

/* The backward's call sums in the regions after the slabs: before the tasks
 * (begin = 1) to zero with their turn counters at 0 (the MTA conv's dconv_w
 * pairs; the band's d_alpha pair; the projections' weight gradients, both
 * words, and their partials), after them (begin = 0) the results out. */
TA_CPU_NOINLINE static void ta_cpu_bwd_sums(const ta_plan *plan, const ta_bwd_args *a,
                                            void *workspace, int32_t n_threads, int begin) {
    ta_cpu_slab slab; /* thread 0's: the shared regions' pointers */
    size_t total, n;
    int32_t h;
    (void)ta_cpu_layout(plan, 1, n_threads, workspace, 0, &slab, &total);
    if (plan->has_conv && !begin && a->accumulate) /* the lo words back to the caller */
        memcpy(a->dconv_w_lo, slab.dw_lo, plan->n_conv * sizeof(float));
    if (!begin) {
        if (slab.da_g) *a->d_alpha = slab.da_g[0]; /* the pair's hi word */
        return;
    }
    if (plan->has_conv) { /* the pairs (dconv_w, dw_lo) = 0 (accumulate: the caller's
                           * pair, continued), then the in-order merge */
        for (n = 0; n < plan->n_conv; ++n) {
            if (!a->accumulate) a->dconv_w[n] = 0.0f;
            slab.dw_lo[n] = a->accumulate ? a->dconv_w_lo[n] : 0.0f;
        }
        for (h = 0; h < plan->p.heads_q; ++h)
            TA_CPU_TASK_INIT(slab.dw_turn + h);
    }
    if (slab.da_g) slab.da_g[0] = slab.da_g[1] = 0.0f; /* the band */
    if (slab.lat_sums.dwq_lo) { /* the projections: (dw, lo) pairs = 0, partials +0 */
        const ta_cpu_lat_sums *ls = &slab.lat_sums;
        const size_t n_q = plan->n_wq / (size_t)plan->p.heads_q;
        const size_t n_v = plan->n_wv / (size_t)plan->p.heads_q;
        for (n = 0; n < plan->n_wq; ++n)
            a->dw_qlat[n] = ls->dwq_lo[n] = 0.0f;
        for (n = 0; n < plan->n_wv; ++n)
            a->dw_vup[n] = ls->dwv_lo[n] = 0.0f;
        memset(ls->dwq_part, 0, n_q * sizeof(float));
        memset(ls->dwv_part, 0, n_v * sizeof(float));
    }
    if (slab.sum_turn) TA_CPU_TASK_INIT(slab.sum_turn); /* turn: task 0 */
}

/* Backward: the dk/dv tasks, then the dq tasks (see ta_cpu_run). */
static ta_status ta_cpu_bwd(const ta_plan *plan, const ta_bwd_args *a, void *workspace,
                            void *stream) {
    ta_cpu_run run;
    const ta_status st = ta_cpu_start(&run, plan, 1, workspace, ta_cpu_threads(plan), 0);
    (void)stream;
    if (st != TA_OK) return st;
    run.fa = NULL;
    run.ba = a;
    ta_cpu_bwd_sums(plan, a, workspace, run.n_threads, 1);
    ta_cpu_parallel(&run);
    ta_cpu_bwd_sums(plan, a, workspace, run.n_threads, 0);
    return TA_OK;
}

/* ---------------------------------------------------------------------- */
/* Caller-run tasks (include/tileattn.h; docs/cpu.md section 3a)            */
/* ---------------------------------------------------------------------- */

/* "tileattn tasks", version 1: a shared workspace that a prepare call filled. */
#define TA_CPU_TASKS_MAGIC UINT64_C(0x7461736b73000001)
/* tensors of a backward (21: the accumulating mode's lo words included; a forward
 * has 11), the rotary tables and positions (4), the shared workspace */
#define TA_CPU_TASKS_SPANS 26

/* A byte range the scratch of a task must not overlap. */
typedef struct ta_cpu_span {
    const void *ptr;
    size_t bytes;
} ta_cpu_span;

/*
 * The shared workspace of a caller-run call:
 *
 *   +------------------------------+-------------------------------+-------------------+
 *   | header (this struct)         | dw_sum [B n_q H][c_q c_k] f32 | dw_add [B n_q H]  |
 *   +------------------------------+-------------------------------+-------------------+
 *     the validated call            MTA backward only: each dq task's R(b, qt) and
 *                                    whether it sees a K tile (phase 1 merges them)
 *   latent attention's backward instead: | da_rows [B H S_q] | lat_g, lat_ctx [B H S_q][L] |
 *   each row's d_alpha (band), dq~ and ctx~ (projections), summed by phase 1
 *   a split-K forward instead: | part_o | part_lse | done |  (ta_cpu_splits: the
 *   parts and each unit's count of finished parts, as after the OpenMP slabs)
 *
 * The header holds copies of the plan and the arguments (the caller's structs
 * may go), the task numbering (the OpenMP path's ta_cpu_run, whose plan and
 * args point into the header), and a counter of finished tasks per phase.
 */
typedef struct ta_cpu_tasks_hdr {
    uint64_t magic;   /* TA_CPU_TASKS_MAGIC once prepared */
    const void *self; /* the address it was prepared at */
    ta_plan plan;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_cpu_run run;
    int32_t num_phases;
    int64_t num_tasks[TA_TASK_PHASES_MAX];
    size_t scratch_bytes;
    ta_cpu_span spans[TA_CPU_TASKS_SPANS];
    int n_spans;
    float *dw_sum;   /* MTA backward: [B n_q H][n_w], slot (b n_q + qt) H + h */
    int32_t *dw_add; /* [B n_q H] */
    /* latent attention's backward: each row's share of the call sums, slot
     * (b H + h) S_q + r: its d_alpha hi word (band) [B H S_q]; its dq~ and
     * ctx~ (projections) [B H S_q][L] each (phase 1 sums them) */
    float *da_rows, *lat_g, *lat_ctx;
    ta_cpu_splits splits; /* a split-K forward's parts (no split-K: NULL) */
    TA_CPU_TASK_COUNTER done[TA_TASK_PHASES_MAX];
} ta_cpu_tasks_hdr;

/* Workers the caller expects: num_threads, 0 = 1 (sets the task grouping only). */
static int32_t ta_cpu_task_workers(const ta_plan *plan) {
    return plan->p.num_threads > 0 ? plan->p.num_threads : 1;
}

/* The shared workspace's one layout routine (base NULL: size only). */
static ta_status ta_cpu_tasks_layout(const ta_plan *plan, int backward, void *base,
                                     ta_cpu_tasks_hdr **hdr, size_t *bytes) {
    ta_ws_cursor c;
    float *dw_sum = NULL, *da_rows = NULL, *lat_g = NULL, *lat_ctx = NULL;
    int32_t *dw_add = NULL;
    ta_cpu_splits sp;
    memset(&sp, 0, sizeof sp);
    ta_ws_begin(&c, base);
    *hdr = TA_WS_TAKE(&c, ta_cpu_tasks_hdr, 1);
    if (!backward) ta_cpu_carve_splits(plan, ta_cpu_task_workers(plan), &c, &sp);
    if (ta_cpu_bwd_turns(plan, backward)) {
        size_t rows, floats;
        if (!ta_mul_size((size_t)plan->p.batch * (size_t)plan->p.heads_q, (size_t)plan->p.seq_q,
                         &rows) ||
            !ta_mul_size(rows, (size_t)plan->p.latent_dim, &floats))
            return TA_ERR_OVERFLOW;
        if (plan->stages.score == TA_SCORE_RBAND) da_rows = TA_WS_TAKE(&c, float, rows);
        if (floats > 0) {
            lat_g = TA_WS_TAKE(&c, float, floats);
            lat_ctx = TA_WS_TAKE(&c, float, floats);
        }
    }
    if (backward && plan->has_conv) {
        const size_t n_w = (size_t)plan->p.conv_q * (size_t)plan->p.conv_k;
        size_t slots, floats;
        if (!ta_mul_size((size_t)plan->p.batch * (size_t)plan->bwd.num_q_tiles,
                         (size_t)plan->p.heads_q, &slots) ||
            !ta_mul_size(slots, n_w, &floats))
            return TA_ERR_OVERFLOW;
        dw_sum = TA_WS_TAKE(&c, float, floats);
        dw_add = TA_WS_TAKE(&c, int32_t, slots);
    }
    if (c.overflow) return TA_ERR_OVERFLOW;
    if (base) {
        (*hdr)->dw_sum = dw_sum, (*hdr)->dw_add = dw_add;
        (*hdr)->da_rows = da_rows, (*hdr)->lat_g = lat_g, (*hdr)->lat_ctx = lat_ctx;
        (*hdr)->splits = sp;
    }
    *bytes = c.used;
    return TA_OK;
}

ta_status ta_cpu_tasks_plan(const ta_plan *plan, int backward, ta_task_plan *out) {
    const int32_t n = ta_cpu_task_workers(plan);
    ta_cpu_tasks_hdr *hdr;
    ta_cpu_slab slab;
    ta_cpu_run run;
    ta_status st;
    memset(out, 0, sizeof *out);
    out->scratch_bytes = ta_cpu_carve_slab(plan, backward, n, 0, NULL, &slab);
    if (out->scratch_bytes == 0) return TA_ERR_OVERFLOW;
    if ((st = ta_cpu_tasks_layout(plan, backward, NULL, &hdr, &out->shared_bytes)) != TA_OK)
        return st;
    if ((st = ta_cpu_start(&run, plan, backward, NULL, n, 1)) != TA_OK) return st;
    out->num_phases = backward && (plan->has_conv || ta_cpu_bwd_turns(plan, backward)) ? 2 : 1;
    out->num_tasks[0] = run.n_tasks;
    if (backward && plan->has_conv) out->num_tasks[1] = plan->p.heads_q; /* the dconv_w merge */
    if (ta_cpu_bwd_turns(plan, backward)) /* per head the weight gradients; d_alpha */
        out->num_tasks[1] = (plan->p.latent_dim > 0 ? plan->p.heads_q : 0) +
                            (plan->stages.score == TA_SCORE_RBAND ? 1 : 0);
    return TA_OK;
}

void ta_cpu_tasks_prepare(const ta_plan *plan, const ta_fwd_args *fa, const ta_bwd_args *ba,
                          const ta_extents *ex, void *shared) {
    const int backward = fa == NULL;
    const size_t n_w = plan->n_conv * sizeof(float);
    const size_t n_lse = plan->n_lse * sizeof(float), n_sl = (size_t)plan->p.batch * 4;
    const int lat = plan->p.latent_dim > 0;
    ta_cpu_tasks_hdr *h;
    ta_task_plan tp;
    size_t bytes;
    int32_t ph;
    (void)ta_cpu_tasks_plan(plan, backward, &tp); /* validated: cannot fail */
    (void)ta_cpu_tasks_layout(plan, backward, shared, &h, &bytes);
    h->magic = 0;
    h->self = shared;
    h->plan = *plan;
    memset(&h->fa, 0, sizeof h->fa);
    memset(&h->ba, 0, sizeof h->ba);
    if (fa) h->fa = *fa;
    if (ba) h->ba = *ba;
    (void)ta_cpu_start(&h->run, &h->plan, backward, NULL, ta_cpu_task_workers(plan), 1);
    h->run.fa = fa ? &h->fa : NULL;
    h->run.ba = ba ? &h->ba : NULL;
    h->num_phases = tp.num_phases;
    h->scratch_bytes = tp.scratch_bytes;
    for (ph = 0; ph < TA_TASK_PHASES_MAX; ++ph) {
        h->num_tasks[ph] = tp.num_tasks[ph];
        TA_CPU_TASK_INIT(&h->done[ph]);
    }
    ta_cpu_splits_reset(&h->splits);
    {
        const ta_cpu_span fwd[] = {{fa ? fa->q : NULL, ex->q},
                                   {fa ? fa->k : NULL, ex->k},
                                   {fa ? fa->v : NULL, ex->v},
                                   {fa ? fa->o : NULL, ex->o},
                                   {fa ? fa->lse : NULL, n_lse},
                                   {fa ? fa->conv_w : NULL, n_w},
                                   {fa ? fa->seqlens_k : NULL, n_sl},
                                   {fa && plan->p.q_history > 0 ? fa->q_hist : NULL, ex->q_hist},
                                   {plan->block_table, n_sl * (size_t)plan->p.kv_max_blocks},
                                   {fa && lat ? fa->w_qlat : NULL, plan->n_wq * sizeof(float)},
                                   {fa && lat ? fa->w_vup : NULL, plan->n_wv * sizeof(float)}};
        const ta_cpu_span bwd[] = {
            {ba ? ba->q : NULL, ex->q},       {ba ? ba->k : NULL, ex->k},
            {ba ? ba->v : NULL, ex->v},       {ba ? ba->o : NULL, ex->o},
            {ba ? ba->d_o : NULL, ex->d_o},   {ba ? ba->lse : NULL, n_lse},
            {ba ? ba->conv_w : NULL, n_w},    {ba ? ba->seqlens_k : NULL, n_sl},
            {ba ? ba->dq : NULL, ex->dq},     {ba ? ba->dk : NULL, ex->dk},
            {ba ? ba->dv : NULL, ex->dv},     {ba ? ba->dconv_w : NULL, n_w},
            {ba && lat ? ba->w_qlat : NULL, plan->n_wq * sizeof(float)},
            {ba && lat ? ba->w_vup : NULL, plan->n_wv * sizeof(float)},
            {ba && lat ? ba->dw_qlat : NULL, plan->n_wq * sizeof(float)},
            {ba && lat ? ba->dw_vup : NULL, plan->n_wv * sizeof(float)},
            {ba && plan->stages.score == TA_SCORE_RBAND ? ba->d_alpha : NULL, sizeof(float)},
            {ba && ba->accumulate ? ba->dq_lo : NULL, ex->dq}, /* f32 extents then */
            {ba && ba->accumulate ? ba->dk_lo : NULL, ex->dk},
            {ba && ba->accumulate ? ba->dv_lo : NULL, ex->dv},
            {ba && ba->accumulate && plan->has_conv ? ba->dconv_w_lo : NULL, n_w}};
        const ta_cpu_span *src = backward ? bwd : fwd;
        const int n = backward ? 21 : 11;
        const ta_cpu_span rope[] = {
            {plan->rope.cos, plan->n_rope * sizeof(float)},
            {plan->rope.sin, plan->n_rope * sizeof(float)},
            {plan->rope.pos_q, (size_t)plan->p.batch * (size_t)plan->p.seq_q * sizeof(int32_t)},
            {plan->rope.pos_k, (size_t)plan->p.batch * (size_t)plan->p.seq_k * sizeof(int32_t)}};
        int i;
        for (i = 0; i < n; ++i)
            h->spans[i] = src[i];
        for (i = 0; i < 4; ++i) /* NULL (skipped) without the rotary stage */
            h->spans[n + i] = rope[i];
        h->spans[n + 4].ptr = shared, h->spans[n + 4].bytes = tp.shared_bytes;
        h->n_spans = n + 5;
    }
    h->magic = TA_CPU_TASKS_MAGIC;
}

/* Phase 1 of the MTA backward, head h: per weight the pair (dconv_w[h], lo) =
 * 0 (accumulate: the caller's pair, args.dconv_w_lo), then + R(b, qt) for every (b, Q tile) that sees a K tile, ascending:
 * ta_cpu_dw_merge's sequence per element (the weights are independent, so
 * the lo word is a local here, no workspace). */
static void ta_cpu_task_dw_merge(const ta_cpu_tasks_hdr *h, int32_t head) {
    const ta_plan *plan = &h->plan;
    const size_t n_w = (size_t)plan->p.conv_q * (size_t)plan->p.conv_k;
    const int64_t turns = (int64_t)plan->p.batch * plan->bwd.num_q_tiles;
    float *dw = h->ba.dconv_w + (size_t)head * n_w; /* [c_q, c_k] of head h */
    int64_t turn;
    size_t n;
    float *dw_lo = h->ba.accumulate ? h->ba.dconv_w_lo + (size_t)head * n_w : NULL;
    for (n = 0; n < n_w; ++n) {
        float hi = dw_lo ? dw[n] : 0.0f, lo = dw_lo ? dw_lo[n] : 0.0f; /* accumulate: continued */
        for (turn = 0; turn < turns; ++turn) {
            const size_t slot = (size_t)turn * (size_t)plan->p.heads_q + (size_t)head;
            if (h->dw_add[slot]) ta_sum2_add(&hi, &lo, 1.0f, h->dw_sum[slot * n_w + n]);
        }
        dw[n] = hi;
        if (dw_lo) dw_lo[n] = lo;
    }
}

/* Phase 0's dq task of latent attention's backward: dq, then its rows'
 * shares into their slots (no turn: phase 1 adds them in REF's order). */
static void ta_cpu_task_sums_dq(const ta_cpu_tasks_hdr *h, const ta_cpu_slab *slab, int64_t turn) {
    const ta_plan *plan = &h->plan;
    const ta_cpu_turn_tiles tt = ta_cpu_turn_dq(&h->run, slab, turn);
    const size_t lat = (size_t)plan->p.latent_dim;
    const size_t slot0 = ((size_t)tt.b * (size_t)plan->p.heads_q + (size_t)tt.h) *
                             (size_t)plan->p.seq_q +
                         (size_t)ta_tile_row_eff_begin(&plan->bwd, tt.qt);
    int32_t i;
    for (i = 0; i < tt.rows; ++i) {
        if (h->da_rows) h->da_rows[slot0 + (size_t)i] = slab->dq.da_hi[i];
        if (lat == 0) continue;
        memcpy(h->lat_g + (slot0 + (size_t)i) * lat, slab->dq.dq_acc + (size_t)i * slab->dq.dm.d_pad,
               lat * sizeof(float));
        memcpy(h->lat_ctx + (slot0 + (size_t)i) * lat,
               slab->dq.lat.ctx_hi + (size_t)i * slab->dq.dm.dv_pad, lat * sizeof(float));
    }
}

/* Phase 1 of latent attention's backward: tasks [0, H) with the projections
 * head h's weight gradients (kern->lat_dw_head), the last one with the band
 * d_alpha = the pair (0, 0) + each row's share, (b, h, row) ascending: per
 * sum REF's sequence (ta_ref_bwd_q_tile_merge after ta_ref_bwd_begin). */
static void ta_cpu_task_sums_merge(const ta_cpu_tasks_hdr *h, int64_t task) {
    const ta_plan *plan = &h->plan;
    if (plan->p.latent_dim > 0 && task < plan->p.heads_q) {
        h->run.kern->lat_dw_head(plan, &h->ba, h->lat_g, h->lat_ctx, (int32_t)task);
    } else {
        const size_t n = (size_t)plan->p.batch * (size_t)plan->p.heads_q * (size_t)plan->p.seq_q;
        float hi = 0.0f, lo = 0.0f;
        size_t i;
        for (i = 0; i < n; ++i)
            ta_sum2_add(&hi, &lo, 1.0f, h->da_rows[i]);
        *h->ba.d_alpha = hi;
    }
}

ta_status ta_cpu_task_run(void *shared, int32_t phase, int64_t task, void *scratch,
                          size_t scratch_bytes) {
    ta_cpu_tasks_hdr *h = (ta_cpu_tasks_hdr *)shared;
    const ta_plan *plan;
    ta_cpu_slab slab;
    int i;
    if (!shared) return TA_ERR_NULL_ARG;
    if (((uintptr_t)shared & (TA_WORKSPACE_ALIGN - 1)) != 0) return TA_ERR_WORKSPACE_ALIGN;
    if (h->magic != TA_CPU_TASKS_MAGIC || h->self != shared) return TA_ERR_BAD_ARG;
    if (phase < 0 || phase >= h->num_phases || task < 0 || task >= h->num_tasks[phase])
        return TA_ERR_BAD_ARG;
    if (phase > 0 && TA_CPU_TURN_LOAD(&h->done[phase - 1]) < h->num_tasks[phase - 1])
        return TA_ERR_BAD_ARG; /* the phase before is not finished */
    if (!scratch) return TA_ERR_NULL_ARG;
    if (scratch_bytes < h->scratch_bytes) return TA_ERR_WORKSPACE_SIZE;
    if (((uintptr_t)scratch & (TA_WORKSPACE_ALIGN - 1)) != 0) return TA_ERR_WORKSPACE_ALIGN;
    for (i = 0; i < h->n_spans; ++i) {
        const uintptr_t a = (uintptr_t)scratch, b = (uintptr_t)h->spans[i].ptr;
        if (b && h->spans[i].bytes && a < b + h->spans[i].bytes && b < a + h->scratch_bytes)
            return TA_ERR_BAD_ARG;
    }
    plan = &h->plan;
    if (phase == 1 && plan->has_conv) {
        ta_cpu_task_dw_merge(h, (int32_t)task);
    } else if (phase == 1) {
        ta_cpu_task_sums_merge(h, task);
    } else {
        (void)ta_cpu_carve_slab(plan, h->run.ba != NULL, h->run.n_threads, 0, scratch, &slab);
        slab.dw_turn = NULL;
        ta_cpu_slab_splits(&h->splits, &slab); /* the call's split-K parts */
        if (h->run.ba && plan->has_conv && task >= h->run.n_dkdv) {
            /* MTA dq task (b, Q tile, head): its R(b, qt) into its slot, no merge */
            const int64_t turn = (task - h->run.n_dkdv) / plan->p.heads_q;
            const int32_t head = (int32_t)((task - h->run.n_dkdv) % plan->p.heads_q);
            const size_t n_w = (size_t)plan->p.conv_q * (size_t)plan->p.conv_k;
            const size_t slot = (size_t)turn * (size_t)plan->p.heads_q + (size_t)head;
            h->dw_add[slot] = h->run.kern->dq.mta(plan, &h->ba, &slab.mta,
                                                  (int32_t)(turn / plan->bwd.num_q_tiles), head,
                                                  (int32_t)(turn % plan->bwd.num_q_tiles));
            memcpy(h->dw_sum + slot * n_w, slab.mta.dw_sum, n_w * sizeof(float));
        } else if (ta_cpu_bwd_turns(plan, h->run.ba != NULL) && task >= h->run.n_dkdv) {
            ta_cpu_task_sums_dq(h, &slab, task - h->run.n_dkdv);
        } else {
            ta_cpu_do_task(&h->run, &slab, task);
        }
    }
    (void)TA_CPU_TASK_TAKE(&h->done[phase]); /* one more finished task of this phase */
    return TA_OK;
}

const ta_backend_ops ta_cpu_ops = {ta_cpu_available,
                                   ta_cpu_supports,
                                   ta_cpu_fwd_size,
                                   ta_cpu_bwd_size,
                                   ta_cpu_fwd,
                                   ta_cpu_bwd,
                                   1,
                                   NULL /* nothing to tune */,
                                   ta_ref_merge /* the host merge loop (src/ta_merge.h) */,
                                   ta_ref_bwd_finish /* the host loop: one pass, no threads */};
