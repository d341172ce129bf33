#!/usr/bin/env python3
"""tileattn CPU backend vs PyTorch's CPU scaled_dot_product_attention, same run.

For each thread count, runs bench/cpu_bench (our CPU backend, f32, plus the
machine's FMA peak measured in that binary) and then times
torch.nn.functional.scaled_dot_product_attention on the CPU with the same
shapes, dtype (f32) and thread count (torch.set_num_threads). Both use the
same FLOP count (per visible (row, key) pair: forward 2 (D + D_v), backward
2 (3 D + 2 D_v)), so the ratio of GFLOP/s is the ratio of times.

Shapes: B = 1 (--batch), H = 8 (--heads), S_q = S_k = S, D = D_v, causal and
not (torch's is_causal=True is top-left aligned, the same mask as ours when
S_q = S_k). Times are medians of --reps calls after one warm-up; the torch
backward is timed alone (torch.autograd.grad on a graph built beforehand).

Usage (from the repository root, after building cpu_bench):
  cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DTILEATTN_CUDA=OFF \\
        -DTILEATTN_TESTS=OFF && cmake --build build/bench -j --target cpu_bench
  python3 bench/cpu_torch.py --bench build/bench/cpu_bench --threads 1,16 \\
        --seq 512,1024,2048,4096,8192 --dim 64,128 --out results.md

Prints a table and writes it (markdown) to --out; --csv adds the raw rows.
MTA (--mta 6x11 by default, "off" for none): cpu_bench's MTA rows of the same
causal shapes go into a second table, ours only (PyTorch has no MTA kernel on
the CPU): time, GFLOP/s (cpu_bench's MTA FLOP count), fraction of the peak
and the ratio of the MTA time to our SDPA time of the same shape and pass.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def visible_pairs(s, causal):
    return s * (s + 1) / 2 if causal else float(s) * s


def flops(b, h, s, d, causal, bwd):
    per_pair = 2 * (3 * d + 2 * d) if bwd else 2 * (d + d)
    return b * h * visible_pairs(s, causal) * per_pair


def run_ours(bench, threads, seqs, dims, batch, heads, reps, passes, mta, causal):
    """Runs cpu_bench; returns (peak GFLOP/s, {(s, d, causal, pass): ms}, isa,
    {(s, d, pass): (kind, ms, gflops, frac_peak, mta_over_sdpa)})."""
    cmd = [bench, "--threads", str(threads), "--seq", ",".join(map(str, seqs)),
           "--dim", ",".join(map(str, dims)), "--heads", str(heads), "--batch", str(batch),
           "--reps", str(reps), "--pass", passes, "--mta", mta, "--causal", causal, "--csv"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit("cpu_bench failed:\n" + res.stdout + res.stderr)
    peak, times, isa, mta_rows = None, {}, "?", {}
    for line in res.stderr.splitlines():
        f = line.split(",")
        if f[0] == "peak":
            peak, isa = float(f[11]), f[1]
        elif f[0] == "sdpa":
            # kind,isa,threads,batch,heads,seq,dim,causal,dtype,pass,ms,gflops,peak,frac
            times[(int(f[5]), int(f[6]), f[7] == "1", f[9])] = float(f[10])
        elif f[0].startswith("mta"):
            # ... as sdpa, then the MTA / SDPA time ratio
            mta_rows[(int(f[5]), int(f[6]), f[9])] = (
                f[0], float(f[10]), float(f[11]), float(f[13]),
                float(f[14]) if len(f) > 14 else float("nan"))
    return peak, times, isa, mta_rows


def time_torch(torch, b, h, s, d, causal, bwd, reps):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(1)
    q = (torch.rand(b, h, s, d, generator=g) * 2 - 1).requires_grad_(bwd)
    k = (torch.rand(b, h, s, d, generator=g) * 2 - 1).requires_grad_(bwd)
    v = (torch.rand(b, h, s, d, generator=g) * 2 - 1).requires_grad_(bwd)
    d_o = torch.rand(b, h, s, d, generator=g) * 2 - 1
    out = []
    for i in range(reps + 1):
        if not bwd:
            with torch.no_grad():
                t0 = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                t = time.perf_counter() - t0
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            t0 = time.perf_counter()
            torch.autograd.grad(o, (q, k, v), d_o)
            t = time.perf_counter() - t0
        if i > 0:
            out.append(t)
    return statistics.median(out) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/bench/cpu_bench", help="cpu_bench binary")
    ap.add_argument("--threads", default="1,0", help="thread counts; 0 = all cores")
    ap.add_argument("--seq", default="512,1024,2048,4096,8192")
    ap.add_argument("--dim", default="64,128")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pass", dest="passes", default="both", choices=["fwd", "bwd", "both"])
    ap.add_argument("--causal", default="both", choices=["on", "off", "both"])
    ap.add_argument("--mta", default="6x11", help="MTA conv c_qxc_k for the MTA table, or off")
    ap.add_argument("--out", default=None, help="write the markdown table here")
    ap.add_argument("--csv", action="store_true", help="also print CSV rows")
    a = ap.parse_args()
    import torch

    seqs = [int(x) for x in a.seq.split(",")]
    dims = [int(x) for x in a.dim.split(",")]
    passes = ["fwd", "bwd"] if a.passes == "both" else [a.passes]
    lines = []
    head = ("| threads | S | D | mask | pass | ours ms | torch ms | torch/ours | ours GFLOP/s "
            "| torch GFLOP/s | ours of peak |")
    lines.append(head)
    lines.append("|" + "---|" * 11)
    meta = []
    mta_lines = ["| threads | S | D | conv | pass | MTA ms | our SDPA ms | MTA/SDPA | MTA GFLOP/s "
                 "| of peak |", "|" + "---|" * 10]
    for t in [int(x) for x in a.threads.split(",")]:
        threads = t if t > 0 else (os.cpu_count() or 1)
        peak, ours, isa, mta_rows = run_ours(a.bench, threads, seqs, dims, a.batch, a.heads,
                                             a.reps, a.passes, a.mta, a.causal)
        for s in seqs:
            for d in dims:
                for p in passes:
                    if (s, d, p) not in mta_rows:
                        continue
                    kind, ms, gf, frac, ratio = mta_rows[(s, d, p)]
                    mta_lines.append(f"| {threads} | {s} | {d} | {kind[3:]} | {p} | {ms:.2f} "
                                     f"| {ours[(s, d, True, p)]:.2f} | {ratio:.2f} | {gf:.1f} "
                                     f"| {100 * frac:.0f}% |")
        torch.set_num_threads(threads)
        meta.append(f"{threads} thread(s): FMA peak {peak:.1f} GFLOP/s ({isa}), "
                    f"torch {torch.__version__} with {torch.get_num_threads()} threads")
        print(meta[-1], flush=True)
        for s in seqs:
            for d in dims:
                for causal in {"on": (True,), "off": (False,), "both": (True, False)}[a.causal]:
                    for p in passes:
                        bwd = p == "bwd"
                        ms_t = time_torch(torch, a.batch, a.heads, s, d, causal, bwd, a.reps)
                        ms_o = ours[(s, d, causal, p)]
                        fl = flops(a.batch, a.heads, s, d, causal, bwd)
                        row = (f"| {threads} | {s} | {d} | {'causal' if causal else 'full'} | {p} "
                               f"| {ms_o:.2f} | {ms_t:.2f} | {ms_t / ms_o:.2f} "
                               f"| {fl / ms_o * 1e-6:.1f} | {fl / ms_t * 1e-6:.1f} "
                               f"| {100 * fl / ms_o * 1e-6 / peak:.0f}% |")
                        lines.append(row)
                        print(row, flush=True)
                        if a.csv:
                            print(f"csv,{threads},{s},{d},{int(causal)},{p},{ms_o:.4f},"
                                  f"{ms_t:.4f},{peak:.2f}", flush=True)
    text = "\n".join(meta) + "\n\n" + "\n".join(lines) + "\n"
    if len(mta_lines) > 2:
        text += "\nMTA (causal; ours only: PyTorch has no CPU MTA kernel)\n\n"
        text += "\n".join(mta_lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
