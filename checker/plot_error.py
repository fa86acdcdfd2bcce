"""Draws an implementation's error over time for `lacs explain --plot`.

    /usr/bin/python3 checker/plot_error.py DATA.csv FILE.png

DATA.csv is written by build/lacs: `# key value` comment lines (case, output,
impl, tier), a `t,ratio` header, then one line per time step t with the
worst elementwise ratio error / allowed at that step (lacs_check_error_over_time;
1 is the limit, `inf` at a non-finite mismatch). The plot is log10(ratio)
against t, with the limit as a horizontal line and the boundaries of chunks of
64 tokens as vertical lines: chunked kernels hand their state over there, and
an error that starts at one points at the hand-over.

Exit status 0, or 2 with one line `lacs: <problem>` on stderr (matplotlib
missing, unreadable data), as the lacs CLI does.
"""

import math
import os
import sys

CHUNK = 64


def fail(message):
    print(f"lacs: {message}", file=sys.stderr)
    sys.exit(2)


def read_data(path):
    """(info, ts, ratios): the comment keys, and the two columns."""
    info, ts, ratios = {}, [], []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                if line.startswith("#"):
                    key, _, value = line[1:].strip().partition(" ")
                    info[key] = value
                    continue
                if line == "t,ratio":
                    continue
                t, ratio = line.split(",")
                ts.append(int(t))
                ratios.append(float(ratio))
    except (OSError, ValueError) as e:
        fail(f"{path}: cannot read the error over time: {e}")
    return info, ts, ratios


def log10_ratio(ratio, ceiling):
    """log10 of a ratio for plotting: 0 and NaN/inf are drawn at the plot's bottom and top."""
    if math.isnan(ratio) or math.isinf(ratio):
        return ceiling
    if ratio <= 0:
        return None
    return math.log10(ratio)


def main(argv):
    if len(argv) != 3:
        fail("usage: plot_error.py DATA.csv FILE.png")
    data_path, png_path = argv[1], argv[2]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("--plot needs matplotlib for /usr/bin/python3: apt-get install python3-matplotlib")

    info, ts, ratios = read_data(data_path)
    if not ts:
        fail(f"{data_path}: no time steps to plot")
    finite = [math.log10(r) for r in ratios if r > 0 and math.isfinite(r)]
    ceiling = max(finite + [0.0]) + 1.0
    points = [(t, log10_ratio(r, ceiling)) for t, r in zip(ts, ratios)]
    points = [(t, y) for t, y in points if y is not None]

    fig, ax = plt.subplots(figsize=(9, 4.5))
    if points:
        ax.plot([t for t, _ in points], [y for _, y in points], linewidth=1.0, marker=".", markersize=3,
                label=f"worst element at t ({info.get('output', 'o')})")
    ax.axhline(0.0, color="red", linewidth=1.0, label="limit (ratio 1)")
    for boundary in range(CHUNK, max(ts) + 1, CHUNK):
        ax.axvline(boundary, color="gray", linestyle=":", linewidth=0.8)
    ax.set_xlabel(f"t (dotted: chunk boundaries every {CHUNK} tokens)")
    ax.set_ylabel("log10(error / allowed)")
    ax.set_title(f"{info.get('case', '?')}: {info.get('impl', '?')}")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()

    # Written beside the target and renamed: the PNG is whole or absent.
    partial = png_path + ".tmp.png"
    try:
        fig.savefig(partial, dpi=100)
        os.replace(partial, png_path)
    except OSError as e:
        fail(f"cannot write {png_path}: {e}")
    finally:
        plt.close(fig)
        if os.path.exists(partial):
            os.remove(partial)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
