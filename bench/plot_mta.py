#!/usr/bin/env python3
"""Plot the MTA rows of a bench/cuda_bench.py CSV (--csv): tileattn's exact CUDA
MTA against the eager PyTorch MTA, time against S and the eager MTA's memory.

    python3 bench/plot_mta.py bench/results/cuda_exact_h100_2026-11-22_831fe01.csv \\
        [--out docs/img/mta_vs_eager.png] [--title TEXT] [--dpi N]

Three panels: forward and backward milliseconds against S (log-log; one line
per (D, conv) and implementation, a single point where a (D, conv) has one S),
and the eager MTA's peak GPU memory (GiB) against S, beside tileattn's
workspace (the larger of the forward's and backward's size queries, column
ours_ws_gib, where the CSV has it; tileattn's tensors are the caller's and
not counted). Reads the columns op, B, H, S, D, conv, ours_fwd_ms,
base_fwd_ms, ours_bwd_ms, base_bwd_ms, base_gib, ours_ws_gib. Needs
matplotlib (not a dependency of the library or its tests).
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def read_mta(path):
    """The CSV's MTA rows, grouped by (D, conv), each group sorted by S."""
    groups = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["op"] != "mta":
                continue
            key = (int(r["D"]), r["conv"])
            groups.setdefault(key, []).append(r)
    for rows in groups.values():
        rows.sort(key=lambda r: int(r["S"]))
    return groups


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--out", default="docs/img/mta_vs_eager.png")
    ap.add_argument("--title", default=None)
    ap.add_argument("--dpi", type=int, default=110)
    a = ap.parse_args()
    groups = read_mta(a.csv)
    if not groups:
        print(f"{a.csv}: no MTA rows", file=sys.stderr)
        return 1
    device = None
    with open(a.csv, newline="") as f:
        for r in csv.DictReader(f):
            device = r.get("device") or device
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for gi, ((d, conv), rows) in enumerate(sorted(groups.items())):
        color = colors[gi % len(colors)]
        s = [int(r["S"]) for r in rows]
        tag = f"D={d}, {conv}"
        for ax, col in ((axes[0], "fwd"), (axes[1], "bwd")):
            ax.plot(s, [float(r[f"ours_{col}_ms"]) for r in rows], color=color, marker="o",
                    label=f"tileattn exact, {tag}")
            ax.plot(s, [float(r[f"base_{col}_ms"]) for r in rows], color=color, marker="x",
                    linestyle="--", label=f"eager PyTorch, {tag}")
        axes[2].plot(s, [float(r["base_gib"]) for r in rows], color=color, marker="x",
                     linestyle="--", label=f"eager PyTorch peak, {tag}")
        ws = [(int(r["S"]), float(r["ours_ws_gib"])) for r in rows if r.get("ours_ws_gib")]
        if ws:
            axes[2].plot([x for x, _ in ws], [y for _, y in ws], color=color, marker="o",
                         label=f"tileattn workspace, {tag}")
    for ax, what in ((axes[0], "forward ms"), (axes[1], "backward ms"),
                     (axes[2], "GPU memory, GiB")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("S (causal, B=1, H=8)")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(a.title or f"MTA, f32: tileattn CUDA exact vs eager PyTorch MTA"
                 f"{' (' + device + ')' if device else ''}")
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
