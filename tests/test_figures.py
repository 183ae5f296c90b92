"""The report's figures as a paper needs them (issue 28): titles inside the canvas, every line of a figure its own
(colour, marker, line style), lines that coincide drawn once and named together, and vector formats."""
import pytest

pytest.importorskip("matplotlib")

from ttc.replay import figures  # noqa: E402
from ttc.replay.policies import METHODS, REGISTRY  # noqa: E402


@pytest.fixture
def kept(monkeypatch):
    """The figures the plot functions draw, kept open (they close them after saving)."""
    figs = []
    monkeypatch.setattr(figures, "_close", lambda plt, fig: figs.append(fig))
    yield figs
    import matplotlib.pyplot as plt

    for f in figs:
        plt.close(f)


def _inside(fig, artist):
    r = fig.canvas.get_renderer()
    box, canvas = artist.get_window_extent(r), fig.bbox
    return box.x0 >= canvas.x0 - 0.5 and box.x1 <= canvas.x1 + 0.5 and box.y0 >= canvas.y0 - 0.5 \
        and box.y1 <= canvas.y1 + 0.5


def _lines(fig):
    return [(h.get_color(), h.get_marker(), h.get_linestyle()) for ax in fig.axes for h in ax.get_lines()
            if h.get_label() and not h.get_label().startswith("_")]


LONG = ("humaneval-codegen16b-100: accuracy against cost per method (mean ± SE over 100 seeds; Pareto front in "
        "black)")


def test_methods_figure_title_fits_and_no_colour_is_reused(tmp_path, kept):
    methods = list(METHODS)
    assert len(methods) >= 17
    series = {m: ([1 + k, 2 + k, 4 + k], [0.3 + 0.01 * k, 0.4, 0.5], [0.01] * 3) for k, m in enumerate(methods)}
    panels = [{"xlabel": "average cost (samples)", "series": series, "front": ([1, 2], [0.3, 0.5])}]
    figures.plot_pareto(tmp_path / "methods.png", LONG, panels, methods, formats=("pdf", "svg", "png"))
    for ext in ("pdf", "svg", "png"):
        assert (tmp_path / f"methods.{ext}").stat().st_size > 1000
    assert (tmp_path / "methods.svg").read_text().lstrip().startswith("<?xml")
    assert (tmp_path / "methods.pdf").read_bytes().startswith(b"%PDF")
    fig = kept[0]
    assert _inside(fig, fig._suptitle), fig._suptitle.get_text()
    from matplotlib.colors import to_hex

    drawn = {c.get_label(): c.lines[0] for ax in fig.axes for c in ax.containers}
    colours = [to_hex(drawn[m].get_color()) for m in methods]
    assert len(set(colours)) == len(methods)  # tab10 alone reused 7 of them
    looks = [(to_hex(drawn[m].get_color()), drawn[m].get_marker(), drawn[m].get_linestyle()) for m in methods]
    assert len(set(looks)) == len(methods)
    assert _inside(fig, fig.legends[0])


def test_curves_mark_coincident_lines_and_style_every_line_apart(tmp_path, kept):
    budgets = [4, 8, 16, 32]
    same = [0.6, 0.7, 0.8, 0.9]
    series = {}
    for k, p in enumerate(p for p in REGISTRY if p != "deepconf-online"):
        mean = same if p in ("elimination", "ucb", "gap", "marginal-gain", "dsc", "side-eb") else \
            [0.5 + 0.01 * k, 0.6, 0.7, 0.8]
        series[p] = (p, mean, [0.01] * 4)
    for rho in (0.25, 0.75):  # two-stage's further configurations
        series[f"two-stage(rho={rho})"] = ("two-stage", [0.4 + rho / 10, 0.5, 0.6, 0.7], [0.01] * 4)
    panels = [{"title": "coverage", "ylabel": "coverage", "series": series, "exact": None}]
    title = "math500-llama3.1-8b-48: mean over 100 seeds, band ±0.5 std " * 3
    figures.plot_curves(tmp_path / "curves.png", title, budgets, panels)
    fig = kept[0]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "elimination = ucb = gap = marginal-gain = dsc = side-eb (identical)" in labels
    assert len(labels) == len(series) - 5
    styles = _lines(fig)
    assert len(styles) == len(labels) and len(set(styles)) == len(styles)
    assert _inside(fig, fig._suptitle) and _inside(fig, fig.legends[0])


def test_styles_keep_a_policys_colour_and_vary_its_further_configurations():
    look = figures.styles([("two-stage", "two-stage"), ("two-stage(rho=0.25)", "two-stage"),
                           ("two-stage(rho=0.75)", "two-stage"), ("ucb", "ucb")])
    assert len(set(look.values())) == 4
    assert {v[0] for k, v in look.items() if k.startswith("two-stage")} == {REGISTRY["two-stage"].style[0]}


def test_report_format_option_is_checked(tmp_path):
    from typer.testing import CliRunner

    from ttc.cli import app

    r = CliRunner().invoke(app, ["report", "lastletters-gpt35-40", "--out", str(tmp_path / "r"), "--format",
                                 "png,bmp"])
    assert r.exit_code == 2 and "--format" in r.output and not (tmp_path / "r").exists()


def test_theory_writes_vector_figures(tmp_path):
    from typer.testing import CliRunner

    from ttc.cli import app

    r = CliRunner().invoke(app, ["theory", "--sizes", "10,20", "--seeds", "20", "--out", str(tmp_path / "t"),
                                 "--format", "pdf,svg"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t" / "theory.pdf").read_bytes().startswith(b"%PDF")
    assert "<svg" in (tmp_path / "t" / "theory.svg").read_text()
    assert not (tmp_path / "t" / "theory.png").exists()
