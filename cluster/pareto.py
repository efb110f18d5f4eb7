"""The Pareto front of a sweep: latency against DSPs, per workload, and its plot.

A synthesised sweep puts each config at the MULT18X18D its core maps to and its latency at its
Fmax; a sweep without synthesis at the PE array's MULT18X18D (one per MAC: ``rows * cols``) and
its latency at the config's clock. A point is on the front when no other point of its workload
is as fast with fewer DSPs, or faster with as few.
"""

__all__ = ["axes", "workload_key", "fronts", "plot"]


def axes(points):
    """``(x key, y key, x label, y label)`` of a sweep's points: synthesised or not (the y
    key's values are in us, the plot's in ms)."""
    if any(point.get("dsp") is not None for point in points):
        return ("dsp", "latency_us_fmax", "MULT18X18D (synthesised core)",
                "latency at Fmax (ms)")
    return ("array_dsp", "latency_us", "MULT18X18D of the PE array (rows x cols)",
            "latency at the config's clock (ms)")


def workload_key(workload):
    """``"minilm seq 128 batch 1"``."""
    return f"{workload['model']} seq {workload['seq']} batch {workload['batch']}"


def fronts(points):
    """``{workload key: [point, ...]}``: each workload's points on the front, fewest DSPs
    first (points without both figures are left out)."""
    x, y, _, _ = axes(points)
    by_workload = {}
    for point in points:
        if point.get(x) is not None and point.get(y) is not None:
            by_workload.setdefault(workload_key(point["workload"]), []).append(point)
    out = {}
    for key, group in by_workload.items():
        best, front = None, []
        for point in sorted(group, key=lambda p: (p[x], p[y])):
            if best is None or point[y] < best:
                front.append(point)
                best = point[y]
        out[key] = front
    return out


def plot(points, path, *, title="bertaccel sweep"):
    """Write the plot of ``points`` to ``path`` (PNG): every point of each workload, its front
    joined and labelled with the configs. Returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    x, y, x_label, y_label = axes(points)
    figure, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    front_of = fronts(points)
    for index, (key, front) in enumerate(front_of.items()):
        colour = f"C{index % 10}"
        group = [p for p in points if workload_key(p["workload"]) == key
                 and p.get(x) is not None and p.get(y) is not None]
        ax.scatter([p[x] for p in group], [p[y] / 1e3 for p in group], color=colour,
                   alpha=0.35, s=24)
        ax.plot([p[x] for p in front], [p[y] / 1e3 for p in front], "o-", color=colour,
                label=key, drawstyle="steps-post", markersize=6)
        for p in front:
            ax.annotate(p["config"]["label"], (p[x], p[y] / 1e3), textcoords="offset points",
                        xytext=(4, 4), fontsize=7, color=colour)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_yscale("log")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(f"{title}: Pareto front of latency against DSPs")
    ax.grid(True, which="both", alpha=0.3)
    if front_of:
        ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
