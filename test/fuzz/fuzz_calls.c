/*
 * libFuzzer harness: small full calls, REF against CPU bit for bit.
 *
 * Each input gives a small problem (B <= 2, H <= 4, S <= 40, D <= 40, every dtype,
 * causal, windows, seqlens_k, MTA conv, tile sizes, [B,S,H,D] strides, 1-3 CPU
 * threads) and a seed for the input values (finite, |x| <= 2: the NaN and
 * overflow semantics of issue 15 items 1-2 are still open, so this harness stays
 * inside the finite range where bit-identity is specified). Then:
 *   - REF and CPU size queries agree on the status;
 *   - ta_fwd on REF and on CPU, then ta_bwd on both (from REF's o and lse):
 *     o, lse, dq, dk, dv, dconv_w equal bit for bit;
 *   - the same forward and backward as caller-run CPU tasks (ta_*_task_plan,
 *     ta_*_tasks_prepare, ta_task_run on this thread, each phase's tasks in an
 *     order shuffled from the seed, one scratch buffer between canaries with
 *     random contents): equal bit for bit to ta_fwd / ta_bwd on CPU;
 *   - every buffer sits between canaries that stay intact, inputs stay unchanged,
 *     and the workspace starts with random contents (results do not depend on it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tileattn.h"

enum {
    B_Q,
    B_K,
    B_V,
    B_CONV,
    B_SEQL,
    B_DO,
    B_N_IN, /* inputs */
    B_O = B_N_IN,
    B_LSE,
    B_DQ,
    B_DK,
    B_DV,
    B_DCONV,
    B_WS,
    B_SCRATCH, /* caller-run tasks */
    B_N
};
typedef struct bufs {
    fz_buf b[B_N];
} bufs;

static void make_problem(fz *f, ta_problem *p, ta_strides *bshd) {
    fz_small_problem(f, p, 40, 40);
    if (fz_range(f, 0, 3) == 0) p->scale = (float)fz_range(f, -40, 40) / 16.0f;
    *bshd = fz_range(f, 0, 3) == 0 ? (ta_strides){1, 1, 1} : (ta_strides){0, 0, 0};
}

/* [B, S, H, D] strides of a [B, heads, S, dim] tensor (no gaps), or zeros. */
static ta_strides strides_of(const ta_strides *bshd, int32_t heads, int32_t seq, int32_t dim) {
    ta_strides s = {0, 0, 0};
    if (bshd->batch) {
        s.batch = (int64_t)seq * heads * dim;
        s.head = dim;
        s.seq = (int64_t)heads * dim;
    }
    return s;
}

static void fill(uint64_t *seed, void *buf, ta_dtype dt, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        /* a float in [-2, 2), rounded to dt by truncating its bits (still finite) */
        const float x = (float)((int64_t)(fz_mix(seed) >> 40) - (1 << 23)) / (float)(1 << 22);
        uint32_t u;
        memcpy(&u, &x, 4);
        if (dt == TA_F32)
            memcpy((float *)buf + i, &x, 4);
        else if (dt == TA_BF16)
            ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
        else { /* f16 from the value's sign and a small exponent/mantissa */
            const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
            ((uint16_t *)buf)[i] = (uint16_t)(sign | (uint16_t)(fz_mix(seed) % 0x4000u));
        }
    }
}

static int all_guards(const bufs *bs) {
    int i;
    for (i = 0; i < B_N; ++i)
        if (bs->b[i].raw && !fz_guards_intact(&bs->b[i])) return i;
    return -1;
}

static void bufs_free(bufs *bs) {
    int i;
    for (i = 0; i < B_N; ++i)
        fz_buf_free(&bs->b[i]);
}

static void fill_random(unsigned char *buf, size_t bytes, uint64_t *s) {
    size_t i;
    for (i = 0; i + 8 <= bytes; i += 8) {
        const uint64_t r = fz_mix(s);
        memcpy(buf + i, &r, 8);
    }
}

/* Every task of the call prepared in shared (plan tp), phase by phase, each
 * phase's tasks in an order shuffled from *s (Fisher-Yates). */
static ta_status run_tasks(const ta_task_plan *tp, void *shared, void *scratch, uint64_t *s) {
    int32_t ph;
    for (ph = 0; ph < tp->num_phases; ++ph) {
        const int64_t n = tp->num_tasks[ph];
        int64_t *order = (int64_t *)malloc((size_t)n * sizeof(int64_t) + 8), i;
        FZ_CHECK(order != NULL, "out of memory");
        for (i = 0; i < n; ++i)
            order[i] = i;
        for (i = n - 1; i > 0; --i) {
            const int64_t j = (int64_t)(fz_mix(s) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j], order[j] = t;
        }
        for (i = 0; i < n; ++i) {
            const ta_status st = ta_task_run(shared, ph, order[i], scratch, tp->scratch_bytes);
            if (st != TA_OK) {
                free(order);
                return st;
            }
        }
        free(order);
    }
    return TA_OK;
}

/* One backend's forward then backward (from the given o and lse, else its own).
 * tp (CPU only): the forward's and the backward's task plans, run as caller-run
 * tasks (ws is then the shared workspace); NULL: ta_fwd and ta_bwd. */
static void run_backend(const ta_problem *p, ta_backend be, const bufs *in, const ta_strides *bshd,
                        const void *o_in, const float *lse_in, size_t ws_bytes, uint64_t ws_seed,
                        const ta_task_plan *tp, bufs *out, size_t eb, ta_status *st_f,
                        ta_status *st_b) {
    const size_t n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k;
    const size_t n_conv = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
    ta_fwd_args fa;
    ta_bwd_args ba;
    uint64_t s = ws_seed;
    unsigned char *ws;
    memset(out, 0, sizeof *out);
    memset(fz_buf_alloc(&out->b[B_O], n_q * (size_t)p->head_dim_v * eb), 0xFF,
           n_q * (size_t)p->head_dim_v * eb);
    memset(fz_buf_alloc(&out->b[B_LSE], n_q * 4), 0xFF, n_q * 4);
    memset(fz_buf_alloc(&out->b[B_DQ], n_q * (size_t)p->head_dim * eb), 0xFF,
           n_q * (size_t)p->head_dim * eb);
    memset(fz_buf_alloc(&out->b[B_DK], n_k * (size_t)p->head_dim * eb), 0xFF,
           n_k * (size_t)p->head_dim * eb);
    memset(fz_buf_alloc(&out->b[B_DV], n_k * (size_t)p->head_dim_v * eb), 0xFF,
           n_k * (size_t)p->head_dim_v * eb);
    memset(fz_buf_alloc(&out->b[B_DCONV], n_conv * 4), 0xFF, n_conv * 4);
    ws = (unsigned char *)fz_buf_alloc(&out->b[B_WS], ws_bytes);
    fill_random(ws, ws_bytes, &s);
    if (tp) {
        const size_t n = tp[0].scratch_bytes > tp[1].scratch_bytes ? tp[0].scratch_bytes
                                                                   : tp[1].scratch_bytes;
        fill_random((unsigned char *)fz_buf_alloc(&out->b[B_SCRATCH], n), n, &s);
    }
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    fa.q = ba.q = fz_data(&in->b[B_Q]);
    fa.k = ba.k = fz_data(&in->b[B_K]);
    fa.v = ba.v = fz_data(&in->b[B_V]);
    fa.conv_w = ba.conv_w = p->conv_q ? (const float *)fz_data(&in->b[B_CONV]) : NULL;
    fa.seqlens_k = ba.seqlens_k =
        in->b[B_SEQL].raw ? (const int32_t *)fz_data(&in->b[B_SEQL]) : NULL;
    fa.o = fz_data(&out->b[B_O]);
    fa.lse = (float *)fz_data(&out->b[B_LSE]);
    fa.q_strides = ba.q_strides = ba.dq_strides =
        strides_of(bshd, p->heads_q, p->seq_q, p->head_dim);
    fa.k_strides = ba.k_strides = ba.dk_strides =
        strides_of(bshd, p->heads_kv, p->seq_k, p->head_dim);
    fa.v_strides = ba.v_strides = ba.dv_strides =
        strides_of(bshd, p->heads_kv, p->seq_k, p->head_dim_v);
    fa.o_strides = ba.o_strides = ba.d_o_strides =
        strides_of(bshd, p->heads_q, p->seq_q, p->head_dim_v);
    if (tp) {
        *st_f = ta_fwd_tasks_prepare(p, be, &fa, ws, ws_bytes);
        if (*st_f == TA_OK) *st_f = run_tasks(&tp[0], ws, fz_data(&out->b[B_SCRATCH]), &s);
    } else {
        *st_f = ta_fwd(p, be, &fa, ws, ws_bytes, NULL);
    }
    ba.o = o_in ? o_in : fa.o;
    ba.lse = lse_in ? lse_in : fa.lse;
    ba.d_o = fz_data(&in->b[B_DO]);
    ba.dq = fz_data(&out->b[B_DQ]);
    ba.dk = fz_data(&out->b[B_DK]);
    ba.dv = fz_data(&out->b[B_DV]);
    ba.dconv_w = p->conv_q ? (float *)fz_data(&out->b[B_DCONV]) : NULL;
    if (*st_f != TA_OK) {
        *st_b = *st_f;
    } else if (tp) {
        *st_b = ta_bwd_tasks_prepare(p, be, &ba, ws, ws_bytes);
        if (*st_b == TA_OK) *st_b = run_tasks(&tp[1], ws, fz_data(&out->b[B_SCRATCH]), &s);
    } else {
        *st_b = ta_bwd(p, be, &ba, ws, ws_bytes, NULL);
    }
}

static void compare(const bufs *a, const bufs *b, int which, const char *name,
                    const char *what) {
    FZ_CHECK(memcmp(fz_data(&a->b[which]), fz_data(&b->b[which]), a->b[which].bytes) == 0,
             "%s differ in %s", what, name);
}

static void compare_all(const bufs *a, const bufs *b, int conv, const char *what) {
    compare(a, b, B_O, "o", what);
    compare(a, b, B_LSE, "lse", what);
    compare(a, b, B_DQ, "dq", what);
    compare(a, b, B_DK, "dk", what);
    compare(a, b, B_DV, "dv", what);
    if (conv) compare(a, b, B_DCONV, "dconv_w", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    ta_problem p;
    ta_strides bshd;
    bufs in, pristine, ref, cpu, tsk;
    ta_task_plan tp[2];
    size_t ws_f[2] = {0, 0}, ws_b[2] = {0, 0}, ws_bytes, eb, n_q, n_k, n_conv;
    ta_status st[3][2], sq[2][2];
    uint64_t seed;
    int be, i, bad;
    make_problem(&f, &p, &bshd);
    seed = fz_bits(&f, 8);
    for (be = 0; be < 2; ++be) {
        sq[be][0] = ta_fwd_workspace_size(&p, (ta_backend)be, &ws_f[be]);
        sq[be][1] = ta_bwd_workspace_size(&p, (ta_backend)be, &ws_b[be]);
    }
    FZ_CHECK(sq[0][0] == sq[1][0] && sq[0][1] == sq[1][1], "REF and CPU size queries disagree");
    if (sq[0][0] != TA_OK) return 0; /* a refused geometry (blocks too small for the conv) */
    eb = p.dtype == TA_F32 ? 4u : 2u;
    n_q = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    n_k = (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k;
    n_conv = (size_t)p.heads_q * (size_t)p.conv_q * (size_t)p.conv_k;
    memset(&in, 0, sizeof in);
    fill(&seed, fz_buf_alloc(&in.b[B_Q], n_q * (size_t)p.head_dim * eb), p.dtype,
         n_q * (size_t)p.head_dim);
    fill(&seed, fz_buf_alloc(&in.b[B_K], n_k * (size_t)p.head_dim * eb), p.dtype,
         n_k * (size_t)p.head_dim);
    fill(&seed, fz_buf_alloc(&in.b[B_V], n_k * (size_t)p.head_dim_v * eb), p.dtype,
         n_k * (size_t)p.head_dim_v);
    fill(&seed, fz_buf_alloc(&in.b[B_DO], n_q * (size_t)p.head_dim_v * eb), p.dtype,
         n_q * (size_t)p.head_dim_v);
    fill(&seed, fz_buf_alloc(&in.b[B_CONV], n_conv * 4 + 4), TA_F32, n_conv + 1);
    if (fz_range(&f, 0, 1)) {
        int32_t *sl = (int32_t *)fz_buf_alloc(&in.b[B_SEQL], (size_t)p.batch * 4);
        for (i = 0; i < p.batch; ++i)
            sl[i] = fz_range(&f, 0, p.seq_k);
    }
    memset(&pristine, 0, sizeof pristine);
    for (i = 0; i < B_N_IN; ++i)
        if (in.b[i].raw) {
            memcpy(fz_buf_alloc(&pristine.b[i], in.b[i].bytes), fz_data(&in.b[i]), in.b[i].bytes);
        }
    ws_bytes = ws_f[0] > ws_b[0] ? ws_f[0] : ws_b[0];
    run_backend(&p, TA_BACKEND_REF, &in, &bshd, NULL, NULL, ws_bytes, seed, NULL, &ref, eb,
                &st[0][0], &st[0][1]);
    ws_bytes = ws_f[1] > ws_b[1] ? ws_f[1] : ws_b[1];
    /* the CPU backward takes REF's o and lse, as a training step would take its forward's */
    run_backend(&p, TA_BACKEND_CPU, &in, &bshd, fz_data(&ref.b[B_O]),
                (const float *)fz_data(&ref.b[B_LSE]), ws_bytes, ~seed, NULL, &cpu, eb, &st[1][0],
                &st[1][1]);
    /* the same as caller-run tasks (fz_small_problem leaves num_splits 0: no
     * split-K, which the task mode refuses) */
    FZ_CHECK(ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tp[0]) == TA_OK &&
                 ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp[1]) == TA_OK,
             "task plans refused a problem ta_fwd accepts");
    ws_bytes = tp[0].shared_bytes > tp[1].shared_bytes ? tp[0].shared_bytes : tp[1].shared_bytes;
    run_backend(&p, TA_BACKEND_CPU, &in, &bshd, fz_data(&ref.b[B_O]),
                (const float *)fz_data(&ref.b[B_LSE]), ws_bytes, seed ^ 0x5a5a5a5a5a5a5a5aull, tp,
                &tsk, eb, &st[2][0], &st[2][1]);
    FZ_CHECK(st[0][0] == TA_OK && st[1][0] == TA_OK, "forward refused: REF %d, CPU %d",
             (int)st[0][0], (int)st[1][0]);
    FZ_CHECK(st[0][1] == TA_OK && st[1][1] == TA_OK, "backward refused: REF %d, CPU %d",
             (int)st[0][1], (int)st[1][1]);
    FZ_CHECK(st[2][0] == TA_OK && st[2][1] == TA_OK, "caller-run tasks refused: fwd %d, bwd %d",
             (int)st[2][0], (int)st[2][1]);
    compare_all(&ref, &cpu, p.conv_q > 0, "REF and CPU");
    compare_all(&cpu, &tsk, p.conv_q > 0, "CPU calls and caller-run tasks");
    FZ_CHECK((bad = all_guards(&ref)) < 0, "REF wrote past buffer %d", bad);
    FZ_CHECK((bad = all_guards(&cpu)) < 0, "CPU wrote past buffer %d", bad);
    FZ_CHECK((bad = all_guards(&tsk)) < 0, "caller-run tasks wrote past buffer %d", bad);
    FZ_CHECK((bad = all_guards(&in)) < 0, "an input's guard was written (%d)", bad);
    for (i = 0; i < B_N_IN; ++i)
        FZ_CHECK(!in.b[i].raw ||
                     memcmp(fz_data(&in.b[i]), fz_data(&pristine.b[i]), in.b[i].bytes) == 0,
                 "input %d changed", i);
    bufs_free(&in);
    bufs_free(&pristine);
    bufs_free(&ref);
    bufs_free(&cpu);
    bufs_free(&tsk);
    return 0;
}
