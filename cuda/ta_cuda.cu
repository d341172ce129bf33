/*
 * CUDA backend: probes (ta_cuda_compiled, ta_cuda_device_present) and the host
 * helpers of the launch code (cuda/ta_cuda_host.cuh): the parameter fill,
 * device-pointer checks, shared-memory opt-in, kernel launch and the
 * batch-chunk loop. Every CUDA call is checked; a failure becomes
 * TA_ERR_DEVICE (never an abort or a message). Nothing here allocates.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_host.cuh"
#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_internal.h"
#include "ta_math.h"
}

/* Instantiates the shared headers in device code (never launched; the GPU math
 * test in test/ launches its own kernels), so CI (nvcc, no GPU) catches
 * anything in them that is not device-clean. */
__global__ void ta_cuda_header_probe(const float *x, float *y, int32_t n) {
    const int32_t i = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    ta_tiling t;
    if (i >= n) return;
    if (ta_tiling_make(&t, n, n, 64, 64, 6, 11, 1, TA_TILING_BWD, 1) != TA_OK) return;
    y[i] = ta_exp(x[i]) + ta_log(x[i]) + (float)ta_tile_k_end(&t, i / t.rows_eff, n) +
           ta_f16_to_f32(ta_f32_to_f16(x[i])) + ta_bf16_to_f32(ta_f32_to_bf16(x[i]));
}

extern "C" int ta_cuda_compiled(void) { return 1; }

extern "C" int ta_cuda_device_present(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the (non-sticky) error state */
        return 0;
    }
    return n > 0;
}

/* A failed call: clear the runtime's last-error slot (so a caller's later
 * cudaGetLastError does not report it twice) and map it to TA_ERR_DEVICE. */
static ta_status ta_cuda_fail(void) {
    (void)cudaGetLastError();
    return TA_ERR_DEVICE;
}

ta_status ta_cuda_check_pointers(const void *const *ptrs, int n) {
    int device = 0, i;
    if (cudaGetDevice(&device) != cudaSuccess) return ta_cuda_fail();
    for (i = 0; i < n; ++i) {
        cudaPointerAttributes at;
        if (!ptrs[i]) continue;
        if (cudaPointerGetAttributes(&at, ptrs[i]) != cudaSuccess) return ta_cuda_fail();
        switch (at.type) {
        case cudaMemoryTypeDevice:
            if (at.device != device) return TA_ERR_BAD_ARG;
            break;
        case cudaMemoryTypeManaged: break;
        case cudaMemoryTypeHost:
            if (at.devicePointer != ptrs[i]) return TA_ERR_BAD_ARG;
            break;
        default: return TA_ERR_BAD_ARG; /* unregistered (pageable) host memory */
        }
    }
    return TA_OK;
}

extern "C" ta_status ta_cuda_check_index_ptrs(const ta_plan *plan, const int32_t *seqlens_k,
                                              const int32_t *block_table) {
    const void *ptrs[2] = {(plan->p.flags & TA_SEQLENS_DEVICE) ? seqlens_k : NULL,
                           plan->p.kv_page_size > 0 ? block_table : NULL};
    return ta_cuda_check_pointers(ptrs, 2);
}

ta_status ta_cuda_check_rope(const ta_plan *plan) {
    const void *ptrs[4] = {plan->rope.cos, plan->rope.sin, plan->rope.pos_q, plan->rope.pos_k};
    return ta_cuda_check_pointers(ptrs, 4);
}

ta_status ta_cuda_smem_opt_in(const void *kernel, size_t need, size_t most) {
    const size_t dflt = 48u * 1024u; /* every device's default, under every opt-in limit */
    int device = 0, limit_attr = 0;
    cudaFuncAttributes fa;
    size_t limit;
    if (most < need) most = need;
    if (most <= dflt) return TA_OK;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&limit_attr, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess ||
        cudaFuncGetAttributes(&fa, kernel) != cudaSuccess)
        return ta_cuda_fail();
    /* the device limit holds static and dynamic shared memory together (the
     * kernels' __shared__ slot arrays take 64 B) */
    limit = limit_attr > 0 && (size_t)limit_attr > fa.sharedSizeBytes
                ? (size_t)limit_attr - fa.sharedSizeBytes
                : 0u;
    if (need > limit) return TA_ERR_UNSUPPORTED;
    if (most > limit) most = limit;
    if (most > dflt && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)most) != cudaSuccess)
        return ta_cuda_fail();
    return TA_OK;
}

ta_status ta_cuda_launch_args(const void *kernel, int64_t n_blocks, size_t smem_bytes, void **args,
                              void *stream) {
    return ta_cuda_launch_threads(kernel, n_blocks, TA_CUDA_THREADS, smem_bytes, args, stream);
}

ta_status ta_cuda_launch_threads(const void *kernel, int64_t n_blocks, int threads,
                                 size_t smem_bytes, void **args, void *stream) {
    const int64_t grid_max = 2147483647;
    const unsigned int grid = (unsigned int)(n_blocks < grid_max ? n_blocks : grid_max);
    if (n_blocks < 1) return TA_OK;
    if (cudaLaunchKernel(kernel, dim3(grid), dim3((unsigned int)threads), args, smem_bytes,
                         static_cast<cudaStream_t>(stream)) != cudaSuccess)
        return ta_cuda_fail();
    return TA_OK;
}

ta_status ta_cuda_launch_batches(const ta_cuda_launch_desc *l, int n, const int32_t *seqlens_k,
                                 int32_t batch, void *stream) {
    int32_t b0, count;
    /* device-memory lengths (TA_SEQLENS_DEVICE): the kernels read them, one
     * launch of every batch entry */
    if (n > 0 && l[0].base->has_seqlens == 2) seqlens_k = NULL;
    for (b0 = 0; b0 < batch; b0 += count) {
        int i;
        count = seqlens_k ? ta_tiling_min_i32(TA_CUDA_BATCH_CHUNK, batch - b0) : batch;
        for (i = 0; i < n; ++i) {
            ta_cuda_params *base = l[i].base;
            void *args[1];
            ta_status st;
            base->batch_begin = b0;
            base->batch_count = count;
            if (seqlens_k) memcpy(base->seqlens_k, seqlens_k + b0, (size_t)count * sizeof(int32_t));
            args[0] = l[i].params;
            st = ta_cuda_launch_threads(l[i].kernel,
                                        l[i].blocks_per_entry * count + l[i].blocks_fixed,
                                        l[i].threads ? l[i].threads : TA_CUDA_THREADS,
                                        l[i].smem, args, stream);
            if (st != TA_OK) return st;
        }
    }
    return TA_OK;
}

ta_status ta_cuda_tiling(const ta_plan *plan, int32_t block_q, int32_t block_k, int32_t pass,
                         ta_tiling *t) {
    const ta_problem *pr = &plan->p;
    /* the forward's key splits (the backward has none) */
    const int st = ta_tiling_make(t, pr->seq_q, pr->seq_k, block_q, block_k, pr->conv_q, pr->conv_k,
                                  plan->fwd.causal, pass,
                                  pass == TA_TILING_FWD ? plan->fwd.num_splits : 1);
    if (st != TA_OK) return (ta_status)st;
    ta_tiling_set_window(t, plan->fwd.window_left, plan->fwd.window_right);
    /* the forward's query history rows (MTA decode; the backward has none) */
    if (pass == TA_TILING_FWD) {
        ta_tiling_set_history(t, plan->fwd.q_history);
        /* the output keys (forward only) and the rows' offset, as the plan's */
        ta_tiling_set_keys(t, plan->p.q_offset, plan->fwd.key_begin, plan->fwd.key_end);
    } else {
        ta_tiling_set_keys(t, plan->p.q_offset, 0, t->seq_k);
    }
    return TA_OK;
}

/* The part of the fill both passes share: dims, scale, tiling, layout, and
 * latent attention's band (its T, and the backward's dl, from the pass's
 * workspace; NULL without the band). */
static void ta_cuda_params_dims(ta_cuda_params *p, const ta_plan *plan, const ta_tiling *t,
                                const int32_t *seqlens_k, const float *rb_t, const float *rb_dl) {
    const ta_problem *pr = &plan->p;
    if (plan->stages.score == TA_SCORE_RBAND) {
        p->rb_t = rb_t;
        p->rb_dl = rb_dl;
        p->rb_alpha = pr->rband_alpha;
        p->rb_width = pr->rband_width;
        p->rb_w1 = ta_cuda_rband_w1(plan);
    }
    p->t = *t;
    p->lay = plan->layout;
    p->heads_q = pr->heads_q;
    p->heads_kv = pr->heads_kv;
    p->group = plan->group;
    p->head_dim = pr->head_dim;
    p->head_dim_v = pr->head_dim_v;
    p->conv_q = pr->conv_q;
    p->conv_k = pr->conv_k;
    p->scale = pr->scale;
    p->has_seqlens = !seqlens_k ? 0 : pr->flags & TA_SEQLENS_DEVICE ? 2 : 1;
    p->seqlens_dev = p->has_seqlens == 2 ? seqlens_k : NULL;
    if (pr->rope != TA_ROPE_NONE) { /* the load stage's, or the fast backward's epilogue */
        p->rope_args = plan->rope;
        p->rope = pr->rope;
        p->rope_pairs = pr->rope_pairs;
        p->rope_rows = pr->rope_rows;
        p->rope_row_stride = pr->rope_row_stride ? pr->rope_row_stride : pr->rope_pairs;
        p->rope_head_stride = pr->rope_head_stride;
    }
}

void ta_cuda_params_fwd(ta_cuda_params *p, const ta_plan *plan, const ta_tiling *t,
                        const ta_fwd_args *a, const ta_cuda_fwd_ws *ws) {
    memset(p, 0, sizeof *p);
    p->q = a->q;
    p->k = a->k;
    p->v = a->v;
    p->o = a->o;
    p->lse = a->lse;
    p->conv_w = a->conv_w;
    p->q_hist = t->q_history > 0 ? a->q_hist : NULL;
    if (plan->p.kv_page_size > 0) {
        p->block_table = a->block_table;
        p->kv_page_size = plan->p.kv_page_size;
        p->kv_num_pages = plan->p.kv_num_pages;
        p->kv_max_blocks = plan->p.kv_max_blocks;
    }
    p->part_o = ws->part_o; /* split-K's parts (NULL with one split) */
    p->part_lse = ws->part_lse;
    p->n_rows = (int64_t)plan->n_lse;
    ta_cuda_params_dims(p, plan, t, a->seqlens_k, ws->lat_t, NULL);
}

ta_status ta_cuda_merge_splits(const ta_plan *plan, int32_t n, const ta_fwd_args *a,
                               const ta_cuda_fwd_ws *ws, void *stream) {
    if (n == 1) return TA_OK;
    return ta_cuda_merge_parts(plan, ws->part_o, TA_F32, ws->part_lse, n, a->o, a->lse, stream);
}

ta_status ta_cuda_fwd_launch(const void *kernel, size_t smem, const ta_plan *plan,
                             const ta_tiling *t, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                             void *stream) {
    ta_cuda_params prm;
    ta_cuda_launch_desc launch;
    ta_status st;
    ta_cuda_params_fwd(&prm, plan, t, a, ws);
    launch = ta_cuda_launch_of(kernel, &prm,
                               (int64_t)plan->p.heads_q * t->num_q_tiles * t->num_splits, 0, smem);
    if ((st = ta_cuda_launch_batches(&launch, 1, a->seqlens_k, plan->p.batch, stream)) != TA_OK)
        return st;
    return ta_cuda_merge_splits(plan, plan->fwd.num_splits, a, ws, stream);
}

void ta_cuda_params_bwd(ta_cuda_params *p, const ta_plan *plan, const ta_tiling *t,
                        const ta_bwd_args *a, const ta_cuda_bwd_ws *ws) {
    memset(p, 0, sizeof *p);
    p->q = a->q;
    p->k = a->k;
    p->v = a->v;
    p->d_o = a->d_o;
    p->o = const_cast<void *>(a->o);      /* read only: the delta kernel's input */
    p->lse = const_cast<float *>(a->lse); /* read only in the backward */
    p->conv_w = a->conv_w;
    p->dq = a->dq;
    p->dk = a->dk;
    p->dv = a->dv;
    p->dconv_w = a->dconv_w;
    p->delta = ws->delta;
    p->dw_rows = ws->dw_rows;
    ta_cuda_params_dims(p, plan, t, a->seqlens_k, ws->lat_t, ws->lat_dl);
}
