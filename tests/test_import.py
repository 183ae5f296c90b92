"""`ttc import`: adapters from public dumps to valid pools (fixtures written here; the shared dumps when present)."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ttc.cli import app
from ttc.harvest.importers import import_pool, lastletters_answer, qwen_answer
from ttc.replay.pool import PoolError, load_pool

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "pools"


def _qwen_fixture(path):
    rows = [{"idx": 0, "gt": "4", "level": "Level 1", "pred": ["4", " 4 ", "5", ""],
             "score": [True, True, False, False], "pred_score": [[2.0], [0.0], [-1.0], [-3.0]]},
            {"idx": 7, "gt": "x", "level": "Level 5", "pred": ["$x$", "y"], "score": [True, False],
             "pred_score": [[1.0], [1.0]]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_qwen_fixture_imports_with_logistic_scores_and_hashed_answers(tmp_path):
    out = import_pool("qwen-math-rm", _qwen_fixture(tmp_path / "q.jsonl"), tmp_path / "pool")
    p = load_pool(out, score="rm")
    assert p.query_ids == ["math-000", "math-007"] and p.sizes.tolist() == [4, 2]
    assert np.allclose(p.score[:4], [1 / (1 + math.exp(-v)) for v in (2.0, 0.0, -1.0, -3.0)])
    a = p.ans[:4].tolist()  # "4" and " 4 " are one answer, "5" another, "" is invalid
    assert a[0] == a[1] >= 0 and a[2] >= 0 and a[2] != a[0] and a[3] == -1
    assert p.correct.tolist() == [1, 1, 0, 0, 1, 0]
    assert qwen_answer("$x$") == "x" and lastletters_answer("so The answer is: Yajo.") == "yajo"


def test_import_refuses_bad_input(tmp_path):
    src = _qwen_fixture(tmp_path / "q.jsonl")
    with pytest.raises(PoolError, match="unknown import format"):
        import_pool("nope", src, tmp_path / "a")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(PoolError, match="not an empty directory"):
        import_pool("qwen-math-rm", src, tmp_path / "full")
    with pytest.raises(PoolError, match="does not look like lastletters-esc"):
        import_pool("lastletters-esc", src, tmp_path / "b")
    r = CliRunner().invoke(app, ["import", "qwen-math-rm", str(tmp_path / "missing.jsonl"),
                                 "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "is not a file" in r.output


@pytest.mark.parametrize("fmt,rel,queries,per_query", [
    ("lastletters-esc", "lastletters-gpt35-40/T0.7.jsonl", 500, 40),
    ("math500-ivt", "math500-llama3.1-8b-48/pool.jsonl", 499, 48),
    ("qwen-math-rm", "qwen-math-rm-100x8/math_cot_100.jsonl", 100, 8),
])
def test_shared_dumps_import_into_valid_pools(tmp_path, fmt, rel, queries, per_query):
    src = SHARED / rel
    if not src.exists():
        pytest.skip(f"{src} not present (../shared/data is only beside the project on the team's machines)")
    r = CliRunner().invoke(app, ["import", fmt, str(src), "--out", str(tmp_path / "pool")])
    assert r.exit_code == 0, r.output
    p = load_pool(tmp_path / "pool")
    assert p.n_queries == queries and (p.sizes == per_query).all()
    r = CliRunner().invoke(app, ["replay", str(tmp_path / "pool"), "--seeds", "3", "--budgets", "2"])
    assert r.exit_code == 0, r.output


def test_generic_per_query_lists_and_per_response_csv(tmp_path):
    import polars as pl

    pl.DataFrame({"pid": ["p1", "p2"], "ok": [[True, False, True], [False, False]],
                  "pred": [["4", "5", "4"], ["x", ""]], "prm": [[0.9, 0.2, 0.8], [0.1, 0.3]],
                  "toks": [[10, 20, 30], [5, 6]]}).write_ndjson(tmp_path / "q.jsonl")
    r = CliRunner().invoke(app, ["import", "generic", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "a"),
                                 "--query-id", "pid", "--correct", "ok", "--answer", "pred", "--score", "prm=prm",
                                 "--n-tokens", "toks", "--hash-answers"])
    assert r.exit_code == 0, r.output
    p = load_pool(tmp_path / "a", score="prm", need_tokens=True)
    assert p.sizes.tolist() == [3, 2] and p.correct.tolist() == [1, 0, 1, 0, 0]
    assert p.tok.tolist() == [10, 20, 30, 5, 6] and p.ans[3] >= 0 and p.ans[4] == -1  # "" is invalid
    assert p.ans[0] == p.ans[2] != p.ans[1]

    pl.DataFrame({"q": ["b", "a", "a"], "i": [0, 1, 0], "c": [1, 0, 1],
                  "s": [0.5, 1.5, 0.2]}).write_csv(tmp_path / "r.csv")
    bad = CliRunner().invoke(app, ["import", "generic", str(tmp_path / "r.csv"), "--out", str(tmp_path / "b"),
                                   "--query-id", "q", "--sample-idx", "i", "--correct", "c", "--score", "rm=s"])
    assert bad.exit_code == 2 and "outside [0, 1]" in bad.output
    assert not (tmp_path / "b").exists()  # nothing invalid is left behind
    pl.DataFrame({"q": ["b", "a", "a"], "i": [0, 1, 0], "c": [True, False, True]}).write_csv(tmp_path / "ok.csv")
    r = CliRunner().invoke(app, ["import", "generic", str(tmp_path / "ok.csv"), "--out", str(tmp_path / "c"),
                                 "--query-id", "q", "--sample-idx", "i", "--correct", "c"])
    assert r.exit_code == 0, r.output
    assert load_pool(tmp_path / "c").correct.tolist() == [1, 0, 1]  # a: idx 0 then 1; b
