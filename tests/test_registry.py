"""The registry (replay/policies.py) is the one place a policy or rule is declared: the README's option table, the
report's sweeps, the figures' styles and the live driver read it, and every kernel code has exactly one entry."""
import re
from pathlib import Path

from ttc.replay import kernel
from ttc.replay.engine import SELECT
from ttc.replay.figures import STYLE
from ttc.replay.live import LIVE_POLICIES
from ttc.replay.policies import (
    DEPTH_RULES,
    ELIMINATION_RULES,
    POLICIES,
    REGISTRY,
    SELECTION_RULES,
    RunConfig,
    markdown_choices,
    supported,
)
from ttc.replay.pool import Pool

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _row(option):
    rows = [line for line in README.splitlines() if line.startswith(f"| `{option}")]
    assert len(rows) == 1, option
    return rows[0]


def test_readme_option_rows_are_rendered_from_the_registry():
    assert markdown_choices(REGISTRY) in _row("--policy")
    assert markdown_choices(ELIMINATION_RULES) in _row("--eliminate")
    assert markdown_choices(SELECTION_RULES) in _row("--select")
    for entry in (*REGISTRY.values(), *ELIMINATION_RULES.values(), *SELECTION_RULES.values()):
        assert "|" not in entry.doc, entry.name  # would break the markdown table


def test_every_kernel_policy_code_has_one_entry():
    codes = {v for k, v in vars(kernel).items() if k in {"UNIFORM", "ELIMINATION", "UCB", "GAP", "GAP_LITERAL",
                                                         "ENTROPY", "TWO_STAGE", "STREAMING", "ORACLE",
                                                             "OPTSCALE", "MARGINAL_GAIN", "DSC", "SIDE_EB",
                                                             "DEEPCONF_ONLINE", "PARALLEL_PROBE", "CMC",
                                                             "UAB", "PETS", "PETS_ONLINE"}}
    assert sorted(p.code for p in REGISTRY.values()) == sorted(codes)
    depth_codes = {v for k, v in vars(kernel).items() if k.startswith("DEPTH_")}
    assert sorted(r.code for r in DEPTH_RULES.values()) == sorted(depth_codes)
    elim_codes = {v for k, v in vars(kernel).items() if k.startswith("ELIM_")}
    assert sorted(r.code for r in ELIMINATION_RULES.values()) == sorted(elim_codes)
    assert SELECT == {n: r.code for n, r in SELECTION_RULES.items()}
    assert POLICIES == {n: p.code for n, p in REGISTRY.items()}


def test_the_readers_follow_the_registry():
    assert set(STYLE) == set(REGISTRY)
    assert LIVE_POLICIES == tuple(n for n, p in REGISTRY.items() if p.live) and "oracle" not in LIVE_POLICIES
    for name, p in REGISTRY.items():  # every parameter a policy declares is a RunConfig field
        assert set(p.params) <= set(RunConfig.__dataclass_fields__), name


def test_supported_reads_the_needs():
    import numpy as np
    off = np.array([0, 2])
    bare = Pool.from_arrays(off, score=np.array([0.5, 1.0]))
    full = Pool.from_arrays(off, correct=np.array([1, 0]), ans=np.array([0, 1]))
    assert "oracle" not in supported(bare) and "entropy" not in supported(bare)
    # deepconf-online needs the record lows, parallel-probe and cmc the probes, uab a side signal
    assert supported(full) == [p for p in REGISTRY if p not in ("deepconf-online", "parallel-probe", "cmc", "uab")]
    full.lows = (np.array([0, 1, 1]), np.array([0]), np.array([1.0]))
    full.side = np.array([0.9, 0.5])
    assert supported(full) == [p for p in REGISTRY if p not in ("parallel-probe", "cmc")]
    full.probe_off, full.probe_tok, full.probe_ans, full.probe_ok = (np.array([0, 1, 1]), np.array([500]),
                                                                     np.array([0]), np.array([True]))
    assert supported(full) == list(REGISTRY)
    assert "elimination" not in supported(bare, "sc-beta") and "uniform" in supported(bare, "sc-beta")
    assert not re.search("oracle|entropy", " ".join(supported(bare, "sc-share")))


# --- harvest's registry: oracles, backends, import formats (harvest/registry.py) ----------------------------------
# Adding an oracle = its implementation class + one Oracle entry; a backend = its class + one Backend entry (+ an
# Option for a new command-line option); an import format = its function + one Importer entry; then
# `python -m ttc.harvest.registry --write` renders the docs tables. The tests below hold everything else to the entries.

import inspect  # noqa: E402
import json  # noqa: E402

import polars as pl  # noqa: E402
import pytest  # noqa: E402

from ttc.harvest import registry as hreg  # noqa: E402
from ttc.harvest.scoring import OracleImpl, _with_columns  # noqa: E402
from ttc.replay.pool import atomic_write_parquet  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_docs_tables_are_rendered_from_the_harvest_registry():
    docs = (ROOT / "docs" / "harvest.md").read_text()
    assert hreg.oracle_table() in docs and hreg.backend_table() in docs, "run: python -m ttc.harvest.registry --write"
    assert hreg.importer_table() in README, "run: python -m ttc.harvest.registry --write"
    for rel, renders in hreg.TABLES.items():  # --write leaves up-to-date docs as they are
        text = (ROOT / rel).read_text()
        assert hreg.rewrite_tables(text, renders) == text
    for entries in (hreg.ORACLES, hreg.BACKENDS, hreg.IMPORTERS):
        for e in entries.values():
            texts = [getattr(e, f) for f in ("doc", "how", "source", "derives") if hasattr(e, f)]
            assert not any("|" in t or "\n" in t for t in texts), e.name  # would break a markdown table row


def test_rewrite_tables_replaces_a_stale_table_and_only_it():
    stale = hreg.oracle_table().replace("`judge`", "`judgement`")
    text = f"intro\n\n{stale}\n\nafter | not a table row\n"
    new = hreg.rewrite_tables(text, [hreg.oracle_table])
    assert new == f"intro\n\n{hreg.oracle_table()}\n\nafter | not a table row\n"
    with pytest.raises(SystemExit, match="expected one table"):
        hreg.rewrite_tables("no table here\n", [hreg.oracle_table])


def test_every_harvest_entry_names_a_working_implementation():
    from ttc.harvest.datasets import TASKS
    from ttc.harvest.scoring import COLUMN_TYPES

    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^([a-z][a-z0-9-]*) = \[", section, re.MULTILINE))  # (tomllib is Python 3.11+)
    assert {"grade", "harvest", "gpu", "openai"} <= extras
    for name, o in hreg.ORACLES.items():
        impl = o.load()
        assert issubclass(impl, OracleImpl) and impl is not OracleImpl, name
        assert set(o.columns) <= set(COLUMN_TYPES) and (o.tasks is None or set(o.tasks) <= set(TASKS)), name
        assert o.needs <= {"gold", "code", "model"} and o.gives <= {"gt", "answers", "scores"}, name
        assert ("gt" in o.gives) == ("correct" in o.columns) and ("answers" in o.gives) == ("answer" in o.columns)
        assert ("scores" in o.gives) == any(c.startswith("score_") for c in o.columns), name
        assert o.extra in extras | {None, "backend"}, name
    for name, b in hreg.BACKENDS.items():
        cls = b.load()
        params = inspect.signature(cls).parameters
        assert callable(getattr(cls, "generate", None)) and callable(getattr(cls, "info", None)), name
        assert {"model", "revision"} <= set(params), name  # what ttc harvest gives every backend
        assert {hreg.BACKEND_OPTIONS[o].keyword for o in b.options} <= set(params), name
        assert set(b.required) <= set(b.options) and b.chat in ("tokenizer", "server"), name
        assert (b.chat == "server") == ("chat" in params) and b.needs <= {"gpu", "server"}, name
        assert b.extra in extras, name
    assert set(hreg.BACKEND_OPTIONS) == {o for b in hreg.BACKENDS.values() for o in b.options}  # none unused
    for name, i in hreg.IMPORTERS.items():
        params = inspect.signature(i.load()).parameters
        assert list(params)[:2] == ["src", "out"] and set(i.options) <= set(params), name
        required = {p for p, v in params.items() if v.default is inspect.Parameter.empty} - {"src", "out"}
        assert required <= set(i.options), name  # ttc import can give what the function cannot do without
        assert i.extra in extras | {None}, name


def test_the_command_line_reads_the_harvest_registry():
    import typer.main

    from ttc import cli
    from ttc.cli import app

    assert (cli.ORACLES, cli.BACKENDS, cli.IMPORT_FORMATS) == (tuple(hreg.ORACLES), tuple(hreg.BACKENDS),
                                                               tuple(hreg.IMPORTERS))
    group = typer.main.get_command(app)
    commands = {n: {p.name: p for p in group.commands[n].params} for n in ("harvest", "score", "import")}
    for command in ("harvest", "score"):
        oracle_help = commands[command]["oracle"].help
        assert all(f"{n}: {o.doc}" in oracle_help for n, o in hreg.ORACLES.items()), command
    backend_help = commands["harvest"]["backend"].help
    assert all(f"{n}: {b.doc}" in backend_help for n, b in hreg.BACKENDS.items())

    def choices(param):
        return [m.value for m in param.type_descriptor.annotation]

    assert choices(commands["harvest"]["backend"]) == choices(commands["score"]["judge_backend"]) == list(hreg.BACKENDS)
    assert choices(commands["import"]["fmt"]) == list(hreg.IMPORTERS)
    for param, o in hreg.BACKEND_OPTIONS.items():  # every backend option, as declared, on ttc harvest
        p = commands["harvest"][param]
        assert p.opts[0] == o.flag.split("/")[0] and p.default == o.default, param
        assert p.help.startswith(", ".join(hreg.taking(hreg.BACKENDS, param)) + ": "), param
    # the scoring options each oracle reads exist, their help names the oracle, and none is read by no oracle
    readers = {name: [n for n, o in hreg.ORACLES.items() if name in o.options] for name in cli._SCORING}
    for name, oracles in readers.items():
        if name != "progress":
            assert oracles, f"no oracle in harvest/registry.py reads --{name.replace('_', '-')}; add it to its options"
        help_text = cli._SCORING[name][1].help
        assert all(o in help_text for o in oracles), (name, oracles, help_text)
    assert {o for e in hreg.ORACLES.values() for o in e.options} <= set(cli._SCORING)
    # ttc import's options name the formats that take them, and only those
    flags = {p.opts[0]: p for p in group.commands["import"].params}
    for keyword in {o for i in hreg.IMPORTERS.values() for o in i.options if o in ("limit", "per_query", "workers",
                                                                                     "timeout")}:
        text = flags[hreg.flag(keyword)].help
        named = {n for n in hreg.IMPORTERS if re.search(rf"(^|[\s,;]){re.escape(n)}[:,;\s]", text)}
        assert named == set(hreg.taking(hreg.IMPORTERS, keyword)), (keyword, text)
    for i in hreg.IMPORTERS.values():
        assert all(f in flags for f in i.flags()), i.name


class WordBackend:
    """A backend declared only in a test's registry entry: each response is the prompt's first word, n times."""

    def __init__(self, model, revision=None, shout=False):
        self.model, self.shout, self.tokenizer = model, shout, None

    def generate(self, prompts, sampling, seeds, stop=None):
        from ttc.harvest.types import Response

        word = [(p.split() or [""])[0] for p in prompts]
        return [[Response(w.upper() if self.shout else w, 1, "stop")] * sampling.n for w in word]

    def info(self):
        return {"backend": "word", "model": self.model}


class LengthOracle(OracleImpl):
    """An oracle declared only in a test's registry entry: score = min(1, characters / 100)."""

    def config(self, opts):
        return {"rule": "min(1, len(text) / 100)"}

    def score(self, sp, todo, rec, opts):
        for part in todo:
            df = pl.read_parquet(part)
            score = [min(1.0, len(t or "") / 100) for t in df["text"].to_list()]
            atomic_write_parquet(_with_columns(df, {"score_length": score}), part)
            rec.mark(part)
        return {"responses": 0}


def add_source(path):
    path.write_text('{"task_id": "a", "ok": [true, false]}\n{"task_id": "b", "ok": [false]}\n')
    return path


def import_ok_lists(src, out, limit=None):
    """An import format declared only in a test's registry entry: JSONL rows of task_id and a list of verdicts."""
    from ttc.replay.pool import samples_frame, write_pool

    rows = [json.loads(line) for line in src.read_text().splitlines()][:limit]
    cols = {"query_id": [r["task_id"] for r in rows for _ in r["ok"]],
            "sample_idx": [k for r in rows for k in range(len(r["ok"]))],
            "correct": [v for r in rows for v in r["ok"]]}
    return write_pool(out, samples_frame(cols), {"name": out.name})


def test_an_entry_is_all_it_takes(tmp_path, monkeypatch):
    """A backend, an oracle and an import format added as registry entries only reach the command line, ttc harvest,
    ttc score and ttc import with no other change (the implementations live in this test module)."""
    from typer.testing import CliRunner

    from ttc.harvest.pipeline import read_meta
    from ttc.harvest.scoring import score_pool
    from ttc.replay.pool import load_pool

    here = __name__
    monkeypatch.setitem(hreg.BACKENDS, "word", hreg.Backend("word", f"{here}:WordBackend", "first words",
                                                            ("shout",), extra="harvest"))
    monkeypatch.setitem(hreg.BACKEND_OPTIONS, "shout", hreg.Option("shout", "--shout", "shout", bool, False, "shout."))
    monkeypatch.setitem(hreg.ORACLES, "length", hreg.Oracle("length", f"{here}:LengthOracle", "length", "length",
                                                            ("score_length",), gives=frozenset({"scores"})))
    monkeypatch.setitem(hreg.IMPORTERS, "ok-lists", hreg.Importer("ok-lists", f"{here}:import_ok_lists", "ok lists",
                                                                  "a JSONL file", "correct = ok", ("limit",)))
    import importlib

    from ttc import cli
    cli = importlib.reload(cli)  # the command line, rebuilt from the patched registry (and rebuilt again at the end)
    try:
        runner = CliRunner()
        data = tmp_path / "q.jsonl"
        data.write_text('{"id": "a", "problem": "seven plus one", "answer": "8"}\n'
                        '{"id": "b", "problem": "two times two", "answer": "4"}\n')
        pool = tmp_path / "pool"
        r = runner.invoke(cli.app, ["harvest", "--dataset", str(data), "--model", "m", "--backend", "word", "--shout",
                                    "--responses", "2", "--max-tokens", "4", "--out", str(pool), "--template", "plain",
                                    "--oracle", "length", "--no-progress"])
        assert r.exit_code == 0, r.output
        df = pl.read_parquet(sorted((pool / "samples").glob("*.parquet"))).sort("query_id", "sample_idx")
        assert df["text"].to_list()[:1] == [df["text"][0].upper()] and df["text"][0] != ""
        assert df["score_length"].to_list() == [min(1.0, len(t) / 100) for t in df["text"].to_list()]
        assert read_meta(pool)["oracles"]["length"]["rule"] == "min(1, len(text) / 100)"
        assert load_pool(pool, score="length").n_queries == 2
        assert score_pool(pool, ["length"], skip_scored=True)[0].status == "skipped"
        r = runner.invoke(cli.app, ["harvest", "--dataset", str(data), "--model", "m", "--backend", "transformers",
                                    "--shout", "--responses", "2", "--max-tokens", "4", "--out", str(tmp_path / "x")])
        assert r.exit_code == 2 and "--shout applies to --backend word, not transformers" in r.output
        r = runner.invoke(cli.app, ["import", "ok-lists", str(add_source(tmp_path / "ok.jsonl")), "--out",
                                    str(tmp_path / "imported"), "--limit", "1"])
        assert r.exit_code == 0, r.output
        assert load_pool(tmp_path / "imported").query_ids == ["a"]
        r = runner.invoke(cli.app, ["import", "ok-lists", str(tmp_path / "ok.jsonl"), "--out", str(tmp_path / "i2"),
                                    "--workers", "2"])
        assert r.exit_code == 2 and "ok-lists does not take --workers" in r.output
    finally:
        monkeypatch.undo()
        importlib.reload(cli)
