"""The figures of `ttc report`: main curves, hard-subset curves, the allocation bars and the methods' Pareto plot
(matplotlib, Agg), as PNG (200 dpi) and, for a paper, PDF and SVG (`--format`).

Every policy keeps one colour, marker and line style across all figures; within a figure every line has its own
(colour, marker, line style): a policy's further configurations (two-stage's rhos) vary its line style and marker,
and the methods take colours from a 28-colour palette, none reused. Lines that coincide exactly (ucb and gap reduce
to round-robin under a ground-truth oracle) are drawn once with one legend entry naming them all ("a = b"), rather
than drawn over each other. Titles are wrapped to the canvas's width (issue 28: methods.png's title was cut at both
edges)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .extras import require
from .policies import REGISTRY

STYLE = {name: p.style for name, p in REGISTRY.items()}  # policy -> (colour, marker, line style)
FORMATS = ("png",)
PNG_DPI = 200
SPARE_MARKERS = "o^vsDP*hpd8X<>"
SPARE_LINES = ("--", ":", "-.", "-")
GROUP_COLOURS = {"easy": "#8fbf6f", "hard, solvable": "#e08a3c", "unsolvable": "#9b9b9b"}


def _plt():
    matplotlib = require("matplotlib", "ttc report")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _budget_axis(ax, budgets):
    import matplotlib.ticker

    ax.set_xscale("log", base=2)
    ax.set_xticks(budgets)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    lo, hi = min(budgets), max(budgets)
    ax.set_xlim(lo / 1.25, hi * 1.25)
    ax.grid(True, alpha=0.3)


def _style(policy: str):
    return STYLE.get(policy, ("black", "o", "-"))


def styles(entries: list[tuple[str, str]]) -> dict:
    """label -> (colour, marker, line style) for a figure's (label, policy) entries: each policy's own style, and for
    a further entry of the same policy (another configuration) the same colour with the next line style and marker
    not yet taken, so no two entries of a figure look alike."""
    taken, out = set(), {}
    for label, policy in entries:
        colour, marker, ls = _style(policy)
        k = 0
        while (colour, marker, ls) in taken:
            ls, marker = SPARE_LINES[k % len(SPARE_LINES)], SPARE_MARKERS[k % len(SPARE_MARKERS)]
            k += 1
        taken.add((colour, marker, ls))
        out[label] = (colour, marker, ls)
    return out


def coincident(series: dict) -> list[list[str]]:
    """Groups of labels whose mean lines are identical at every point (in the series' order): drawn as one line."""
    groups: list[list[str]] = []
    means: list[np.ndarray] = []
    for label, (_, mean, *_rest) in series.items():
        m = np.asarray(mean, float)
        for g, other in zip(groups, means, strict=True):
            if m.shape == other.shape and np.array_equal(m, other, equal_nan=True):
                g.append(label)
                break
        else:
            groups.append([label])
            means.append(m)
    return groups


def _joined(group: list[str]) -> str:
    return group[0] if len(group) == 1 else " = ".join(group) + " (identical)"


def _suptitle(fig, title: str, fontsize: float = 11) -> int:
    """The figure's title wrapped so that it fits the canvas with a margin; returns its number of lines."""
    import textwrap

    width = fig.get_figwidth() * fig.dpi * 0.96
    text = fig.suptitle(title, fontsize=fontsize)
    renderer = fig.canvas.get_renderer()
    chars = len(title)
    while text.get_window_extent(renderer).width > width and chars > 10:
        chars = int(chars * 0.9)
        text.set_text(textwrap.fill(title, chars))
    return text.get_text().count("\n") + 1


def _save(fig, out: Path, formats=None):
    """The figure in each format (out's suffix replaced), then closed."""
    plt = _plt()
    for fmt in formats or FORMATS:
        path = out.with_suffix(f".{fmt}")
        fig.savefig(path, dpi=PNG_DPI if fmt == "png" else None)
    _close(plt, fig)


def _close(plt, fig):
    plt.close(fig)


def plot_curves(out: Path, title: str, budgets, panels: list[dict], exact: dict | None = None, formats=None):
    """One panel per metric. panels: [{"ylabel", "series": {label: (policy, mean, std)}, "exact": (k, y) or
    None}]; the band is mean +- 0.5 std over seeds, the exact curve a thick black line."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(8.0 if len(panels) == 1 else 6.4 * len(panels), 5.4), dpi=100,
                             squeeze=False)
    lows = []
    for ax, panel in zip(axes[0], panels):
        if panel.get("exact") is not None:
            k, y = panel["exact"]
            ax.plot(k, y, color="black", lw=1.3, zorder=4, label="uniform, exact expectation")
            seen = np.asarray(k) >= min(budgets) / 1.25  # only the part inside the x range sets the y range
            if seen.any():
                lows.append(np.nanmin(np.asarray(y)[seen]))
        look = styles([(lab, pol) for lab, (pol, *_r) in panel["series"].items()])
        for group in coincident(panel["series"]):
            policy, mean, std = panel["series"][group[0]]
            colour, marker, ls = look[group[0]]
            mean, std = np.asarray(mean, float), np.asarray(std, float)
            ax.fill_between(budgets, mean - 0.5 * std, mean + 0.5 * std, color=colour, alpha=0.18, lw=0, zorder=2)
            ax.plot(budgets, mean, color=colour, marker=marker, ls=ls, lw=1.5, ms=6, mfc="none", mew=1.4,
                    zorder=3, label=_joined(group))
            lows.append(np.nanmin(mean - 0.5 * std))
        _budget_axis(ax, budgets)
        ax.set_xlabel("average budget per query (samples, log scale)")
        ax.set_ylabel(panel["ylabel"])
        ax.set_title(panel["title"], fontsize=10)
    lo = max(0.0, float(np.nanmin(lows)) - 0.03) if lows else 0.0
    for ax in axes[0]:
        ax.set_ylim(lo, min(1.0, ax.get_ylim()[1] + 0.01))
    _legend_below(fig, axes[0][0], title)
    _save(fig, out, formats)


def _legend_below(fig, ax, title: str):
    """The legend in rows under the panels, as many columns as the figure's width holds, the title wrapped to the
    width above them, and room made for both (the figure grows by the legend's rows, so the panels keep theirs)."""
    handles, labels = ax.get_legend_handles_labels()
    col_in = 0.6 + 0.065 * max(len(lab) for lab in labels)  # handle plus text at 8.5 pt, in inches
    ncol = max(1, min(len(labels), int(fig.get_figwidth() / col_in)))
    rows = -(-len(labels) // ncol)
    fig.set_figheight(fig.get_figheight() + 0.24 * max(0, rows - 2))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8.5, frameon=False)
    lines = _suptitle(fig, title)
    h = fig.get_figheight()
    fig.tight_layout(rect=(0, (0.24 * rows + 0.1) / h, 1, 1 - (0.22 * lines + 0.18) / h))


def plot_hard(out: Path, title: str, budgets, panels: list[dict], formats=None):
    """Normalised coverage on each hard subset against the budget. panels: [{"title", "series": {label:
    (policy, mean, se)}, "uniform": values at the budgets}]."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.9), dpi=100, squeeze=False)
    for ax, panel in zip(axes[0], panels):
        ax.plot(budgets, panel["uniform"], color="black", lw=1.3, zorder=4, label="uniform, exact expectation")
        look = styles([(lab, pol) for lab, (pol, *_r) in panel["series"].items()])
        for group in coincident(panel["series"]):
            policy, mean, se = panel["series"][group[0]]
            colour, marker, ls = look[group[0]]
            ax.errorbar(budgets, mean, yerr=se, color=colour, marker=marker, ls=ls, lw=1.5, ms=6, mfc="none",
                        mew=1.4, capsize=2, label=_joined(group))
        _budget_axis(ax, budgets)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("average budget per query (samples, log scale)")
        ax.set_ylabel("coverage on the solvable part of the subset")
        ax.set_title(panel["title"], fontsize=10)
    _legend_below(fig, axes[0][0], title)
    _save(fig, out, formats)


def plot_allocation(out: Path, title: str, budgets, policies: list[str], groups: list[str], sizes: dict,
                    values: dict, formats=None):
    """Grouped bars: mean responses per query of each group, per policy, one panel per budget.
    values[(budget, policy)] = [mean for each group] (NaN for an empty group)."""
    plt = _plt()
    nb = len(budgets)
    cols = 2 if nb > 1 else 1
    rows = -(-nb // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.2 * cols, 3.9 * rows + 0.6), dpi=100, squeeze=False)
    x = np.arange(len(policies))
    width = 0.8 / len(groups)
    for idx, b in enumerate(budgets):
        ax = axes[idx // cols][idx % cols]
        top = 0.0
        for g, group in enumerate(groups):
            ys = np.array([values[(b, p)][g] for p in policies], float)
            ax.bar(x + (g - (len(groups) - 1) / 2) * width, np.nan_to_num(ys), width,
                   color=GROUP_COLOURS.get(group), edgecolor="white", lw=0.4,
                   label=f"{group} ({sizes[group]} queries)")
            top = max(top, np.nanmax(ys) if np.isfinite(ys).any() else 0.0)
        ax.axhline(b, color="black", lw=1, ls="--", alpha=0.6)
        ax.text(len(policies) - 0.45, b, f"budget {b:g}", ha="right", va="bottom", fontsize=8, alpha=0.8)
        ax.set_xticks(x)
        ax.set_xticklabels(policies, rotation=30, ha="right", fontsize=8.5)
        ax.set_xlim(-0.6, len(policies) - 0.4)
        ax.set_ylim(0, max(top, b) * 1.12)
        ax.set_ylabel("responses per query (mean)")
        ax.set_title(f"average budget {b:g}", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    for idx in range(nb, rows * cols):
        axes[idx // cols][idx % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(groups), fontsize=9, frameon=False)
    lines = _suptitle(fig, title)
    fig.tight_layout(rect=(0, 0.05 / rows + 0.02, 1, 1 - (0.22 * lines + 0.08) / fig.get_figheight()))
    _save(fig, out, formats)


METHOD_MARKERS = "osv^DPX*h<>p"


def palette() -> list:
    """28 distinct colours (tab10, Dark2, then tab20's light shades): the methods' figure has 22 entries (tab10 alone
    reused colours; 18 ran out when the 2025-26 methods came)."""
    import matplotlib

    return (list(matplotlib.colormaps["tab10"].colors) + list(matplotlib.colormaps["Dark2"].colors)
            + list(matplotlib.colormaps["tab20"].colors[1::2]))


def plot_pareto(out: Path, title: str, panels: list[dict], methods: list[str], formats=None):
    """Accuracy against the cost a method actually spent, one line per method through its budgets (error bars ±
    SE), the Pareto front over every method's points as a black staircase with ringed points. panels: [{"xlabel",
    "series": {method: (costs, accuracies, se)}, "front": (costs, accuracies)}], one per cost unit. methods: the
    registry's order, which fixes each method's colour and marker whatever the pool runs."""
    import matplotlib
    import matplotlib.ticker

    plt = _plt()
    colours = palette()
    fig, axes = plt.subplots(1, len(panels), figsize=(8.0 if len(panels) == 1 else 6.6 * len(panels), 5.6), dpi=100,
                             squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for name, (cost, acc, se) in panel["series"].items():
            k = methods.index(name) if name in methods else len(methods)
            ax.errorbar(cost, acc, yerr=se, color=colours[k % len(colours)], marker=METHOD_MARKERS[k % 12],
                        ls=("-", "--", ":")[k // 6 % 3], lw=1.4, ms=6, mfc="none", mew=1.4, capsize=2, label=name,
                        zorder=3)
        fc, fa = (np.asarray(v, float) for v in panel["front"])
        if len(fc):
            o = np.argsort(fc)
            ax.step(fc[o], fa[o], where="post", color="black", lw=1.0, alpha=0.7, zorder=2, label="Pareto front")
            ax.scatter(fc[o], fa[o], s=110, facecolors="none", edgecolors="black", lw=1.0, zorder=4)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.grid(True, alpha=0.3)
        ax.set_xlabel(panel["xlabel"])
        ax.set_ylabel("accuracy (the method's own selection)")
    _legend_below(fig, axes[0][0], title)
    _save(fig, out, formats)


# ------------------------------------------------------------------------------------------ ttc leaderboard

def _leaderboard_style(label: str):
    """A leaderboard label is a policy or policy+rule: the policy's colour and marker, the rule's line style."""
    colour, marker, _ = _style(label.split("+")[0])
    rules = ("sc-share", "sc-beta", "esc", "ac-majority", "ac-entropy", "ac-dirichlet")
    rule = label.split("+")[1] if "+" in label else None
    ls = "-" if rule is None else ("-", "--", ":", "-.", (0, (3, 1, 1, 1)), (0, (5, 2)))[rules.index(rule) % 6] \
        if rule in rules else "-"
    return colour, marker, ls


def leaderboard_figures(df, out: Path, dpi: int = 150, curves: bool = True) -> list[Path]:
    """Per track and unit of a leaderboard frame (replay/leaderboard.py): heatmap_<track>_<unit> (policy x pool,
    each policy's median efficiency gain over the budgets, log scale centred on 1x) and curves_<track>_<unit> (one
    panel per pool: held-out metric against budget for uniform, the oracle and the four policies of best mean rank
    across pools, with 2-SE bars); each as vector PDF and PNG (dpi: the heatmap PNG's; the curves' is 0.8 of it;
    curves False: heatmaps only). Returns the files written."""
    import polars as pl

    plt = _plt()
    from matplotlib.colors import TwoSlopeNorm

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for (track, unit), g in df.group_by("track", "unit", maintain_order=True):
        live = g.filter(pl.col("role") != "oracle")
        med = (live.group_by("policy", "pool").agg(pl.col("gain").median()))
        order = (live.group_by("policy").agg(pl.col("rank").mean()).sort("rank")["policy"].to_list())
        pools = g["pool"].unique(maintain_order=True).to_list()
        grid = np.full((len(order), len(pools)), np.nan)
        for r in med.iter_rows(named=True):
            if r["gain"] is not None and np.isfinite(r["gain"]) and r["gain"] > 0:
                grid[order.index(r["policy"]), pools.index(r["pool"])] = np.log2(r["gain"])
        fig, ax = plt.subplots(figsize=(max(6.0, 0.32 * len(pools) + 3), max(3.0, 0.32 * len(order) + 2)))
        lim = max(1.0, float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0)
        im = ax.imshow(np.ma.masked_invalid(grid), cmap="RdBu", norm=TwoSlopeNorm(0.0, -lim, lim), aspect="auto")
        ax.set_xticks(range(len(pools)), pools, rotation=90, fontsize=6)
        ax.set_yticks(range(len(order)), order, fontsize=7)
        if len(pools) * len(order) <= 900:
            for i in range(len(order)):
                for j in range(len(pools)):
                    if np.isfinite(grid[i, j]):
                        ax.text(j, i, f"{2 ** grid[i, j]:.1f}", ha="center", va="center", fontsize=4.5)
        cb = fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01)
        cb.set_label("median efficiency gain (log2; 0 = uniform's)")
        ax.set_title(f"{track}, {unit} budgets: efficiency gain over uniform (held-out, median over budgets)",
                     fontsize=9)
        fig.tight_layout()
        for ext in ("pdf", "png"):
            path = out / f"heatmap_{track}_{unit}.{ext}"
            fig.savefig(path, dpi=dpi)
            written.append(path)
        plt.close(fig)
        if not curves:
            continue

        show = ["uniform"] + [p for p in order if p != "uniform"][:4]
        cols = min(6, len(pools))
        rows = -(-len(pools) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.2 * rows + 0.6), squeeze=False)
        levels = sorted(g["level"].unique().to_list())
        for k, pool in enumerate(pools):
            ax = axes[k // cols][k % cols]
            sub = g.filter(pl.col("pool") == pool)
            for label in show + ["oracle"]:
                s = sub.filter(pl.col("policy") == label).sort("level")
                if not s.height:
                    continue
                colour, marker, ls = _leaderboard_style(label)
                ax.errorbar(s["level"].to_numpy(), s["mean"].to_numpy(), yerr=2 * np.nan_to_num(s["se"].to_numpy()),
                            color=colour, marker=marker, ls=ls, ms=3, lw=1, capsize=1.5, label=label)
            _budget_axis(ax, levels)
            ax.set_title(pool, fontsize=6.5)
            ax.tick_params(labelsize=6)
        for k in range(len(pools), rows * cols):
            axes[k // cols][k % cols].axis("off")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=7, frameon=False)
        fig.suptitle(f"{track} ({g['metric'][0]}, held-out) against {unit} budget"
                     + (" (multiples of the median length)" if unit == "tokens" else " (samples per query)"),
                     fontsize=9)
        fig.tight_layout(rect=(0, 0.05, 1, 0.97))
        for ext in ("pdf", "png"):
            path = out / f"curves_{track}_{unit}.{ext}"
            fig.savefig(path, dpi=int(dpi * 0.8))
            written.append(path)
        plt.close(fig)
    return written
