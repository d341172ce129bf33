/*
 * The CPU backend's MTA key-query conv (pre-softmax), forward and backward,
 * included by ta_cpu_impl.h after the SDPA micro-kernels (k1, k2, k3), the
 * online softmax and the store, which it reuses. docs/mta.md (Specification)
 * fixes the arithmetic; docs/cpu.md section 9 the design.
 *
 * Layout: every score-like tile is held transposed, [key][row], lanes across
 * query rows, as the SDPA forward holds S^T. Rows are independent outputs of
 * every per-entry quantity (S, C, P, dP, dC, dS), so each lane runs exactly the
 * reference's scalar sequence for its own (row, key):
 *   S^T  k1 (Q^T resident, K rows broadcast), then invisible entries set to +0
 *   C^T  cpu_conv (mirror 0): lane x of key j: a asc, b asc,
 *        fmaf(w[a][b], S^T[j + b][x + a], acc) from +0   (S^T lane x + a is row
 *        i - (c_q-1-a) when lane 0 of S^T is c_q-1 rows above lane 0 of C^T)
 *   dS^T cpu_conv (mirror 1): fmaf(w[a][b], dC^T[j + (c_k-1) - b][x + (c_q-1) - a], acc)
 * and the dconv_w partial runs lanes across a (one output w[a][b'] per lane),
 * broadcasting dC[i][j] over (i asc, j asc).
 * Every term of every conv sum is visited, masked ones included (the
 * reference's fmaf(w, 0, acc) is not always a no-op on signed zeros).
 */

/* Conv register block: TA_CRB keys x TA_NV vectors of rows. */
#define TA_CRB 4
/* dconv_w register block: at most TA_DWB key offsets b' per sweep. */
#define TA_DWB 12

/* Lane index 0..15 as floats (exact), for the per-lane visibility compare. */
static const float cpu_iota[16] = {0.f, 1.f, 2.f,  3.f,  4.f,  5.f,  6.f,  7.f,
                                   8.f, 9.f, 10.f, 11.f, 12.f, 13.f, 14.f, 15.f};

/* ---------------------------------------------------------------------- */
/* The conv micro-kernel                                                   */
/* ---------------------------------------------------------------------- */

/*
 * rb keys (u = 0..rb-1) x nv row vectors, lanes x over rows:
 *   mirror 0: out[u][x] = sum_{a asc, b asc} fmaf(w[a][b], X[u + b][x + a], .)
 *   mirror 1: out[u][x] = sum_{a asc, b asc} fmaf(w[a][b], X[u + (c_k-1) - b][x + (c_q-1) - a], .)
 * from +0. Per a, each X row kk is loaded once for every key of the block
 * that reads it; the rows run ascending for mirror 0 (b = kk - u ascends) and
 * descending for mirror 1 (b = u + c_k-1 - kk ascends), so every accumulator
 * sees exactly (a ascending, b ascending).
 */
TA_KFN void cpu_conv_block(const int rb, const int nv, const int mirror, float *out, size_t ldo,
                           const float *X, size_t ldx, const float *w, int32_t c_q, int32_t c_k) {
    ta_v acc[TA_CRB][TA_NV];
    const int32_t n_x = rb + c_k - 1; /* X rows the block reads */
    int u, k;
    int32_t a, s;
    TA_UNROLL
    for (u = 0; u < rb; ++u) {
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            acc[u][k] = v_zero();
        }
    }
    for (a = 0; a < c_q; ++a) {
        const float *w_row = w + (size_t)a * (size_t)c_k; /* [c_k] */
        const int32_t lane = mirror ? c_q - 1 - a : a;    /* row offset of this a */
        for (s = 0; s < n_x; ++s) {
            const int32_t kk = mirror ? n_x - 1 - s : s;
            const float *x_row = X + (size_t)kk * ldx + (size_t)lane;
            ta_v xv[TA_NV];
            TA_UNROLL
            for (k = 0; k < nv; ++k) {
                xv[k] = v_load(x_row + k * TA_VW);
            }
            TA_UNROLL
            for (u = 0; u < rb; ++u) {
                const int32_t b = mirror ? u + c_k - 1 - kk : kk - u;
                if (b >= 0 && b < c_k) {
                    const ta_v wv = v_bcast(w_row + b);
                    TA_UNROLL
                    for (k = 0; k < nv; ++k) {
                        acc[u][k] = v_fma(wv, xv[k], acc[u][k]);
                    }
                }
            }
        }
    }
    TA_UNROLL
    for (u = 0; u < rb; ++u) {
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            v_store(out + (size_t)u * ldo + (size_t)(k * TA_VW), acc[u][k]);
        }
    }
}

/* rb keys, row vectors [v0, nvec). */
TA_KFN void cpu_conv_keys(const int rb, const int mirror, float *out, size_t ldo, const float *X,
                          size_t ldx, const float *w, int32_t c_q, int32_t c_k, int32_t v0,
                          int32_t nvec) {
    int32_t v = v0;
    for (; v + TA_NV <= nvec; v += TA_NV)
        cpu_conv_block(rb, TA_NV, mirror, out + v * TA_VW, ldo, X + v * TA_VW, ldx, w, c_q, c_k);
    for (; v < nvec; ++v)
        cpu_conv_block(rb, 1, mirror, out + v * TA_VW, ldo, X + v * TA_VW, ldx, w, c_q, c_k);
}

TA_KFN void cpu_conv_rb(const int mirror, int rb, float *out, size_t ldo, const float *X,
                        size_t ldx, const float *w, int32_t c_q, int32_t c_k, int32_t v0,
                        int32_t nvec) {
    switch (rb) {
    case 1: cpu_conv_keys(1, mirror, out, ldo, X, ldx, w, c_q, c_k, v0, nvec); break;
    case 2: cpu_conv_keys(2, mirror, out, ldo, X, ldx, w, c_q, c_k, v0, nvec); break;
    case 3: cpu_conv_keys(3, mirror, out, ldo, X, ldx, w, c_q, c_k, v0, nvec); break;
    default: cpu_conv_keys(TA_CRB, mirror, out, ldo, X, ldx, w, c_q, c_k, v0, nvec); break;
    }
}

/*
 * The conv over keys [j_begin, j_end) (out row j, X rows from j), lanes
 * [0, n_lanes) rounded up to vectors; key j only from lane max(0, j + shift)
 * rounded down to a vector (the rows before it do not see key j: causal).
 * X must be defined on every lane and row the block reads.
 */
static void cpu_conv(int mirror, float *out, size_t ldo, const float *X, size_t ldx, const float *w,
                     int32_t c_q, int32_t c_k, int32_t j_begin, int32_t j_end, int32_t shift,
                     int32_t n_lanes) {
    const int32_t nvec = TA_NVEC(n_lanes);
    int32_t j0;
    for (j0 = j_begin; j0 < j_end; j0 += TA_CRB) {
        const int32_t rb = j_end - j0 < TA_CRB ? j_end - j0 : TA_CRB;
        const int32_t lo = j0 + shift > 0 ? j0 + shift : 0;
        const int32_t v0 = lo / TA_VW;
        if (v0 >= nvec) break; /* later keys start later still */
        if (mirror)
            cpu_conv_rb(1, rb, out + (size_t)j0 * ldo, ldo, X + (size_t)j0 * ldx, ldx, w, c_q, c_k,
                        v0, nvec);
        else
            cpu_conv_rb(0, rb, out + (size_t)j0 * ldo, ldo, X + (size_t)j0 * ldx, ldx, w, c_q, c_k,
                        v0, nvec);
    }
}

/* ---------------------------------------------------------------------- */
/* Loading, scores with the mask, dconv_w                                  */
/* ---------------------------------------------------------------------- */

/* dst[d][x] = row (first + x) of the (b, h) slice starting at slice_row0,
 * feature d, widened, for x < count with the row inside [0, seq); every other
 * lane of [0, ld) zero (rows above row 0 or past S_q are zero padding). */
static void cpu_load_t_rows(float *dst, size_t ld, const void *src, ta_dtype dt, size_t slice_row0,
                            int32_t seq, int32_t first, int32_t count, int32_t dim) {
    int32_t x, d;
    memset(dst, 0, (size_t)dim * ld * sizeof(float));
    for (x = 0; x < count; ++x) {
        const int32_t r = first + x;
        size_t src0;
        if (r < 0 || r >= seq) continue;
        src0 = (slice_row0 + (size_t)r) * (size_t)dim;
        for (d = 0; d < dim; ++d)
            dst[(size_t)d * ld + (size_t)x] = cpu_elem(src, dt, src0 + (size_t)d);
    }
}

/* Where a [key][row] tile sits: key 0 is absolute column col_first, lane 0
 * absolute row row_first; n_lanes rows are loaded. */
typedef struct cpu_mta_frame {
    int32_t row_first, n_lanes, col_first;
} cpu_mta_frame;

/* First lane of key k (absolute column col_first + k) whose row sees it under
 * the causal mask (may be negative: every lane). */
static inline int32_t cpu_mta_lane_lo(const ta_tiling *t, const cpu_mta_frame *f, int32_t k) {
    return t->causal ? f->col_first + k - t->diag_offset - f->row_first : -f->row_first;
}

/*
 * k1 for keys [k_lo, k_hi) of frame f (R: their rows, from key k_lo), in
 * blocks of TA_RB keys, each from the first row vector any of its keys is
 * visible from: out[k][x] = (scale *) dot(R_k, T[.][x]).
 */
static void cpu_mta_k1(const ta_tiling *t, const cpu_mta_frame *f, float *out, size_t ldo,
                       const float *T, size_t ldt, const float *R, size_t ldr, int32_t k_lo,
                       int32_t k_hi, int32_t dim, float scale, int scaled) {
    const int32_t nvec = TA_NVEC(f->n_lanes);
    int32_t k0;
    for (k0 = k_lo; k0 < k_hi; k0 += TA_RB) {
        const int32_t nr = k_hi - k0 < TA_RB ? k_hi - k0 : TA_RB;
        const int32_t lo = cpu_mta_lane_lo(t, f, k0);
        const int32_t v0 = lo > 0 ? lo / TA_VW : 0;
        if (v0 >= nvec) break;
        cpu_k1(T + (size_t)v0 * TA_VW, ldt, nvec - v0, R + (size_t)(k0 - k_lo) * ldr, ldr, nr, dim,
               scale, scaled, out + (size_t)k0 * ldo + (size_t)v0 * TA_VW, ldo);
    }
}

/*
 * Raw scores S^T on frame f for keys [0, n_keys) (docs/mta.md forward step 1):
 * scale * dot(q_r, k_j) where visible, +0 everywhere else on [0, ld) (the conv
 * reads masked entries). k1 runs on keys [k_lo, k_hi) (K rows from k_lo), the
 * keys inside [0, key_len) that some loaded row may see.
 */
static void cpu_mta_scores(const ta_tiling *t, const cpu_mta_frame *f, float *st, size_t ld,
                           const float *qt, size_t ldq, const float *k_rows, size_t ldk,
                           int32_t k_lo, int32_t k_hi, int32_t n_keys, int32_t dim, float scale) {
    const int32_t row_hi =
        (t->seq_q < f->row_first + f->n_lanes ? t->seq_q : f->row_first + f->n_lanes) -
        f->row_first; /* lanes past the last real row */
    int32_t k;
    cpu_mta_k1(t, f, st, ld, qt, ldq, k_rows, ldk, k_lo, k_hi, dim, scale, 1);
    for (k = 0; k < n_keys; ++k) {
        float *row = st + (size_t)k * ld;
        int32_t lo = cpu_mta_lane_lo(t, f, k), hi = row_hi, x;
        if (lo < -f->row_first) lo = -f->row_first; /* rows below 0 */
        if (lo < 0) lo = 0;
        if (k < k_lo || k >= k_hi) lo = (int32_t)ld; /* key not computed: all +0 */
        if (lo > (int32_t)ld) lo = (int32_t)ld;
        if (hi < lo) hi = lo;
        for (x = 0; x < lo; ++x)
            row[x] = 0.0f;
        for (x = hi; x < (int32_t)ld; ++x)
            row[x] = 0.0f;
    }
}

/* The keys [k_lo, k_hi) of [0, n_keys) in frame f worth a dot product: inside
 * [0, key_len) and not past the last key any real loaded row sees. */
static void cpu_mta_key_range(const ta_tiling *t, const cpu_mta_frame *f, int32_t key_len,
                              int32_t n_keys, int32_t *k_lo, int32_t *k_hi) {
    int32_t last_row = f->row_first + f->n_lanes - 1, hi = n_keys;
    if (last_row > t->seq_q - 1) last_row = t->seq_q - 1;
    if (key_len - f->col_first < hi) hi = key_len - f->col_first;
    if (t->causal && last_row + t->diag_offset + 1 - f->col_first < hi)
        hi = last_row + t->diag_offset + 1 - f->col_first;
    *k_lo = f->col_first < 0 ? -f->col_first : 0;
    if (*k_lo > n_keys) *k_lo = n_keys;
    *k_hi = hi < *k_lo ? *k_lo : hi;
}

/*
 * dconv_w partial of one tile pair (docs/mta.md backward step 5), lanes
 * across a: for nb key offsets b' from b0 and the a-vector from a0,
 *   part[a][b'] = sum_{i asc, j asc} fmaf(dC[i][j], S[i-(c_q-1-a)][j+b'-P], .) from +0
 * with dC[i][j] = dct[(j + P) ld + i] (G) and S[..] = st[(j + P + b') ld + i + a] (L),
 * over every effective (i, j) of rows x cols.
 */
TA_KFN void cpu_dw_block(const int nb, float *part, int32_t c_q, int32_t c_k, const float *dct,
                         const float *st, size_t ld, int32_t rows, int32_t cols, int32_t half_k,
                         int32_t a0, int32_t b0) {
    ta_v acc[TA_DWB];
    float lanes[TA_VW];
    int u;
    int32_t i, j, x;
    TA_UNROLL
    for (u = 0; u < nb; ++u) {
        acc[u] = v_zero();
    }
    for (i = 0; i < rows; ++i) {
        const float *dc = dct + (size_t)half_k * ld + (size_t)i;              /* dC[i][0] */
        const float *s0 = st + (size_t)(half_k + b0) * ld + (size_t)(i + a0); /* j = 0, b' = b0 */
        /* two keys per step: S^T row j+P+b'+1 serves (j, b'+1) and (j+1, b'),
         * so nb + 1 loads feed 2 nb FMAs; each accumulator still takes
         * (i, j) then (i, j+1) */
        for (j = 0; j + 1 < cols; j += 2) {
            const ta_v d0 = v_bcast(dc + (size_t)j * ld), d1 = v_bcast(dc + (size_t)(j + 1) * ld);
            const float *s = s0 + (size_t)j * ld;
            ta_v x_prev = v_load(s);
            TA_UNROLL
            for (u = 0; u < nb; ++u) {
                const ta_v x_next = v_load(s + (size_t)(u + 1) * ld);
                acc[u] = v_fma(d0, x_prev, acc[u]);
                acc[u] = v_fma(d1, x_next, acc[u]);
                x_prev = x_next;
            }
        }
        if (j < cols) { /* the last key of an odd count */
            const ta_v d = v_bcast(dc + (size_t)j * ld);
            const float *s = s0 + (size_t)j * ld;
            TA_UNROLL
            for (u = 0; u < nb; ++u) {
                acc[u] = v_fma(d, v_load(s + (size_t)u * ld), acc[u]);
            }
        }
    }
    TA_UNROLL
    for (u = 0; u < nb; ++u) {
        v_store(lanes, acc[u]);
        for (x = 0; x < TA_VW && a0 + x < c_q; ++x)
            part[(size_t)(a0 + x) * (size_t)c_k + (size_t)(b0 + u)] = lanes[x];
    }
}

static void cpu_mta_dw(float *part, int32_t c_q, int32_t c_k, const float *dct, const float *st,
                       size_t ld, int32_t rows, int32_t cols) {
    const int32_t half_k = (c_k - 1) / 2;
    int32_t a0, b0;
    for (a0 = 0; a0 < c_q; a0 += TA_VW) {
        for (b0 = 0; b0 < c_k; b0 += TA_DWB) {
#define TA_DW_CASE(n)                                                                              \
    case n: cpu_dw_block(n, part, c_q, c_k, dct, st, ld, rows, cols, half_k, a0, b0); break
            switch (c_k - b0 < TA_DWB ? c_k - b0 : TA_DWB) {
                TA_DW_CASE(1);
                TA_DW_CASE(2);
                TA_DW_CASE(3);
                TA_DW_CASE(4);
                TA_DW_CASE(5);
                TA_DW_CASE(6);
                TA_DW_CASE(7);
                TA_DW_CASE(8);
                TA_DW_CASE(9);
                TA_DW_CASE(10);
                TA_DW_CASE(11);
            default: cpu_dw_block(TA_DWB, part, c_q, c_k, dct, st, ld, rows, cols, half_k, a0, b0);
            }
#undef TA_DW_CASE
        }
    }
}

/* ---------------------------------------------------------------------- */
/* MTA forward                                                             */
/* ---------------------------------------------------------------------- */

/*
 * Forward of Q tiles [qt_begin, qt_end) of one (b, h) (docs/mta.md forward),
 * held as one block of rows (rows are independent; each still sees the K
 * tiles of plan->fwd in ascending order, and the softmax rescales at their
 * boundaries). The loaded rows are the block's effective rows and the c_q-1
 * rows above them (the Q tiles' halos overlap the previous tile's rows):
 *   1. Q^T of the loaded rows (rows above 0: zero); m = -inf, l = 0, acc = 0
 *   2. K tiles [0, ta_tile_k_end(last Q tile)) ascending, with n_i visible
 *      keys per effective row:
 *        a. S^T on the loaded rows x the keys [col0 - P, col0 + n_max + P)
 *           (k1, lanes over rows), +0 where not visible
 *        b. C^T on the effective rows x keys [col0, col0 + n_max) (cpu_conv)
 *        c. online softmax and acc = acc * alpha + P V (k2), as SDPA
 *   3. normalise and store
 */
static void cpu_mta_fwd_task(const ta_plan *plan, const ta_fwd_args *a, const ta_cpu_fwd_ws *ws,
                             int32_t b, int32_t h, int32_t qt_begin, int32_t qt_end) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->fwd;
    const ta_cpu_dims *dm = &ws->dm;
    const int32_t c_q = p->conv_q, c_k = p->conv_k, half_k = (c_k - 1) / 2;
    const float *w = a->conv_w + (size_t)h * (size_t)c_q * (size_t)c_k;
    const int32_t key_len = a->seqlens_k ? a->seqlens_k[b] : p->seq_k;
    const int32_t row0 = ta_tile_row_eff_begin(t, qt_begin);
    const int32_t rows = ta_tile_row_eff_end(t, qt_end - 1) - row0;
    const int32_t k_end = ta_tile_k_end(t, qt_end - 1, key_len);
    const size_t q_slice = ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q;
    const size_t k_base =
        ((size_t)b * (size_t)p->heads_kv + (size_t)(h / plan->group)) * (size_t)p->seq_k;
    cpu_mta_frame f;
    int32_t kt;
    size_t z;
    /* step 1 */
    f.row_first = row0 - (c_q - 1);
    f.n_lanes = rows + c_q - 1;
    cpu_load_t_rows(ws->qt, ws->ld, a->q, p->dtype, q_slice, p->seq_q, f.row_first, f.n_lanes,
                    p->head_dim);
    for (z = 0; z < dm->bq_pad; ++z) {
        ws->m[z] = -INFINITY;
        ws->l[z] = 0.0f;
    }
    memset(ws->acc, 0, (size_t)rows * dm->dv_pad * sizeof(float));
    /* step 2 */
    for (kt = 0; kt < k_end; ++kt) {
        const int32_t col0 = ta_tile_col_eff_begin(t, kt);
        const int32_t cols = ta_tile_col_eff_end(t, kt) - col0;
        const int32_t n_max =
            cpu_fill_nvis(ws->nvis, dm->bq_pad, t, row0, rows, col0, cols, key_len, NULL);
        const int32_t n_keys = n_max + c_k - 1; /* S keys the conv reads */
        const float *k_rows, *v_rows;
        size_t ldk, ldv;
        int32_t k_lo, k_hi;
        if (n_max == 0) continue;
        f.col_first = col0 - half_k;
        cpu_mta_key_range(t, &f, key_len, n_keys, &k_lo, &k_hi);
        k_rows =
            cpu_rows_view(ws->k, dm->d_pad, a->k, p->dtype, k_base + (size_t)(f.col_first + k_lo),
                          k_hi - k_lo, p->head_dim, 0, &ldk);
        /* a */
        cpu_mta_scores(t, &f, ws->sraw, ws->ld_sraw, ws->qt, ws->ld, k_rows, ldk, k_lo, k_hi,
                       n_keys, p->head_dim, p->scale);
        /* b: C^T[j][i], row i = row0 + i sees key col0 + j from i >= col0 + j - off - row0 */
        cpu_conv(0, ws->st, ws->ld, ws->sraw, ws->ld_sraw, w, c_q, c_k, 0, n_max,
                 col0 - t->diag_offset - row0, rows);
        /* c */
        v_rows = cpu_rows_view(ws->v, dm->dv_pad, a->v, p->dtype, k_base + (size_t)col0, n_max,
                               p->head_dim_v, 1, &ldv);
        cpu_fwd_softmax(ws, rows);
        cpu_k2(ws->acc, dm->dv_pad, ws->alpha, ws->st, ws->ld, v_rows, ldv, ws->nvis, rows,
               TA_NVEC(p->head_dim_v));
    }
    /* step 3 */
    cpu_fwd_store(plan, a, ws, q_slice + (size_t)row0, rows);
}

/* ---------------------------------------------------------------------- */
/* MTA backward                                                            */
/* ---------------------------------------------------------------------- */

/* One Q tile's side of the backward (the rows of every pair it takes part in). */
typedef struct cpu_mta_qside {
    int32_t r0, rows; /* effective rows [r0, r0 + rows) */
    size_t q_slice;   /* row index of row 0 of (b, h) in the [B, H, S_q] grid */
    const float *d_o; /* dO rows of G inside [0, S_q) (E rows first), row-major */
    size_t ld_do;
} cpu_mta_qside;

/*
 * The Q side of Q tile qt of (b, h): Q^T of the loaded rows
 * [r0 - (c_q-1), r1 + (c_q-1)); dO^T, dO rows, lse and D_i of the gradient
 * rows [r0, r1 + (c_q-1)) (lane g = row r0 + g). D_i = fmaf(dO_id, o_id, .)
 * over d ascending from +0 (one scalar chain per row, from the rows as
 * stored); rows outside [0, S_q): lse = -inf, D = 0.
 */
static void cpu_mta_load_q(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_mta_bwd_ws *ws,
                           int32_t b, int32_t h, int32_t qt, cpu_mta_qside *qs) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->bwd;
    const int32_t pq = p->conv_q - 1;
    const size_t ld = ws->ld;
    const float *o_rows;
    size_t ld_o;
    int32_t g, g_rows;
    qs->r0 = ta_tile_row_eff_begin(t, qt);
    qs->rows = ta_tile_row_eff_end(t, qt) - qs->r0;
    qs->q_slice = ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q;
    g_rows = qs->rows + pq < p->seq_q - qs->r0 ? qs->rows + pq : p->seq_q - qs->r0;
    cpu_load_t_rows(ws->qt, ld, a->q, p->dtype, qs->q_slice, p->seq_q, qs->r0 - pq,
                    qs->rows + 2 * pq, p->head_dim);
    cpu_load_t_rows(ws->dot, ld, a->d_o, p->dtype, qs->q_slice, p->seq_q, qs->r0, g_rows,
                    p->head_dim_v);
    qs->d_o = cpu_rows_view(ws->d_o, ws->dm.dv_pad, a->d_o, p->dtype, qs->q_slice + (size_t)qs->r0,
                            g_rows, p->head_dim_v, 1, &qs->ld_do);
    o_rows = cpu_rows_view(ws->o, ws->dm.dv_pad, a->o, p->dtype, qs->q_slice + (size_t)qs->r0,
                           g_rows, p->head_dim_v, 0, &ld_o);
    cpu_delta_rows(ws->delta, qs->d_o, qs->ld_do, o_rows, ld_o, g_rows, p->head_dim_v);
    for (g = 0; g < (int32_t)ld; ++g) {
        ws->lse[g] = g < g_rows ? a->lse[qs->q_slice + (size_t)(qs->r0 + g)] : -INFINITY;
        if (g >= g_rows) ws->delta[g] = 0.0f;
    }
}

/*
 * P and dC on the gradient region (docs/mta.md backward step 2), lanes over
 * G rows, for every key of [0, n_keys) on [0, ld): for the live lanes
 * (key in [g_lo, g_hi), row sees the key, lse != -inf)
 *   P = exp(C - lse) (into ct), dC = P * (dP - D) (into dct, which holds dP);
 * dC = +0 on every other lane (the transposed conv reads them all).
 */
static void cpu_mta_probs(const ta_tiling *t, const cpu_mta_frame *f, const ta_cpu_mta_bwd_ws *ws,
                          int32_t n_keys, int32_t g_lo, int32_t g_hi) {
    const size_t ld = ws->ld;
    const int32_t nvec = TA_NVEC(f->n_lanes);
    const ta_v zero = v_zero(), neg_inf = v_set1(-INFINITY), iota = v_load(cpu_iota);
    int32_t k, v;
    for (k = 0; k < n_keys; ++k) {
        float *c = ws->ct + (size_t)k * ld, *dc = ws->dct + (size_t)k * ld;
        const int32_t lo = cpu_mta_lane_lo(t, f, k);
        int32_t v0 = lo > 0 ? lo / TA_VW : 0;
        const ta_v lo_v = v_set1((float)(lo > 0 ? lo : 0));
        if (k < g_lo || k >= g_hi) { /* outside [0, key_len) or past every row's view */
            memset(dc, 0, ld * sizeof(float));
            continue;
        }
        if (v0 > nvec) v0 = nvec;
        memset(dc, 0, (size_t)v0 * TA_VW * sizeof(float));
        for (v = v0; v < nvec; ++v) {
            const size_t x0 = (size_t)v * TA_VW;
            const ta_v lse = v_load(ws->lse + x0), delta = v_load(ws->delta + x0);
            const ta_v pv = v_exp(v_sub(v_load(c + x0), lse));
            const ta_v dcv = v_mul(pv, v_sub(v_load(dc + x0), delta));
            const ta_v lane = v_add(v_set1((float)x0), iota);
            v_store(c + x0, pv);
            v_store(dc + x0, v_sel(m_lt(lane, lo_v), zero, v_sel(m_ne(lse, neg_inf), dcv, zero)));
        }
        memset(dc + (size_t)nvec * TA_VW, 0, (ld - (size_t)nvec * TA_VW) * sizeof(float));
    }
}

/*
 * The recomputation of one tile pair (Q side qs, K tile kt of plan->bwd),
 * docs/mta.md backward steps 1-3, all lanes over rows:
 *   1. nvis: live keys of the K tile per effective row (0 when lse = -inf)
 *   2. S^T on L (keys [c0-2P, c1+2P)), +0 where not visible
 *   3. C^T on G (cpu_conv), dP^T on G (k1 with dO^T resident)
 *   4. P^T, dC^T on G
 *   5. dS^T on E (cpu_conv, mirror), keys [0, n_max)
 * Returns n_max (0: nothing live in E, nothing computed). *k_rows, *ldk: the
 * K rows of E keys (for dq).
 */
static int32_t cpu_mta_pair(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_mta_bwd_ws *ws,
                            const cpu_mta_qside *qs, int32_t b, int32_t h, int32_t kt,
                            const float **k_e, size_t *ldk_out) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->bwd;
    const ta_cpu_dims *dm = &ws->dm;
    const size_t ld = ws->ld;
    const int32_t c_q = p->conv_q, c_k = p->conv_k, half_k = (c_k - 1) / 2, pq = c_q - 1;
    const float *w = a->conv_w + (size_t)h * (size_t)c_q * (size_t)c_k;
    const int32_t key_len = a->seqlens_k ? a->seqlens_k[b] : p->seq_k;
    const size_t k_base =
        ((size_t)b * (size_t)p->heads_kv + (size_t)(h / plan->group)) * (size_t)p->seq_k;
    const int32_t c0 = ta_tile_col_eff_begin(t, kt);
    const int32_t cols = ta_tile_col_eff_end(t, kt) - c0;
    cpu_mta_frame fl, fg;
    const float *k_rows, *v_rows;
    size_t ldk, ldv;
    int32_t n_max, k_lo, k_hi, g_lo, g_hi;
    /* 1 */
    n_max = cpu_fill_nvis(ws->nvis, ld, t, qs->r0, qs->rows, c0, cols, key_len, ws->lse);
    if (n_max == 0) return 0;
    /* 2: L = rows [r0 - pq, r1 + pq) x keys [c0 - 2P, c1 + 2P) */
    fl.row_first = qs->r0 - pq;
    fl.n_lanes = qs->rows + 2 * pq;
    fl.col_first = c0 - 2 * half_k;
    cpu_mta_key_range(t, &fl, key_len, cols + 4 * half_k, &k_lo, &k_hi);
    k_rows = cpu_rows_view(ws->k, dm->d_pad, a->k, p->dtype, k_base + (size_t)(fl.col_first + k_lo),
                           k_hi - k_lo, p->head_dim, 1, &ldk);
    cpu_mta_scores(t, &fl, ws->st, ld, ws->qt, ld, k_rows, ldk, k_lo, k_hi, cols + 4 * half_k,
                   p->head_dim, p->scale);
    *k_e = k_rows + (size_t)(2 * half_k - k_lo) * ldk; /* E key 0 = L key 2P */
    *ldk_out = ldk;
    /* 3: G = rows [r0, r1 + pq) x keys [c0 - P, c1 + P); lane g of G is lane g of S^T's a = 0 */
    fg.row_first = qs->r0;
    fg.n_lanes = qs->rows + pq;
    fg.col_first = c0 - half_k;
    cpu_mta_key_range(t, &fg, key_len, cols + 2 * half_k, &g_lo, &g_hi);
    cpu_conv(0, ws->ct, ld, ws->st, ld, w, c_q, c_k, g_lo, g_hi, cpu_mta_lane_lo(t, &fg, 0),
             fg.n_lanes);
    v_rows =
        cpu_rows_view(ws->v, dm->dv_pad, a->v, p->dtype, k_base + (size_t)(fg.col_first + g_lo),
                      g_hi - g_lo, p->head_dim_v, 0, &ldv);
    cpu_mta_k1(t, &fg, ws->dct, ld, ws->dot, ld, v_rows, ldv, g_lo, g_hi, p->head_dim_v, 0.0f, 0);
    /* 4 */
    cpu_mta_probs(t, &fg, ws, cols + 2 * half_k, g_lo, g_hi);
    /* 5: dS^T[j][e] = sum w[a][b] dC^T[j + 2P - b][e + pq - a]: G key j + 2P - b is
     * column c0 + j + P - b, G lane e + pq - a is row r0 + e + pq - a */
    cpu_conv(1, ws->dst, ld, ws->dct, ld, w, c_q, c_k, 0, n_max, c0 - t->diag_offset - qs->r0,
             qs->rows);
    return n_max;
}

/* Pass 1 for one (query head, Q tile) and the K tile of slot `slot` (K tile
 * kt): the pair's recomputation, then P and dS on E row-major (transposed
 * from the [key][row] tiles, live entries only) and dv_acc += P^T dO,
 * dk_acc += dS^T Q (k3: rows ascending per key). */
static void cpu_mta_dkdv_pair(const ta_plan *plan, const ta_bwd_args *a,
                              const ta_cpu_mta_bwd_ws *ws, const cpu_mta_qside *qs, int32_t b,
                              int32_t h, int32_t kt, int32_t slot) {
    const ta_problem *p = &plan->p;
    const ta_cpu_dims *dm = &ws->dm;
    const int32_t half_k = (p->conv_k - 1) / 2;
    const size_t ld = ws->ld;
    const float *k_e, *q_rows;
    size_t ldk, ldq;
    int32_t n_max;
    n_max = cpu_mta_pair(plan, a, ws, qs, b, h, kt, &k_e, &ldk);
    if (n_max == 0) return;
    q_rows = cpu_rows_view(ws->q, dm->d_pad, a->q, p->dtype, qs->q_slice + (size_t)qs->r0, qs->rows,
                           p->head_dim, 1, &ldq);
    /* P on E is P^T at G key j + P, lane i; dS^T at key j, lane i: read in place */
    cpu_k3_t(ws->dv_acc[slot], dm->dv_pad, ws->ct + (size_t)half_k * ld, ld, qs->d_o, qs->ld_do,
             ws->nvis, qs->rows, n_max, TA_NVEC(p->head_dim_v));
    cpu_k3_t(ws->dk_acc[slot], dm->d_pad, ws->dst, ld, q_rows, ldq, ws->nvis, qs->rows, n_max,
             TA_NVEC(p->head_dim));
}

/*
 * Backward pass 1 for K tiles [kt_begin, kt_end) of (b, kv head h_kv)
 * (docs/mta.md backward step 4, docs/reference.md pass 1), each K tile in its
 * own slot with its own accumulators:
 *   1. dk_acc = dv_acc = 0
 *   2. query heads of the group ascending, Q tiles ascending from the first
 *      that sees the group; each Q side is loaded once, then every K tile
 *      this Q tile reaches (qt >= ta_tile_q_begin(kt)) accumulates
 *      (cpu_mta_dkdv_pair)
 *   3. dk = store(scale * dk_acc), dv = store(dv_acc)
 * Each accumulator sees exactly the reference's sequence: heads ascending,
 * Q tiles ascending, rows ascending.
 */
static void cpu_mta_dkdv_task(const ta_plan *plan, const ta_bwd_args *a,
                              const ta_cpu_mta_bwd_ws *ws, int32_t b, int32_t h_kv,
                              int32_t kt_begin, int32_t kt_end) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->bwd;
    const ta_cpu_dims *dm = &ws->dm;
    const int32_t key_len = a->seqlens_k ? a->seqlens_k[b] : p->seq_k;
    const int32_t n_slots = kt_end - kt_begin;
    const size_t k_slice = ((size_t)b * (size_t)p->heads_kv + (size_t)h_kv) * (size_t)p->seq_k;
    const ta_v scale = v_set1(p->scale);
    int32_t q_begin[TA_CPU_DKDV_GROUP_MAX];
    int32_t s, g, qt, j, v;
    /* step 1 */
    for (s = 0; s < n_slots; ++s) {
        const int32_t cols =
            ta_tile_col_eff_end(t, kt_begin + s) - ta_tile_col_eff_begin(t, kt_begin + s);
        q_begin[s] = ta_tile_q_begin(t, kt_begin + s, key_len); /* ascending in s */
        memset(ws->dk_acc[s], 0, (size_t)cols * dm->d_pad * sizeof(float));
        memset(ws->dv_acc[s], 0, (size_t)cols * dm->dv_pad * sizeof(float));
    }
    /* step 2 */
    for (g = 0; g < plan->group; ++g) {
        const int32_t h = h_kv * plan->group + g;
        for (qt = q_begin[0]; qt < t->num_q_tiles; ++qt) {
            cpu_mta_qside qs;
            cpu_mta_load_q(plan, a, ws, b, h, qt, &qs);
            for (s = 0; s < n_slots && qt >= q_begin[s]; ++s)
                cpu_mta_dkdv_pair(plan, a, ws, &qs, b, h, kt_begin + s, s);
        }
    }
    /* step 3 */
    for (s = 0; s < n_slots; ++s) {
        const int32_t c0 = ta_tile_col_eff_begin(t, kt_begin + s);
        const int32_t cols = ta_tile_col_eff_end(t, kt_begin + s) - c0;
        for (j = 0; j < cols; ++j) {
            const size_t row = k_slice + (size_t)(c0 + j);
            float *dk = ws->dk_acc[s] + (size_t)j * dm->d_pad;
            for (v = 0; v < TA_NVEC(p->head_dim); ++v)
                v_store(dk + v * TA_VW, v_mul(scale, v_load(dk + v * TA_VW)));
            cpu_store_row(a->dk, p->dtype, row * (size_t)p->head_dim, dk, p->head_dim);
            cpu_store_row(a->dv, p->dtype, row * (size_t)p->head_dim_v,
                          ws->dv_acc[s] + (size_t)j * dm->dv_pad, p->head_dim_v);
        }
    }
}

/*
 * Backward pass 2 for Q tile qt of (b, h) (docs/mta.md backward steps 4-5):
 *   1. the Q side; dq_acc = 0; R = 0 (dw_part)
 *   2. K tiles [0, ta_tile_k_end) ascending: the pair's recomputation;
 *      dq_acc += dS K (k2, keys ascending per row); the pair's dconv_w
 *      partial over E (from +0), then R = R + partial
 *   3. dq = store(scale * dq_acc); R stays in ws->dw_sum for the merge
 * Returns 1 if the Q tile sees a K tile (k_end > 0): only then is R added.
 * A pair with no live entry in E adds nothing: its dS is unused, and its
 * partial is +0 everywhere (dC = +0 on all of E, finite S), which leaves R
 * unchanged (R is never -0: it starts at +0 and is a sum of additions).
 */
static int cpu_mta_dq_task(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_mta_bwd_ws *ws,
                           int32_t b, int32_t h, int32_t qt) {
    float *dw_sum = ws->dw_sum;
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->bwd;
    const ta_cpu_dims *dm = &ws->dm;
    const int32_t key_len = a->seqlens_k ? a->seqlens_k[b] : p->seq_k;
    const int32_t k_end = ta_tile_k_end(t, qt, key_len);
    const size_t n_w = (size_t)p->conv_q * (size_t)p->conv_k;
    const ta_v scale = v_set1(p->scale);
    cpu_mta_qside qs;
    int32_t kt, i, v;
    size_t n;
    /* step 1 */
    cpu_mta_load_q(plan, a, ws, b, h, qt, &qs);
    memset(ws->dq_acc, 0, (size_t)qs.rows * dm->d_pad * sizeof(float));
    for (n = 0; n < n_w; ++n)
        dw_sum[n] = 0.0f;
    /* step 2 */
    for (kt = 0; kt < k_end; ++kt) {
        const float *k_e;
        size_t ldk;
        const int32_t c0 = ta_tile_col_eff_begin(t, kt);
        const int32_t cols = ta_tile_col_eff_end(t, kt) - c0;
        const int32_t n_max = cpu_mta_pair(plan, a, ws, &qs, b, h, kt, &k_e, &ldk);
        if (n_max == 0) continue;
        cpu_k2(ws->dq_acc, dm->d_pad, NULL, ws->dst, ws->ld, k_e, ldk, ws->nvis, qs.rows,
               TA_NVEC(p->head_dim));
        cpu_mta_dw(ws->dw_part, p->conv_q, p->conv_k, ws->dct, ws->st, ws->ld, qs.rows, cols);
        for (n = 0; n < n_w; ++n) /* R(b, qt) = 0 + part(kt=0) + part(kt=1) + ... */
            dw_sum[n] = dw_sum[n] + ws->dw_part[n];
    }
    /* step 3 */
    for (i = 0; i < qs.rows; ++i) {
        float *dq = ws->dq_acc + (size_t)i * dm->d_pad;
        for (v = 0; v < TA_NVEC(p->head_dim); ++v)
            v_store(dq + v * TA_VW, v_mul(scale, v_load(dq + v * TA_VW)));
        cpu_store_row(a->dq, p->dtype,
                      (qs.q_slice + (size_t)qs.r0 + (size_t)i) * (size_t)p->head_dim, dq,
                      p->head_dim);
    }
    return k_end > 0;
}
