"""`ttc import generic --sql`: one polars SQL query over the source derives columns, drops repeated rows and fills
nulls before the column flags map the result. The fixture is a raw dump in the shape issue 14 describes (an AIME run:
ids and sample numbers only in a path, responses written twice, `correct` null for truncated responses, mean
log-probs that need exp), imported in one command; each of its faults left unmended is one error line naming the
SQL that mends it."""
import json
import math
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.harvest.importers import import_pool
from ttc.replay.pool import load_pool

DUMP = Path(__file__).resolve().parent / "fixtures" / "import" / "aime_dump.jsonl"
QUERY = ("SELECT DISTINCT REGEXP_REPLACE(path, '.*/aime/([^/]+)/.*', '\\1') AS problem, "
         "CAST(REGEXP_REPLACE(path, '.*/sample_([0-9]+)\\.json', '\\1') AS INT) AS k, "
         "COALESCE(correct, false) AS ok, EXP(mean_logprob) AS conf, answer, n_tokens FROM source")
FLAGS = ["--query-id", "problem", "--sample-idx", "k", "--correct", "ok", "--score", "conf=conf", "--answer", "answer",
         "--n-tokens", "n_tokens", "--hash-answers"]


def run(*args):
    return CliRunner().invoke(app, ["import", "generic", *map(str, args)])


def refused(r, *patterns):
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    for p in patterns:
        assert p in r.output, r.output


def expected():
    """The pool by hand from the raw rows: one row per (problem, sample), null correct = not correct, exp."""
    rows = {}
    for line in DUMP.read_text().splitlines():
        r = json.loads(line)
        _, _, _, problem, name = r["path"].split("/")
        rows[(problem, int(name[len("sample_"):-len(".json")]))] = r
    return dict(sorted(rows.items()))


def test_the_raw_aime_dump_imports_in_one_command(tmp_path):
    r = run(DUMP, "--out", tmp_path / "p", "--sql", QUERY, *FLAGS)
    assert r.exit_code == 0, r.output
    want = expected()
    assert len(DUMP.read_text().splitlines()) == 51 and len(want) == 48   # 3 rows were written twice
    p = load_pool(tmp_path / "p", score="conf", need_tokens=True)
    assert p.query_ids == sorted({q for q, _ in want}) and p.sizes.tolist() == [8] * 6
    assert p.correct.tolist() == [int(v["correct"] is True) for v in want.values()]
    assert p.score.tolist() == [math.exp(v["mean_logprob"]) for v in want.values()]
    assert p.tok.tolist() == [v["n_tokens"] for v in want.values()]
    assert [a == -1 for a in p.ans.tolist()] == [v["answer"] is None for v in want.values()]   # truncated: no answer
    assert f"pass@1 {sum(v['correct'] is True for v in want.values()) / 48:.4f}" in r.output
    meta = json.loads((tmp_path / "p" / "pool.json").read_text())
    assert meta["sql"]["query"] == QUERY and (meta["sql"]["rows_read"], meta["sql"]["rows_after"]) == (51, 48)
    df = pl.read_parquet(tmp_path / "p" / "samples.parquet")
    assert "path" not in df.columns and df["answer"].str.len_chars().max() == 12   # hashed, no third-party text
    r = CliRunner().invoke(app, ["replay", str(tmp_path / "p"), "--score", "conf", "--seeds", "2", "--budgets", "2",
                                 "--policy", "uniform"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("query,flags,patterns", [
    # the responses written twice, left in: the same (query, sample) twice
    (QUERY.replace("SELECT DISTINCT", "SELECT"), FLAGS, ["3 rows of the --sql result repeat a (query_id, sample_idx)",
                                                         "SELECT DISTINCT * FROM source"]),
    # truncated responses' null ground truth, not filled
    (QUERY.replace("COALESCE(correct, false) AS ok", "correct AS ok"), FLAGS,
     ["'ok' is null in 6 of 48 rows", "COALESCE(ok, false)"]),
    # the mean log-prob used as it is
    (QUERY.replace("EXP(mean_logprob) AS conf", "mean_logprob AS conf"), FLAGS,
     ["'conf' (--score conf) has values outside [0, 1]", "EXP(conf)"]),
    (QUERY.replace("REGEXP_REPLACE(path", "REGEXP_SUBSTR(path", 1), FLAGS,
     ["--sql: unsupported function 'regexp_substr'", "the table is 'source', with columns path, "]),
    ("SELECT * FROM results", FLAGS, ["--sql: ", "'results'", "the table is 'source'"]),
    ("SELECT __import__('os').system('true') FROM source", FLAGS, ["--sql: "]),   # SQL, not Python: nothing runs
    ("SELECT path FROM source", FLAGS, ["column 'problem' not in the --sql result (columns: path)"]),
    ("  ", FLAGS, ["--sql is empty"]),
])
def test_each_fault_is_one_line_naming_the_mend(tmp_path, query, flags, patterns):
    refused(run(DUMP, "--out", tmp_path / "p", "--sql", query, *flags), *patterns)
    assert not (tmp_path / "p").exists()


def test_without_sql_the_source_columns_are_named(tmp_path):
    refused(run(DUMP, "--out", tmp_path / "p", "--query-id", "problem"),
            "column 'problem' not in aime_dump.jsonl (columns: path, ")
    refused(CliRunner().invoke(app, ["import", "qwen-math-rm", str(DUMP), "--out", str(tmp_path / "q"),
                                     "--sql", "SELECT 1"]), "qwen-math-rm does not take --sql")


def test_sql_keeps_row_order_for_sample_numbers(tmp_path):
    """Without --sample-idx, responses are numbered in the order the query returns them; DISTINCT keeps the first of
    each repeated row in place."""
    src = tmp_path / "r.csv"
    pl.DataFrame({"q": ["a", "a", "a", "b", "a"], "ok": [1, 0, 0, 1, 1],
                  "s": [0.5, 0.25, 0.25, 1.0, 0.75]}).write_csv(src)
    out = import_pool("generic", src, tmp_path / "p", {"query_id": "q", "correct": "ok", "scores": {"s": "s"},
                                                        "sql": "SELECT DISTINCT * FROM source WHERE s > 0.3"})
    df = pl.read_parquet(out / "samples.parquet").sort("query_id", "sample_idx")
    assert df.select("query_id", "sample_idx", "score_s").rows() == [("a", 0, 0.5), ("a", 1, 0.75), ("b", 0, 1.0)]


def test_math500_dump_maps_its_mean_logprob_as_harvest_does(tmp_path):
    from ttc.harvest.confidence import ConfidenceSpec

    src = tmp_path / "pool.jsonl"
    src.write_text(json.dumps({"i": 3, "level": 2, "c": "10", "s": [-0.5, -2.25]}) + "\n"
                   + json.dumps({"i": 4, "missing": True}) + "\n")
    p = load_pool(import_pool("math500-ivt", src, tmp_path / "p"), score="conf")
    spec = ConfidenceSpec(("mean-logprob",))
    assert p.score.tolist() == [spec.compute([x], None)["score_mean_logprob"] for x in (-0.5, -2.25)]
