#!/usr/bin/env python3
"""Two builds of tileattn's CUDA backend, A and B, timed side by side in one
process on the same tensors and stream: the before/after check of a change
(an issue's "no benchmark row slower by more than 3%").

    python3 bench/cuda_ab.py --lib A=before.so,B=after.so [--rounds 5] [--reps 15]
                             [--window L,R]

More than two builds (--lib A=a.so,M=m.so,B=b.so) are timed interleaved the
same way; the table compares the last with the first, and adds each middle
build's fwd and bwd ratio to the first (an ablation in one process).

Each .so is a build's libtileattn_cuda.a and libtileattn.a linked into a shared
object (see bench/cuda_check.sh). The shapes are bench/cuda_bench.py's SDPA and MTA tables
(f32, exact mode). Per shape and pass the builds run in turn, --rounds times,
each a CUDA-event median of --reps calls after 3 warm-ups; the table gives the
median over rounds, B/A, and whether the two builds returned the same bits
(they must: exact mode is bit-identical to the reference on every build).
Interleaving in one process matters: two separate processes one after the
other drift by about 1% on the same binary, and one session measured 4-5% with
separate runs where the interleaved A/B gave 0.2-0.7%.
The hardware limit column: f32 TFLOP/s of B over the f32 FMA peak (exact mode
cannot use tensor cores); FLOPs counted as cuda_bench.py counts them.
--window L,R: run every shape with TA_WINDOW (L, R) in both builds (a build
without windows rejects it).
"""
import argparse
import ctypes
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_bench import (TA_BACKEND_CUDA, TA_CAUSAL, TA_F32, BwdArgs, FwdArgs, Problem,  # noqa: E402
                        check, f32_peak_tflops, load, median_ms)

TA_WINDOW = 2
SDPA = [(4, 16, 1024, 64, False), (4, 16, 1024, 64, True), (2, 16, 4096, 64, True),
        (2, 16, 4096, 128, True), (1, 16, 8192, 128, True), (1, 16, 4096, 256, False)]
MTA = [(1, 8, 1024, 64, 6, 11), (1, 8, 2048, 64, 6, 11), (1, 8, 4096, 64, 6, 11),
       (1, 8, 4096, 128, 6, 11), (1, 8, 8192, 64, 6, 11), (1, 8, 2048, 64, 3, 3)]


def one_shape(libs, b, h, s, d, causal, conv, window, args):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(4321 + s + d)

    def rand(*shape):
        return torch.rand(*shape, device=dev, generator=gen, dtype=torch.float32) * 2 - 1

    q, k, v, d_o = (rand(b, h, s, d) for _ in range(4))
    c_q, c_k = conv
    w = None
    if c_q:
        w = rand(h, c_q, c_k) * 0.1
        w[:, c_q - 1, (c_k - 1) // 2] += 1.0  # near the identity
    p = Problem(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim=d, head_dim_v=d,
                dtype=TA_F32, precision=0, flags=(TA_CAUSAL if causal else 0), conv_q=c_q,
                conv_k=c_k)
    if window:
        p.flags |= TA_WINDOW
        p.window_left, p.window_right = window
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    state = {}
    for name, lib in libs.items():
        fb, bb = ctypes.c_size_t(), ctypes.c_size_t()
        check(lib, lib.ta_fwd_workspace_size(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(fb)),
              "fwd size")
        check(lib, lib.ta_bwd_workspace_size(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(bb)),
              "bwd size")
        ws = torch.empty(max(fb.value, bb.value, 1) + 64, device=dev, dtype=torch.uint8)
        o, lse = torch.empty_like(q), torch.empty(b, h, s, device=dev)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dw = torch.empty_like(w) if w is not None else None
        wp = w.data_ptr() if w is not None else None
        fa = FwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), conv_w=wp,
                     o=o.data_ptr(), lse=lse.data_ptr())
        ba = BwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                     d_o=d_o.data_ptr(), lse=lse.data_ptr(), conv_w=wp, dq=dq.data_ptr(),
                     dk=dk.data_ptr(), dv=dv.data_ptr(),
                     dconv_w=dw.data_ptr() if dw is not None else None)

        def fwd(lib=lib, fa=fa, ws=ws):
            check(lib, lib.ta_fwd(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(fa),
                                  ws.data_ptr(), ws.numel(), stream), "ta_fwd")

        def bwd(lib=lib, ba=ba, ws=ws):
            check(lib, lib.ta_bwd(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(ba),
                                  ws.data_ptr(), ws.numel(), stream), "ta_bwd")

        state[name] = {"fwd": fwd, "bwd": bwd, "out": (o, lse, dq, dk, dv, dw),
                       "t": {"fwd": [], "bwd": []}}
    for _ in range(args.rounds):
        for pass_ in ("fwd", "bwd"):
            for name in libs:
                state[name]["t"][pass_].append(median_ms(state[name][pass_], 3, args.reps))
    names = list(libs)
    ref = state[names[0]]["out"]
    same = all(all((x is None and y is None) or torch.equal(x, y)
                   for x, y in zip(ref, state[n]["out"])) for n in names[1:])
    med = {n: {ps: statistics.median(state[n]["t"][ps]) for ps in ("fwd", "bwd")} for n in names}
    return med, same


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="A=path.so,B=path.so")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--window", default="")
    args = ap.parse_args()
    libs = {n: load(pth) for n, pth in (x.split("=", 1) for x in args.lib.split(","))}
    if len(libs) < 2:
        sys.exit("--lib needs two builds or more")
    window = tuple(int(x) for x in args.window.split(",")) if args.window else None
    peak = f32_peak_tflops()
    a, *mid, b = list(libs)
    print(f"device: {torch.cuda.get_device_name(0)}, f32 FMA peak {peak:.1f} TFLOP/s; "
          f"A = {a}, B = {b}; medians over {args.rounds} interleaved rounds of "
          f"{args.reps} calls" + (f"; window {window}" if window else ""))
    print(f"| shape | {a} fwd ms | {b} fwd ms | fwd {b}/{a} | {a} bwd ms | {b} bwd ms | "
          f"bwd {b}/{a} | {b} fwd TF/s | {b} bwd TF/s | % f32 peak | same bits |" +
          "".join(f" fwd {m}/{a} | bwd {m}/{a} |" for m in mid))
    print("|---|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(mid))
    rows = [(x, (0, 0)) for x in SDPA] + [((bb, h, s, d, True), (cq, ck))
                                          for (bb, h, s, d, cq, ck) in MTA]
    worst = 0.0
    for (bb, h, s, d, causal), conv in rows:
        med, same = one_shape(libs, bb, h, s, d, causal, conv, window, args)
        pairs = bb * h * s * s * (0.5 if causal else 1.0)
        flops = 4.0 * pairs * d + (2.0 * conv[0] * conv[1] * pairs if conv[0] else 0.0)
        flops_b = 2.5 * 4.0 * pairs * d + (4.0 * conv[0] * conv[1] * pairs if conv[0] else 0.0)
        tf_f, tf_b = flops / med[b]["fwd"] / 1e9, flops_b / med[b]["bwd"] / 1e9
        rf, rb = med[b]["fwd"] / med[a]["fwd"], med[b]["bwd"] / med[a]["bwd"]
        worst = max(worst, rf, rb)
        label = (f"B={bb} H={h} S={s} D={d} " +
                 (f"{conv[0]}x{conv[1]}" if conv[0] else ("causal" if causal else "full")))
        print(f"| {label} | {med[a]['fwd']:.3f} | {med[b]['fwd']:.3f} | {rf:.3f} | "
              f"{med[a]['bwd']:.3f} | {med[b]['bwd']:.3f} | {rb:.3f} | {tf_f:.2f} | {tf_b:.2f} | "
              f"{100 * max(tf_f, tf_b) / peak:.1f}% | {'yes' if same else 'NO'} |" +
              "".join(f" {med[m]['fwd'] / med[a]['fwd']:.3f} | {med[m]['bwd'] / med[a]['bwd']:.3f} |"
                      for m in mid), flush=True)
    print(f"worst {b}/{a}: {worst:.3f}")


if __name__ == "__main__":
    main()
