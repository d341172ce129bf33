#!/usr/bin/env python3
"""Decode on the GPU (issue 12 item 7): a few new query rows against a long KV
cache, bf16, D = 128, H = 32 query heads (MHA, and GQA with H_kv = 8), 1 and
16 new queries, S_k = 8k .. 256k, B = 1; tileattn against PyTorch SDPA's flash
and cuDNN backends in the same process, on the same tensors and stream, as
achieved HBM bandwidth against a device-to-device copy measured in the same run:

    python3 bench/cuda_decode_bench.py --lib BUILD/libtileattn_bench.so
        [--seqs 8192,...] [--reps N] [--warmup N] [--csv FILE]

tileattn runs two ways: `split` = TA_PRECISION_FAST with num_splits =
TA_SPLITS_AUTO (a split-K forward: the tensor-core mma.sync kernels since
2026-11-23, the exact kernels before; the parts merged by the merge kernel,
docs/cuda.md section 7, "Split-K in fast mode"), and `fast` = the fast
tensor-core forward unsplit (one block per query head and Q tile: built for
prefill, not decode; with 16 or fewer rows per packed head, split-K's default
is the decode-shaped kernel since 2026-11-24, cuda/ta_cuda_fast_decode.cu).
--explore also times num_splits in {4, 8, 16, 32, 64} x the tile_configs of
--explore-cfgs (default 0, 7 = the multi-stage split kernel, 9 and 10 = the
decode-shaped ones, for D = 128) of the split path (printed, not in the CSV). No mask (a decode row sees the whole cache; with 16 new
rows the bottom-right causal mask would hide 120 of 16 x S_k scores, and
PyTorch's is_causal aligns top-left, so both sides run unmasked). PyTorch gets
enable_gqa=True for GQA.

--mta-cfgs 1,2,... also times those tile_configs of the MTA decode kernel
(its candidates; printed); --only-mta skips the baselines (and the CSV rows).
With --mta, each shape also runs the MTA 6 x 11 decode step in fast mode
(causal, q_history = 5: the c_q - 1 query rows above the new ones passed as
history, TA_SPLITS_AUTO; the decode-shaped kernel with the conv on raw
scores, docs/cuda.md section 7), timed against our split SDPA step on the
same cache (issue 12's target: at most 1.3x); column mta_ms, ratio mta/split.

GB/s: the bytes of K and V (2 S_k H_kv D x 2 bytes; q and o are under 0.1 % at
S_k = 8k) over the time. `copy`: torch's copy of a tensor of that size, read +
write bytes over its time (the achievable HBM bandwidth). Ratios: against
flash (> 1: tileattn faster) and the fraction of the copy bandwidth.
CUDA-event medians of --reps calls after --warmup.
"""
import argparse
import csv
import ctypes
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_bench import FwdArgs, Problem, check, kernel_table, load, median_ms  # noqa: E402

TA_BACKEND_CUDA = 2
TA_BF16 = 2
TA_PRECISION_FAST = 1
TA_SPLITS_AUTO = -1
BASELINES = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))


class Decode:
    def __init__(self, lib, h, h_kv, s_q, s_k, d, splits, conv=None):
        dev = torch.device("cuda")
        gen = torch.Generator(device=dev).manual_seed(11 + s_k + s_q + h_kv)
        self.q = (torch.rand(1, h, s_q, d, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
        self.k, self.v = ((torch.rand(1, h_kv, s_k, d, device=dev, generator=gen) * 2 - 1)
                          .to(torch.bfloat16) for _ in range(2))
        self.o = torch.empty_like(self.q)
        self.lse = torch.empty(1, h, s_q, device=dev, dtype=torch.float32)
        self.lib = lib
        self.p = Problem(batch=1, heads_q=h, heads_kv=h_kv, seq_q=s_q, seq_k=s_k, head_dim=d,
                         head_dim_v=d, dtype=TA_BF16, precision=TA_PRECISION_FAST,
                         scale=1.0 / math.sqrt(d), num_splits=splits)
        self.fa = FwdArgs(q=self.q.data_ptr(), k=self.k.data_ptr(), v=self.v.data_ptr(),
                          o=self.o.data_ptr(), lse=self.lse.data_ptr())
        if conv:  # MTA: the paper's kernel shape, causal, c_q - 1 history rows
            c_q, c_k = conv
            self.w = (torch.rand(h, c_q, c_k, device=dev, generator=gen) - 0.5) * 0.4
            self.hist = (torch.rand(1, h, c_q - 1, d, device=dev, generator=gen) * 2 - 1).to(
                torch.bfloat16)
            self.p.conv_q, self.p.conv_k, self.p.q_history = c_q, c_k, c_q - 1
            self.p.flags = 1  # TA_CAUSAL (MTA requires it)
            self.fa.conv_w, self.fa.q_hist = self.w.data_ptr(), self.hist.data_ptr()
        self.sized()
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def sized(self):
        """(Re)allocate the workspace for the problem as it is now."""
        n = ctypes.c_size_t()
        check(self.lib, self.lib.ta_fwd_workspace_size(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                                       ctypes.byref(n)), "fwd size")
        self.ws = torch.empty(max(n.value, 1), device="cuda", dtype=torch.uint8)

    def __call__(self):
        check(self.lib, self.lib.ta_fwd(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                        ctypes.byref(self.fa), self.ws.data_ptr(),
                                        self.ws.numel(), self.stream), "ta_fwd")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--seqs", default="8192,32768,65536,131072,262144")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--csv", default="")
    ap.add_argument("--explore", action="store_true",
                    help="also time other split counts and candidates (printed)")
    ap.add_argument("--explore-cfgs", default="0,7,9,10",
                    help="the tile_configs --explore times")
    ap.add_argument("--mta", action="store_true",
                    help="also time the MTA 6x11 decode step on the same cache")
    ap.add_argument("--mta-cfgs", default="",
                    help="with --mta: also time these tile_configs of the MTA decode kernel "
                         "(its candidates, cuda/ta_cuda_fast_decode.cu; printed, not in the CSV)")
    ap.add_argument("--kernels", action="store_true",
                    help="also print each kernel's device time of our split (and MTA) calls "
                         "(torch.profiler; printed, not in the CSV)")
    ap.add_argument("--only-mta", action="store_true",
                    help="with --mta: skip the flash / cuDNN baselines and the unsplit call")
    a = ap.parse_args()
    lib = load(a.lib)
    d, h = 128, 32
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    print("H_kv S_q      S_k |   copy GB/s | split ms  fast ms flash ms cudnn ms | split GB/s "
          "flash GB/s cudnn GB/s | split/flash split/copy | max|o-flash|")
    rows = []
    for h_kv in (32, 8):
        for s_q in (1, 16):
            for s_k in (int(x) for x in a.seqs.split(",")):
                kv_bytes = 2 * s_k * h_kv * d * 2
                src = torch.empty(kv_bytes // 2, device="cuda", dtype=torch.bfloat16)
                dst = torch.empty_like(src)
                copy_gbs = 2 * kv_bytes / (median_ms(lambda: dst.copy_(src), a.warmup, a.reps)
                                           * 1e-3) / 1e9
                del src, dst
                split = Decode(lib, h, h_kv, s_q, s_k, d, TA_SPLITS_AUTO)
                fast = Decode(lib, h, h_kv, s_q, s_k, d, 0)
                fast.q.copy_(split.q)
                fast.k, fast.v = split.k, split.v
                fast.fa.k, fast.fa.v = split.k.data_ptr(), split.v.data_ptr()
                t = {"split": median_ms(split, a.warmup, a.reps)}
                if a.kernels:
                    kernel_table(split, a.reps, f"split, H_kv {h_kv} S_q {s_q} S_k {s_k} "
                                 f"({t['split'] * 1e3:.0f} us per call, CUDA events)")
                if not a.only_mta:
                    t["fast"] = median_ms(fast, a.warmup, max(3, a.reps // 4))
                if a.mta:
                    mta = Decode(lib, h, h_kv, s_q, s_k, d, TA_SPLITS_AUTO, conv=(6, 11))
                    mta.q.copy_(split.q)
                    mta.k, mta.v = split.k, split.v
                    mta.fa.k, mta.fa.v = split.k.data_ptr(), split.v.data_ptr()
                    t["mta"] = median_ms(mta, a.warmup, a.reps)
                    if a.kernels:
                        kernel_table(mta, a.reps, f"MTA, H_kv {h_kv} S_q {s_q} S_k {s_k} "
                                     f"({t['mta'] * 1e3:.0f} us per call, CUDA events)")
                    if a.mta_cfgs:
                        seen = []
                        for cfg in (int(x) for x in a.mta_cfgs.split(",")):
                            mta.p.tile_config = cfg
                            seen.append("%d %.3f" % (cfg, median_ms(mta, a.warmup, a.reps)))
                        print("    MTA tile_config ms: " + ", ".join(seen)
                              + " (split %.3f)" % t["split"], flush=True)
                    del mta
                    if a.only_mta:
                        del split, fast
                        torch.cuda.empty_cache()
                        continue
                if a.explore:
                    seen = []
                    for n_split in (4, 8, 16, 32, 64):
                        for cfg in (int(x) for x in a.explore_cfgs.split(",")):
                            split.p.num_splits, split.p.tile_config = n_split, cfg
                            split.sized()
                            seen.append("%d/%d %.3f" % (n_split, cfg,
                                                        median_ms(split, a.warmup, a.reps)))
                    split.p.num_splits, split.p.tile_config = TA_SPLITS_AUTO, 0
                    split.sized()
                    print("    splits/tile_config ms: " + ", ".join(seen), flush=True)
                ref = None
                for name, be in BASELINES:
                    try:
                        with sdpa_kernel(be):
                            def call():
                                return F.scaled_dot_product_attention(
                                    split.q, split.k, split.v, enable_gqa=h_kv != h)
                            out = call()
                            ref = out if ref is None else ref
                            t[name] = median_ms(call, a.warmup, a.reps)
                            if a.kernels and name == "flash":
                                kernel_table(call, a.reps, f"flash, H_kv {h_kv} S_q {s_q} "
                                             f"S_k {s_k} ({t[name] * 1e3:.0f} us per call)")
                    except RuntimeError as e:
                        print(f"  {name}: unavailable ({str(e).splitlines()[0][:80]})",
                              file=sys.stderr)
                        t[name] = float("nan")
                split()
                torch.cuda.synchronize()
                err = ((split.o.float() - ref.float()).abs().max().item() if ref is not None
                       else float("nan"))
                gbs = {k: kv_bytes / (ms * 1e-3) / 1e9 for k, ms in t.items()}
                row = {"H": h, "H_kv": h_kv, "S_q": s_q, "S_k": s_k, "D": d,
                       "copy_gbs": copy_gbs, "split_ms": t["split"], "fast_ms": t["fast"],
                       "flash_ms": t["flash"], "cudnn_ms": t["cudnn"],
                       "split_gbs": gbs["split"], "fast_gbs": gbs["fast"],
                       "flash_gbs": gbs["flash"], "cudnn_gbs": gbs["cudnn"],
                       "split_vs_flash": t["flash"] / t["split"],
                       "split_frac_copy": gbs["split"] / copy_gbs, "max_abs_diff": err}
                if a.mta:
                    row.update({"mta_ms": t["mta"], "mta_gbs": gbs["mta"],
                                "mta_vs_split": t["mta"] / t["split"]})
                rows.append(row)
                print("%4d %3d %8d | %11.0f | %8.3f %8.3f %8.3f %8.3f | %10.0f %10.0f %10.0f | "
                      "%11.3f %10.3f | %.2e"
                      % (h_kv, s_q, s_k, copy_gbs, t["split"], t["fast"], t["flash"], t["cudnn"],
                         gbs["split"], gbs["flash"], gbs["cudnn"], row["split_vs_flash"],
                         row["split_frac_copy"], err), flush=True)
                if a.mta:
                    print("      MTA 6x11 decode: %.3f ms = %.2fx our split SDPA"
                          % (t["mta"], row["mta_vs_split"]), flush=True)
                del split, fast, ref
                torch.cuda.empty_cache()
    if a.csv and rows:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
