"""What the bench/plot_*.py scripts share: the command line (a CSV, --out,
--title, --dpi), reading the CSV, matplotlib without a display, and the save.
Needs matplotlib (not a dependency of the library or its tests)."""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402,F401  (re-exported for the scripts)


def read_args(doc, default_out):
    """Parses the shared command line; returns (args, the CSV's rows as dicts)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--out", default=default_out)
    ap.add_argument("--title", default="")
    ap.add_argument("--dpi", type=int, default=110)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        return a, list(csv.DictReader(f))


def panels(n):
    """A figure of n side-by-side panels; returns (fig, list of axes)."""
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    return fig, list(axes[0])


def finish(fig, a):
    """Title, layout, save to a.out."""
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print("wrote", a.out)
