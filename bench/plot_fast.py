#!/usr/bin/env python3
"""Plot a bench/cuda_fast_bench.py CSV: forward or backward TFLOP/s against S
(log2 axis) for tileattn's fast mode, PyTorch flash and PyTorch cuDNN, one panel
per (D, causal).

    python3 bench/plot_fast.py bench/results/fast_fwd_h100_2026-11-23_wgmma.csv \\
        [--pass fwd|bwd] [--out PNG] [--before OLD.csv [--before-label TEXT]]
        [--label TEXT] [--title TEXT] [--dpi N]

Reads the columns D, causal, S, ours_tflops, flash_tflops, cudnn_tflops (those
cuda_fast_bench.py writes) of the rows of one pass: the CSV's `pass` column,
fwd or bwd (--pass, default fwd; a CSV without that column, written before
cuda_fast_bench.py had --pass, holds forward rows only). The PNG is
docs/img/fast_fwd_tflops.png or docs/img/fast_bwd_tflops.png unless --out
says otherwise. A NaN (a backend unavailable for a shape) leaves a gap.
--before adds the ours_tflops of an older CSV's rows of the same pass as a
dashed line (an earlier kernel on the same shapes; its rows are matched by D,
causal and S). Needs matplotlib (not a dependency of the library or its tests).
"""
import argparse
import csv
import math
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

SERIES = (  # CSV column, legend label, line style
    ("ours_tflops", "tileattn fast (tile_config 0)", dict(color="tab:blue", marker="o")),
    ("flash_tflops", "PyTorch flash", dict(color="tab:orange", marker="s")),
    ("cudnn_tflops", "PyTorch cuDNN", dict(color="tab:green", marker="^")),
)


def read_rows(path, cols, pass_):
    """The CSV's rows of pass_ (fwd or bwd); a CSV without a pass column is fwd."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"D", "causal", "S"} | set(cols)
    if not rows or not need <= set(rows[0]):
        sys.exit(f"{path}: not a cuda_fast_bench.py CSV (needs columns {sorted(need)})")
    rows = [r for r in rows if r.get("pass", "fwd") == pass_]
    if not rows:
        sys.exit(f"{path}: no {pass_} rows")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="CSV written by bench/cuda_fast_bench.py --csv")
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="fwd",
                    help="which rows to plot (the CSV's pass column)")
    ap.add_argument("--out", default="", help="default docs/img/fast_<pass>_tflops.png")
    ap.add_argument("--label", default="tileattn fast (tile_config 0)",
                    help="legend label of the CSV's ours_tflops")
    ap.add_argument("--before", default="", help="an older CSV: its ours_tflops, dashed")
    ap.add_argument("--before-label", default="tileattn fast, before")
    ap.add_argument("--title", default="")
    ap.add_argument("--dpi", type=int, default=80)
    a = ap.parse_args()
    out = a.out or f"docs/img/fast_{a.pass_}_tflops.png"
    series = [(col, a.label if col == "ours_tflops" else label, style)
              for col, label, style in SERIES]
    rows = read_rows(a.csv, [col for col, _, _ in SERIES], a.pass_)
    before = {}
    if a.before:
        for r in read_rows(a.before, ["ours_tflops"], a.pass_):
            before[(int(r["D"]), int(r["causal"]), int(r["S"]))] = float(r["ours_tflops"])
    dims = sorted({int(r["D"]) for r in rows})
    panels = [(d, c) for d in dims for c in (0, 1)]
    top = max([float(r[col]) for r in rows for col, _, _ in SERIES] + list(before.values()),
              key=lambda y: y if math.isfinite(y) else -1.0)
    fig, axes = plt.subplots(len(dims), 2, figsize=(10, 3.2 * len(dims)), sharey=True,
                             squeeze=False)
    for (d, causal), ax in zip(panels, axes.flat):
        sel = sorted((r for r in rows if int(r["D"]) == d and int(r["causal"]) == causal),
                     key=lambda r: int(r["S"]))
        if not sel:
            ax.set_visible(False)
            continue
        xs = [int(r["S"]) for r in sel]
        for col, label, style in series:
            ys = [float(r[col]) for r in sel]
            ys = [y if math.isfinite(y) else float("nan") for y in ys]
            ax.plot(xs, ys, label=label, linewidth=1.6, markersize=4, **style)
        if before:
            ys = [before.get((d, causal, x), float("nan")) for x in xs]
            ax.plot(xs, ys, label=a.before_label, linewidth=1.2, markersize=3,
                    color="tab:blue", marker="o", linestyle="--", alpha=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x // 1024}k" if x >= 1024 else str(x) for x in xs])
        ax.set_ylim(0, 1.05 * top)  # one scale for every panel
        ax.grid(True, which="major", alpha=0.3)
        ax.set_title(f"D = {d}, {'causal' if causal else 'not causal'}, "
                     f"H = {sel[0]['H']}", fontsize=10)
        ax.set_xlabel("S (B = tokens / S)", fontsize=9)
        if causal == 0:
            ax.set_ylabel("%s TFLOP/s" % ("forward" if a.pass_ == "fwd" else "backward"),
                          fontsize=9)
    axes.flat[0].legend(fontsize=8, loc="upper left")
    if a.title:
        fig.suptitle(a.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=a.dpi)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
