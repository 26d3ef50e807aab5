#!/usr/bin/env python3
"""The plot of bench/cpu/compare.sh without gnuplot: an SVG, standard
library only, from its CSV. One panel per collective: the other library's
time over hetccl's (above 1: hetccl faster) against the message size, both
axes log2, a line per rank count, the dashed line at 1.

    bench/cpu/plot_ratio.py RESULTS.csv OUT.svg [TITLE] [OTHER_LIB]

OTHER_LIB defaults to ompi-shm. Rows of compare.sh's local part only.
"""
import csv
import math
import sys
from collections import defaultdict

PANEL_W, PANEL_H, MARGIN = 560, 340, 60
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def ratios(path, other):
    """{coll: {n: [(size, other/hetccl)]}} from compare.sh's CSV."""
    t = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["part"] != "local":
                continue
            try:
                t[(row["coll"], row["lib"], int(row["n"]), int(row["size"]))] = float(row["time_us_median"])
            except ValueError:
                continue  # a size that failed has no median
    out = defaultdict(lambda: defaultdict(list))
    for (coll, lib, n, size), mine in t.items():
        theirs = t.get((coll, other, n, size))
        if lib == "hetccl" and theirs and mine > 0:
            out[coll][n].append((size, theirs / mine))
    return out


def size_label(b):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= div:
            return "%d%s" % (b // div, unit)
    return str(b)


def panel(svg, x0, y0, coll, series):
    sizes = [s for pts in series.values() for s, _ in pts]
    vals = [r for pts in series.values() for _, r in pts] + [1.0]
    lx0, lx1 = math.log2(min(sizes)), math.log2(max(sizes))
    ly0, ly1 = math.floor(math.log2(min(vals))), math.ceil(math.log2(max(vals)))
    lx1 = lx1 if lx1 > lx0 else lx0 + 1
    ly1 = ly1 if ly1 > ly0 else ly0 + 1
    w, h = PANEL_W - MARGIN - 10, PANEL_H - MARGIN - 30

    def px(size):
        return x0 + MARGIN + (math.log2(size) - lx0) / (lx1 - lx0) * w

    def py(ratio):
        return y0 + 30 + h - (math.log2(ratio) - ly0) / (ly1 - ly0) * h

    svg.append('<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>' % (x0 + MARGIN, y0 + 20, coll))
    svg.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (x0 + MARGIN, y0 + 30, w, h))
    for e in range(int(ly0), int(ly1) + 1):
        y = py(2.0**e)
        svg.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (x0 + MARGIN, y, x0 + MARGIN + w, y))
        svg.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%g</text>' % (x0 + MARGIN - 4, y + 3, 2.0**e))
    last = -1e9
    for size in sorted(set(sizes)):
        if px(size) - last < 30:
            continue  # the label would run into the one before
        last = px(size)
        svg.append('<text x="%.1f" y="%d" font-size="9" text-anchor="middle">%s</text>' %
                   (last, y0 + 30 + h + 12, size_label(size)))
    svg.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>' %
               (x0 + MARGIN, py(1.0), x0 + MARGIN + w, py(1.0)))
    for i, n in enumerate(sorted(series)):
        pts = sorted(series[n])
        color = COLORS[i % len(COLORS)]
        path = " ".join("%.1f,%.1f" % (px(s), py(r)) for s, r in pts)
        svg.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (path, color))
        for s, r in pts:
            svg.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (px(s), py(r), color))
        svg.append('<text x="%d" y="%d" font-size="11" fill="%s">%d ranks</text>' %
                   (x0 + MARGIN + 8, y0 + 46 + 14 * i, color, n))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    other = sys.argv[4] if len(sys.argv) > 4 else "ompi-shm"
    data = ratios(sys.argv[1], other)
    if not data:
        sys.exit("plot_ratio.py: no hetccl and %s rows of the same size in %s" % (other, sys.argv[1]))
    colls = sorted(data)
    cols = 2
    rows = (len(colls) + cols - 1) // cols
    width, height = cols * PANEL_W, rows * PANEL_H + 40
    title = sys.argv[3] if len(sys.argv) > 3 else "%s time / hetccl time per call (above 1: hetccl faster)" % other
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="24" font-size="15" text-anchor="middle">%s</text>' % (width // 2, title)]
    for k, coll in enumerate(colls):
        panel(svg, (k % cols) * PANEL_W, 40 + (k // cols) * PANEL_H, coll, data[coll])
    svg.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
