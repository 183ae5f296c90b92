"""Write docs/results.md, the leaderboard of today's reasoning models, and its figures (docs/results/), from one
`ttc leaderboard` run over every public pool: the 29 BoInf and 8 AutoTTS dumps (../shared/data/pools, imported here
with `ttc import boinf` / `ttc import autotts`) and the embedded pools; its depth rows (the AutoTTS pools, which
have probes) get an SE over problems besides the one over seeds, from replays of their two chosen configurations.
Every number in results.md is read from the run's parquet files or those replays; every claim of a difference is a
paired difference beyond 2 standard errors.

    python docs/make_results.py                      # import (once), run the leaderboard (once), write the docs
    python docs/make_results.py --work /tmp/ttc-results --rerun
    python docs/make_results.py --leaderboard DIR   # render from a run already made
    python docs/make_results.py --depth-only DIR    # only the depth section, from a depth leaderboard run
    python docs/make_results.py --leaderboard DIR --keep-depth --no-figures  # the rest's text only

The pools and the leaderboard are written under --work (default /tmp/ttc-results), never into the repository; only
results.md and three small figures are.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "pools"
DOC = ROOT / "docs" / "results.md"
FIG = ROOT / "docs" / "results"
FOCUS = ("boinf-Qwen3-4B-aime2025", "autotts-Qwen3-4B-aime2025")  # the seed paper's setting, twice


def sh(args: list[str]):
    print("+", shlex.join(args), flush=True)
    subprocess.run(args, check=True)


def ensure(work: Path, seeds: int, rerun: bool) -> tuple[Path, list[str]]:
    pools = work / "pools"
    for fmt, src in (("boinf", "boinf-80"), ("autotts", "autotts-128")):
        if not (pools / fmt).exists():
            sh(["ttc", "import", fmt, str(SHARED / src), "--out", str(pools / fmt)])
    out = work / "leaderboard"
    cmd = ["ttc", "leaderboard", str(pools / "boinf"), str(pools / "autotts"), "--embedded", "--seeds", str(seeds),
           "--out", str(out), "--force"]
    if rerun or not (out / "leaderboard.parquet").exists():
        sh(cmd)
    return out, cmd


def ensure_depth(work: Path, seeds: int, rerun: bool, main: Path) -> Path:
    """Depth against width (issue 30) on the probed pools, the AutoTTS ones: the leaderboard's sc track in tokens,
    where its width x depth entries run. The main run has them (its depth.parquet) when it was made by a leaderboard
    that knows depth; else a run of its own on the AutoTTS pools."""
    if (main / "depth.parquet").exists():
        return main
    out = work / "depth-leaderboard"
    if rerun or not (out / "depth.parquet").exists():
        sh(["ttc", "leaderboard", str(work / "pools" / "autotts"), "--tracks", "sc", "--units", "tokens", "--seeds",
            str(seeds), "--out", str(out), "--force"])
    return out


def _level_row(g: pl.DataFrame) -> list:
    n = g.height
    b, w = (g["verdict"] == "better").sum(), (g["verdict"] == "worse").sum()
    bq, wq = (g["verdict_queries"] == "better").sum(), (g["verdict_queries"] == "worse").sum()
    top = g["depth_policy"].value_counts(sort=True)
    common = top.filter(pl.col("count") == top["count"][0])["depth_policy"].sort().to_list()
    return [f"{g['level'][0]:g}x median", f"{b}/{n}", f"{w}/{n}", f"{bq}/{n}", f"{wq}/{n}",
            f"{float(g['diff'].median()):+.1%}", f"{float(g['ratio'].median()):.2f}", " = ".join(common)]


def verdict_text(better: int, worse: int, n: int, problems: int) -> str:
    """The section's conclusion, from the counts of cells where depth is better / worse beyond 2 SE over problems."""
    if better == 0 and worse == 0:
        return (f"Over problems neither kind is better beyond 2 SE in any of the {n} cells: on {problems} held-out "
                "problems per pool, depth and width cannot be told apart at equal tokens.")
    if better == 0:
        return (f"Over problems depth is better in no cell and worse in {worse} of {n}: at equal tokens, depth adds no "
                "accuracy on these pools; where the two can be told apart, width is ahead.")
    if worse == 0:
        return (f"Over problems depth is better in {better} of {n} cells and worse in none: there depth adds accuracy "
                "at equal tokens.")
    return (f"Over problems depth is better in {better} and worse in {worse} of {n} cells: what depth adds depends on "
            "the pool and the budget (the cells above).")


DEPTH_HEADINGS = ("\n## What depth adds", "\n## Depth: stopping traces part-way")  # (the second: its old title)
MOSTLY = {"better": "mostly better", "worse": "mostly worse", "mixed": "neither mostly better nor worse"}


def newer_entries(lb: pl.DataFrame, paths: dict, pools: list) -> set:
    """The width and depth entries this build's leaderboard runs on the pools (their sc track in tokens) that the
    run does not have: a run made before they joined (the page then says so)."""
    from ttc.replay.leaderboard import entries
    from ttc.replay.pool import load_pool

    ran = set(lb.filter(pl.col("kind").is_in(["width", "depth"]))["policy"])
    now = {e.label for p in pools for e in entries(load_pool(paths[p], probes=True), "sc", "tokens")
           if e.role != "oracle"}
    return now - ran


def probe_spacing(paths: dict, pools: list) -> str:
    """How far apart the pools' probes are along a trace, in tokens ("every 500 tokens"; several: their range)."""
    from ttc.replay.pool import load_pool

    gaps = set()
    for p in pools:
        pool = load_pool(paths[p], probes=True)
        trace = np.searchsorted(pool.probe_off, np.arange(len(pool.probe_tok)), "right") - 1
        gaps |= set(np.unique(np.diff(pool.probe_tok)[np.diff(trace) == 0]).tolist())  # (within a trace)
    lo, hi = min(gaps), max(gaps)
    return f"every {lo:,} tokens" if lo == hi else f"every {lo:,} to {hi:,} tokens"


def depth_section(dl: Path) -> list[str]:
    """What depth adds and where it does not: the leaderboard's depth rows (its depth.parquet), each with depth -
    width's SE over the held-out problems added (compare.with_query_se: replays of the two chosen configurations)."""
    from ttc.replay.compare import DEPTH_SE_METHOD, with_query_se

    dw = pl.read_parquet(dl / "depth.parquet")
    lb = pl.read_parquet(dl / "leaderboard.parquet")
    r0 = lb.row(0, named=True)
    seeds = r0["n_seeds"]
    n_report = int(lb.filter(pl.col("pool").is_in(dw["pool"].unique().to_list()))["n_report"].max())
    paths = dict(lb.select("pool", "pool_path").unique().iter_rows())
    s = with_query_se(dw, paths, range(r0["seed_start"], r0["seed_start"] + seeds), r0["holdout"], r0["split_seed"])
    lb_cmd = (dl / "leaderboard.md").read_text().split("```bash\n", 1)[1].split("\n```", 1)[0]
    missing = sorted(newer_entries(lb, paths, dw["pool"].unique().to_list()))
    s = s.with_columns((pl.col("depth_tokens_per_query") / pl.col("width_tokens_per_query")).alias("ratio"))
    n = s.height
    widen = float(s.filter(pl.col("diff_se") > 0).select(pl.col("diff_se_queries") / pl.col("diff_se")).median().item())
    rows = [_level_row(g) for _, g in s.group_by("level", maintain_order=True)]
    rows.sort(key=lambda r: float(r[0].split("x")[0]))

    def cells(frame):
        return ", ".join(f"{r['pool'].removeprefix('autotts-')} at {r['level']:g}x ({r['diff']:+.1%})"
                         for r in frame.sort("pool", "level").iter_rows(named=True)) or "none"

    better, worse = s.filter(pl.col("verdict") == "better"), s.filter(pl.col("verdict") == "worse")
    better_q = s.filter(pl.col("verdict_queries") == "better")
    worse_q = s.filter(pl.col("verdict_queries") == "worse")
    saving = s.filter((pl.col("ratio") < 0.9) & (pl.col("verdict") != "better"))
    where = []
    for lvl, g in s.group_by("level", maintain_order=True):
        b, w = int((g["verdict"] == "better").sum()), int((g["verdict"] == "worse").sum())
        word = "worse" if w > g.height / 2 else "better" if b > g.height / 2 else "mixed"  # (a majority of pools)
        bq, wq = int((g["verdict_queries"] == "better").sum()), int((g["verdict_queries"] == "worse").sum())
        where.append((lvl[0], word, b, w, bq, wq, g.height, float(g["diff"].median())))
    where.sort()
    per_pool = [[r["pool"].removeprefix("autotts-"), f"{r['level']:g}x", r["width_policy"],
                 mse(r["width_mean"], r["width_se"]), f"{r['width_tokens_per_query']:,.0f}", r["depth_policy"],
                 mse(r["depth_mean"], r["depth_se"]), f"{r['depth_tokens_per_query']:,.0f}",
                 f"{r['diff']:+.1%} ± {r['diff_se']:.1%}" + (" *" if r["verdict"] != "within 2 SE" else ""),
                 f"± {r['diff_se_queries']:.1%}" + (" *" if r["verdict_queries"] != "within 2 SE" else "")]
                for r in s.sort("pool", "level").iter_rows(named=True)]
    from ttc.replay.leaderboard import DEPTH_M

    return [
        f"\n## What depth adds: stopping traces part-way (the {s['pool'].n_unique()} AutoTTS pools)\n",
        f"The AutoTTS dumps probe every trace {probe_spacing(paths, dw['pool'].unique().to_list())} (its answer so "
        "far), so a trace can be replayed as if stopped part-way (docs/semantics.md, Depth). On them the leaderboard "
        "run\n",
        f"```bash\n{lb_cmd}\n```\n",
        "sets, in its sc track at token budgets (multiples of each pool's median trace length per query), per pool and "
        "budget the best width-only entry (whole traces: uniform, and each score-free policy with each "
        "answer-agreement rule) against the best width x depth entry (each of those under the answer-stability "
        f"rule, a trace stopping when its last {_and(str(m) for m in DEPTH_M).replace(' and ', ' or ')} probes "
        "agree; Parallel-Probe; AutoTTS's CMC), without a "
        "verifier (majority answer, metric accuracy). Every entry's parameters, and each kind's best entry, are "
        "chosen on one half of each pool's problems; both best "
        f"entries are measured on the other half ({n_report} problems) at the same token budget, {seeds} seeds. "
        "`ttc compare POOL --depth` prints the same comparison for one pool (the same numbers: "
        "tests/test_compare_depth.py), with every entry beside it. The SE over problems below is added by this "
        "script, from replays of the two chosen configurations of each row with per-problem outcomes (compare's "
        f"with_query_se). Standard errors: {DEPTH_SE_METHOD}. The queries here are problems; the SE over "
        "problems is the one that says whether a difference would hold on other problems of the kind, and it is a "
        f"median {widen:.1f} times the SE over seeds here. A difference is called only beyond 2 SE."
        + (f" The run predates entries this build's leaderboard also runs ({', '.join(missing)}); rerun it and "
           "`python docs/make_results.py --depth-only DIR` to include them." if missing else "") + "\n",
        table(["budget", "depth better (pools, SE over seeds)", "depth worse (seeds)", "better (SE over problems)",
               "worse (problems)", "median difference", "median tokens spent, depth / width",
               "most often the best depth entry (ties: =)"], rows),
        "",
        f"**What depth adds, and where it does not.** At equal token budgets the best width x depth entry is more "
        f"accurate than the best width-only one beyond 2 SE over seeds in {better.height} of {n} (pool, budget) cells "
        f"({cells(better)}) and less accurate in {worse.height}. Beyond 2 SE over problems, which also covers which "
        f"{n_report} problems were held out, depth is better in {better_q.height} ({cells(better_q)}) and worse in "
        f"{worse_q.height}. By budget: "
        + "; ".join(f"at {lvl:g}x the median length depth is {MOSTLY[word]} over seeds ({b} better, {w} worse of "
                    f"{m}; over problems {bq} and {wq}; median {d:+.1%})" for lvl, word, b, w, bq, wq, m, d in where)
        + ". "
        + (f"Where depth is not more accurate it sometimes spends fewer tokens: in {saving.height} cells it spends "
           f"under 0.9 of the best width-only entry's tokens (median {float(saving['ratio'].median()):.2f}) at a "
           f"median accuracy difference of {float(saving['diff'].median()):+.1%}, the trade AutoTTS and "
           "Parallel-Probe report (tokens saved at nearly equal accuracy), which the question asked here (the most "
           "accuracy a budget buys) does not reward. " if saving.height else "")
        + verdict_text(better_q.height, worse_q.height, n, n_report) + "\n",
        "Per pool (held-out accuracy ± SE over seeds; tokens spent per query; * beyond 2 SE):\n",
        table(["pool", "budget", "best width-only", "accuracy", "tokens", "best width x depth", "accuracy", "tokens",
               "depth - width ± SE over seeds", "± SE over problems"], per_pool),
    ]


def mse(m, se, pct=True) -> str:
    if m is None or not np.isfinite(m):
        return "—"
    return f"{m:.1%} ± {se:.1%}" if pct else f"{m:.3f} ± {se:.3f}"


def table(head, rows) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def gain(g, cens) -> str:
    return "—" if g is None or not np.isfinite(g) else f"{'≥' if cens else ''}{g:.2f}x"


def pool_table(df: pl.DataFrame) -> str:
    rows = []
    cov = df.filter((pl.col("track") == "coverage") & (pl.col("unit") == "samples"))
    for name in cov["pool"].unique(maintain_order=True):
        g = cov.filter(pl.col("pool") == name)
        u = {r["level"]: r for r in g.filter(pl.col("policy") == "uniform").iter_rows(named=True)}
        o = {r["level"]: r for r in g.filter(pl.col("policy") == "oracle").iter_rows(named=True)}
        sc = df.filter((pl.col("pool") == name) & (pl.col("track") == "sc") & (pl.col("unit") == "samples")
                       & (pl.col("policy") == "uniform"))
        sc16 = sc.filter(pl.col("level") == 16.0)
        r0 = g.row(0, named=True)
        rows.append([name, r0["n_report"], f"{u[1.0]['exact_uniform']:.3f}", f"{u[4.0]['exact_uniform']:.3f}",
                     f"{u[16.0]['exact_uniform']:.3f}", f"{o[1.0]['mean']:.3f}",
                     mse(sc16["mean"][0], sc16["se"][0], False) if sc16.height else "—",
                     f"{r0['median_tokens']:,.0f}" if r0["median_tokens"] else "—"])
    return table(["pool", "held-out queries", "uniform coverage@1", "@4", "@16", "oracle coverage at 1 / query",
                  "uniform sc accuracy at 16", "median tokens"], rows)


def across(agg: pl.DataFrame, track: str, unit: str, levels, top: int = 6) -> str:
    rows = []
    for lvl in levels:
        g = agg.filter((pl.col("track") == track) & (pl.col("unit") == unit) & (pl.col("level") == float(lvl)))
        keep = g.head(top)
        if "uniform" not in keep["policy"].to_list():
            keep = pl.concat([keep, g.filter(pl.col("policy") == "uniform")])
        for r in keep.iter_rows(named=True):
            rows.append([f"{lvl:g}" + ("" if unit == "samples" else "x median"), r["policy"], f"{r['mean_rank']:.2f}",
                         f"{r['beats_uniform']}/{r['pools']}",
                         "—" if r["role"] == "uniform" else f"{r['beats_best']}/{r['pools']}",
                         gain(r["median_gain"], False) + (f" ({r['gains_censored']} ≥)" if r["gains_censored"] else ""),
                         "—" if r["median_gap_share"] is None or not np.isfinite(r["median_gap_share"])
                         else f"{r['median_gap_share']:.0%}"])
    return table(["budget / query", "policy", "mean rank", "beats uniform > 2 SE (pools)",
                  "beats best published > 2 SE", "median gain (lower bounds)", "median gap closed"], rows)


def config_text(r) -> str:
    """The chosen parameters, without what the label already says (the policy, its rule)."""
    inner = r["config"].removeprefix(r["base_policy"]).strip(" ()")
    kept = [kv for kv in inner.split(", ") if kv and not kv.startswith("eliminate=")]
    return f"({', '.join(kept)})" if kept else ""


def focus_table(df: pl.DataFrame) -> str:
    rows = []
    for name in FOCUS:
        for track in ("sc", "coverage"):
            g = df.filter((pl.col("pool") == name) & (pl.col("track") == track) & (pl.col("unit") == "samples"))
            for lvl in (1.0, 2.0, 4.0, 8.0, 16.0):
                h = g.filter(pl.col("level") == lvl)
                if not h.height:
                    continue
                u = h.filter(pl.col("policy") == "uniform").row(0, named=True)
                best = h.filter(pl.col("is_best_published")).row(0, named=True)
                o = h.filter(pl.col("role") == "oracle").row(0, named=True)
                verdict = ("better" if best["vs_uniform"] > 2 * best["vs_uniform_se"] else
                           "worse" if best["vs_uniform"] < -2 * best["vs_uniform_se"] else "within 2 SE")
                rows.append([name.split("-", 1)[0], track, f"{lvl:g}", mse(u["mean"], u["se"], False),
                             f"{best['policy']} {config_text(best)}".strip(),
                             mse(best["mean"], best["se"], False), f"{best['samples_per_query']:.2f}",
                             f"{best['vs_uniform']:+.3f} ± {best['vs_uniform_se']:.3f} ({verdict})",
                             gain(best["gain"], best["gain_censored"]), f"{o['mean']:.3f}"])
    return table(["source", "track", "budget", "uniform", "best published (chosen on the tuning half)",
                  "its held-out metric", "samples / query", "minus uniform", "gain", "oracle coverage"], rows)


def sources_agree(df: pl.DataFrame) -> str:
    """Uniform's held-out numbers on the two Qwen3-4B AIME 2025 pools side by side (different traces, different
    held-out halves: unpaired, SEs combined)."""
    rows = []
    for track in ("coverage", "sc"):
        for lvl in (1.0, 4.0, 16.0):
            vals = []
            for name in FOCUS:
                r = df.filter((pl.col("pool") == name) & (pl.col("track") == track) & (pl.col("unit") == "samples")
                              & (pl.col("policy") == "uniform") & (pl.col("level") == lvl)).row(0, named=True)
                vals.append(r)
            rows.append([track, f"{lvl:g}", mse(vals[0]["mean"], vals[0]["se"], False),
                         mse(vals[1]["mean"], vals[1]["se"], False),
                         f"{vals[0]['mean'] - vals[1]['mean']:+.3f} ± "
                         f"{np.hypot(vals[0]['se'], vals[1]['se']):.3f} (over seeds only)"])
    return table(["track", "budget", "BoInf (80 answers / problem)", "AutoTTS (128 traces / problem)",
                  "difference"], rows)


def sources_verdict(df: pl.DataFrame) -> str:
    beyond = []
    for track in ("coverage", "sc"):
        for lvl in (1.0, 4.0, 16.0):
            r = [df.filter((pl.col("pool") == n) & (pl.col("track") == track) & (pl.col("unit") == "samples")
                           & (pl.col("policy") == "uniform") & (pl.col("level") == lvl)).row(0, named=True)
                 for n in FOCUS]
            d, se = r[0]["mean"] - r[1]["mean"], float(np.hypot(r[0]["se"], r[1]["se"]))
            if abs(d) > 2 * se:
                beyond.append(f"{track} at {lvl:g} ({d:+.3f})")
    if not beyond:
        return "They agree within 2 SE at every budget shown."
    top = [df.filter((pl.col("pool") == n) & (pl.col("track") == "coverage") & (pl.col("unit") == "samples")
                     & (pl.col("policy") == "uniform") & (pl.col("level") == 16.0))["exact_uniform"][0] for n in FOCUS]
    return ("They differ beyond 2 SE at " + ", ".join(beyond) + "; uniform's exact coverage@16 is "
            f"{top[0]:.3f} (BoInf) and {top[1]:.3f} (AutoTTS).")


def headroom(df: pl.DataFrame, track: str, lvl: float) -> pl.DataFrame:
    """Per pool at one sample budget: uniform, the oracle's ceiling, the best published and whether it beats
    uniform beyond 2 SE."""
    g = df.filter((pl.col("track") == track) & (pl.col("unit") == "samples") & (pl.col("level") == lvl))
    out = []
    for name in g["pool"].unique(maintain_order=True):
        h = g.filter(pl.col("pool") == name)
        u = h.filter(pl.col("policy") == "uniform").row(0, named=True)
        b = h.filter(pl.col("is_best_published")).row(0, named=True)
        top = h.filter(pl.col("role").is_in(["published", "new"])).sort("mean", descending=True).row(0, named=True)
        out.append({"pool": name, "uniform": u["mean"], "uniform_se": u["se"], "oracle": b["oracle_mean"],
                    "best": b["policy"], "best_mean": b["mean"], "best_se": b["se"], "diff": b["vs_uniform"],
                    "diff_se": b["vs_uniform_se"], "beats": bool(b["beats_uniform"]), "gain": b["gain"],
                    "censored": b["gain_censored"], "any_beats": bool(h["beats_uniform"].any()),
                    "top": top["policy"]})
    return pl.DataFrame(out)


def headroom_table(h: pl.DataFrame) -> str:
    rows = [[r["pool"], mse(r["uniform"], r["uniform_se"], False), f"{r['oracle']:.3f}",
             f"{r['oracle'] - r['uniform']:+.3f}", r["best"],
             f"{r['diff']:+.3f} ± {r['diff_se']:.3f}" + (" *" if r["beats"] else ""), gain(r["gain"], r["censored"])]
            for r in h.sort("uniform").iter_rows(named=True)]
    return table(["pool", "uniform", "oracle ceiling", "headroom", "best published", "minus uniform", "gain"], rows)


def figures(df: pl.DataFrame, lb: Path):
    """Small copies for the docs: the two sample-budget heatmaps at a low resolution, and the focus pools' curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ttc.replay.figures import leaderboard_figures

    FIG.mkdir(parents=True, exist_ok=True)
    tmp = lb / "docs-figures"
    sub = df.filter(pl.col("unit") == "samples")
    for f in leaderboard_figures(sub, tmp, dpi=75, curves=False):
        if f.suffix == ".png":
            f.replace(FIG / f.name)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, track in zip(axes, ("sc", "coverage"), strict=True):
        for name, ls in zip(FOCUS, ("-", "--"), strict=True):
            g = df.filter((pl.col("pool") == name) & (pl.col("track") == track) & (pl.col("unit") == "samples"))
            for pol, colour in (("uniform", "#4d4d4d"), ("oracle", "#bcbd22")):
                s = g.filter(pl.col("policy") == pol).sort("level")
                ax.errorbar(s["level"], s["mean"], yerr=2 * s["se"].fill_nan(0), color=colour, ls=ls, marker="o",
                            ms=3, capsize=2, label=f"{pol} ({name.split('-')[0]})")
            best = (g.filter(pl.col("role").is_in(["published", "new"])).group_by("policy")
                    .agg(pl.col("rank").mean()).sort("rank")["policy"][0])
            s = g.filter(pl.col("policy") == best).sort("level")
            ax.errorbar(s["level"], s["mean"], yerr=2 * s["se"].fill_nan(0), color="#d62728", ls=ls, marker="s",
                        ms=3, capsize=2, label=f"{best} ({name.split('-')[0]})")
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
        ax.set_xlabel("samples per query")
        ax.set_ylabel("held-out accuracy (majority)" if track == "sc" else "held-out coverage")
        ax.set_title(f"Qwen3-4B, AIME 2025: {track} track", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(FIG / "qwen3-4b-aime2025.png", dpi=80)
    plt.close(fig)


def claims(df: pl.DataFrame, hs: pl.DataFrame, hc: pl.DataFrame) -> list[str]:
    """One bullet per claim of the seed paper, each with the numbers that decide it."""
    out = []
    g = hs.filter(pl.col("beats"))
    two = hs.filter(pl.col("gain") >= 2.0)
    out.append(f"- *2x to 4x less compute, several points at equal budget.* Without a verifier (sc, 4 samples per "
               f"query) the best published policy's median gain is {gain(float(hs['gain'].median()), False)}; it "
               f"reaches 2x or more on {two.height} of {hs.height} pools; where it beats uniform beyond 2 SE the "
               f"median difference is {float(g['diff'].median()):+.3f} accuracy"
               + (f" (largest {float(g['diff'].max()):+.3f})" if g.height else "") + ". With a verifier the gains are "
               f"larger (median {gain(float(hc['gain'].median()), False)} at 4 samples), because a verified query "
               "stops at its first correct answer: that setting is the oracle's own rule, not a property of the "
               "allocation policy.")
    hard = hs.filter(pl.col("uniform") < 0.6)["pool"].to_list()
    sc = df.filter((pl.col("track") == "sc") & (pl.col("unit") == "samples") & pl.col("pool").is_in(hard)
                   & pl.col("role").is_in(["published", "uniform"]))
    if sc.height:
        r = (sc.group_by("policy").agg(pl.col("rank").mean().alias("r"), pl.col("beats_uniform").sum().alias("b"),
                                       pl.len().alias("n")).sort("r"))
        r = r.sort("r", "policy")
        ent = r.filter(pl.col("policy").str.starts_with("entropy")).row(0, named=True)
        top = r.row(0, named=True)
        out.append(f"- *Entropy (and ucb) best on the hardest queries.* On the {len(hard)} pools where uniform's "
                   f"majority vote is below 0.6 at 4 samples per query ({', '.join(hard)}), the combination of best "
                   f"mean rank over all budgets is {top['policy']} ({top['r']:.2f}; beats uniform beyond 2 SE in "
                   f"{top['b']} of {top['n']} pool-budget cells); the best entropy one is {ent['policy']} "
                   f"({ent['r']:.2f}, {ent['b']} of {ent['n']}): no clear winner. ucb reads a score, so it has no "
                   "place without a verifier; with one it ties elimination (both stop at the first correct answer "
                   "and go round-robin).")
    tok = df.filter((pl.col("unit") == "tokens") & pl.col("is_best_published") & (pl.col("level") == 4.0))
    sam = df.filter((pl.col("unit") == "samples") & pl.col("is_best_published") & (pl.col("level") == 4.0))
    for track in ("sc", "coverage"):
        t, s_ = (x.filter(pl.col("track") == track) for x in (tok, sam))
        if t.height and s_.height:
            out.append(f"- *Token budgets keep most of the gain* ({track}): at 4 (samples, or median lengths) per "
                       f"query the best published policy's median gain is {gain(float(s_['gain'].median()), False)} "
                       f"in samples and {gain(float(t['gain'].median()), False)} in tokens (over the {t.height} pools "
                       "with token counts); it beats uniform beyond 2 SE on "
                       f"{int(s_['beats_uniform'].sum())} of {s_.height} and {int(t['beats_uniform'].sum())} of "
                       f"{t.height} pools.")
    m5 = hs.filter(pl.col("pool").str.contains("boinf") & pl.col("pool").str.contains("math500"))
    if m5.height:
        out.append(f"- *MATH-500 on today's models.* On the {m5.height} BoInf MATH-500 pools uniform's majority vote "
                   f"at 4 samples per query is already {float(m5['uniform'].min()):.3f} to "
                   f"{float(m5['uniform'].max()):.3f} and the oracle's ceiling {float(m5['oracle'].min()):.3f} to "
                   f"{float(m5['oracle'].max()):.3f}: at most {float((m5['oracle'] - m5['uniform']).max()):+.3f} to "
                   f"gain. The best published policy's difference from uniform there is "
                   f"{float(m5['diff'].min()):+.3f} to {float(m5['diff'].max()):+.3f} (beyond 2 SE on "
                   f"{m5.filter(pl.col('beats')).height} of {m5.height}): the several points the seed paper found on "
                   "2024 models' MATH pools are not there to be had on these.")
    from ttc.replay.leaderboard import LEADERBOARD_GRID, RULE_GRID

    out.append("- *Larger K moves toward uniform* is not examined here: the leaderboard draws "
               f"K = {_and(str(k) for k in LEADERBOARD_GRID['K']).replace(' and ', ' or ')} responses per pull "
               f"(ESC's window is its own K, {_and(str(k) for k in RULE_GRID['esc']['K']).replace(' and ', ' or ')}).")
    return [line + "\n" for line in out]


def advice_rows(df: pl.DataFrame) -> list[list]:
    """"Which policy should I use?": per track and kind of pool, the policy of best mean rank over sample budgets
    (ties listed together), its 2-SE win counts against uniform and the best published, its median gain."""
    kinds = {"AIME (integer answers)": pl.col("pool").str.contains("aime"),
             "MATH-500 (reasoning models)": pl.col("pool").str.contains("math500")
             & pl.col("pool").str.contains("boinf"),
             "older pools (embedded)": ~pl.col("pool").str.contains("boinf|autotts")}
    advice = []
    for track, label in (("coverage", "with a verifier (coverage)"), ("sc", "without a verifier (self-consistency)")):
        for kind, cond in kinds.items():
            g = df.filter((pl.col("track") == track) & (pl.col("unit") == "samples") & cond
                          & pl.col("role").is_in(["published", "new", "uniform"]))
            if not g.height:
                continue
            s = (g.group_by("policy").agg(pl.col("rank").mean().alias("r"), pl.col("beats_uniform").sum().alias("b"),
                                         pl.col("beats_best").sum().alias("bb"), pl.len().alias("n"),
                                         pl.col("gain").median().alias("g"))
                 .sort("r", "policy"))
            top = s.row(0, named=True)
            tied = s.filter((pl.col("r") - top["r"]).abs() < 0.05)["policy"].to_list()  # the same numbers: a tie
            uni = s.filter(pl.col("policy") == "uniform").row(0, named=True)
            advice.append([label, kind, g["pool"].n_unique(), " = ".join(tied), f"{top['r']:.2f}",
                           f"{top['b']}/{top['n']}", f"{top['bb']}/{top['n']}", gain(top["g"], False),
                           f"{uni['r']:.2f}"])
    return advice


def _and(items) -> str:
    items = list(items)
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + (items[-1] if items else "")


def pool_meta(df: pl.DataFrame) -> list[dict]:
    """Each pool's name, model, dataset and responses per query, from its pool.json (the importers' record)."""
    out = []
    for name, path in df.select("pool", "pool_path").unique(maintain_order=True).iter_rows():
        j = json.loads((Path(path) / "pool.json").read_text())
        out.append({"name": name, "model": j.get("model"), "dataset": j.get("dataset"),
                    "size": j.get("responses_per_query"), "path": Path(path)})
    return out


def sizes_text(group: list[dict], what: str) -> str:
    """"80 answers per problem, 100 for gpt-oss-20b on AIME 2024 and AIME 2025": the most common size, then the
    others by model and dataset."""
    sizes = [m["size"] for m in group]
    common = max(set(sizes), key=sizes.count)
    other = {}
    for m in group:
        if m["size"] != common:
            other.setdefault((m["size"], m["model"]), []).append(m["dataset"])
    return f"{common} {what} per problem" + "".join(
        f", {size} for {model} on {_and(sorted(ds))}" for (size, model), ds in sorted(other.items()))


def pools_text(df: pl.DataFrame) -> str:
    """The pools this run covered, by source, from their pool.json."""
    meta = pool_meta(df)
    boinf = [m for m in meta if m["name"].startswith("boinf-")]
    autotts = [m for m in meta if m["name"].startswith("autotts-")]
    emb = [m for m in meta if not m["name"].startswith(("boinf-", "autotts-"))]
    parts = []
    if boinf:
        by, same = {}, {}
        for m in boinf:
            by.setdefault(m["dataset"], set()).add(m["model"])
        for d, v in sorted(by.items()):  # (datasets run by the same models named together)
            same.setdefault(frozenset(v), []).append(d)
        parts.append(f"the {len(boinf)} BoInf dumps ("
                     + ", ".join(f"{len(v)} reasoning models on {_and(ds)}" for v, ds in same.items())
                     + f"; {sizes_text(boinf, 'answers')})")
    if autotts:
        models = sorted({m["model"] for m in autotts}, key=lambda x: float(x.split("-")[-1].rstrip("B")))
        parts.append(f"the {len(autotts)} AutoTTS dumps ({_and(models)} on "
                     f"{_and(sorted({m['dataset'] for m in autotts}))}; {sizes_text(autotts, 'traces')})")
    if emb:
        parts.append(f"the {len(emb)} embedded pools ({_and(m['name'] for m in emb)})")
    return f"over {len(meta)} pools: " + _and(parts)


def focus_split_text(df: pl.DataFrame) -> str:
    """Whether the two focus pools number the same problems with the same gold answers, and so hold out the same
    ones under the run's split (split_queries over each pool's query ids, as the leaderboard splits them)."""
    from ttc.replay.pool import load_pool
    from ttc.replay.tune import split_queries

    paths = dict(df.select("pool", "pool_path").unique().iter_rows())
    r0 = df.filter(pl.col("pool") == FOCUS[0]).row(0, named=True)
    ids, gold, held = [], [], []
    for name in FOCUS:
        q = load_pool(paths[name]).query_ids
        g = dict(pl.read_parquet(Path(paths[name]) / "queries.parquet").select("query_id", "gold").iter_rows())
        ids.append(list(q))
        gold.append([g.get(x) for x in q])
        held.append({q[i] for i in split_queries(q, r0["holdout"], r0["split_seed"])[1]})
    if ids[0] == ids[1] and gold[0] == gold[1] and held[0] == held[1]:
        return (f"Both number the {len(ids[0])} problems the same way, with the same gold answers, so the split "
                f"holds out the same {len(held[0])} problems in both")
    return (f"The two pools' problems or gold answers differ ({len(ids[0])} and {len(ids[1])} problems; "
            f"{len(held[0] & held[1])} held out in both)")


def missing_sc_entries(df: pl.DataFrame) -> list[str]:
    """The sc track's policy+rule entries this build's leaderboard runs (its score-free policies with each rule that
    reads answers) that the run has on no pool: a run made before they joined (the page then says so)."""
    from ttc.replay.leaderboard import SC_POLICIES
    from ttc.replay.policies import ELIMINATION_RULES

    have = set(df.filter(pl.col("track") == "sc")["policy"])
    return [f"{p}+{r}" for p in SC_POLICIES for r, spec in ELIMINATION_RULES.items()
            if "answers" in spec.needs and f"{p}+{r}" not in have]


def sc_rules(df: pl.DataFrame) -> tuple[list[str], list[str]]:
    """The sc track's answer-agreement rules and the policies that took them in this run, in the registry's order."""
    from ttc.replay.leaderboard import SC_POLICIES
    from ttc.replay.policies import ELIMINATION_RULES

    labels = set(df.filter((pl.col("track") == "sc") & (pl.col("unit") == "samples"))["policy"])
    pols = [p for p in SC_POLICIES if any(x.startswith(p + "+") for x in labels)]
    rules = [r for r in ELIMINATION_RULES if any(f"{p}+{r}" in labels for p in pols)]
    return rules, pols


def in_short(df: pl.DataFrame, advice: list[list]) -> str:
    """The closing advice, from the advice rows and the best published policy's held-out differences."""
    sc_top = sorted({p for row in advice if row[0].startswith("without") for p in row[3].split(" = ")})
    g = df.filter((pl.col("track") == "sc") & (pl.col("unit") == "samples") & pl.col("is_best_published")
                  & pl.col("level").is_in([2.0, 4.0, 8.0]))
    won = g.filter(pl.col("beats_uniform"))
    return ("In short: with a verifier, stop each query at its first verified answer and spend the budget on the "
            "rest (the policies listed together do exactly that and give the same numbers); the gain is the "
            "verifier's. Without one, let an answer-agreement rule decide how much each query gets (of best mean "
            f"rank by kind of pool: {_and(sc_top)}): at 2 to 8 samples per query the best published policy beats "
            f"uniform beyond 2 SE in {won.height} of {g.height} (pool, budget) cells, by a median "
            f"{float(won['vs_uniform'].median()) if won.height else float('nan'):+.3f} accuracy there, and only "
            "where uniform's majority-vote curve still rises; on a flat pool (the headroom table above) it cannot.\n")


def render(lb: Path, cmd: list[str], make_figures: bool = True, depth: Path | None = None) -> str:
    df = pl.read_parquet(lb / "leaderboard.parquet")
    agg = pl.read_parquet(lb / "aggregate.parquet")
    if make_figures:
        figures(df, lb)
    seeds = df["n_seeds"][0]
    lb_cmd = (lb / "leaderboard.md").read_text().split("```bash\n", 1)[1].split("\n```", 1)[0]
    hc = headroom(df, "coverage", 4.0)
    hs = headroom(df, "sc", 4.0)
    hs16 = headroom(df, "sc", 16.0)
    flat = hs.filter((pl.col("oracle") - pl.col("uniform")) < 0.02)
    sc_win = hs.filter(pl.col("any_beats"))
    cov_win = hc.filter(pl.col("beats"))
    advice = advice_rows(df)
    rules, pols = sc_rules(df)
    missing = missing_sc_entries(df)
    aime_held = sorted(set(df.filter(pl.col("pool").str.contains("aime"))["n_report"].to_list()))
    parts = [
        "# Results: which allocation policy for today's reasoning models\n",
        "Generated by `python docs/make_results.py` (it imports the public dumps, runs the leaderboard and writes this "
        "page and docs/results/); the leaderboard itself is\n",
        f"```bash\n{lb_cmd}\n```\n",
        f"{pools_text(df)}. Each pool's queries are split in two by a seeded split; every "
        "policy's parameters are chosen on one half and every number below is measured on the other half, "
        f"{seeds} seeds (permutations of each query's responses) per configuration; ± is one standard error over "
        "seeds with the held-out queries fixed, and a difference is called only beyond 2 SE (paired over seeds). "
        f"With {_and(str(v) for v in aime_held)} held-out AIME problems per pool, the standard error says how much "
        "the draw order moves a number, not how much it would move on other problems.\n",
        "Two tracks. **coverage**: a verifier is available (here the ground truth), a query stops at its first "
        "correct response, the metric is coverage; every live policy takes part, the hindsight oracle is the "
        "ceiling. **sc**: no verifier, a query stops when its answers agree (each answer-agreement rule: "
        f"{', '.join(rules)}) and gives its majority answer; the policies that read no score ({', '.join(pols)}) "
        "with each rule, against uniform majority voting; the ceiling is "
        "the oracle's coverage (no vote is right where no drawn response is). Gain: the budget uniform needs to "
        "match a policy's held-out number over what the policy spent (≥: a lower bound, the policy beats uniform's "
        "last point). Budgets are samples per query here; token budgets (multiples of each pool's median length) "
        "are in the leaderboard's own tables."
        + (f" The run predates entries this build's leaderboard also runs in the sc track ({', '.join(missing)}); "
           "rerun it (`python docs/make_results.py --rerun`) to include them." if missing else "") + "\n",
        "## The pools\n",
        "Held-out halves; uniform's coverage@k is exact (the unbiased estimator), the oracle's is replayed.\n",
        pool_table(df),
        "\n## Across pools\n",
        "Sample budgets; per budget the six policies of best mean rank (1 = best held-out metric on a pool) and "
        "uniform. \"Beats uniform\" and \"beats best published\" count pools where the paired difference is beyond "
        "2 SE; the best published is the adaptive policy whose chosen configuration scored best on the tuning half.\n",
        "### coverage (verifier)\n", across(agg, "coverage", "samples", (1, 2, 4, 8, 16)),
        "\n![coverage heatmap](results/heatmap_coverage_samples.png)\n",
        "### sc (no verifier, majority answer)\n", across(agg, "sc", "samples", (2, 4, 8, 16)),
        "\n![sc heatmap](results/heatmap_sc_samples.png)\n",
        "Heatmaps: each policy's median efficiency gain over the sample budgets, per pool (log scale, 1x = "
        "uniform's). The leaderboard's own PDF/PNG heatmaps and per-pool curves, for tokens too, are in its "
        "figures/ directory.\n",
        "## The seed paper's claims, re-examined\n",
        "The seed paper (Zuo & Zhu 2025, *Strategic Scaling of Test-Time Compute*; its claims as the project's spec "
        "states them, shape only) reports that adaptive policies beat uniform at equal budget by several points, "
        "equivalently reach uniform's score with 2x to 4x less compute; that on very hard queries entropy and ucb do "
        "best; that larger K moves results toward uniform; and that token-matched runs keep most of the gain. For "
        "reasoning models it allocates with self-consistency (answer agreement, majority answer), among them "
        "Qwen3-4B on AIME 2025, a setting that exists twice here, in BoInf and in AutoTTS (different traces of the "
        "same model on the same problems):\n",
        focus_table(df),
        "\n![Qwen3-4B AIME 2025](results/qwen3-4b-aime2025.png)\n",
        f"Uniform on the two sources side by side. {focus_split_text(df)}; the traces differ, so the "
        "difference is unpaired and its SE (over seeds only) says nothing about how other traces of the model "
        f"would do. {sources_verdict(df)}\n",
        sources_agree(df),
        "\nThe claims, one by one, on all pools:\n",
        *claims(df, hs, hc),
        "\n## Where adaptive allocation gains, and where it cannot\n",
        f"With a verifier, at 4 samples per query the best published policy beats uniform beyond 2 SE on "
        f"{cov_win.height} of {hc.height} pools; its median efficiency gain there is "
        f"{gain(float(hc['gain'].median()), False)} (many gains are lower bounds: the policy reaches uniform's "
        f"coverage at the pool's full size). Without one (sc track, 4 samples per query) some policy beats uniform "
        f"beyond 2 SE on {sc_win.height} of {hs.height} pools; the best published one (chosen on the tuning half) "
        f"does on {hs.filter(pl.col('beats')).height}, and at 16 samples per query on "
        f"{hs16.filter(pl.col('beats')).height}.\n",
        f"A pool whose uniform curve is flat has nothing to gain: the oracle's ceiling is within 0.02 of uniform on "
        f"{flat.height} of {hs.height} pools in the sc track at 4 samples per query"
        + (f" ({', '.join(flat['pool'].to_list())})" if 0 < flat.height <= 15 else "")
        + (f". The headroom bounds what any allocation can add there: the largest difference from uniform the best "
           f"published policy reaches on them is {flat['diff'].max():+.3f} (beyond 2 SE on "
           f"{flat.filter(pl.col('beats')).height} of them: real, and too small to matter)" if flat.height else "")
        + ".\n",
        "Per pool, sc track at 4 samples per query (sorted by uniform's accuracy; * beyond 2 SE):\n",
        headroom_table(hs),
        "\n## Which policy should I use?\n",
        "From the evidence above, by kind of pool (sample budgets 1 to 16, all budgets pooled): the policy of best "
        "mean rank (policies whose mean ranks differ by less than 0.05 are listed together: on these pools they "
        "give the same numbers), on how many (pool, budget) cells it beats uniform and the best published policy "
        "beyond 2 SE, and its median gain. A mean rank has no standard error; a recommendation rests on the 2-SE "
        "counts, and where the top policy beats the best published on few or no cells, the top few are "
        "interchangeable.\n",
        table(["setting", "pools", "n", "policy of best mean rank", "mean rank", "beats uniform (cells)",
               "beats best published (cells)", "median gain", "uniform's mean rank"], advice),
        "\n" + in_short(df, advice),
    ]
    if depth is not None:
        parts += depth_section(depth)
    return "\n".join(parts) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/ttc-results"))
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--rerun", action="store_true", help="rerun the leaderboard even if its output exists")
    ap.add_argument("--leaderboard", type=Path, help="render from this leaderboard directory (no import, no run)")
    ap.add_argument("--depth-leaderboard", type=Path, help="with --leaderboard: the depth run's directory (its "
                    "depth.parquet; default: --leaderboard's own when it has one)")
    ap.add_argument("--depth-only", type=Path, metavar="DIR", help="re-render only the depth section of results.md, "
                    "from this leaderboard directory (its depth.parquet: e.g. `ttc leaderboard pools/autotts --tracks "
                    "sc --units tokens`), the rest of the page left as it is")
    ap.add_argument("--keep-depth", action="store_true", help="with --leaderboard: keep results.md's depth section as "
                    "it is (no depth run given: e.g. a main run made before the leaderboard ran depth)")
    ap.add_argument("--no-figures", action="store_true", help="keep docs/results/'s figures as they are (the text "
                    "only: the same run drew them)")
    args = ap.parse_args(argv)
    if args.depth_only is not None:
        text = DOC.read_text()
        at = [i for i in (text.find(h) for h in DEPTH_HEADINGS) if i >= 0]
        if not at:
            raise SystemExit(f"{DOC} has no depth section to replace")
        DOC.write_text(text[:min(at)] + "\n".join(depth_section(args.depth_only)) + "\n")
        print(f"rewrote the depth section of {DOC}", file=sys.stderr)
        return
    if args.leaderboard is not None:
        lb, cmd = args.leaderboard, []
        depth = args.depth_leaderboard or (lb if (lb / "depth.parquet").exists() else None)
    else:
        lb, cmd = ensure(args.work, args.seeds, args.rerun)
        depth = ensure_depth(args.work, args.seeds, args.rerun, lb)
    text = render(lb, cmd, make_figures=not args.no_figures, depth=depth)
    if args.keep_depth and depth is None:
        old = DOC.read_text()
        at = [i for i in (old.find(h) for h in DEPTH_HEADINGS) if i >= 0]
        if at:
            text = text + old[min(at):]
    DOC.write_text(text)
    print(f"wrote {DOC}" + ("" if args.no_figures else f" and {FIG}/"), file=sys.stderr)


if __name__ == "__main__":
    main()
