/*
 * Host-side helpers shared by the CUDA launch code (cuda/ta_cuda_sdpa_*.cu,
 * cuda/ta_cuda_mta_*.cu), defined in cuda/ta_cuda.cu: the parameter fill, the
 * batch-chunk launcher, the shared-memory policy, pointer checks. Not installed.
 */
#ifndef TA_CUDA_HOST_CUH
#define TA_CUDA_HOST_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_params.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

/*
 * The one fill of the kernel parameter base (cuda/ta_cuda_params.cuh): zeroes
 * *p, then sets the pass's tensor pointers from a (and the workspace ws), the
 * dims, scale and layout (the call's strides) from plan, the tiling t the
 * kernel runs (copied; made by ta_cuda_tiling, or one of the plan's) and
 * has_seqlens. The batch chunk is ta_cuda_launch_batches'.
 * A launcher with a derived parameter struct calls this on its base part and
 * sets its own fields after.
 */
void ta_cuda_params_fwd(ta_cuda_params *p, const ta_plan *plan, const ta_tiling *t,
                        const ta_fwd_args *a, const ta_cuda_fwd_ws *ws);
/* Split-K's end (n = the tiling's num_splits): nothing with one split, else
 * the merge kernel of ws's f32 parts into a->o, a->lse (cuda/ta_cuda_merge.cu);
 * the exact and the fast forward alike. */
ta_status ta_cuda_merge_splits(const ta_plan *plan, int32_t n, const ta_fwd_args *a,
                               const ta_cuda_fwd_ws *ws, void *stream);
void ta_cuda_params_bwd(ta_cuda_params *p, const ta_plan *plan, const ta_tiling *t,
                        const ta_bwd_args *a, const ta_cuda_bwd_ws *ws);
/* An exact forward's launch (SDPA and MTA): the parameters (ta_cuda_params_fwd
 * and split-K's parts in ws), one block per (b, h, Q tile of t, part) through
 * ta_cuda_launch_batches, then with split-K the merge kernel of ws's parts
 * into a->o, a->lse (cuda/ta_cuda_merge.cu). */
ta_status ta_cuda_fwd_launch(const void *kernel, size_t smem, const ta_plan *plan,
                             const ta_tiling *t, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                             void *stream);

/*
 * The tiling a kernel runs: block_q x block_k tiles of the plan's problem for
 * `pass` (TA_TILING_FWD / _BWD halos of the plan's conv), with the plan's mask
 * (causal and the sliding window, ta_tiling_set_window). A kernel may pick
 * its own row tiles (rows are independent); the forward keeps the plan's
 * block_k (the contract's key cut). Errors as ta_tiling_make.
 */
ta_status ta_cuda_tiling(const ta_plan *plan, int32_t block_q, int32_t block_k, int32_t pass,
                         ta_tiling *t);

/* 1 if the plan's mask has a left bound (a window's window_left >= 0): the
 * kernels' WL instantiation. Without one every row's keys start at 0 and the
 * WL = false kernels test the right end only (cuda/ta_cuda_tile.cuh). */
static inline bool ta_cuda_left_bounded(const ta_plan *plan) { return plan->fwd.window_left >= 0; }

/*
 * TA_OK if every non-NULL pointer of ptrs[0 .. n) is memory a kernel on the
 * current device may read and write: device memory of that device, managed
 * memory, or mapped pinned host memory (cudaHostAlloc) whose device address is
 * the host address. Pageable host memory and another device's memory give
 * TA_ERR_BAD_ARG; a failing CUDA call TA_ERR_DEVICE. Only the base address is
 * checked (CUDA cannot tell an allocation's extent cheaply).
 */
ta_status ta_cuda_check_pointers(const void *const *ptrs, int n);

/* ta_cuda_check_pointers on the rotary stage's tables and positions
 * (plan->rope; all NULL without the stage): the exact kernels read them. */
ta_status ta_cuda_check_rope(const ta_plan *plan);

/*
 * The one shared-memory policy, called by every launcher for every kernel with
 * dynamic shared memory before its first launch. need: this launch's bytes
 * (from the kernel's offset table); most: the kernel's largest need over all
 * launches. The kernel is opted in to min(most, device limit) bytes when that
 * is above the 48 KB default: one value per (kernel, device), so concurrent
 * callers set the same attribute (reentrant). The device limit is
 * cudaDevAttrMaxSharedMemoryPerBlockOptin (227 KB on sm_90, 163 KB on sm_80,
 * 99 KB on sm_86/sm_89) less the kernel's static shared memory.
 * TA_ERR_UNSUPPORTED if need exceeds it (nothing launched), TA_ERR_DEVICE if
 * a CUDA call fails.
 */
ta_status ta_cuda_smem_opt_in(const void *kernel, size_t need, size_t most);

/*
 * Launch kernel(args...) with TA_CUDA_THREADS threads per block and
 * min(n_blocks, 2^31 - 1) blocks (kernels loop over their tiles with a grid
 * stride, so any n_blocks >= 1 is covered; n_blocks < 1 launches nothing) on
 * stream. TA_ERR_DEVICE if the launch fails.
 */
ta_status ta_cuda_launch_args(const void *kernel, int64_t n_blocks, size_t smem_bytes, void **args,
                              void *stream);
/* The same with `threads` threads per block (the fast-mode kernels' own). */
ta_status ta_cuda_launch_threads(const void *kernel, int64_t n_blocks, int threads,
                                 size_t smem_bytes, void **args, void *stream);

/*
 * One kernel of a pass for ta_cuda_launch_batches: its parameter struct (the
 * kernel's one argument, a ta_cuda_params or a struct derived from it), that
 * struct's ta_cuda_params part (where the batch chunk is written), and its
 * grid: blocks_per_entry * batch_count + blocks_fixed blocks of smem bytes,
 * `threads` threads each (0, as ta_cuda_launch_of sets it: TA_CUDA_THREADS).
 */
typedef struct ta_cuda_launch_desc {
    const void *kernel;
    void *params;
    ta_cuda_params *base;
    int64_t blocks_per_entry, blocks_fixed;
    size_t smem;
    int threads;
} ta_cuda_launch_desc;

template <typename P>
static inline ta_cuda_launch_desc ta_cuda_launch_of(const void *kernel, P *params,
                                                    int64_t blocks_per_entry, int64_t blocks_fixed,
                                                    size_t smem) {
    ta_cuda_launch_desc d;
    d.kernel = kernel;
    d.params = params;
    d.base = static_cast<ta_cuda_params *>(params);
    d.blocks_per_entry = blocks_per_entry;
    d.blocks_fixed = blocks_fixed;
    d.smem = smem;
    d.threads = 0;
    return d;
}

/*
 * The kernel instantiation for a dtype and a count n (slots or accumulator
 * blocks) in [LO, 4]: K<dtype, n>, where F is a kernel family, a struct with
 * `template <int DT, int N> static const void *at()` returning &K<DT, N>.
 * n <= LO gives LO, n >= 4 gives 4; only K<*, LO..4> are instantiated.
 */
template <class F, int DT, int LO, int HI> struct ta_cuda_pick_count {
    static const void *at(int n) {
        return n <= LO ? F::template at<DT, LO>() : ta_cuda_pick_count<F, DT, LO + 1, HI>::at(n);
    }
};
template <class F, int DT, int HI> struct ta_cuda_pick_count<F, DT, HI, HI> {
    static const void *at(int) { return F::template at<DT, HI>(); }
};

template <class F, int LO> static inline const void *ta_cuda_pick(ta_dtype dt, int n) {
    switch (dt) {
    case TA_F16: return ta_cuda_pick_count<F, TA_F16, LO, 4>::at(n);
    case TA_BF16: return ta_cuda_pick_count<F, TA_BF16, LO, 4>::at(n);
    case TA_F32: break;
    }
    return ta_cuda_pick_count<F, TA_F32, LO, 4>::at(n);
}

/* ta_cuda_pick of the exact kernels' family F<WL, ROPE> for plan: WL, a
 * window's left bound (ta_cuda_left_bounded); ROPE, the rotary load stage
 * (docs/cuda.md section 2, "The rotary load stage"). */
template <template <bool, bool> class F, int LO>
static inline const void *ta_cuda_pick_plan(const ta_plan *plan, int n) {
    const ta_dtype dt = plan->p.dtype;
    if (plan->stages.load == TA_LOAD_ROPE)
        return ta_cuda_left_bounded(plan) ? ta_cuda_pick<F<true, true>, LO>(dt, n)
                                          : ta_cuda_pick<F<false, true>, LO>(dt, n);
    return ta_cuda_left_bounded(plan) ? ta_cuda_pick<F<true, false>, LO>(dt, n)
                                      : ta_cuda_pick<F<false, false>, LO>(dt, n);
}

/* The same with latent attention's twins: lat picks L<WL> (f32 sub-plans of
 * cuda/ta_cuda_latent.cu, no rotary stage), else F<WL, ROPE> as above. */
template <template <bool, bool> class F, template <bool> class L, int LO>
static inline const void *ta_cuda_pick_plan_lat(const ta_plan *plan, int n, bool lat) {
    if (!lat) return ta_cuda_pick_plan<F, LO>(plan, n);
    return ta_cuda_left_bounded(plan) ? ta_cuda_pick_count<L<true>, TA_F32, LO, 4>::at(n)
                                      : ta_cuda_pick_count<L<false>, TA_F32, LO, 4>::at(n);
}

/*
 * The one batch-chunk loop: seqlens_k (host memory, or NULL) travels by value
 * in the parameters, TA_CUDA_BATCH_CHUNK entries per launch; for each chunk of
 * the batch entries [0, batch), in order, the n kernels of l in order, each
 * with the chunk written into its base. Without seqlens_k, or with lengths
 * in device memory (has_seqlens == 2 in l[0]'s base: TA_SEQLENS_DEVICE), one
 * chunk of all entries. Not cudaMemcpyAsync: a copy from pageable host memory waits for
 * the stream's earlier work. TA_ERR_DEVICE if a launch fails (the kernels
 * launched before it stay enqueued).
 */
ta_status ta_cuda_launch_batches(const ta_cuda_launch_desc *l, int n, const int32_t *seqlens_k,
                                 int32_t batch, void *stream);

#endif /* TA_CUDA_HOST_CUH */
