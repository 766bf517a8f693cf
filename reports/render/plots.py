"""The one plot setup of every report section: matplotlib on the Agg backend (files only, no display), one style,
figures sized in inches, saved as PNG into the report directory and linked by file name.

Plots are optional: without matplotlib `figure` returns None and the sections keep their tables.
"""

import os

DPI = 100
# Small type: the plots sit beside tables in a page about 1200 px wide.
STYLE = {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 7,
         "xtick.labelsize": 8, "ytick.labelsize": 8}


def pyplot():
    """matplotlib.pyplot on the Agg backend with the report style, or None where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: PLC0415 - only a report that draws needs it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    plt.rcParams.update(STYLE)
    return plt


def figure(width, height, rows=1, cols=1, **subplots):
    """(figure, axes) of a new width x height inch figure (plt.subplots(rows, cols, **subplots)); None without
    matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    return plt.subplots(rows, cols, figsize=(width, height), **subplots)


def save(fig, report_dir, name, layout="tight"):
    """Writes the figure as report_dir/name and closes it; returns name (what a section links).
    layout: "tight" (tight_layout before saving), "bbox" (crop to what was drawn: legends outside the axes stay in),
    or None (the figure placed its axes itself)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - loaded by figure() already

    if layout == "tight":
        fig.tight_layout()
    fig.savefig(os.path.join(report_dir, name), dpi=DPI, bbox_inches="tight" if layout == "bbox" else None)
    plt.close(fig)
    return name
