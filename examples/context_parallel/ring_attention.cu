/*
 * Ring attention (context parallelism) over NCCL with tileattn's public API:
 * the sequence cut into 2N chunks, rank r holding chunks r and 2N-1-r (the
 * zig-zag assignment: every rank gets the same causal work), K/V blocks passed
 * around the ring on a communication stream while the compute stream runs the
 * chunk pairs the block meets (issue 18; docs/api.md, "Split-K and merge").
 *
 *   forward:  for each (q chunk, k chunk) pair that the mask leaves visible,
 *             ta_fwd on the pair (causal on the diagonal, full below it) into
 *             part kc of q chunk qc; after the ring, ta_merge of parts
 *             0 .. qc (all keys, ascending: the order never depends on which
 *             rank ran which pair, or when).
 *   backward: ta_bwd on each visible pair with the merged o and lse; dq sums
 *             the pairs in ring-step order on its owner, dk and dv travel with
 *             their K/V block and sum in ring order from the block's owner on;
 *             the block returns to its owner after N steps. How the pairs sum:
 *             - exact mode: one accumulating ta_bwd per pair (args.accumulate =
 *               TA_BWD_ACCUMULATE) adds the pair's sums into f32 (hi, lo)
 *               pairs: dq's on the q chunk's rank, dk's and dv's travelling
 *               with the block (both words sent); ta_bwd_finish rounds each
 *               gradient once at the end (docs/api.md, "Backward over key and
 *               query ranges");
 *             - fast mode: ta_bwd of each pair into the storage type, then one
 *               f32 add kernel per gradient, the sums stored at the end. The
 *               library runs accumulating calls on its exact kernels in fast
 *               mode too (the tensor-core backward keeps no pairs), far slower,
 *               so fast mode (and --bench) stays on the tensor-core path and
 *               rounds each pair's gradients to bf16 before the f32 sum.
 *
 * Modes:
 *   --check  (default) small problems (C = 128, H = 2, D = 64), exact f32,
 *            exact bf16 and fast bf16, causal and not:
 *            - the N-rank result against the same chunk calls run on one GPU
 *              in the same order: o, lse, the finished dq, dk, dv and the f32
 *              sums (exact mode: the hi and lo words) bit for bit;
 *            - exact f32: the forward against one ta_fwd over the whole
 *              sequence with num_splits = 2N (bit for bit: the same key cut
 *              and merge), and dq, dk, dv against one ta_bwd over the whole
 *              sequence with the ring's o and lse (not bit for bit: the ring
 *              sums in ring order; max |diff| / max |ref| below 1e-5);
 *            - fast bf16 (causal): o and lse against a float64 reference
 *              computed here, within docs/exactness.md section 9's bound (o:
 *              2u o_mag for one call, plus u o_mag for the rounding of each
 *              pair's o to bf16 before ta_merge; lse: 1e-5 lse_mag), and
 *              dq, dk, dv against the exact f32 ring on the same inputs
 *              (printed only: no simple documented bound for the ring's sums
 *              of bf16 pairs);
 *            - SDPA under a sliding window (exact f32 and bf16, forward and
 *              backward; every pair placed by q_offset), as above;
 *            - the MTA forward over the ring (6x11, 7x7, 2x3, and 6x11 and
 *              SDPA under a window; exact f32: a halo exchange, halo'd K/V
 *              chunks, key ranges) against one ta_fwd with num_splits = 2N,
 *              bit for bit;
 *            - the MTA backward over the ring (6x11, 7x7, 2x3 under a window;
 *              exact f32: the backward's halo exchange, row and key ranges,
 *              accumulating pairs in the documented order, a fixed-order
 *              cross-rank dconv_w merge) against the same calls on one GPU
 *              (every word bit for bit) and one ta_bwd (dq, dk, dv bit for
 *              bit; dconv_w within 1e-5).
 *   --bench  fast bf16, causal, D = 128: one GPU's single call over S against
 *            the ring on N GPUs, forward and backward, S = 32k .. 256k; the
 *            scaling efficiency T_1 / (N T_N) and the ring's time with the
 *            sends skipped (communication not hidden = the difference).
 *   --emulate the checks with 2, 3 and 4 ranks on device 0, each group's
 *            transfers as device copies (no NCCL; the default with one GPU).
 *
 * Exit status: 0 ok; 1 a failure; 77 no GPU (or --bench with fewer than 2).
 * Built with -DTILEATTN_CONTEXT_PARALLEL=ON (needs NCCL; off by default: the core library
 * has no NCCL dependency).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <tileattn.h>

#define MAXR 8
#define SKIP 77

#define CK(call)                                                                                   \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "ring_attention: %s:%d %s: %s\n", __FILE__, __LINE__, #call,         \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define NK(call)                                                                                   \
    do {                                                                                           \
        const ncclResult_t r_ = (call);                                                            \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "ring_attention: %s:%d %s: %s\n", __FILE__, __LINE__, #call,         \
                    ncclGetErrorString(r_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define TK(call)                                                                                   \
    do {                                                                                           \
        const ta_status s_ = (call);                                                               \
        if (s_ != TA_OK) {                                                                         \
            fprintf(stderr, "ring_attention: %s:%d %s: %s\n", __FILE__, __LINE__, #call,         \
                    ta_status_string(s_));                                                         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- Transfers: NCCL point-to-point, or emulated on one GPU ----
 * With fewer than 2 GPUs the check runs its ranks on device 0 and each
 * group's transfers as device copies (g_emul): at the group's end every
 * stream is drained, then every receive takes the next send from its peer
 * (NCCL's matching order), then the copies finish. No overlap, the same
 * data movement: the ring's indexing, halos and orders are checked, NCCL
 * itself only with 2 GPUs. */
#define XMAX 1024
static int g_emul;
static struct xq {
    const void *src;
    void *dst;
    size_t bytes;
    int from, to;
} g_send[XMAX], g_recv[XMAX];
static int g_nsend, g_nrecv;

static void x_group_start(void) {
    if (!g_emul) NK(ncclGroupStart());
}
/* One emulated transfer side into its queue (src for a send, dst for a receive). */
static void x_queue(struct xq *q, int *n, const void *src, void *dst, size_t bytes, int from,
                    int to) {
    if (*n == XMAX) exit(1);
    q[*n].src = src;
    q[*n].dst = dst;
    q[*n].bytes = bytes;
    q[*n].from = from;
    q[(*n)++].to = to;
}
static void x_send(const void *p, size_t bytes, int from, int to, ncclComm_t *comms,
                   cudaStream_t s) {
    if (!g_emul)
        NK(ncclSend(p, bytes, ncclChar, to, comms[from], s));
    else
        x_queue(g_send, &g_nsend, p, NULL, bytes, from, to);
}
static void x_recv(void *p, size_t bytes, int to, int from, ncclComm_t *comms, cudaStream_t s) {
    if (!g_emul)
        NK(ncclRecv(p, bytes, ncclChar, from, comms[to], s));
    else
        x_queue(g_recv, &g_nrecv, NULL, p, bytes, from, to);
}
static void x_group_end(void) {
    int i, j;
    if (!g_emul) {
        NK(ncclGroupEnd());
        return;
    }
    CK(cudaDeviceSynchronize());
    for (i = 0; i < g_nrecv; ++i) { /* the first unused send from its peer to it */
        for (j = 0; j < g_nsend; ++j)
            if (g_send[j].src && g_send[j].from == g_recv[i].from && g_send[j].to == g_recv[i].to)
                break;
        if (j == g_nsend || g_send[j].bytes != g_recv[i].bytes) {
            fprintf(stderr, "ring_attention: emulated receive %d has no matching send\n", i);
            exit(1);
        }
        CK(cudaMemcpy(g_recv[i].dst, g_send[j].src, g_recv[i].bytes, cudaMemcpyDeviceToDevice));
        g_send[j].src = NULL;
    }
    for (j = 0; j < g_nsend; ++j)
        if (g_send[j].src) {
            fprintf(stderr, "ring_attention: emulated send %d was not received\n", j);
            exit(1);
        }
    g_nsend = g_nrecv = 0;
}

/* y[i] += x[i] (x in the storage type: f32, or bf16 when bf16 != 0). */
__global__ void add_into(float *y, const void *x, size_t n, int bf16) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += bf16 ? __uint_as_float((uint32_t)((const uint16_t *)x)[i] << 16)
                     : ((const float *)x)[i];
}

/* y = x in the storage type (bf16: round to nearest even). */
__global__ void store_as(void *y, const float *x, size_t n, int bf16) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (bf16) {
            const uint32_t u = __float_as_uint(x[i]);
            ((uint16_t *)y)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        } else {
            ((float *)y)[i] = x[i];
        }
    }
}

/* The run: N ranks (GPUs), chunk length C, heads H, head dim D. */
typedef struct cfg {
    int n, bf16, causal, fast;
    int window;  /* a sliding window (with causal): window_left = wl */
    int32_t wl;
    int32_t c, h, d;
    size_t elem;   /* bytes per element */
    size_t chunk;  /* elements per chunk of q, k, v, o, dO: H C D */
    size_t chunkl; /* per chunk of lse: H C */
} cfg;

/* One rank: its two q chunks (and o, lse, dO, dq), its own block's dk, dv, a
 * K/V block double buffer (k of both chunks, then v of both), the travelling
 * dk/dv accumulators (f32), the parts of the forward and the scratch of the
 * backward. An accumulator holds acc_words() f32 words per element: the sum
 * (fast mode), or the hi words, then the lo words of the (hi, lo) pairs of
 * the accumulating ta_bwd (exact mode). */
typedef struct rank {
    int dev;
    cudaStream_t comp, comm;
    cudaEvent_t used[2], arrived[2];
    void *q[2], *o[2], *d_o[2], *dq[2];
    void *dk[2], *dv[2]; /* the gradients of the rank's own k chunks, storage type */
    float *lse[2];
    float *dq_acc[2]; /* [dq] f32, exact: [dq hi, dq lo] */
    void *kv[2];     /* [k chunk a, k chunk b, v chunk a, v chunk b] */
    void *home;      /* the rank's own block (kv[0] is reset to it per pass) */
    float *dkv[2];   /* [dk a, dk b, dv a, dv b] f32, exact: those hi, then those lo */
    void *part_o[2]; /* q chunk x: [2N][chunk] */
    float *part_l[2];
    void *gq, *gk, *gv; /* fast mode: the backward's per-pair outputs */
    void *ws;
    size_t ws_bytes;
} rank;

/* f32 words per element of an accumulator: 2 (hi, lo) in exact mode. */
static size_t acc_words(const cfg *c) { return c->fast ? 1 : 2; }

static int32_t chunk_of(const cfg *c, int r, int x) { return x == 0 ? r : 2 * c->n - 1 - r; }

/* The pair of a q chunk and a k chunk dist = qc - kc chunks before it (0:
 * the diagonal). With a window every pair is placed by q_offset = dist C
 * (row r at the key position of row qc C + r) under TA_CAUSAL | TA_WINDOW;
 * without one an off-diagonal pair needs no mask (keeping fast mode's
 * tensor-core kernels, which take no q_offset). */
static ta_problem pair_problem(const cfg *c, int32_t dist) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = c->h;
    p.seq_q = p.seq_k = c->c;
    p.head_dim = p.head_dim_v = c->d;
    p.dtype = c->bf16 ? TA_BF16 : TA_F32;
    p.precision = c->fast ? TA_PRECISION_FAST : TA_PRECISION_EXACT;
    if (c->window) {
        p.flags = TA_CAUSAL | TA_WINDOW;
        p.window_left = c->wl;
        p.window_right = -1;
        p.q_offset = dist * c->c;
    } else {
        p.flags = dist == 0 && c->causal ? TA_CAUSAL : 0;
    }
    return p;
}

/* 1 if q chunk qc meets k chunk kc (*dist = qc - kc: 0 on the diagonal). */
static int visible(const cfg *c, int32_t qc, int32_t kc, int32_t *dist) {
    *dist = qc - kc;
    return !c->causal || kc <= qc;
}

static char *at(void *base, size_t elems, size_t elem) { return (char *)base + elems * elem; }

static void rank_alloc(const cfg *c, rank *r, int dev) {
    size_t fb = 0, bb = 0, x;
    ta_problem p = pair_problem(c, 0); /* the diagonal */
    memset(r, 0, sizeof *r);
    r->dev = dev;
    CK(cudaSetDevice(dev));
    CK(cudaStreamCreateWithFlags(&r->comp, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&r->comm, cudaStreamNonBlocking));
    for (x = 0; x < 2; ++x) {
        CK(cudaEventCreateWithFlags(&r->used[x], cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&r->arrived[x], cudaEventDisableTiming));
        CK(cudaMalloc(&r->q[x], c->chunk * c->elem));
        CK(cudaMalloc(&r->o[x], c->chunk * c->elem));
        CK(cudaMalloc(&r->d_o[x], c->chunk * c->elem));
        CK(cudaMalloc(&r->dq[x], c->chunk * c->elem));
        CK(cudaMalloc(&r->dk[x], c->chunk * c->elem));
        CK(cudaMalloc(&r->dv[x], c->chunk * c->elem));
        CK(cudaMalloc((void **)&r->lse[x], c->chunkl * sizeof(float)));
        CK(cudaMalloc((void **)&r->dq_acc[x], acc_words(c) * c->chunk * sizeof(float)));
        CK(cudaMalloc(&r->kv[x], 4 * c->chunk * c->elem));
        if (x == 0) CK(cudaMalloc(&r->home, 4 * c->chunk * c->elem));
        CK(cudaMalloc((void **)&r->dkv[x], 4 * acc_words(c) * c->chunk * sizeof(float)));
        CK(cudaMalloc(&r->part_o[x], 2 * (size_t)c->n * c->chunk * c->elem));
        CK(cudaMalloc((void **)&r->part_l[x], 2 * (size_t)c->n * c->chunkl * sizeof(float)));
    }
    if (c->fast) {
        CK(cudaMalloc(&r->gq, c->chunk * c->elem));
        CK(cudaMalloc(&r->gk, c->chunk * c->elem));
        CK(cudaMalloc(&r->gv, c->chunk * c->elem));
    }
    /* the workspace: the max over the pair problems (accumulate changes no size) */
    TK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &fb));
    TK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bb));
    p = pair_problem(c, 1); /* off the diagonal */
    TK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &x));
    if (x > fb) fb = x;
    TK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &x));
    if (x > bb) bb = x;
    r->ws_bytes = fb > bb ? fb : bb;
    CK(cudaMalloc(&r->ws, r->ws_bytes ? r->ws_bytes : 64));
}

static void rank_free(rank *r) {
    int x;
    CK(cudaSetDevice(r->dev));
    CK(cudaDeviceSynchronize());
    for (x = 0; x < 2; ++x) {
        CK(cudaFree(r->q[x]));
        CK(cudaFree(r->o[x]));
        CK(cudaFree(r->d_o[x]));
        CK(cudaFree(r->dq[x]));
        CK(cudaFree(r->dk[x]));
        CK(cudaFree(r->dv[x]));
        CK(cudaFree(r->lse[x]));
        CK(cudaFree(r->dq_acc[x]));
        CK(cudaFree(r->kv[x]));
        CK(cudaFree(r->dkv[x]));
        CK(cudaFree(r->part_o[x]));
        CK(cudaFree(r->part_l[x]));
        CK(cudaEventDestroy(r->used[x]));
        CK(cudaEventDestroy(r->arrived[x]));
    }
    CK(cudaFree(r->home));
    CK(cudaFree(r->gq));
    CK(cudaFree(r->gk));
    CK(cudaFree(r->gv));
    CK(cudaFree(r->ws));
    CK(cudaStreamDestroy(r->comp));
    CK(cudaStreamDestroy(r->comm));
}

/* The pair (q chunk x of rank r, k chunk y of the block in buffer b): ta_fwd
 * into part kc of q chunk x. */
static void fwd_pair(const cfg *c, rank *r, int x, const void *kvb, int y, int32_t kc,
                     int32_t dist) {
    const ta_problem p = pair_problem(c, dist);
    ta_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = r->q[x];
    a.k = at((void *)kvb, (size_t)y * c->chunk, c->elem);
    a.v = at((void *)kvb, (size_t)(2 + y) * c->chunk, c->elem);
    a.o = at(r->part_o[x], (size_t)kc * c->chunk, c->elem);
    a.lse = r->part_l[x] + (size_t)kc * c->chunkl;
    TK(ta_fwd(&p, TA_BACKEND_CUDA, &a, r->ws, r->ws_bytes, r->comp));
}

/* ta_bwd's inputs for the pair (q chunk x of rank r, k chunk y of the block
 * kvb): the merged o and lse. */
static ta_bwd_args bwd_inputs(const cfg *c, const rank *r, int x, const void *kvb, int y) {
    ta_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = r->q[x];
    a.k = at((void *)kvb, (size_t)y * c->chunk, c->elem);
    a.v = at((void *)kvb, (size_t)(2 + y) * c->chunk, c->elem);
    a.o = r->o[x];
    a.d_o = r->d_o[x];
    a.lse = r->lse[x];
    return a;
}

/* Fast mode's pair: ta_bwd into the storage type, then dq_acc[x], dkv[y] and
 * dkv[2 + y] += its outputs. */
static void bwd_pair_sum(const cfg *c, rank *r, int x, const void *kvb, float *dkv, int y,
                         int32_t dist) {
    const ta_problem p = pair_problem(c, dist);
    const unsigned blocks = 1024, threads = 256;
    ta_bwd_args a = bwd_inputs(c, r, x, kvb, y);
    a.dq = r->gq;
    a.dk = r->gk;
    a.dv = r->gv;
    TK(ta_bwd(&p, TA_BACKEND_CUDA, &a, r->ws, r->ws_bytes, r->comp));
    add_into<<<blocks, threads, 0, (cudaStream_t)r->comp>>>(r->dq_acc[x], r->gq, c->chunk, c->bf16);
    add_into<<<blocks, threads, 0, (cudaStream_t)r->comp>>>(dkv + (size_t)y * c->chunk, r->gk,
                                                             c->chunk, c->bf16);
    add_into<<<blocks, threads, 0, (cudaStream_t)r->comp>>>(dkv + (size_t)(2 + y) * c->chunk,
                                                             r->gv, c->chunk, c->bf16);
}

/* Exact mode's pair: one accumulating ta_bwd into the (hi, lo) pairs of q
 * chunk x (dq_acc[x]) and of k chunk y of the travelling block (dkv). */
static void bwd_pair_acc(const cfg *c, rank *r, int x, const void *kvb, float *dkv, int y,
                         int32_t dist) {
    const ta_problem p = pair_problem(c, dist);
    float *lo = dkv + 4 * c->chunk; /* the block's lo words */
    ta_bwd_args a = bwd_inputs(c, r, x, kvb, y);
    a.accumulate = TA_BWD_ACCUMULATE;
    a.dq = r->dq_acc[x];
    a.dq_lo = r->dq_acc[x] + c->chunk;
    a.dk = dkv + (size_t)y * c->chunk;
    a.dk_lo = lo + (size_t)y * c->chunk;
    a.dv = dkv + (size_t)(2 + y) * c->chunk;
    a.dv_lo = lo + (size_t)(2 + y) * c->chunk;
    TK(ta_bwd(&p, TA_BACKEND_CUDA, &a, r->ws, r->ws_bytes, r->comp));
}

/* The backward pair (q chunk x of rank r, k chunk y of the block kvb, whose
 * accumulators are dkv). */
static void bwd_pair(const cfg *c, rank *r, int x, const void *kvb, float *dkv, int y,
                     int32_t dist) {
    if (c->fast)
        bwd_pair_sum(c, r, x, kvb, dkv, y, dist);
    else
        bwd_pair_acc(c, r, x, kvb, dkv, y, dist);
}

/* The end of rank r's backward, its own block's accumulators in dkv: dq, dk,
 * dv of its chunks in the storage type (fast: the f32 sums stored; exact:
 * ta_bwd_finish of the hi words). */
static void bwd_finish(const cfg *c, rank *r, const float *dkv) {
    const unsigned blocks = 1024, threads = 256;
    int x;
    for (x = 0; x < 2; ++x) {
        const float *dk_hi = dkv + (size_t)x * c->chunk, *dv_hi = dkv + (size_t)(2 + x) * c->chunk;
        if (c->fast) {
            store_as<<<blocks, threads, 0, r->comp>>>(r->dq[x], r->dq_acc[x], c->chunk, c->bf16);
            store_as<<<blocks, threads, 0, r->comp>>>(r->dk[x], dk_hi, c->chunk, c->bf16);
            store_as<<<blocks, threads, 0, r->comp>>>(r->dv[x], dv_hi, c->chunk, c->bf16);
        } else {
            const ta_problem p = pair_problem(c, 0); /* S_q = S_k = C: dtype, scale */
            ta_bwd_finish_args f;
            memset(&f, 0, sizeof f);
            f.dq_hi = r->dq_acc[x];
            f.dk_hi = dk_hi;
            f.dv_hi = dv_hi;
            f.dq = r->dq[x];
            f.dk = r->dk[x];
            f.dv = r->dv[x];
            TK(ta_bwd_finish(&p, TA_BACKEND_CUDA, &f, r->comp));
        }
    }
}

/* q chunk x of rank r: o, lse = ta_merge of its parts 0 .. last (ascending). */
static void merge(const cfg *c, rank *r, int x, int32_t nparts) {
    const ta_problem p = pair_problem(c, 0);
    ta_merge_args m;
    memset(&m, 0, sizeof m);
    m.num_parts = nparts;
    m.o_parts = r->part_o[x];
    m.lse_parts = r->part_l[x];
    m.o = r->o[x];
    m.lse = r->lse[x];
    TK(ta_merge(&p, TA_BACKEND_CUDA, &m, r->comp));
}

/* The ring's forward (comm = 0: the sends skipped, for timing only). On
 * entry rank r's kv[0] holds its own block. */
static void reset_blocks(const cfg *c, rank *rk) {
    int r;
    for (r = 0; r < c->n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        CK(cudaMemcpyAsync(rk[r].kv[0], rk[r].home, 4 * c->chunk * c->elem,
                           cudaMemcpyDeviceToDevice, rk[r].comp));
        CK(cudaEventRecord(rk[r].arrived[0], rk[r].comp));
        CK(cudaStreamWaitEvent(rk[r].comm, rk[r].arrived[0], 0));
    }
}

static void ring_fwd(const cfg *c, rank *rk, ncclComm_t *comms, int comm) {
    int s, r, x, y;
    reset_blocks(c, rk);
    for (s = 0; s < c->n; ++s) {
        const int b = s & 1;
        if (comm && s + 1 < c->n) { /* block to the next rank while this step runs */
            for (r = 0; r < c->n; ++r) {
                CK(cudaSetDevice(rk[r].dev));
                CK(cudaStreamWaitEvent(rk[r].comm, rk[r].used[b ^ 1], 0));
            }
            x_group_start();
            for (r = 0; r < c->n; ++r) {
                x_send(rk[r].kv[b], 4 * c->chunk * c->elem, r, (r + 1) % c->n, comms, rk[r].comm);
                x_recv(rk[r].kv[b ^ 1], 4 * c->chunk * c->elem, r, (r + c->n - 1) % c->n, comms,
                       rk[r].comm);
            }
            x_group_end();
            for (r = 0; r < c->n; ++r) {
                CK(cudaSetDevice(rk[r].dev));
                CK(cudaEventRecord(rk[r].arrived[b ^ 1], rk[r].comm));
            }
        }
        for (r = 0; r < c->n; ++r) {
            const int src = (r + c->n - s) % c->n;
            CK(cudaSetDevice(rk[r].dev));
            for (x = 0; x < 2; ++x)
                for (y = 0; y < 2; ++y) {
                    const int32_t qc = chunk_of(c, r, x), kc = chunk_of(c, src, y);
                    int32_t dist;
                    if (visible(c, qc, kc, &dist)) fwd_pair(c, &rk[r], x, rk[r].kv[b], y, kc, dist);
                }
            CK(cudaEventRecord(rk[r].used[b], rk[r].comp));
            if (comm && s + 1 < c->n) CK(cudaStreamWaitEvent(rk[r].comp, rk[r].arrived[b ^ 1], 0));
        }
    }
    for (r = 0; r < c->n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        for (x = 0; x < 2; ++x) {
            const int32_t qc = chunk_of(c, r, x);
            merge(c, &rk[r], x, c->causal ? qc + 1 : 2 * c->n);
        }
    }
}

/* The ring's backward: K/V and the dk/dv accumulators (exact mode: both
 * words) travel together; each step's block leaves after the step's pairs
 * (its accumulators changed). On exit rank r's dkv[(n) & 1] holds its own
 * block's sums, and dq, dk, dv its chunks' gradients (bwd_finish). */
static int ring_bwd(const cfg *c, rank *rk, ncclComm_t *comms, int comm) {
    int s, r, x, y;
    const size_t acc = acc_words(c) * c->chunk; /* f32 words of one chunk's accumulator */
    reset_blocks(c, rk);
    for (r = 0; r < c->n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        for (x = 0; x < 2; ++x) CK(cudaMemsetAsync(rk[r].dq_acc[x], 0, acc * sizeof(float), rk[r].comp));
        CK(cudaMemsetAsync(rk[r].dkv[0], 0, 4 * acc * sizeof(float), rk[r].comp));
    }
    for (s = 0; s < c->n; ++s) {
        const int b = s & 1;
        for (r = 0; r < c->n; ++r) {
            const int src = (r + c->n - s) % c->n;
            CK(cudaSetDevice(rk[r].dev));
            for (x = 0; x < 2; ++x)
                for (y = 0; y < 2; ++y) {
                    const int32_t qc = chunk_of(c, r, x), kc = chunk_of(c, src, y);
                    int32_t dist;
                    if (visible(c, qc, kc, &dist))
                        bwd_pair(c, &rk[r], x, rk[r].kv[b], rk[r].dkv[b], y, dist);
                }
            CK(cudaEventRecord(rk[r].used[b], rk[r].comp));
            CK(cudaStreamWaitEvent(rk[r].comm, rk[r].used[b], 0));
        }
        if (comm) {
            x_group_start();
            for (r = 0; r < c->n; ++r) {
                const int to = (r + 1) % c->n, from = (r + c->n - 1) % c->n;
                if (s + 1 < c->n) {
                    x_send(rk[r].kv[b], 4 * c->chunk * c->elem, r, to, comms, rk[r].comm);
                    x_recv(rk[r].kv[b ^ 1], 4 * c->chunk * c->elem, r, from, comms, rk[r].comm);
                }
                x_send(rk[r].dkv[b], 4 * acc * sizeof(float), r, to, comms, rk[r].comm);
                x_recv(rk[r].dkv[b ^ 1], 4 * acc * sizeof(float), r, from, comms, rk[r].comm);
            }
            x_group_end();
        }
        for (r = 0; r < c->n; ++r) {
            CK(cudaSetDevice(rk[r].dev));
            CK(cudaEventRecord(rk[r].arrived[b ^ 1], rk[r].comm));
            CK(cudaStreamWaitEvent(rk[r].comp, rk[r].arrived[b ^ 1], 0));
        }
    }
    for (r = 0; r < c->n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        bwd_finish(c, &rk[r], rk[r].dkv[c->n & 1]);
    }
    return c->n & 1;
}

/* ---- check mode ---- */

static void fill(void *dst, size_t n, int bf16, uint32_t seed, float scale) {
    size_t i;
    float *f = (float *)malloc(n * sizeof(float));
    uint16_t *h = (uint16_t *)malloc(n * 2);
    uint32_t st = seed * 2654435761u + 1u;
    if (!f || !h) exit(1);
    for (i = 0; i < n; ++i) {
        st = st * 1664525u + 1013904223u;
        f[i] = ((float)(st >> 8) * (2.0f / 16777216.0f) - 1.0f) * scale;
        {
            uint32_t u;
            memcpy(&u, &f[i], 4);
            h[i] = (uint16_t)(u >> 16);
            u = (uint32_t)h[i] << 16;
            memcpy(&f[i], &u, 4); /* bf16-representable in both dtypes */
        }
    }
    CK(cudaMemcpy(dst, bf16 ? (void *)h : (void *)f, n * (bf16 ? 2 : 4), cudaMemcpyHostToDevice));
    free(f);
    free(h);
}

static void *download(const void *src, size_t bytes) {
    void *h = malloc(bytes);
    if (!h) exit(1);
    CK(cudaMemcpy(h, src, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* Every chunk's inputs on its owner: q, dO of chunk qc, k and v of chunk kc,
 * from seeds of the chunk index, so a copy on another device is identical. */
static void fill_rank(const cfg *c, rank *r, int rr) {
    int x;
    CK(cudaSetDevice(r->dev));
    for (x = 0; x < 2; ++x) {
        const int32_t ch = chunk_of(c, rr, x);
        fill(r->q[x], c->chunk, c->bf16, 100u + (uint32_t)ch, 1.0f);
        fill(r->d_o[x], c->chunk, c->bf16, 200u + (uint32_t)ch, 1.0f);
        fill(at(r->home, (size_t)x * c->chunk, c->elem), c->chunk, c->bf16, 300u + (uint32_t)ch, 1.0f);
        fill(at(r->home, (size_t)(2 + x) * c->chunk, c->elem), c->chunk, c->bf16,
             400u + (uint32_t)ch, 1.0f);
    }
    CK(cudaMemcpy(r->kv[0], r->home, 4 * c->chunk * c->elem, cudaMemcpyDeviceToDevice));
}

/* The outputs of rank r's chunks: o, lse, dq, its block's dk, dv (storage
 * type), and the accumulators' f32 words of each chunk x: [dq, dk, dv] (fast
 * mode: the sums) or [dq hi, dq lo, dk hi, dk lo, dv hi, dv lo] (exact). */
typedef struct outs {
    void *o[2], *dq[2], *dk[2], *dv[2];
    float *lse[2], *words[2];
} outs;

static void take(const cfg *c, rank *r, int home, outs *o) {
    const size_t nw = acc_words(c), cb = c->chunk * sizeof(float);
    size_t w;
    int x;
    CK(cudaSetDevice(r->dev));
    CK(cudaDeviceSynchronize());
    for (x = 0; x < 2; ++x) {
        o->o[x] = download(r->o[x], c->chunk * c->elem);
        o->lse[x] = (float *)download(r->lse[x], c->chunkl * sizeof(float));
        o->dq[x] = download(r->dq[x], c->chunk * c->elem);
        o->dk[x] = download(r->dk[x], c->chunk * c->elem);
        o->dv[x] = download(r->dv[x], c->chunk * c->elem);
        o->words[x] = (float *)malloc(3 * nw * cb);
        if (!o->words[x]) exit(1);
        for (w = 0; w < nw; ++w) { /* word w of chunk x: dkv + (4 w + x) chunks (dk), + 2 (dv) */
            const float *dkv = r->dkv[home] + 4 * w * c->chunk;
            CK(cudaMemcpy(o->words[x] + w * c->chunk, r->dq_acc[x] + w * c->chunk, cb,
                          cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(o->words[x] + (nw + w) * c->chunk, dkv + (size_t)x * c->chunk, cb,
                          cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(o->words[x] + (2 * nw + w) * c->chunk, dkv + (size_t)(2 + x) * c->chunk,
                          cb, cudaMemcpyDeviceToHost));
        }
    }
}

static void outs_free(outs *o) {
    int x;
    for (x = 0; x < 2; ++x) {
        free(o->o[x]);
        free(o->dq[x]);
        free(o->dk[x]);
        free(o->dv[x]);
        free(o->lse[x]);
        free(o->words[x]);
    }
}

static int same(const void *a, const void *b, size_t bytes, const char *what, int rr, int x) {
    if (memcmp(a, b, bytes) == 0) return 1;
    fprintf(stderr, "ring_attention: %s of rank %d chunk %d differs\n", what, rr, x);
    return 0;
}

static cfg small_cfg(int n, int bf16, int fast, int causal, int32_t wl) {
    cfg c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.bf16 = bf16;
    c.fast = fast;
    c.causal = causal || wl >= 0;
    c.window = wl >= 0;
    c.wl = wl;
    c.c = 128;
    c.h = 2;
    c.d = 64;
    c.elem = bf16 ? 2 : 4;
    c.chunk = (size_t)c.h * c.c * c.d;
    c.chunkl = (size_t)c.h * c.c;
    return c;
}

/* The ring on ranks rk (one per device of devs), forward then backward; its
 * outputs into got. */
static void run_ring(const cfg *c, rank *rk, ncclComm_t *comms, const int *devs, outs *got) {
    int r, home;
    for (r = 0; r < c->n; ++r) {
        rank_alloc(c, &rk[r], devs[r]);
        fill_rank(c, &rk[r], r);
    }
    ring_fwd(c, rk, comms, 1);
    home = ring_bwd(c, rk, comms, 1);
    for (r = 0; r < c->n; ++r) take(c, &rk[r], home, &got[r]);
}

/* A visible chunk pair of a ring step: q chunk x of the rank, k chunk y of
 * the block it meets (the sequence's chunk kc; diag: on the diagonal). */
typedef struct step_pair {
    int x, y;
    int32_t kc, dist;
} step_pair;

/* The visible pairs of rank r meeting the block of rank src, in the ring's
 * order (x, then y); returns how many (at most 4). */
static int step_pairs(const cfg *c, int r, int src, step_pair *out) {
    int x, y, n = 0;
    for (x = 0; x < 2; ++x)
        for (y = 0; y < 2; ++y) {
            const int32_t qc = chunk_of(c, r, x), kc = chunk_of(c, src, y);
            int32_t dist;
            if (!visible(c, qc, kc, &dist)) continue;
            out[n].x = x;
            out[n].y = y;
            out[n].dist = dist;
            out[n].kc = kc;
            ++n;
        }
    return n;
}

/* The ring's steps on one device (the ranks em all there, filled): at step s
 * rank r meets the block of rank r - s, whose accumulators stay in place;
 * the same calls in the same order as the ring. */
static void emulate(const cfg *c, rank *em) {
    const int n = c->n;
    const size_t acc = acc_words(c) * c->chunk;
    step_pair pr[4];
    int s, r, x, i, np;
    for (s = 0; s < n; ++s) /* forward */
        for (r = 0; r < n; ++r) {
            const int src = (r + n - s) % n;
            np = step_pairs(c, r, src, pr);
            for (i = 0; i < np; ++i)
                fwd_pair(c, &em[r], pr[i].x, em[src].kv[0], pr[i].y, pr[i].kc, pr[i].dist);
        }
    for (r = 0; r < n; ++r)
        for (x = 0; x < 2; ++x) merge(c, &em[r], x, c->causal ? chunk_of(c, r, x) + 1 : 2 * n);
    /* backward: block src's accumulators sum the ranks src, src + 1, ... */
    for (r = 0; r < n; ++r) {
        for (x = 0; x < 2; ++x)
            CK(cudaMemsetAsync(em[r].dq_acc[x], 0, acc * sizeof(float), em[r].comp));
        CK(cudaMemsetAsync(em[r].dkv[0], 0, 4 * acc * sizeof(float), em[r].comp));
    }
    CK(cudaDeviceSynchronize());
    for (s = 0; s < n; ++s)
        for (r = 0; r < n; ++r) {
            const int src = (r + n - s) % n;
            np = step_pairs(c, r, src, pr);
            for (i = 0; i < np; ++i) {
                CK(cudaStreamSynchronize(em[src].comp));
                bwd_pair(c, &em[r], pr[i].x, em[src].kv[0], em[src].dkv[0], pr[i].y, pr[i].dist);
                CK(cudaStreamSynchronize(em[r].comp));
            }
        }
    for (r = 0; r < n; ++r) bwd_finish(c, &em[r], em[r].dkv[0]);
}

/* ---- the whole sequence (S = 2 N C rows, chunk ch at rows ch C ..) ---- */

/* Chunk ch's owner rank and its slot there (chunk_of's inverse). */
static void owner_of(const cfg *c, int32_t ch, int *rr, int *xx) {
    *rr = ch < c->n ? (int)ch : (int)(2 * c->n - 1 - ch);
    *xx = ch < c->n ? 0 : 1;
}

/* The whole sequence's [H, S, w] tensor as f32 on the host, from the chunks'
 * [H, C, w] buffers: tab[r][x] is slot x of rank r (device memory when dev,
 * else host; bf16 widened). */
static float *seq_host(const cfg *c, const void *const (*tab)[2], int dev, size_t w, int bf16) {
    const int32_t S = 2 * c->n * c->c;
    const size_t per = (size_t)c->h * c->c * w, eb = bf16 ? 2 : 4;
    float *full = (float *)malloc((size_t)c->h * S * w * sizeof(float));
    void *tmp = malloc(per * eb);
    int32_t ch, h;
    size_t i;
    if (!full || !tmp) exit(1);
    for (ch = 0; ch < 2 * c->n; ++ch) {
        int rr, xx;
        const void *src;
        owner_of(c, ch, &rr, &xx);
        src = tab[rr][xx];
        if (dev) {
            CK(cudaMemcpy(tmp, src, per * eb, cudaMemcpyDeviceToHost));
            src = tmp;
        }
        for (h = 0; h < c->h; ++h) {
            float *dst = full + ((size_t)h * S + (size_t)ch * c->c) * w;
            const size_t o = (size_t)h * c->c * w;
            for (i = 0; i < (size_t)c->c * w; ++i) {
                if (bf16) {
                    const uint32_t u = (uint32_t)((const uint16_t *)src)[o + i] << 16;
                    memcpy(&dst[i], &u, 4);
                } else {
                    dst[i] = ((const float *)src)[o + i];
                }
            }
        }
    }
    free(tmp);
    return full;
}

/* An input of the whole sequence from the ranks' buffers: t = 0 q, 1 k, 2 v,
 * 3 dO. */
static float *seq_input(const cfg *c, const rank *rk, int t) {
    const void *tab[MAXR][2];
    int r, x;
    for (r = 0; r < c->n; ++r)
        for (x = 0; x < 2; ++x)
            tab[r][x] = t == 0   ? rk[r].q[x]
                        : t == 3 ? rk[r].d_o[x]
                                 : (const void *)at(rk[r].home, (size_t)(t == 1 ? x : 2 + x) * c->chunk,
                                                    c->elem);
    return seq_host(c, tab, 1, (size_t)c->d, c->bf16);
}

/* An output of the ring for the whole sequence: t = 0 o, 1 lse, 2 dq, 3 dk,
 * 4 dv. */
static float *seq_output(const cfg *c, const outs *got, int t) {
    const void *tab[MAXR][2];
    int r, x;
    for (r = 0; r < c->n; ++r)
        for (x = 0; x < 2; ++x)
            tab[r][x] = t == 0   ? got[r].o[x]
                        : t == 1 ? (const void *)got[r].lse[x]
                        : t == 2 ? got[r].dq[x]
                        : t == 3 ? got[r].dk[x]
                                 : got[r].dv[x];
    return t == 1 ? seq_host(c, tab, 0, 1, 0) : seq_host(c, tab, 0, (size_t)c->d, c->bf16);
}

static void *upload(const float *h, size_t n) {
    void *d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

/* max |a - ref| / max |ref| over n elements. */
static double rel_err(const float *a, const float *ref, size_t n) {
    double e = 0.0, m = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        const double d = fabs((double)a[i] - (double)ref[i]);
        if (d > e || d != d) e = d; /* a NaN sticks */
        if (fabs((double)ref[i]) > m) m = fabs((double)ref[i]);
    }
    return m > 0.0 ? e / m : (e == 0.0 ? 0.0 : INFINITY);
}

/* The whole sequence's problem: S_q = S_k = 2 N C. */
static ta_problem seq_problem(const cfg *c) {
    ta_problem p = pair_problem(c, 0);
    p.seq_q = p.seq_k = 2 * c->n * c->c;
    p.flags = (c->causal ? TA_CAUSAL : 0u) | (c->window ? TA_WINDOW : 0u);
    p.q_offset = 0;
    return p;
}

/* Exact f32: the ring's o, lse == one ta_fwd over the whole sequence with
 * num_splits = 2N (the same key cut: parts of C keys), bit for bit. */
static int check_splits(const cfg *c, const rank *em, const outs *got) {
    const int32_t S = 2 * c->n * c->c;
    const size_t nt = (size_t)c->h * S * c->d, nl = (size_t)c->h * S;
    ta_problem p = seq_problem(c);
    ta_fwd_args a;
    float *q = seq_input(c, em, 0), *k = seq_input(c, em, 1), *v = seq_input(c, em, 2);
    float *ro = seq_output(c, got, 0), *rl = seq_output(c, got, 1), *ho, *hl;
    void *qd = upload(q, nt), *kd = upload(k, nt), *vd = upload(v, nt), *o, *lse, *ws;
    size_t wb = 0, i;
    int ok = 1;
    p.num_splits = 2 * c->n; /* C = 128 keys: whole K tiles per part */
    CK(cudaMalloc(&o, nt * 4));
    CK(cudaMalloc(&lse, nl * 4));
    TK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &wb));
    CK(cudaMalloc(&ws, wb ? wb : 64));
    memset(&a, 0, sizeof a);
    a.q = qd;
    a.k = kd;
    a.v = vd;
    a.o = o;
    a.lse = (float *)lse;
    TK(ta_fwd(&p, TA_BACKEND_CUDA, &a, ws, wb, NULL));
    ho = (float *)download(o, nt * 4);
    hl = (float *)download(lse, nl * 4);
    for (i = 0; i < nt && ok; ++i)
        if (memcmp(&ho[i], &ro[i], 4) != 0) {
            fprintf(stderr, "ring_attention: o of chunk %d differs from ta_fwd with %d splits\n",
                    (int)((i / (size_t)c->d) % (size_t)S / (size_t)c->c), 2 * c->n);
            ok = 0;
        }
    for (i = 0; i < nl && ok; ++i)
        if (memcmp(&hl[i], &rl[i], 4) != 0) {
            fprintf(stderr, "ring_attention: lse of chunk %d differs from ta_fwd with %d splits\n",
                    (int)(i % (size_t)S / (size_t)c->c), 2 * c->n);
            ok = 0;
        }
    printf("  exact f32 %s: the ring's o, lse == one ta_fwd with num_splits = %d: %s\n",
           c->causal ? "causal" : "full", 2 * c->n, ok ? "bit for bit" : "NO");
    free(q);
    free(k);
    free(v);
    free(ro);
    free(rl);
    free(ho);
    free(hl);
    CK(cudaFree(qd));
    CK(cudaFree(kd));
    CK(cudaFree(vd));
    CK(cudaFree(o));
    CK(cudaFree(lse));
    CK(cudaFree(ws));
    return ok;
}

#define WHOLE_BWD_TOL 1e-5

/* Exact f32: the ring's dq, dk, dv against one ta_bwd over the whole
 * sequence with the ring's o and lse. Not bit for bit: the ring sums each
 * gradient's pairs in ring order (docs/api.md, "Backward over key and query
 * ranges", "The order"); max |diff| / max |ref| per gradient below 1e-5. */
static int check_whole_bwd(const cfg *c, const rank *em, const outs *got) {
    const int32_t S = 2 * c->n * c->c;
    const size_t nt = (size_t)c->h * S * c->d, nl = (size_t)c->h * S;
    const ta_problem p = seq_problem(c);
    const char *name[3] = {"dq", "dk", "dv"};
    ta_bwd_args a;
    float *in[6], *ring[3], *one[3];
    void *d_in[6], *d_g[3], *ws;
    size_t wb = 0;
    double e[3];
    int i, ok = 1;
    for (i = 0; i < 4; ++i) in[i] = seq_input(c, em, i); /* q, k, v, dO */
    in[4] = seq_output(c, got, 0);                        /* o */
    in[5] = seq_output(c, got, 1);                        /* lse */
    for (i = 0; i < 6; ++i) d_in[i] = upload(in[i], i == 5 ? nl : nt);
    for (i = 0; i < 3; ++i) CK(cudaMalloc(&d_g[i], nt * 4));
    TK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &wb));
    CK(cudaMalloc(&ws, wb ? wb : 64));
    memset(&a, 0, sizeof a);
    a.q = d_in[0];
    a.k = d_in[1];
    a.v = d_in[2];
    a.d_o = d_in[3];
    a.o = d_in[4];
    a.lse = (const float *)d_in[5];
    a.dq = d_g[0];
    a.dk = d_g[1];
    a.dv = d_g[2];
    TK(ta_bwd(&p, TA_BACKEND_CUDA, &a, ws, wb, NULL));
    for (i = 0; i < 3; ++i) {
        one[i] = (float *)download(d_g[i], nt * 4);
        ring[i] = seq_output(c, got, 2 + i);
        e[i] = rel_err(ring[i], one[i], nt);
        if (!(e[i] < WHOLE_BWD_TOL)) {
            fprintf(stderr, "ring_attention: the ring's %s against one ta_bwd: %.3e\n", name[i],
                    e[i]);
            ok = 0;
        }
    }
    printf("  exact f32 %s: the ring's dq, dk, dv against one ta_bwd over S = %d (ring order, "
           "not bit for bit): max |diff| / max |ref| %.3e %.3e %.3e (< %.0e): %s\n",
           c->causal ? "causal" : "full", (int)S, e[0], e[1], e[2], WHOLE_BWD_TOL,
           ok ? "ok" : "NO");
    for (i = 0; i < 6; ++i) {
        free(in[i]);
        CK(cudaFree(d_in[i]));
    }
    for (i = 0; i < 3; ++i) {
        free(ring[i]);
        free(one[i]);
        CK(cudaFree(d_g[i]));
    }
    CK(cudaFree(ws));
    return ok;
}

/* float64 attention over the whole sequence ([H, S, D] inputs, the library's
 * scale 1/sqrtf(D), the problem's mask) and the magnitudes of docs/exactness.md
 * section 9 (test/oracle.h's): |C|_ij = scale sum_d |q_id k_jd|,
 * o_mag_i = sum_j P_ij (|v_j| + |C|_ij (|v_j| + |o_i|)) per feature,
 * lse_mag_i = max_j |C|_ij + log sum_j exp(C_ij - max_j C_ij). */
static void ref_fwd(const cfg *c, const float *q, const float *k, const float *v, double *o,
                    double *lse, double *o_mag, double *lse_mag) {
    const int32_t S = 2 * c->n * c->c, D = c->d;
    const double scale = (double)(1.0f / sqrtf((float)D));
    double *cs = (double *)malloc((size_t)S * sizeof(double));
    double *cm = (double *)malloc((size_t)S * sizeof(double));
    double *pr = (double *)malloc((size_t)S * sizeof(double));
    int32_t h, i, j, d;
    if (!cs || !cm || !pr) exit(1);
    for (h = 0; h < c->h; ++h)
        for (i = 0; i < S; ++i) {
            const size_t row = (size_t)h * S + (size_t)i;
            const float *qi = q + row * (size_t)D;
            const int32_t nj = c->causal ? i + 1 : S; /* S_q = S_k: row i sees keys 0 .. i */
            double m = -INFINITY, mm = 0.0, sum = 0.0;
            for (j = 0; j < nj; ++j) {
                const float *kj = k + ((size_t)h * S + (size_t)j) * (size_t)D;
                double dot = 0.0, mag = 0.0;
                for (d = 0; d < D; ++d) {
                    const double x = (double)qi[d] * (double)kj[d];
                    dot += x;
                    mag += fabs(x);
                }
                cs[j] = scale * dot;
                cm[j] = scale * mag;
                if (cs[j] > m) m = cs[j];
                if (cm[j] > mm) mm = cm[j];
            }
            for (j = 0; j < nj; ++j) {
                pr[j] = exp(cs[j] - m);
                sum += pr[j];
            }
            for (j = 0; j < nj; ++j) pr[j] /= sum;
            lse[row] = m + log(sum);
            lse_mag[row] = mm + log(sum);
            for (d = 0; d < D; ++d) {
                const float *vd = v + (size_t)h * S * (size_t)D + (size_t)d;
                double od = 0.0, mag = 0.0;
                for (j = 0; j < nj; ++j) od += pr[j] * (double)vd[(size_t)j * D];
                for (j = 0; j < nj; ++j) {
                    const double av = fabs((double)vd[(size_t)j * D]);
                    mag += pr[j] * (av + cm[j] * (av + fabs(od)));
                }
                o[row * (size_t)D + (size_t)d] = od;
                o_mag[row * (size_t)D + (size_t)d] = mag;
            }
        }
    free(cs);
    free(cm);
    free(pr);
}

/* max over elements of |x - ref| / bound (a zero bound: x must equal ref). */
static double bound_ratio(const float *x, const double *ref, const double *mag, double factor,
                          size_t n) {
    double worst = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        const double err = fabs((double)x[i] - ref[i]), b = factor * mag[i];
        const double r = b > 0.0 ? err / b : (err == 0.0 ? 0.0 : INFINITY);
        if (r > worst || r != r) worst = r; /* a NaN sticks */
    }
    return worst;
}

/* Fast bf16: the ring's o, lse against the float64 reference on the same
 * (bf16) inputs. Bound for o: docs/exactness.md section 9's 2u o_mag for one
 * call (p rounded to bf16, o rounded once) plus u o_mag for the ring's extra
 * rounding: each pair's o is stored in bf16 before ta_merge (weighted by its
 * part's probability mass, those roundings add at most u sum_j P_ij |v_j| <=
 * u o_mag); u = 2^-8. lse: section 9's 1e-5 lse_mag (f32 arithmetic only; the
 * merge adds f32 roundings). */
static int check_fast_fwd(const cfg *c, const rank *em, const outs *got) {
    const int32_t S = 2 * c->n * c->c;
    const size_t nt = (size_t)c->h * S * c->d, nl = (size_t)c->h * S;
    const double u = 1.0 / 256.0, o_fac = 3.0 * u, l_fac = 1e-5;
    float *q = seq_input(c, em, 0), *k = seq_input(c, em, 1), *v = seq_input(c, em, 2);
    float *ro = seq_output(c, got, 0), *rl = seq_output(c, got, 1);
    double *o = (double *)malloc(nt * sizeof(double)), *om = (double *)malloc(nt * sizeof(double));
    double *l = (double *)malloc(nl * sizeof(double)), *lm = (double *)malloc(nl * sizeof(double));
    double eo, el;
    int ok;
    if (!o || !om || !l || !lm) exit(1);
    ref_fwd(c, q, k, v, o, l, om, lm);
    eo = bound_ratio(ro, o, om, o_fac, nt);
    el = bound_ratio(rl, l, lm, l_fac, nl);
    ok = eo <= 1.0 && el <= 1.0;
    printf("  fast bf16 %s: the ring's o, lse against float64 over S = %d: o error / (3u o_mag) "
           "%.3f (%.3fu), lse error / (1e-5 lse_mag) %.3f: %s\n",
           c->causal ? "causal" : "full", (int)S, eo, 3.0 * eo, el, ok ? "within bound" : "NO");
    if (!ok) fprintf(stderr, "ring_attention: fast bf16 o or lse out of bound\n");
    free(q);
    free(k);
    free(v);
    free(ro);
    free(rl);
    free(o);
    free(om);
    free(l);
    free(lm);
    return ok;
}

/* Fast bf16: the ring's dq, dk, dv against the exact f32 ring on the same
 * (bf16-representable) inputs, printed only: each pair's gradients are
 * rounded to bf16 before the f32 sums, and docs/exactness.md section 9's
 * fast-backward bound is per call against the float64 oracle's magnitudes,
 * not a simple bound for these sums. */
static void report_fast_bwd(const cfg *c, ncclComm_t *comms, const int *devs, const outs *got) {
    const cfg e = small_cfg(c->n, 0, 0, c->causal, c->window ? c->wl : -1);
    const size_t nt = (size_t)c->h * 2 * c->n * c->c * c->d;
    rank rk[MAXR];
    outs ex[MAXR];
    double err[3];
    int i, r;
    run_ring(&e, rk, comms, devs, ex);
    for (i = 0; i < 3; ++i) {
        float *a = seq_output(c, got, 2 + i), *b = seq_output(&e, ex, 2 + i);
        err[i] = rel_err(a, b, nt);
        free(a);
        free(b);
    }
    printf("  fast bf16 %s: the ring's dq, dk, dv against the exact f32 ring, same inputs: max "
           "|diff| / max |exact| %.3e %.3e %.3e (informational)\n",
           c->causal ? "causal" : "full", err[0], err[1], err[2]);
    for (r = 0; r < c->n; ++r) {
        outs_free(&ex[r]);
        rank_free(&rk[r]);
    }
}

/* The N-rank ring against the same chunk calls, in the same order, on one
 * GPU (N ranks emulated on device 0, no NCCL: the blocks copied around);
 * then the checks of the configuration (exact f32: against whole-sequence
 * calls; fast bf16: against float64 and the exact ring). */
static int check_one(int n, int bf16, int fast, int causal, int32_t wl, ncclComm_t *comms,
                     const int *devs) {
    const cfg c = small_cfg(n, bf16, fast, causal, wl);
    const size_t wb = 3 * acc_words(&c) * c.chunk * sizeof(float);
    rank rk[MAXR], em[MAXR];
    outs got[MAXR], want[MAXR];
    int r, x, ok = 1;
    run_ring(&c, rk, comms, devs, got);
    CK(cudaSetDevice(devs[0]));
    for (r = 0; r < n; ++r) {
        rank_alloc(&c, &em[r], devs[0]);
        fill_rank(&c, &em[r], r);
    }
    emulate(&c, em);
    for (r = 0; r < n; ++r) take(&c, &em[r], 0, &want[r]);
    for (r = 0; r < n; ++r)
        for (x = 0; x < 2; ++x) {
            ok &= same(got[r].o[x], want[r].o[x], c.chunk * c.elem, "o", r, x);
            ok &= same(got[r].lse[x], want[r].lse[x], c.chunkl * 4, "lse", r, x);
            ok &= same(got[r].dq[x], want[r].dq[x], c.chunk * c.elem, "dq", r, x);
            ok &= same(got[r].dk[x], want[r].dk[x], c.chunk * c.elem, "dk", r, x);
            ok &= same(got[r].dv[x], want[r].dv[x], c.chunk * c.elem, "dv", r, x);
            ok &= same(got[r].words[x], want[r].words[x], wb,
                       fast ? "the f32 sums" : "the hi and lo words", r, x);
        }
    printf("%d ranks, %s %s, %s%s: ring == one GPU, same chunk calls and order: %s\n", n,
           bf16 ? "bf16" : "f32", fast ? "fast" : "exact", c.causal ? "causal" : "full",
           c.window ? " window" : "",
           ok ? (fast ? "o, lse, dq, dk, dv and the f32 sums bit for bit"
                      : "o, lse, dq, dk, dv and the hi and lo words bit for bit")
              : "DIFFERENT");
    CK(cudaSetDevice(devs[0]));
    if (!fast && !bf16) {
        ok &= check_splits(&c, em, got);
        ok &= check_whole_bwd(&c, em, got);
    }
    if (fast && bf16) {
        ok &= check_fast_fwd(&c, em, got);
        report_fast_bwd(&c, comms, devs, got);
    }
    for (r = 0; r < n; ++r) {
        outs_free(&got[r]);
        outs_free(&want[r]);
        rank_free(&rk[r]);
        rank_free(&em[r]);
    }
    return ok;
}


/* ---- MTA over the ring (forward): key ranges with the conv's halos ----
 *
 * The conv of a chunk pair reads raw scores past its chunks: the c_q - 1
 * query rows above its q chunk, and P_k keys past each end of its k chunk
 * (docs/api.md, "Key ranges and the query offset"). Defined exchange, once
 * before the ring (halo_exchange): chunk c's owner receives
 *   - the last E = ce rows of k and v chunk c - 1 (ce = block_k - (c_k - 1),
 *     the effective K tile width: the left halo is a whole tile, so the
 *     chunk's keys start on a tile boundary of the pair call), and
 *   - the first P_k rows of k and v chunk c + 1,
 *   - the last c_q - 1 rows of q chunk c - 1 (its q_history),
 * from their owners (ncclSend / ncclRecv, or a copy on the same rank). Each
 * K/V chunk then travels the ring with its halos: [E | C | P_k] rows (none
 * past the sequence's ends). A visible pair (q chunk a, k chunk b <= a) is
 * one ta_fwd: keys = the halo'd chunk (S_k = E + C + R), key_begin = E,
 * key_end = E + C, q_history = min(c_q - 1, a C), q_offset = a C - b C - R
 * (row r at the position of row a C + r). The parts merge in key order, as
 * for SDPA, and in exact f32 the result is one ta_fwd over the sequence with
 * num_splits = 2N, bit for bit (checked below; test_ring_mta checks the same
 * calls on REF, CPU and CUDA). The backward: check_mta_bwd below.
 */
typedef struct mcfg {
    int n;
    int32_t c, h, d, cq, ck, pk, ce, lmax; /* lmax = ce + C + P_k: a halo'd chunk's rows */
    int32_t wl;                            /* window_left with TA_WINDOW; < 0: no window */
} mcfg;

typedef struct mrank {
    int dev;
    cudaStream_t comp;
    float *q[2], *qh[2], *o[2], *lse[2]; /* q chunks, their history rows [H, c_q - 1, D] */
    float *kv[2], *home;  /* halo'd blocks: [k x0, k x1, v x0, v x1], each [H, lmax, D] */
    float *part_o[2], *part_l[2];
    float *w;             /* conv weights [H, c_q, c_k] */
    void *ws;
    size_t ws_bytes;
} mrank;

static int32_t m_owner(const mcfg *c, int32_t ch) { return ch < c->n ? ch : 2 * c->n - 1 - ch; }
static int m_slot(const mcfg *c, int32_t ch) { return ch < c->n ? 0 : 1; }
static int32_t m_left(const mcfg *c, int32_t ch) { return ch > 0 && c->pk > 0 ? c->ce : 0; }
static int32_t m_right(const mcfg *c, int32_t ch) { return ch + 1 < 2 * c->n ? c->pk : 0; }
static size_t m_slot_elems(const mcfg *c) { return (size_t)c->h * c->lmax * c->d; }

/* The pair (q chunk a, k chunk b) as one ta_fwd (the recipe above). */
static ta_problem m_pair_problem(const mcfg *c, int32_t a, int32_t b) {
    ta_problem p;
    const int32_t e = m_left(c, b), r = m_right(c, b);
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = c->h;
    p.seq_q = c->c;
    p.seq_k = e + c->c + r;
    p.head_dim = p.head_dim_v = c->d;
    p.dtype = TA_F32;
    p.flags = TA_CAUSAL | (c->wl >= 0 ? TA_WINDOW : 0u);
    p.window_left = c->wl >= 0 ? c->wl : 0;
    p.window_right = c->wl >= 0 ? -1 : 0;
    p.conv_q = c->cq;
    p.conv_k = c->ck;
    p.block_k = 64;
    p.q_history = c->cq > 0 ? (a * c->c < c->cq - 1 ? a * c->c : c->cq - 1) : 0;
    p.key_begin = e;
    p.key_end = e + c->c;
    p.q_offset = (a - b) * c->c - r;
    return p;
}

/* Rows [r0, r0 + rows) of every head (heads) of x ([heads, len, w] f32) on
 * rank src (device sdev, stream ss) to rows [d0, ..) of y ([heads, ylen, w])
 * on rank dst (stream ds): NCCL inside the caller's group, or a copy on one
 * rank. */
static void xfer_rows(ncclComm_t *comms, int32_t heads, int src, int sdev, cudaStream_t ss,
                      const float *x, int32_t len, int32_t r0, int dst, cudaStream_t ds, float *y,
                      int32_t ylen, int32_t d0, int32_t rows, int32_t w) {
    int32_t h;
    if (rows <= 0) return;
    for (h = 0; h < heads; ++h) {
        const float *from = x + ((size_t)h * len + r0) * w;
        float *to = y + ((size_t)h * ylen + d0) * w;
        const size_t n = (size_t)rows * w;
        if (src == dst) {
            CK(cudaSetDevice(sdev));
            CK(cudaMemcpyAsync(to, from, n * 4, cudaMemcpyDeviceToDevice, ss));
        } else {
            x_send(from, n * 4, src, dst, comms, ss);
            x_recv(to, n * 4, dst, src, comms, ds);
        }
    }
}

/* xfer_rows of D-wide rows between the forward's ranks. */
static void m_rows(const mcfg *c, mrank *rk, ncclComm_t *comms, int src, const float *x,
                   int32_t len, int32_t r0, int dst, float *y, int32_t ylen, int32_t d0,
                   int32_t rows) {
    xfer_rows(comms, c->h, src, rk[src].dev, rk[src].comp, x, len, r0, dst, rk[dst].comp, y, ylen,
              d0, rows, c->d);
}

/* The halo exchange (once): every chunk's left and right halo rows of k and
 * v into its owner's home block, every q chunk's history rows. On entry each
 * home block holds its chunks' own rows at [E, E + C). */
static void halo_exchange(const mcfg *c, mrank *rk, ncclComm_t *comms) {
    int32_t ch, kv;
    x_group_start();
    for (ch = 0; ch < 2 * c->n; ++ch) {
        const int own = m_owner(c, ch), sl = m_slot(c, ch);
        const size_t slot = m_slot_elems(c);
        if (ch > 0) { /* left halo: chunk ch - 1's last E rows; its q rows above */
            const int from = m_owner(c, ch - 1), fs = m_slot(c, ch - 1);
            const int32_t e = m_left(c, ch), fe = m_left(c, ch - 1);
            for (kv = 0; kv < 2; ++kv)
                m_rows(c, rk, comms, from, rk[from].home + (size_t)(2 * kv + fs) * slot, c->lmax,
                       fe + c->c - e, own, rk[own].home + (size_t)(2 * kv + sl) * slot, c->lmax, 0,
                       e);
            m_rows(c, rk, comms, from, rk[from].q[fs], c->c, c->c - (c->cq - 1), own,
                   rk[own].qh[sl], c->cq - 1, 0, c->cq - 1);
        }
        if (ch + 1 < 2 * c->n) { /* right halo: chunk ch + 1's first P_k rows */
            const int from = m_owner(c, ch + 1), fs = m_slot(c, ch + 1);
            const int32_t e = m_left(c, ch), fe = m_left(c, ch + 1);
            for (kv = 0; kv < 2; ++kv)
                m_rows(c, rk, comms, from, rk[from].home + (size_t)(2 * kv + fs) * slot, c->lmax,
                       fe, own, rk[own].home + (size_t)(2 * kv + sl) * slot, c->lmax, e + c->c,
                       c->pk);
        }
    }
    x_group_end();
}

static void m_fwd_pair(const mcfg *c, mrank *r, int x, const float *blk, int y, int32_t qc,
                       int32_t kc) {
    /* the slot holds [E | C | R] rows from row 0, strided by lmax rows per head */
    const ta_problem p = m_pair_problem(c, qc, kc);
    const size_t slot = m_slot_elems(c), nq = (size_t)c->h * c->c * c->d;
    ta_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = r->q[x];
    a.k = blk + (size_t)y * slot;
    a.v = blk + (size_t)(2 + y) * slot;
    a.k_strides.head = a.v_strides.head = (int64_t)c->lmax * c->d; /* the slot's pitch */
    a.k_strides.seq = a.v_strides.seq = c->d;
    a.k_strides.batch = a.v_strides.batch = (int64_t)c->h * c->lmax * c->d;
    a.conv_w = c->cq > 0 ? r->w : NULL;
    if (p.q_history > 0) { /* the last q_history of the c_q - 1 rows held */
        a.q_hist = r->qh[x] + (size_t)(c->cq - 1 - p.q_history) * c->d;
        a.q_hist_strides.head = (int64_t)(c->cq - 1) * c->d;
        a.q_hist_strides.seq = c->d;
        a.q_hist_strides.batch = (int64_t)c->h * (c->cq - 1) * c->d;
    }
    a.o = r->part_o[x] + (size_t)kc * nq;
    a.lse = r->part_l[x] + (size_t)kc * c->h * c->c;
    TK(ta_fwd(&p, TA_BACKEND_CUDA, &a, r->ws, r->ws_bytes, r->comp));
}

/* The ring's MTA forward: the blocks travel as in ring_fwd (here without
 * overlap: the sends are in their own group after each step), then the
 * merge of parts 0 .. a of q chunk a. */
static void ring_mta_fwd(const mcfg *c, mrank *rk, ncclComm_t *comms) {
    const size_t blk = 4 * m_slot_elems(c);
    int s, r, x, y;
    for (r = 0; r < c->n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        CK(cudaMemcpyAsync(rk[r].kv[0], rk[r].home, blk * 4, cudaMemcpyDeviceToDevice, rk[r].comp));
    }
    for (s = 0; s < c->n; ++s) {
        const int b = s & 1;
        for (r = 0; r < c->n; ++r) {
            const int src = (r + c->n - s) % c->n;
            CK(cudaSetDevice(rk[r].dev));
            for (x = 0; x < 2; ++x)
                for (y = 0; y < 2; ++y) {
                    const int32_t qc = x == 0 ? r : 2 * c->n - 1 - r;
                    const int32_t kc = y == 0 ? src : 2 * c->n - 1 - src;
                    if (kc <= qc) m_fwd_pair(c, &rk[r], x, rk[r].kv[b], y, qc, kc);
                }
        }
        if (s + 1 < c->n) {
            x_group_start();
            for (r = 0; r < c->n; ++r) {
                x_send(rk[r].kv[b], blk * 4, r, (r + 1) % c->n, comms, rk[r].comp);
                x_recv(rk[r].kv[b ^ 1], blk * 4, r, (r + c->n - 1) % c->n, comms, rk[r].comp);
            }
            x_group_end();
        }
    }
    for (r = 0; r < c->n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        for (x = 0; x < 2; ++x) {
            const int32_t qc = x == 0 ? r : 2 * c->n - 1 - r;
            ta_problem p = m_pair_problem(c, qc, qc);
            ta_merge_args m;
            p.q_history = 0;
            p.key_begin = p.key_end = p.q_offset = 0;
            memset(&m, 0, sizeof m);
            m.num_parts = qc + 1;
            m.o_parts = rk[r].part_o[x];
            m.lse_parts = rk[r].part_l[x];
            m.o = rk[r].o[x];
            m.lse = rk[r].lse[x];
            TK(ta_merge(&p, TA_BACKEND_CUDA, &m, rk[r].comp));
        }
    }
}

/* The conv weights of the MTA checks (host, nw floats; free()). */
static float *conv_weights(size_t nw) {
    float *w = (float *)malloc(nw * 4);
    size_t x;
    if (!w) exit(1);
    for (x = 0; x < nw; ++x) w[x] = 0.05f * (float)((x * 7) % 11) - 0.2f;
    return w;
}

/* The MTA ring (cq = ck = 0: SDPA) with an optional sliding window (wl >=
 * 0: window_left, causal) against one ta_fwd over the whole sequence with
 * num_splits = 2N on device 0 (exact f32: o and lse bit for bit). */
static int check_mta(int n, int32_t cq, int32_t ck, int32_t tiles, int32_t wl, ncclComm_t *comms,
                     const int *devs) {
    mcfg c;
    mrank rk[MAXR];
    const int32_t H = 2, D = 64;
    int32_t S, ch, h;
    int r, x, ok = 1;
    size_t nt, nl, wb = 0, nw;
    float *q, *k, *v, *o, *lse, *ho, *hl, *w_host;
    void *ws;
    ta_problem p;
    ta_fwd_args a;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.h = H;
    c.d = D;
    c.cq = cq;
    c.ck = ck;
    c.wl = wl;
    c.pk = ck > 0 ? (ck - 1) / 2 : 0;
    c.ce = 64 - 2 * c.pk;
    c.c = tiles * c.ce;
    c.lmax = c.ce + c.c + c.pk;
    S = 2 * n * c.c;
    nt = (size_t)H * S * D;
    nl = (size_t)H * S;
    nw = cq > 0 ? (size_t)H * cq * ck : 1;
    /* the whole sequence on device 0: q, k, v [H, S, D] and the weights */
    CK(cudaSetDevice(devs[0]));
    CK(cudaMalloc((void **)&q, nt * 4));
    CK(cudaMalloc((void **)&k, nt * 4));
    CK(cudaMalloc((void **)&v, nt * 4));
    CK(cudaMalloc((void **)&o, nt * 4));
    CK(cudaMalloc((void **)&lse, nl * 4));
    fill(q, nt, 0, 11u, 1.0f);
    fill(k, nt, 0, 12u, 1.0f);
    fill(v, nt, 0, 13u, 1.0f);
    w_host = conv_weights(nw);
    /* the ranks: their q chunks and their chunks' own k, v rows at [E, E + C) */
    for (r = 0; r < n; ++r) {
        mrank *m = &rk[r];
        const size_t nq = (size_t)H * c.c * D, slot = m_slot_elems(&c);
        m->dev = devs[r];
        CK(cudaSetDevice(m->dev));
        CK(cudaStreamCreateWithFlags(&m->comp, cudaStreamNonBlocking));
        CK(cudaMalloc((void **)&m->w, nw * 4));
        CK(cudaMemcpy(m->w, w_host, nw * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc((void **)&m->home, 4 * slot * 4));
        CK(cudaMemset(m->home, 0, 4 * slot * 4));
        for (x = 0; x < 2; ++x) {
            const int32_t own = x == 0 ? r : 2 * n - 1 - r, e = m_left(&c, own);
            CK(cudaMalloc((void **)&m->q[x], nq * 4));
            CK(cudaMalloc((void **)&m->qh[x], (size_t)H * (cq > 1 ? cq - 1 : 1) * D * 4));
            CK(cudaMalloc((void **)&m->o[x], nq * 4));
            CK(cudaMalloc((void **)&m->lse[x], (size_t)H * c.c * 4));
            CK(cudaMalloc((void **)&m->kv[x], 4 * slot * 4));
            CK(cudaMalloc((void **)&m->part_o[x], (size_t)2 * n * nq * 4));
            CK(cudaMalloc((void **)&m->part_l[x], (size_t)2 * n * H * c.c * 4));
            CK(cudaMemset(m->o[x], 0xFF, nq * 4));
            for (h = 0; h < H; ++h) {
                const size_t src = ((size_t)h * S + (size_t)own * c.c) * D, rows = (size_t)c.c * D;
                CK(cudaMemcpy(m->q[x] + (size_t)h * c.c * D, q + src, rows * 4, cudaMemcpyDefault));
                CK(cudaMemcpy(m->home + (size_t)x * slot + ((size_t)h * c.lmax + e) * D, k + src,
                              rows * 4, cudaMemcpyDefault));
                CK(cudaMemcpy(m->home + (size_t)(2 + x) * slot + ((size_t)h * c.lmax + e) * D,
                              v + src, rows * 4, cudaMemcpyDefault));
            }
        }
        m->ws_bytes = 0;
        for (ch = 0; ch < 2 * n; ++ch) { /* the largest workspace of the pair problems */
            const ta_problem pp = m_pair_problem(&c, 2 * n - 1, ch);
            size_t b = 0;
            TK(ta_fwd_workspace_size(&pp, TA_BACKEND_CUDA, &b));
            if (b > m->ws_bytes) m->ws_bytes = b;
        }
        CK(cudaMalloc(&m->ws, m->ws_bytes ? m->ws_bytes : 64));
        CK(cudaDeviceSynchronize());
    }
    halo_exchange(&c, rk, comms);
    ring_mta_fwd(&c, rk, comms);
    /* one call over the sequence, num_splits = 2N: part s = chunk s */
    CK(cudaSetDevice(devs[0]));
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = H;
    p.seq_q = p.seq_k = S;
    p.head_dim = p.head_dim_v = D;
    p.flags = TA_CAUSAL | (wl >= 0 ? TA_WINDOW : 0u);
    p.window_left = wl >= 0 ? wl : 0;
    p.window_right = wl >= 0 ? -1 : 0;
    p.conv_q = cq;
    p.conv_k = ck;
    p.block_k = 64;
    p.num_splits = 2 * n;
    TK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &wb));
    CK(cudaMalloc(&ws, wb ? wb : 64));
    memset(&a, 0, sizeof a);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    a.conv_w = cq > 0 ? rk[0].w : NULL;
    TK(ta_fwd(&p, TA_BACKEND_CUDA, &a, ws, wb, NULL));
    CK(cudaDeviceSynchronize());
    ho = (float *)download(o, nt * 4);
    hl = (float *)download(lse, nl * 4);
    for (r = 0; r < n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        CK(cudaDeviceSynchronize());
        for (x = 0; x < 2; ++x) {
            const int32_t own = x == 0 ? r : 2 * n - 1 - r;
            float *go = (float *)download(rk[r].o[x], (size_t)H * c.c * D * 4);
            float *gl = (float *)download(rk[r].lse[x], (size_t)H * c.c * 4);
            int eq = 1;
            for (h = 0; h < H; ++h) {
                eq &= memcmp(ho + ((size_t)h * S + (size_t)own * c.c) * D, go + (size_t)h * c.c * D,
                             (size_t)c.c * D * 4) == 0;
                eq &= memcmp(hl + (size_t)h * S + (size_t)own * c.c, gl + (size_t)h * c.c,
                             (size_t)c.c * 4) == 0;
            }
            if (!eq)
                fprintf(stderr, "ring_attention: %dx%d window %d: chunk %d differs from ta_fwd "
                        "with %d splits\n", (int)cq, (int)ck, (int)wl, (int)own, 2 * n);
            ok &= eq;
            free(go);
            free(gl);
        }
        for (x = 0; x < 2; ++x) {
            cudaFree(rk[r].q[x]);
            cudaFree(rk[r].qh[x]);
            cudaFree(rk[r].o[x]);
            cudaFree(rk[r].lse[x]);
            cudaFree(rk[r].kv[x]);
            cudaFree(rk[r].part_o[x]);
            cudaFree(rk[r].part_l[x]);
        }
        cudaFree(rk[r].home);
        cudaFree(rk[r].w);
        cudaFree(rk[r].ws);
        CK(cudaStreamDestroy(rk[r].comp));
    }
    printf("%d ranks, %s %dx%d exact f32, causal, window_left %d, C = %d (halo exchange, key "
           "ranges, q_offset): the ring's o, lse == one ta_fwd with num_splits = %d: %s\n",
           n, cq > 0 ? "MTA" : "SDPA conv", (int)cq, (int)ck, (int)wl, (int)c.c, 2 * n,
           ok ? "bit for bit" : "NO");
    CK(cudaSetDevice(devs[0]));
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(lse);
    cudaFree(ws);
    free(ho);
    free(hl);
    free(w_host);
    return ok;
}


/* ---- MTA over the ring (backward): row and key ranges with the halos ----
 *
 * The backward of a chunk pair (q chunk a, k chunk b <= a) is one
 * accumulating ta_bwd with row and key ranges (docs/mta.md 2b; docs/api.md,
 * "The backward over row and key ranges"). Its tiles are the backward's,
 * 64 x 64 effective (block_q = 64 + 2 P_q, block_k = 64 + 4 P_k), the chunks
 * C = 64 t rows, so a pair call holds, as rows and keys of its tensors:
 *   rows  [a C - Ht, a C + C + Hb)  Ht = 64 (0 for chunk 0): one backward Q
 *                                   tile above (raw scores); Hb = P_q rows
 *                                   below (fewer at the end) with their dO,
 *                                   o, lse (their dC reaches the chunk's rows)
 *   keys  [b C - E, b C + C + R)    E = 64 (0 for chunk 0), R = 2 P_k (fewer
 *                                   at the end)
 *   row_begin = Ht, row_end = Ht + C, key_begin = E, key_end = E + C, and
 *   q_offset puts call row r at sequence row a C - Ht + r.
 * Defined exchange, once before the backward (bwd_halo_exchange): chunk c's
 * owner receives the last Ht rows of q, o, dO, lse of chunk c - 1 and the
 * first Hb rows of chunk c + 1 (its q-side buffers), the last E rows of k, v
 * of chunk c - 1 and the first R rows of chunk c + 1 (its halo'd K/V block).
 * The halo'd blocks then travel the ring (n - 1 steps, each rank keeping
 * every block it sees: a pair (a, b) runs on a's owner, which needs every
 * b <= a).
 *
 * The order: a wavefront over the pairs, time t = a + b, every pair of a
 * time on its q chunk's owner (the ranks of one time run at once). Each q
 * chunk's k chunks then come ascending (dq's (hi, lo) pairs stay on the q
 * chunk's owner) and each k chunk's q chunks ascending: the dk, dv pairs of
 * k chunk b travel along its pairs, from a - 1's owner to a's before time
 * a + b. That is docs/api.md's documented order, so dq, dk and dv equal one
 * ta_bwd over the sequence bit for bit (H = H_kv, 64 x 64 tiles, chunks of
 * 64 t). dconv_w: every rank continues its own (hi, lo) pair over its pairs
 * in time order (a ascending within a time), then rank 0 adds the ranks'
 * pairs in rank order (hi, then lo: a fixed-order cross-rank merge), within
 * 1e-5 of one ta_bwd's (the pairs round each part once more). Checked: the
 * ring's words (dq, dk, dv pairs, the merged dconv_w) == the same calls run
 * on device 0 on views of the whole sequence, bit for bit; dq, dk, dv
 * finished == one ta_bwd bit for bit; dconv_w printed against one ta_bwd.
 * Exact f32, causal (MTA), optionally a sliding window; o and lse from one
 * ta_fwd over the sequence (the ring forward's bits with its split count:
 * check_mta), dO random.
 */
typedef struct bcfg {
    int n;
    int32_t c, h, d, cq, ck, pq, pk, s; /* S = 2 N C */
    int32_t wl;                          /* window_left with TA_WINDOW; < 0: none */
} bcfg;

static int32_t b_ht(const bcfg *c, int32_t ch) { return ch > 0 && c->n > 0 ? 64 : 0; }
static int32_t b_hb(const bcfg *c, int32_t ch) {
    const int32_t left = c->s - (ch + 1) * c->c;
    return c->pq < left ? c->pq : left;
}
static int32_t b_e(const bcfg *c, int32_t ch) { return ch > 0 && c->n > 0 ? 64 : 0; }
static int32_t b_r(const bcfg *c, int32_t ch) {
    const int32_t left = c->s - (ch + 1) * c->c;
    return 2 * c->pk < left ? 2 * c->pk : left;
}
static int32_t b_sq(const bcfg *c, int32_t ch) { return b_ht(c, ch) + c->c + b_hb(c, ch); }
static int32_t b_sk(const bcfg *c, int32_t ch) { return b_e(c, ch) + c->c + b_r(c, ch); }
static int b_owner(const bcfg *c, int32_t ch) { return ch < c->n ? ch : 2 * c->n - 1 - ch; }
static int b_slot(const bcfg *c, int32_t ch) { return ch < c->n ? 0 : 1; }

/* The problem of the whole sequence (seq_q = seq_k = S; ranges none). */
static ta_problem b_problem(const bcfg *c, int32_t sq, int32_t sk) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = c->h;
    p.seq_q = sq;
    p.seq_k = sk;
    p.head_dim = p.head_dim_v = c->d;
    p.dtype = TA_F32;
    p.flags = TA_CAUSAL | (c->wl >= 0 ? TA_WINDOW : 0u);
    p.window_left = c->wl >= 0 ? c->wl : 0;
    p.window_right = c->wl >= 0 ? -1 : 0;
    p.conv_q = c->cq;
    p.conv_k = c->ck;
    p.block_q = 64 + 2 * c->pq; /* the backward's tiles: 64 x 64 effective */
    p.block_k = 64 + 4 * c->pk;
    return p;
}

/* The pair (q chunk a, k chunk b): its problem (the recipe above). */
static ta_problem b_pair_problem(const bcfg *c, int32_t a, int32_t b) {
    const int32_t sq = b_sq(c, a), sk = b_sk(c, b);
    ta_problem p = b_problem(c, sq, sk);
    p.row_begin = b_ht(c, a);
    p.row_end = b_ht(c, a) + c->c;
    p.key_begin = b_e(c, b);
    p.key_end = b_e(c, b) + c->c;
    p.q_offset = (a * c->c - b_ht(c, a)) - (b * c->c - b_e(c, b)) - sk + sq;
    return p;
}

/* One rank of the backward: per q chunk slot x its halo'd rows (q, o, dO
 * [H, sq, D], lse [H, sq], each chunk's own sq pitch: contiguous) and dq's
 * (hi, lo) words [2][H, sq, D]; per chunk ch (2N) the halo'd K/V block [k, v]
 * [2][H, sk, D] once it has arrived, and the travelling dk, dv words
 * [dk hi, dk lo, dv hi, dv lo][H, sk, D] while they are here; its dconv_w
 * pair [2][H, c_q, c_k]. */
typedef struct brank {
    int dev;
    cudaStream_t comp;
    float *q[2], *o[2], *d_o[2], *lse[2], *dq[2];
    float *kv[2 * MAXR], *dkv[2 * MAXR];
    float *dw, *w;
    void *ws;
    size_t ws_bytes;
} brank;

static size_t b_qn(const bcfg *c, int32_t ch) { return (size_t)c->h * b_sq(c, ch) * c->d; }
static size_t b_kn(const bcfg *c, int32_t ch) { return (size_t)c->h * b_sk(c, ch) * c->d; }
static size_t b_wn(const bcfg *c) { return (size_t)c->h * c->cq * c->ck; }

/* xfer_rows of w-wide rows between the backward's ranks. */
static void b_rows(const bcfg *c, brank *rk, ncclComm_t *comms, int src, const float *x,
                   int32_t len, int32_t r0, int dst, float *y, int32_t ylen, int32_t d0,
                   int32_t rows, int32_t w) {
    xfer_rows(comms, c->h, src, rk[src].dev, rk[src].comp, x, len, r0, dst, rk[dst].comp, y, ylen,
              d0, rows, w);
}

/* The backward's halo exchange (once): each q chunk's rows above (Ht) and
 * below (Hb) of q, o, dO, lse, each k chunk's keys left (E) and right (R) of
 * k and v, from the neighbouring chunks' own rows (at [Ht, Ht + C) of their
 * q-side buffers, [E, E + C) of their blocks). */
static void bwd_halo_exchange(const bcfg *c, brank *rk, ncclComm_t *comms) {
    int32_t ch, t;
    x_group_start();
    for (ch = 0; ch < 2 * c->n; ++ch) {
        const int own = b_owner(c, ch), sl = b_slot(c, ch);
        const int32_t sq = b_sq(c, ch), sk = b_sk(c, ch);
        int nb;
        for (nb = -1; nb <= 1; nb += 2) { /* the chunk above / left, below / right */
            const int32_t o = ch + nb;
            int from, fs;
            int32_t fsq, fsk, fht, fe, rq, rk_, q_src, q_dst, k_src, k_dst;
            if (o < 0 || o >= 2 * c->n) continue;
            from = b_owner(c, o);
            fs = b_slot(c, o);
            fsq = b_sq(c, o);
            fsk = b_sk(c, o);
            fht = b_ht(c, o);
            fe = b_e(c, o);
            rq = nb < 0 ? b_ht(c, ch) : b_hb(c, ch);
            rk_ = nb < 0 ? b_e(c, ch) : b_r(c, ch);
            q_src = nb < 0 ? fht + c->c - rq : fht; /* the last rows above, the first below */
            q_dst = nb < 0 ? 0 : b_ht(c, ch) + c->c;
            k_src = nb < 0 ? fe + c->c - rk_ : fe;
            k_dst = nb < 0 ? 0 : b_e(c, ch) + c->c;
            {
                float *const dq_side[3] = {rk[own].q[sl], rk[own].o[sl], rk[own].d_o[sl]};
                const float *const sq_side[3] = {rk[from].q[fs], rk[from].o[fs],
                                                 rk[from].d_o[fs]};
                for (t = 0; t < 3; ++t)
                    b_rows(c, rk, comms, from, sq_side[t], fsq, q_src, own, dq_side[t], sq, q_dst,
                           rq, c->d);
                b_rows(c, rk, comms, from, rk[from].lse[fs], fsq, q_src, own, rk[own].lse[sl], sq,
                       q_dst, rq, 1);
            }
            for (t = 0; t < 2; ++t) /* k, v of the chunk's own block on its owner */
                b_rows(c, rk, comms, from, rk[from].kv[o] + (size_t)t * b_kn(c, o), fsk, k_src,
                       own, rk[own].kv[ch] + (size_t)t * b_kn(c, ch), sk, k_dst, rk_, c->d);
        }
    }
    x_group_end();
}

/* (hi, lo) += x, then += y: the (hi, lo) pair arithmetic of src/ta_sum2.h
 * (2Sum, then Fast2Sum; alpha = 1), element by element: the cross-rank
 * merge of dconv_w's pairs. */
__device__ static void b_sum2(float *hi, float *lo, float part) {
    const float a = *hi, cl = *lo;
    const float s = __fadd_rn(a, part), b = __fsub_rn(s, a);
    const float e = __fadd_rn(__fsub_rn(a, __fsub_rn(s, b)), __fsub_rn(part, b));
    const float w = __fadd_rn(cl, e);
    const float h = w != w ? s : __fadd_rn(s, w);
    *hi = h;
    *lo = __fsub_rn(w, __fsub_rn(h, s));
}
__global__ void b_merge_pair(float *hi, float *lo, const float *x, const float *y, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        b_sum2(hi + i, lo + i, x[i]);
        b_sum2(hi + i, lo + i, y[i]);
    }
}

/* The views of pair (a, b): q-side pointers from q_lo rows of tensors of
 * head pitch qp rows, k-side from k_lo rows of head pitch kp rows; lse
 * contiguous [H, sq]; accumulators dq (hi, lo) with the q side's layout, dk,
 * dv (hi, lo) with the k side's, dconv_w's pair. */
typedef struct bviews {
    const float *q, *o, *d_o, *lse, *k, *v, *w;
    float *dq, *dq_lo, *dk, *dk_lo, *dv, *dv_lo, *dw, *dw_lo;
    int32_t qp, kp;
} bviews;

static void b_pair_call(const bcfg *c, int32_t a, int32_t b, const bviews *vw, void *ws,
                        size_t ws_bytes, cudaStream_t s) {
    const ta_problem p = b_pair_problem(c, a, b);
    ta_bwd_args g;
    memset(&g, 0, sizeof g);
    g.q = vw->q;
    g.o = vw->o;
    g.d_o = vw->d_o;
    g.lse = vw->lse;
    g.k = vw->k;
    g.v = vw->v;
    g.conv_w = vw->w;
    g.q_strides.batch = g.o_strides.batch = g.d_o_strides.batch = g.dq_strides.batch =
        (int64_t)c->h * vw->qp * c->d;
    g.q_strides.head = g.o_strides.head = g.d_o_strides.head = g.dq_strides.head =
        (int64_t)vw->qp * c->d;
    g.q_strides.seq = g.o_strides.seq = g.d_o_strides.seq = g.dq_strides.seq = c->d;
    g.k_strides.batch = g.v_strides.batch = g.dk_strides.batch = g.dv_strides.batch =
        (int64_t)c->h * vw->kp * c->d;
    g.k_strides.head = g.v_strides.head = g.dk_strides.head = g.dv_strides.head =
        (int64_t)vw->kp * c->d;
    g.k_strides.seq = g.v_strides.seq = g.dk_strides.seq = g.dv_strides.seq = c->d;
    g.accumulate = TA_BWD_ACCUMULATE;
    g.dq = vw->dq;
    g.dq_lo = vw->dq_lo;
    g.dk = vw->dk;
    g.dk_lo = vw->dk_lo;
    g.dv = vw->dv;
    g.dv_lo = vw->dv_lo;
    g.dconv_w = vw->dw;
    g.dconv_w_lo = vw->dw_lo;
    TK(ta_bwd(&p, TA_BACKEND_CUDA, &g, ws, ws_bytes, s));
}

/* The ring's backward: the wavefront above, then the cross-rank dconv_w
 * merge into (dw_hi, dw_lo) on rank 0 (zeroed here). */
static void ring_mta_bwd(const bcfg *c, brank *rk, ncclComm_t *comms, float *dw_hi, float *dw_lo,
                         float *dw_stage) {
    const size_t nw = b_wn(c);
    int s, r, x;
    int32_t t, a, ch;
    /* the blocks travel the ring: after step s rank r holds the blocks of
     * ranks r, r - 1, .., r - s (each block: the rank's two k chunks) */
    for (s = 0; s + 1 < c->n; ++s) {
        x_group_start();
        for (r = 0; r < c->n; ++r) {
            const int src = (r + c->n - s) % c->n, to = (r + 1) % c->n;
            for (x = 0; x < 2; ++x) {
                ch = x == 0 ? src : 2 * c->n - 1 - src;
                x_send(rk[r].kv[ch], 2 * b_kn(c, ch) * 4, r, to, comms, rk[r].comp);
                x_recv(rk[to].kv[ch], 2 * b_kn(c, ch) * 4, to, r, comms, rk[to].comp);
            }
        }
        x_group_end();
    }
    for (t = 0; t <= 2 * (2 * c->n - 1); ++t) {
        /* the dk, dv words of k chunk b = t - a move to a's owner from a - 1's */
        x_group_start();
        for (a = (t + 1) / 2; a <= t && a < 2 * c->n; ++a) {
            const int32_t b = t - a;
            const int from = a > b ? b_owner(c, a - 1) : b_owner(c, a), to = b_owner(c, a);
            if (from != to) {
                x_send(rk[from].dkv[b], 4 * b_kn(c, b) * 4, from, to, comms, rk[from].comp);
                x_recv(rk[to].dkv[b], 4 * b_kn(c, b) * 4, to, from, comms, rk[to].comp);
            }
        }
        x_group_end();
        for (a = (t + 1) / 2; a <= t && a < 2 * c->n; ++a) {
            const int32_t b = t - a;
            const int own = b_owner(c, a), sl = b_slot(c, a);
            brank *m = &rk[own];
            const size_t qn = b_qn(c, a), kn = b_kn(c, b);
            bviews vw;
            vw.q = m->q[sl];
            vw.o = m->o[sl];
            vw.d_o = m->d_o[sl];
            vw.lse = m->lse[sl];
            vw.k = m->kv[b];
            vw.v = m->kv[b] + kn;
            vw.w = m->w;
            vw.dq = m->dq[sl];
            vw.dq_lo = m->dq[sl] + qn;
            vw.dk = m->dkv[b];
            vw.dk_lo = m->dkv[b] + kn;
            vw.dv = m->dkv[b] + 2 * kn;
            vw.dv_lo = m->dkv[b] + 3 * kn;
            vw.dw = m->dw;
            vw.dw_lo = m->dw + nw;
            vw.qp = b_sq(c, a);
            vw.kp = b_sk(c, b);
            CK(cudaSetDevice(m->dev));
            b_pair_call(c, a, b, &vw, m->ws, m->ws_bytes, m->comp);
        }
    }
    /* dconv_w: rank 0 adds the ranks' pairs in rank order */
    CK(cudaSetDevice(rk[0].dev));
    CK(cudaMemsetAsync(dw_hi, 0, nw * 4, rk[0].comp));
    CK(cudaMemsetAsync(dw_lo, 0, nw * 4, rk[0].comp));
    for (r = 0; r < c->n; ++r) {
        x_group_start();
        if (r == 0) {
            CK(cudaMemcpyAsync(dw_stage, rk[0].dw, 2 * nw * 4, cudaMemcpyDeviceToDevice,
                               rk[0].comp));
        } else {
            x_send(rk[r].dw, 2 * nw * 4, r, 0, comms, rk[r].comp);
            x_recv(dw_stage, 2 * nw * 4, 0, r, comms, rk[0].comp);
        }
        x_group_end();
        CK(cudaSetDevice(rk[0].dev));
        b_merge_pair<<<8, 256, 0, rk[0].comp>>>(dw_hi, dw_lo, dw_stage, dw_stage + nw, nw);
        CK(cudaGetLastError());
    }
}

/* The same calls on device 0, on views of the whole sequence (q, o, dO, k,
 * v, dq / dk / dv words [H, S, D]; lse copied per pair), each rank's dconv_w
 * pair its own, merged in rank order: the ring's words, bit for bit. */
static void one_gpu_mta_bwd(const bcfg *c, const float *q, const float *o, const float *d_o,
                            const float *lse, const float *k, const float *v, const float *w,
                            float *dq2, float *dk2, float *dv2, float *dw_ranks, float *dw_hi,
                            float *dw_lo, void *ws, size_t ws_bytes) {
    const size_t nt = (size_t)c->h * c->s * c->d, nw = b_wn(c);
    float *lbuf;
    int32_t t, a, h, r;
    CK(cudaMalloc((void **)&lbuf, (size_t)c->h * c->s * 4));
    for (t = 0; t <= 2 * (2 * c->n - 1); ++t)
        for (a = (t + 1) / 2; a <= t && a < 2 * c->n; ++a) {
            const int32_t b = t - a, q0 = a * c->c - b_ht(c, a), k0 = b * c->c - b_e(c, b);
            const int32_t sq = b_sq(c, a);
            const int own = b_owner(c, a);
            const size_t oq = (size_t)q0 * c->d, ok = (size_t)k0 * c->d;
            bviews vw;
            for (h = 0; h < c->h; ++h)
                CK(cudaMemcpy(lbuf + (size_t)h * sq, lse + (size_t)h * c->s + q0,
                              (size_t)sq * 4, cudaMemcpyDeviceToDevice));
            vw.q = q + oq;
            vw.o = o + oq;
            vw.d_o = d_o + oq;
            vw.lse = lbuf;
            vw.k = k + ok;
            vw.v = v + ok;
            vw.w = w;
            vw.dq = dq2 + oq;
            vw.dq_lo = dq2 + nt + oq;
            vw.dk = dk2 + ok;
            vw.dk_lo = dk2 + nt + ok;
            vw.dv = dv2 + ok;
            vw.dv_lo = dv2 + nt + ok;
            vw.dw = dw_ranks + (size_t)own * 2 * nw;
            vw.dw_lo = vw.dw + nw;
            vw.qp = c->s;
            vw.kp = c->s;
            b_pair_call(c, a, b, &vw, ws, ws_bytes, NULL);
        }
    CK(cudaMemset(dw_hi, 0, nw * 4));
    CK(cudaMemset(dw_lo, 0, nw * 4));
    for (r = 0; r < c->n; ++r)
        b_merge_pair<<<8, 256>>>(dw_hi, dw_lo, dw_ranks + (size_t)r * 2 * nw,
                                 dw_ranks + (size_t)r * 2 * nw + nw, nw);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaFree(lbuf));
}

/* max |x - y| / max |y| over n floats of host copies. */
static double b_rel(const float *x, const float *y, size_t n) {
    double m = 0.0, d = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        const double e = fabs((double)x[i] - (double)y[i]), ay = fabs((double)y[i]);
        if (ay > m) m = ay;
        if (e > d) d = e;
    }
    return m > 0.0 ? d / m : d;
}

/* The MTA ring's backward (c_q x c_k, chunks of 64 t rows, optional window)
 * against the same calls on device 0 and one ta_bwd (the comment above). */
static int check_mta_bwd(int n, int32_t cq, int32_t ck, int32_t tiles, int32_t wl,
                         ncclComm_t *comms, const int *devs) {
    bcfg c;
    brank rk[MAXR];
    const int32_t H = 2, D = 64;
    size_t nt, nl, nw, wb = 0, wb1 = 0;
    float *q, *k, *v, *o, *lse, *d_o, *w, *g[3], *dq2, *dk2, *dv2, *dw_ranks, *dw_hi, *dw_lo;
    float *rdw_hi, *rdw_lo, *dw_stage, *dw1, *w_host, *hq, *hr, *oq, *ok2, *ov;
    void *ws;
    ta_problem p;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_bwd_finish_args fin;
    int r, x, ok = 1, words = 1, grads = 1;
    int32_t ch, h, a, b;
    double e_dw;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.h = H;
    c.d = D;
    c.cq = cq;
    c.ck = ck;
    c.pq = cq - 1;
    c.pk = (ck - 1) / 2;
    c.c = 64 * tiles;
    c.s = 2 * n * c.c;
    c.wl = wl;
    nt = (size_t)H * c.s * D;
    nl = (size_t)H * c.s;
    nw = b_wn(&c);
    /* the whole sequence on device 0: inputs, o and lse of one ta_fwd, dO */
    CK(cudaSetDevice(devs[0]));
    CK(cudaMalloc((void **)&q, nt * 4));
    CK(cudaMalloc((void **)&k, nt * 4));
    CK(cudaMalloc((void **)&v, nt * 4));
    CK(cudaMalloc((void **)&o, nt * 4));
    CK(cudaMalloc((void **)&d_o, nt * 4));
    CK(cudaMalloc((void **)&lse, nl * 4));
    CK(cudaMalloc((void **)&w, nw * 4));
    fill(q, nt, 0, 21u, 1.0f);
    fill(k, nt, 0, 22u, 1.0f);
    fill(v, nt, 0, 23u, 1.0f);
    fill(d_o, nt, 0, 24u, 1.0f);
    w_host = conv_weights(nw);
    CK(cudaMemcpy(w, w_host, nw * 4, cudaMemcpyHostToDevice));
    p = b_problem(&c, c.s, c.s);
    TK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &wb));
    TK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &wb1));
    for (a = 0; a < 2 * n; ++a) /* the pair problems' workspace too */
        for (b = 0; b <= a; ++b) {
            const ta_problem pp = b_pair_problem(&c, a, b);
            size_t bb = 0;
            TK(ta_bwd_workspace_size(&pp, TA_BACKEND_CUDA, &bb));
            if (bb > wb1) wb1 = bb;
        }
    if (wb1 > wb) wb = wb1;
    CK(cudaMalloc(&ws, wb ? wb : 64));
    memset(&fa, 0, sizeof fa);
    fa.q = q;
    fa.k = k;
    fa.v = v;
    fa.conv_w = w;
    fa.o = o;
    fa.lse = lse;
    TK(ta_fwd(&p, TA_BACKEND_CUDA, &fa, ws, wb, NULL));
    /* the ranks: each chunk's own rows; the accumulators zeroed */
    for (r = 0; r < n; ++r) {
        brank *m = &rk[r];
        memset(m, 0, sizeof *m);
        m->dev = devs[r];
        m->ws_bytes = wb1;
        CK(cudaSetDevice(m->dev));
        CK(cudaStreamCreateWithFlags(&m->comp, cudaStreamNonBlocking));
        CK(cudaMalloc((void **)&m->w, nw * 4));
        CK(cudaMemcpy(m->w, w_host, nw * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc((void **)&m->dw, 2 * nw * 4));
        CK(cudaMemset(m->dw, 0, 2 * nw * 4));
        CK(cudaMalloc(&m->ws, wb1 ? wb1 : 64));
        for (ch = 0; ch < 2 * n; ++ch) {
            CK(cudaMalloc((void **)&m->kv[ch], 2 * b_kn(&c, ch) * 4));
            CK(cudaMalloc((void **)&m->dkv[ch], 4 * b_kn(&c, ch) * 4));
            CK(cudaMemset(m->dkv[ch], 0, 4 * b_kn(&c, ch) * 4));
        }
        for (x = 0; x < 2; ++x) {
            const int32_t own = x == 0 ? r : 2 * n - 1 - r, sq = b_sq(&c, own);
            const int32_t sk = b_sk(&c, own), ht = b_ht(&c, own), e = b_e(&c, own);
            const size_t qn = b_qn(&c, own), kn = b_kn(&c, own);
            float **side[3] = {&m->q[x], &m->o[x], &m->d_o[x]};
            const float *src[3] = {q, o, d_o};
            int t;
            CK(cudaMalloc((void **)&m->lse[x], (size_t)H * sq * 4));
            CK(cudaMalloc((void **)&m->dq[x], 2 * qn * 4));
            CK(cudaMemset(m->dq[x], 0, 2 * qn * 4));
            for (t = 0; t < 3; ++t) CK(cudaMalloc((void **)side[t], qn * 4));
            for (h = 0; h < H; ++h) {
                const size_t at = ((size_t)h * c.s + (size_t)own * c.c) * D;
                const size_t rows = (size_t)c.c * D;
                for (t = 0; t < 3; ++t)
                    CK(cudaMemcpy(*side[t] + ((size_t)h * sq + ht) * D, src[t] + at, rows * 4,
                                  cudaMemcpyDefault));
                CK(cudaMemcpy(m->lse[x] + (size_t)h * sq + ht,
                              lse + (size_t)h * c.s + (size_t)own * c.c, (size_t)c.c * 4,
                              cudaMemcpyDefault));
                CK(cudaMemcpy(m->kv[own] + ((size_t)h * sk + e) * D, k + at, rows * 4,
                              cudaMemcpyDefault));
                CK(cudaMemcpy(m->kv[own] + kn + ((size_t)h * sk + e) * D, v + at, rows * 4,
                              cudaMemcpyDefault));
            }
        }
        CK(cudaDeviceSynchronize());
    }
    CK(cudaSetDevice(devs[0]));
    CK(cudaMalloc((void **)&rdw_hi, nw * 4));
    CK(cudaMalloc((void **)&rdw_lo, nw * 4));
    CK(cudaMalloc((void **)&dw_stage, 2 * nw * 4));
    bwd_halo_exchange(&c, rk, comms);
    ring_mta_bwd(&c, rk, comms, rdw_hi, rdw_lo, dw_stage);
    for (r = 0; r < n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        CK(cudaDeviceSynchronize());
    }
    /* the same calls on device 0, and one ta_bwd */
    CK(cudaSetDevice(devs[0]));
    CK(cudaMalloc((void **)&dq2, 2 * nt * 4));
    CK(cudaMalloc((void **)&dk2, 2 * nt * 4));
    CK(cudaMalloc((void **)&dv2, 2 * nt * 4));
    CK(cudaMalloc((void **)&dw_ranks, (size_t)n * 2 * nw * 4));
    CK(cudaMalloc((void **)&dw_hi, nw * 4));
    CK(cudaMalloc((void **)&dw_lo, nw * 4));
    CK(cudaMalloc((void **)&dw1, nw * 4));
    for (x = 0; x < 3; ++x) CK(cudaMalloc((void **)&g[x], 2 * nt * 4));
    CK(cudaMemset(dq2, 0, 2 * nt * 4));
    CK(cudaMemset(dk2, 0, 2 * nt * 4));
    CK(cudaMemset(dv2, 0, 2 * nt * 4));
    CK(cudaMemset(dw_ranks, 0, (size_t)n * 2 * nw * 4));
    one_gpu_mta_bwd(&c, q, o, d_o, lse, k, v, w, dq2, dk2, dv2, dw_ranks, dw_hi, dw_lo, ws, wb);
    /* the ring's words == the one-GPU calls' words */
    oq = (float *)download(dq2, 2 * nt * 4);
    ok2 = (float *)download(dk2, 2 * nt * 4);
    ov = (float *)download(dv2, 2 * nt * 4);
    for (a = 0; a < 2 * n; ++a) {
        const int own = b_owner(&c, a), sl = b_slot(&c, a);
        const int32_t sq = b_sq(&c, a), ht = b_ht(&c, a), sk = b_sk(&c, a), e = b_e(&c, a);
        const int32_t kown = b_owner(&c, 2 * n - 1); /* every k chunk's words end there */
        const size_t qn = b_qn(&c, a), kn = b_kn(&c, a);
        float *rq = (float *)download(rk[own].dq[sl], 2 * qn * 4);
        float *rkv = (float *)download(rk[kown].dkv[a], 4 * kn * 4);
        int wd;
        for (wd = 0; wd < 2; ++wd) /* hi, lo */
            for (h = 0; h < H; ++h) {
                const size_t whole = (size_t)wd * nt + ((size_t)h * c.s + (size_t)a * c.c) * D;
                const size_t rows = (size_t)c.c * D;
                words &= memcmp(rq + (size_t)wd * qn + ((size_t)h * sq + ht) * D, oq + whole,
                                rows * 4) == 0;
                words &= memcmp(rkv + (size_t)wd * kn + ((size_t)h * sk + e) * D, ok2 + whole,
                                rows * 4) == 0;
                words &= memcmp(rkv + (size_t)(2 + wd) * kn + ((size_t)h * sk + e) * D,
                                ov + whole, rows * 4) == 0;
            }
        free(rq);
        free(rkv);
    }
    free(oq);
    free(ok2);
    free(ov);
    hq = (float *)download(rdw_hi, nw * 4);
    hr = (float *)download(dw_hi, nw * 4);
    words &= memcmp(hq, hr, nw * 4) == 0;
    free(hq);
    free(hr);
    hq = (float *)download(rdw_lo, nw * 4);
    hr = (float *)download(dw_lo, nw * 4);
    words &= memcmp(hq, hr, nw * 4) == 0;
    free(hq);
    free(hr);
    /* one ta_bwd over the sequence (the same tiles) against the finished words */
    memset(&ba, 0, sizeof ba);
    ba.q = q;
    ba.k = k;
    ba.v = v;
    ba.o = o;
    ba.d_o = d_o;
    ba.lse = lse;
    ba.conv_w = w;
    ba.dq = g[0];
    ba.dk = g[1];
    ba.dv = g[2];
    ba.dconv_w = dw1;
    TK(ta_bwd(&p, TA_BACKEND_CUDA, &ba, ws, wb, NULL));
    memset(&fin, 0, sizeof fin);
    fin.dq_hi = dq2;
    fin.dk_hi = dk2;
    fin.dv_hi = dv2;
    fin.dq = g[0] + nt;
    fin.dk = g[1] + nt;
    fin.dv = g[2] + nt;
    TK(ta_bwd_finish(&p, TA_BACKEND_CUDA, &fin, NULL));
    CK(cudaDeviceSynchronize());
    for (x = 0; x < 3; ++x) {
        float *gg = (float *)download(g[x], 2 * nt * 4);
        grads &= memcmp(gg, gg + nt, nt * 4) == 0;
        free(gg);
    }
    hq = (float *)download(rdw_hi, nw * 4);
    hr = (float *)download(dw1, nw * 4);
    e_dw = b_rel(hq, hr, nw);
    free(hq);
    free(hr);
    ok = words && grads && e_dw <= 1e-5;
    printf("%d ranks, MTA %dx%d exact f32, causal, window_left %d, C = %d (backward: halo "
           "exchange, row and key ranges, accumulating pairs in the documented order): the "
           "ring's words == the same calls on one GPU: %s; dq, dk, dv == one ta_bwd: %s; "
           "dconv_w %.3g of the largest from one ta_bwd (tolerance 1e-5)\n",
           n, (int)cq, (int)ck, (int)wl, (int)c.c, words ? "bit for bit" : "NO",
           grads ? "bit for bit" : "NO", e_dw);
    for (r = 0; r < n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        for (x = 0; x < 2; ++x) {
            cudaFree(rk[r].q[x]);
            cudaFree(rk[r].o[x]);
            cudaFree(rk[r].d_o[x]);
            cudaFree(rk[r].lse[x]);
            cudaFree(rk[r].dq[x]);
        }
        for (ch = 0; ch < 2 * n; ++ch) {
            cudaFree(rk[r].kv[ch]);
            cudaFree(rk[r].dkv[ch]);
        }
        cudaFree(rk[r].dw);
        cudaFree(rk[r].w);
        cudaFree(rk[r].ws);
        CK(cudaStreamDestroy(rk[r].comp));
    }
    CK(cudaSetDevice(devs[0]));
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(d_o);
    cudaFree(lse);
    cudaFree(w);
    cudaFree(ws);
    cudaFree(dq2);
    cudaFree(dk2);
    cudaFree(dv2);
    cudaFree(dw_ranks);
    cudaFree(dw_hi);
    cudaFree(dw_lo);
    cudaFree(dw1);
    cudaFree(rdw_hi);
    cudaFree(rdw_lo);
    cudaFree(dw_stage);
    for (x = 0; x < 3; ++x) cudaFree(g[x]);
    free(w_host);
    return ok;
}

/* ---- bench mode ---- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sync_all(rank *rk, int n) {
    int r;
    for (r = 0; r < n; ++r) {
        CK(cudaSetDevice(rk[r].dev));
        CK(cudaDeviceSynchronize());
    }
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define REPS 5

/* One shape: one GPU's single call over S, and the ring on n GPUs. */
static void bench_one(int n, int32_t S, int32_t H, int32_t D, ncclComm_t *comms, const int *devs) {
    cfg c;
    rank rk[MAXR];
    double t[REPS], one[2], ring[2], quiet[2];
    int r, i, pass;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.bf16 = 1;
    c.fast = 1;
    c.causal = 1;
    c.c = S / (2 * n);
    c.h = H;
    c.d = D;
    c.elem = 2;
    c.chunk = (size_t)c.h * c.c * c.d;
    c.chunkl = (size_t)c.h * c.c;
    { /* one GPU, one call over S */
        ta_problem p = pair_problem(&c, 0);
        const size_t nt = (size_t)H * S * D;
        void *q, *k, *v, *o, *d_o, *dq, *dk, *dv, *ws;
        float *lse;
        size_t fb = 0, bb = 0;
        ta_fwd_args a;
        ta_bwd_args b;
        p.seq_q = p.seq_k = S;
        CK(cudaSetDevice(devs[0]));
        CK(cudaMalloc(&q, nt * 2));
        CK(cudaMalloc(&k, nt * 2));
        CK(cudaMalloc(&v, nt * 2));
        CK(cudaMalloc(&o, nt * 2));
        CK(cudaMalloc(&d_o, nt * 2));
        CK(cudaMalloc(&dq, nt * 2));
        CK(cudaMalloc(&dk, nt * 2));
        CK(cudaMalloc(&dv, nt * 2));
        CK(cudaMalloc((void **)&lse, (size_t)H * S * 4));
        fill(q, nt, 1, 1u, 1.0f);
        fill(k, nt, 1, 2u, 1.0f);
        fill(v, nt, 1, 3u, 1.0f);
        fill(d_o, nt, 1, 4u, 1.0f);
        TK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &fb));
        TK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bb));
        CK(cudaMalloc(&ws, (fb > bb ? fb : bb) + 64));
        memset(&a, 0, sizeof a);
        a.q = q;
        a.k = k;
        a.v = v;
        a.o = o;
        a.lse = lse;
        memset(&b, 0, sizeof b);
        b.q = q;
        b.k = k;
        b.v = v;
        b.o = o;
        b.d_o = d_o;
        b.lse = lse;
        b.dq = dq;
        b.dk = dk;
        b.dv = dv;
        for (pass = 0; pass < 2; ++pass) {
            for (i = -1; i < REPS; ++i) {
                double t0;
                CK(cudaDeviceSynchronize());
                t0 = now_s();
                if (pass == 0)
                    TK(ta_fwd(&p, TA_BACKEND_CUDA, &a, ws, fb > bb ? fb : bb, NULL));
                else
                    TK(ta_bwd(&p, TA_BACKEND_CUDA, &b, ws, fb > bb ? fb : bb, NULL));
                CK(cudaDeviceSynchronize());
                if (i >= 0) t[i] = now_s() - t0;
            }
            qsort(t, REPS, sizeof t[0], cmp_d);
            one[pass] = t[REPS / 2];
        }
        cudaFree(q);
        cudaFree(k);
        cudaFree(v);
        cudaFree(o);
        cudaFree(d_o);
        cudaFree(dq);
        cudaFree(dk);
        cudaFree(dv);
        cudaFree(lse);
        cudaFree(ws);
    }
    for (r = 0; r < n; ++r) {
        rank_alloc(&c, &rk[r], devs[r]);
        fill_rank(&c, &rk[r], r);
    }
    for (pass = 0; pass < 2; ++pass) {
        int comm;
        for (comm = 1; comm >= 0; --comm) {
            for (i = -1; i < REPS; ++i) {
                double t0;
                if (pass == 1) { /* the forward's o and lse first, untimed */
                    ring_fwd(&c, rk, comms, 1);
                }
                sync_all(rk, n);
                t0 = now_s();
                if (pass == 0)
                    ring_fwd(&c, rk, comms, comm);
                else
                    (void)ring_bwd(&c, rk, comms, comm);
                sync_all(rk, n);
                if (i >= 0) t[i] = now_s() - t0;
            }
            qsort(t, REPS, sizeof t[0], cmp_d);
            if (comm)
                ring[pass] = t[REPS / 2];
            else
                quiet[pass] = t[REPS / 2];
        }
    }
    for (pass = 0; pass < 2; ++pass) {
        /* causal: 2 S^2 H D flops forward (4 S^2 H D / 2), 2.5x that backward */
        const double fl = 2.0 * (double)S * S * H * D * (pass ? 2.5 : 1.0);
        printf("%7d %3d %4d %s | %9.3f %9.3f | %6.3f %6.1f %% | %9.3f %9.1f %% | %7.1f %5.1f %%\n",
               (int)S, (int)H, (int)D, pass ? "bwd" : "fwd", one[pass] * 1e3, ring[pass] * 1e3,
               one[pass] / (n * ring[pass]), 100.0 * one[pass] / (n * ring[pass]),
               quiet[pass] * 1e3, 100.0 * (ring[pass] - quiet[pass]) / ring[pass],
               fl / (n * ring[pass]) / 1e12, 100.0 * fl / (n * ring[pass]) / 989e12);
    }
    for (r = 0; r < n; ++r) rank_free(&rk[r]); /* this shape's buffers */
}

static void bench_all(int n, ncclComm_t *comms, const int *devs, int32_t smax) {
    int32_t S;
    printf("ring attention, fast bf16, causal, zig-zag, %d GPUs; wall medians of %d; one = one "
           "GPU, one call over S; eff = one / (N ring); quiet = the ring with the sends "
           "skipped, exposed = (ring - quiet) / ring; TF/s per GPU (causal: 2 S^2 H D fwd, x 2.5 "
           "bwd) and %% of 989\n",
           n, REPS);
    printf("      S   H    D pass |    one ms   ring ms |    eff        |  quiet ms   exposed |  TF/s  peak\n");
    for (S = 32768; S <= smax; S *= 2) bench_one(n, S, 16, 128, comms, devs);
}

/* The checks with n ranks on devs (g_emul: all on one device). */
static int check_all(int n, ncclComm_t *comms, const int *devs) {
    int ok = 1;
    ok &= check_one(n, 0, 0, 1, -1, comms, devs);
    ok &= check_one(n, 0, 0, 0, -1, comms, devs);
    ok &= check_one(n, 1, 1, 1, -1, comms, devs);
    ok &= check_one(n, 1, 0, 1, -1, comms, devs);
    ok &= check_one(n, 0, 0, 1, 150, comms, devs); /* windows with ranges, fwd + bwd */
    ok &= check_one(n, 1, 0, 1, 150, comms, devs);
    ok &= check_mta(n, 6, 11, 2, -1, comms, devs);
    ok &= check_mta(n, 7, 7, 1, -1, comms, devs);
    ok &= check_mta(n, 2, 3, 3, -1, comms, devs);
    ok &= check_mta(n, 6, 11, 2, 150, comms, devs); /* windows with ranges */
    ok &= check_mta(n, 0, 0, 2, 100, comms, devs);
    ok &= check_mta_bwd(n, 6, 11, 1, -1, comms, devs); /* the backward with ranges */
    ok &= check_mta_bwd(n, 7, 7, 2, -1, comms, devs);
    ok &= check_mta_bwd(n, 2, 3, 1, 150, comms, devs);
    return ok;
}

int main(int argc, char **argv) {
    int n_dev = 0, n, i, bench = 0, ok = 1, emulate = 0;
    int32_t smax = 262144;
    int devs[MAXR];
    ncclComm_t comms[MAXR];
    for (i = 1; i < argc; ++i)
        if (strcmp(argv[i], "--bench") == 0)
            bench = 1;
        else if (strcmp(argv[i], "--emulate") == 0)
            emulate = 1;
        else if (strcmp(argv[i], "--smax") == 0 && i + 1 < argc)
            smax = (int32_t)atol(argv[++i]);
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || (bench && n_dev < 2)) {
        printf("ring_attention: %s: skipped\n",
               bench ? "the benchmark needs 2 CUDA devices" : "no CUDA device");
        return SKIP;
    }
    if (n_dev < 2 || emulate) { /* 2, 3 and 4 ranks on device 0, transfers as copies */
        g_emul = 1;
        memset(devs, 0, sizeof devs);
        for (n = 2; n <= 4; ++n) {
            printf("-- %d ranks emulated on device 0 (no NCCL: each group's transfers as "
                   "copies)\n", n);
            ok &= check_all(n, comms, devs);
        }
        printf("ring_attention (emulated ranks): %s\n", ok ? "passed" : "FAILED");
        return ok ? 0 : 1;
    }
    n = n_dev < MAXR ? n_dev : MAXR;
    for (i = 0; i < n; ++i) devs[i] = i;
    NK(ncclCommInitAll(comms, n, devs));
    if (bench) {
        bench_all(n, comms, devs, smax);
        for (i = 0; i < n; ++i) ncclCommDestroy(comms[i]);
        return 0;
    }
    ok &= check_all(n, comms, devs);
    for (i = 0; i < n; ++i) ncclCommDestroy(comms[i]);
    printf("ring_attention: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
}
