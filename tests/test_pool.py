"""load_pool: layout, ordering, answer ids, score choice, and every validation error with its message."""
import json
import re

import numpy as np
import polars as pl
import pytest

from ttc.replay.pool import PoolError, load_pool


def write_pool(root, samples=None, *, files=None, queries=None, pool_json=None, name="pool"):
    """A pool directory under root: samples.parquet (a DataFrame), and/or samples/<i>.parquet (DataFrames or raw
    bytes), queries.parquet (DataFrame or list of ids), pool.json (dict or raw text)."""
    d = root / name
    d.mkdir(parents=True)
    if samples is not None:
        samples.write_parquet(d / "samples.parquet")
    if files is not None:
        (d / "samples").mkdir()
        for i, f in enumerate(files):
            target = d / "samples" / f"part-{i:02d}.parquet"
            if isinstance(f, bytes):
                target.write_bytes(f)
            else:
                f.write_parquet(target)
    if queries is not None:
        if not isinstance(queries, pl.DataFrame):
            queries = pl.DataFrame({"query_id": queries})
        queries.write_parquet(d / "queries.parquet")
    if pool_json is not None:
        (d / "pool.json").write_text(pool_json if isinstance(pool_json, str) else json.dumps(pool_json))
    return d


def basic(**extra):
    """Two queries, two samples each, with ground truth; extra columns appended."""
    return pl.DataFrame({"query_id": ["a", "a", "b", "b"], "sample_idx": [0, 1, 0, 1],
                         "correct": [True, False, False, True], **extra})


def ragged():
    """Three queries of sizes 3, 1, 2, rows shuffled on disk (queries and sample_idx out of order)."""
    return pl.DataFrame({
        "query_id": ["q2", "q0", "q1", "q0", "q2", "q0"],
        "sample_idx": [5, 2, 0, 0, 1, 1],
        "correct": [True, False, True, True, False, False],
        "answer": ["x", "y", "z", "x", "w", None],
        "score_prm": [0.9, 0.1, 0.8, 0.7, 0.2, 0.3],
    })


# ----------------------------------------------------------------------------------------------- valid pools

def test_ragged_pool_offsets_and_order(tmp_path):
    p = load_pool(write_pool(tmp_path, ragged()))
    assert p.query_ids == ["q0", "q1", "q2"]
    assert p.off.tolist() == [0, 3, 4, 6]
    assert p.sizes.tolist() == [3, 1, 2]
    assert p.n_queries == 3
    # q0 sorted by sample_idx 0, 1, 2 -> correct True, False, False; q1: True; q2 idx 1, 5 -> False, True
    assert p.correct.tolist() == [1, 0, 0, 1, 0, 1]
    assert p.correct.dtype == np.int8
    assert p.has_gt and p.has_answers and not p.has_tokens
    assert p.score_name == "gt"
    assert p.score.tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]  # gt: the score is correct itself
    assert p.tok.tolist() == [0] * 6
    assert p.score_columns == ["score_prm"]
    assert p.name == "pool"  # no pool.json: the directory name


def test_answers_mapped_to_per_query_ids(tmp_path):
    df = pl.DataFrame({
        "query_id": ["b", "a", "a", "a", "b", "a", "b"],
        "sample_idx": [1, 3, 0, 1, 0, 2, 2],
        "correct": [1, 0, 1, 0, 1, 1, 0],
        "answer": ["z", "y", None, "x", "y", "x", None],
    })
    p = load_pool(write_pool(tmp_path, df))
    assert p.query_ids == ["a", "b"]
    assert p.off.tolist() == [0, 4, 7]
    ans = p.ans.tolist()
    a, b = ans[0:4], ans[4:7]
    # a by sample_idx: None, "x", "x", "y"; b: "y", "z", None
    assert a[0] == -1 and b[2] == -1  # null -> -1
    assert a[1] == a[2] != a[3]  # equal answers share an id, different answers do not
    assert b[0] != b[1]
    # ids are per query, in 0..N_i-1 (the same string in two queries need not share an id)
    for seg, size in ((a, 4), (b, 3)):
        valid = [x for x in seg if x != -1]
        assert all(0 <= x < size for x in valid)
        assert sorted(set(valid)) == list(range(len(set(valid))))  # dense
    assert p.ans.dtype == np.int64
    # integer 0/1 ground truth is accepted
    assert p.correct.tolist() == [1, 0, 1, 0, 1, 1, 0]


def test_no_answer_column_gives_minus_one(tmp_path):
    p = load_pool(write_pool(tmp_path, basic()))
    assert not p.has_answers
    assert p.ans.tolist() == [-1] * 4


def test_score_gt_vs_score_column_full_and_short_name(tmp_path):
    d = write_pool(tmp_path, ragged())
    gt = load_pool(d, score="gt")
    full = load_pool(d, score="score_prm")
    short = load_pool(d, score="prm")
    assert gt.score_name == "gt" and full.score_name == "score_prm" and short.score_name == "score_prm"
    expected = [0.7, 0.3, 0.1, 0.8, 0.2, 0.9]  # q0 idx 0,1,2; q1; q2 idx 1,5
    assert full.score.tolist() == pytest.approx(expected)
    assert short.score.tolist() == pytest.approx(expected)
    assert gt.score.tolist() == gt.correct.astype(float).tolist()
    # ground truth is still loaded with a score column
    assert full.has_gt and full.correct.tolist() == gt.correct.tolist()


def test_score_column_without_ground_truth(tmp_path):
    df = pl.DataFrame({"query_id": ["a", "a"], "sample_idx": [0, 1], "score_rm": [0.0, 1.0]})
    p = load_pool(write_pool(tmp_path, df), score="rm")
    assert not p.has_gt
    assert p.correct.tolist() == [0, 0]
    assert p.score.tolist() == [0.0, 1.0]


def test_entirely_null_correct_means_no_ground_truth(tmp_path):
    df = pl.DataFrame({"query_id": ["a", "a"], "sample_idx": [0, 1],
                       "correct": pl.Series([None, None], dtype=pl.Boolean), "score_rm": [0.25, 0.5]})
    p = load_pool(write_pool(tmp_path, df), score="rm")
    assert not p.has_gt


def test_tokens_loaded(tmp_path):
    p = load_pool(write_pool(tmp_path, basic(n_tokens=[5, 0, 7, 9])), need_tokens=True)
    assert p.has_tokens
    assert p.tok.tolist() == [5, 0, 7, 9]


def test_many_sample_files(tmp_path):
    parts = [
        pl.DataFrame({"query_id": ["b", "a"], "sample_idx": [1, 2], "correct": [True, False]}),
        pl.DataFrame({"query_id": ["a", "b"], "sample_idx": [0, 0], "correct": [True, False]}),
        pl.DataFrame({"query_id": ["a"], "sample_idx": [1], "correct": [False]}),
    ]
    p = load_pool(write_pool(tmp_path, files=parts))
    assert p.query_ids == ["a", "b"]
    assert p.off.tolist() == [0, 3, 5]
    assert p.correct.tolist() == [1, 0, 0, 0, 1]


def test_pool_json_and_queries_file(tmp_path):
    d = write_pool(tmp_path, basic(), queries=["b", "a"], pool_json={"name": "my-pool", "model": "m"})
    p = load_pool(d)
    assert p.name == "my-pool"
    assert p.meta["model"] == "m"


def test_embedded_pools_load():
    from ttc.replay.pool import DEFAULT_POOL
    p = load_pool(DEFAULT_POOL)
    assert p.n_queries == 500 and p.off[-1] == 20000 and p.has_answers and p.has_gt and not p.has_tokens
    m = load_pool(DEFAULT_POOL.parent / "math500-llama3.1-8b-48", score="conf")
    assert m.score_name == "score_conf" and not m.has_answers and m.has_gt


# ------------------------------------------------------------------------------------------ layout errors

def test_directory_missing(tmp_path):
    with pytest.raises(PoolError, match=r"pool directory .*nope does not exist"):
        load_pool(tmp_path / "nope")


def test_not_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(PoolError, match="is not a directory"):
        load_pool(f)


def test_no_samples_file(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    (d / "samples").mkdir()  # an empty samples/ does not count
    with pytest.raises(PoolError, match=r"holds no samples\.parquet and no samples/\*\.parquet"):
        load_pool(d)


def test_both_layouts_is_an_error(tmp_path):
    d = write_pool(tmp_path, basic(), files=[basic()])
    with pytest.raises(PoolError, match=r"has both samples\.parquet and samples/\*\.parquet; keep one"):
        load_pool(d)


def test_unreadable_parquet(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "samples.parquet").write_bytes(b"this is not parquet")
    with pytest.raises(PoolError, match=r"samples\.parquet: cannot read as Parquet"):
        load_pool(d)


def test_many_files_mismatched_schema(tmp_path):
    parts = [basic(), pl.DataFrame({"query_id": ["c"], "sample_idx": pl.Series([0], dtype=pl.Int32),
                                    "correct": [True]})]
    with pytest.raises(PoolError, match=r"samples/\*\.parquet"):
        load_pool(write_pool(tmp_path, files=parts))


def test_many_files_missing_column_in_one(tmp_path):
    parts = [basic(), pl.DataFrame({"query_id": ["c"], "sample_idx": [0]})]
    with pytest.raises(PoolError, match=r"samples/\*\.parquet"):
        load_pool(write_pool(tmp_path, files=parts))


def test_many_files_one_corrupt(tmp_path):
    with pytest.raises(PoolError, match=r"samples/\*\.parquet"):
        load_pool(write_pool(tmp_path, files=[basic(), b"garbage"]))


# ----------------------------------------------------------------------------------- column / value errors

@pytest.mark.parametrize("col", ["query_id", "sample_idx"])
def test_missing_required_column(tmp_path, col):
    d = write_pool(tmp_path, basic().drop(col))
    with pytest.raises(PoolError, match=rf"samples\.parquet: missing required column '{col}' \(columns: "):
        load_pool(d)


def test_missing_column_named_for_many_files(tmp_path):
    d = write_pool(tmp_path, files=[basic().drop("sample_idx"), basic().drop("sample_idx")])
    with pytest.raises(PoolError, match=r"samples/\*\.parquet: missing required column 'sample_idx'"):
        load_pool(d)


def test_missing_column_named_for_single_file_in_samples_dir(tmp_path):
    d = write_pool(tmp_path, files=[basic().drop("sample_idx")])
    with pytest.raises(PoolError, match=r"samples/.*: missing required column 'sample_idx'"):
        load_pool(d)


def test_empty_pool(tmp_path):
    with pytest.raises(PoolError, match=r"samples\.parquet: no rows"):
        load_pool(write_pool(tmp_path, basic().head(0)))


@pytest.mark.parametrize("df, msg", [
    (pl.DataFrame({"query_id": [1, 2], "sample_idx": [0, 0], "correct": [True, False]}),
     r"column 'query_id' must be a string, found Int64"),
    (pl.DataFrame({"query_id": ["a", "b"], "sample_idx": [0.0, 1.0], "correct": [True, False]}),
     r"column 'sample_idx' must be an integer, found Float64"),
    (pl.DataFrame({"query_id": ["a", "b"], "sample_idx": ["0", "1"], "correct": [True, False]}),
     r"column 'sample_idx' must be an integer, found String"),
    (basic(correct=["y", "n", "y", "n"]), r"column 'correct' must be boolean \(or 0/1\), found String"),
    (basic(correct=[0, 2, 1, 0]), r"column 'correct' must be boolean \(or 0/1\), found Int64"),
    (basic(correct=[1.0, 0.0, 1.0, 0.0]), r"column 'correct' must be boolean \(or 0/1\), found Float64"),
    (basic(answer=[1, 2, 3, 4]), r"column 'answer' must be a string \(null = invalid\), found Int64"),
    (basic(n_tokens=[1.5, 2.0, 3.0, 4.0]), r"column 'n_tokens' must be an integer, found Float64"),
])
def test_wrong_dtypes(tmp_path, df, msg):
    with pytest.raises(PoolError, match=r"samples\.parquet: " + msg):
        load_pool(write_pool(tmp_path, df))


def test_score_column_wrong_dtype(tmp_path):
    d = write_pool(tmp_path, basic(score_rm=["0.1", "0.2", "0.3", "0.4"]))
    with pytest.raises(PoolError, match=r"column 'score_rm' must be a float, found String"):
        load_pool(d, score="rm")


@pytest.mark.parametrize("col", ["query_id", "sample_idx"])
def test_null_ids(tmp_path, col):
    df = basic().with_columns(pl.when(pl.int_range(pl.len()) == 2).then(None).otherwise(pl.col(col)).alias(col))
    with pytest.raises(PoolError, match=rf"samples\.parquet: column '{col}' has 1 null values"):
        load_pool(write_pool(tmp_path, df))


def test_duplicate_query_sample(tmp_path):
    df = pl.DataFrame({"query_id": ["a", "a", "b", "a"], "sample_idx": [0, 1, 0, 1],
                       "correct": [True, False, True, True]})
    with pytest.raises(PoolError, match=re.escape("2 rows share a (query_id, sample_idx), e.g. ('a', 1)")):
        load_pool(write_pool(tmp_path, df))


def test_duplicate_across_files(tmp_path):
    d = write_pool(tmp_path, files=[basic(), basic().head(1)])
    with pytest.raises(PoolError, match=r"samples/\*\.parquet: 2 rows share a \(query_id, sample_idx\)"):
        load_pool(d)


@pytest.mark.parametrize("values, msg", [
    ([0.5, 1.5, 0.2, 0.1], r"has values outside \[0, 1\] \(min 0.1, max 1.5\)"),
    ([0.5, -0.25, 0.2, 0.1], r"has values outside \[0, 1\] \(min -0.25, max 0.5\)"),
    ([0.5, float("inf"), 0.2, 0.1], r"has values outside \[0, 1\]"),
    ([0.5, float("nan"), 0.2, 0.1], r"has 0 null and 1 NaN values; scores must be numbers in \[0, 1\]"),
    ([0.5, None, None, 0.1], r"has 2 null and 0 NaN values; scores must be numbers in \[0, 1\]"),
])
def test_bad_scores(tmp_path, values, msg):
    d = write_pool(tmp_path, basic(score_rm=pl.Series(values, dtype=pl.Float64)))
    with pytest.raises(PoolError, match=r"samples\.parquet: column 'score_rm' " + msg):
        load_pool(d, score="score_rm")


@pytest.mark.parametrize("score", ["gt", "ok", "score_ok"])
@pytest.mark.parametrize("values, msg", [
    (pl.Series([2.0, 0.0, 0.0, 0.0]), r"has values outside \[0, 1\] \(min 0.0, max 2.0\)"),
    (pl.Series([0.5, float("nan"), 0.2, 0.1]), r"has 0 null and 1 NaN values; scores must be numbers in \[0, 1\]"),
    (pl.Series([0.5, None, 0.2, 0.1], dtype=pl.Float64), r"has 1 null and 0 NaN values"),
    (pl.Series(["0.1", "0.2", "0.3", "0.4"]), r"must be a float, found String"),
])
def test_bad_score_in_unselected_column_is_refused(tmp_path, values, msg, score):
    # the contract holds for every score column, whichever one a run selects (README: "Pool format")
    d = write_pool(tmp_path, basic(score_ok=[0.1, 0.2, 0.3, 0.4], score_bad=values))
    with pytest.raises(PoolError, match=r"samples\.parquet: column 'score_bad' " + msg):
        load_pool(d, score=score)


def test_correct_partially_null(tmp_path):
    d = write_pool(tmp_path, basic(correct=pl.Series([True, None, False, True], dtype=pl.Boolean)))
    with pytest.raises(PoolError, match=r"column 'correct' has 1 null values out of 4: ground truth must be "
                                        r"complete \(or entirely null for a pool without it\)"):
        load_pool(d)


def test_gt_without_correct_column(tmp_path):
    d = write_pool(tmp_path, basic(score_rm=[0.1, 0.2, 0.3, 0.4], score_prm=[0.5] * 4).drop("correct"))
    with pytest.raises(PoolError, match=r"--score gt needs a 'correct' column \(ground truth\), and this pool has "
                                        r"none; score columns here: score_rm, score_prm"):
        load_pool(d, score="gt")


def test_gt_with_entirely_null_correct(tmp_path):
    d = write_pool(tmp_path, basic(correct=pl.Series([None] * 4, dtype=pl.Boolean)))
    with pytest.raises(PoolError, match=r"--score gt needs ground truth, but column 'correct' is entirely null"):
        load_pool(d, score="gt")


def test_score_column_does_not_exist(tmp_path):
    d = write_pool(tmp_path, basic(score_rm=[0.1] * 4, score_conf=[0.2] * 4))
    with pytest.raises(PoolError, match=r"score column 'prm' does not exist; available: score_rm, score_conf and gt"):
        load_pool(d, score="prm")
    with pytest.raises(PoolError, match=r"score column 'score_prm' does not exist; available: score_rm, score_conf"):
        load_pool(d, score="score_prm")


def test_score_column_does_not_exist_none_available(tmp_path):
    d = write_pool(tmp_path, basic())
    with pytest.raises(PoolError, match=r"score column 'prm' does not exist; available: none and gt"):
        load_pool(d, score="prm")


def test_queries_lists_query_without_samples(tmp_path):
    d = write_pool(tmp_path, basic(), queries=["a", "b", "c"])
    with pytest.raises(PoolError, match=r"queries\.parquet: 1 queries have no samples, e.g. 'c'"):
        load_pool(d)


def test_samples_with_unlisted_query(tmp_path):
    d = write_pool(tmp_path, basic(), queries=["a"])
    with pytest.raises(PoolError, match=r"queries\.parquet: 1 query_ids in the samples are not listed, e.g. 'b'"):
        load_pool(d)


def test_queries_without_query_id_column(tmp_path):
    d = write_pool(tmp_path, basic(), queries=pl.DataFrame({"id": ["a", "b"]}))
    with pytest.raises(PoolError, match=r"queries\.parquet: cannot read a 'query_id' column"):
        load_pool(d)


def test_invalid_pool_json(tmp_path):
    d = write_pool(tmp_path, basic(), pool_json="{not json")
    with pytest.raises(PoolError, match=r"pool\.json: not valid JSON"):
        load_pool(d)


@pytest.mark.parametrize("text", ["[1, 2]", '"name"'])
def test_pool_json_not_an_object(tmp_path, text):
    d = write_pool(tmp_path, basic(), pool_json=text)
    with pytest.raises(PoolError, match=r"pool\.json"):
        load_pool(d)


def test_negative_tokens(tmp_path):
    d = write_pool(tmp_path, basic(n_tokens=[3, -1, 4, 5]))
    with pytest.raises(PoolError, match=r"samples\.parquet: column 'n_tokens' has negative values"):
        load_pool(d)


def test_token_budget_without_tokens(tmp_path):
    d = write_pool(tmp_path, basic())
    assert not load_pool(d).has_tokens  # fine for a sample budget
    with pytest.raises(PoolError, match=r"samples\.parquet: a token budget needs an 'n_tokens' column, and this "
                                        r"pool has none"):
        load_pool(d, need_tokens=True)


def test_token_budget_with_null_tokens(tmp_path):
    d = write_pool(tmp_path, basic(n_tokens=[3, None, 4, 5]))
    assert load_pool(d).has_tokens  # nulls are fine for a sample budget
    with pytest.raises(PoolError, match=r"column 'n_tokens' has 1 null values; a token budget needs them all"):
        load_pool(d, need_tokens=True)


def test_pool_error_is_a_user_error_and_a_value_error():
    # the command line prints a UserError as one 'error:' line (anything else is a bug); a ValueError for callers
    from ttc.replay.errors import UserError

    assert issubclass(PoolError, UserError) and issubclass(PoolError, ValueError)


# ----------------------------------------------------------------------------------- the contract: one schema

def test_readme_pool_format_table_is_the_schema():
    # README.md "Pool format" describes SAMPLE_COLUMNS and SCORE: the same columns, required exactly where they are
    from pathlib import Path

    from ttc.replay.pool import SAMPLE_COLUMNS, SCORE

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    table = text[text.index("## Pool format"):].split("| column | type | |", 1)[1].split("\n\n", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()[1:]]
    documented, required = set(), set()
    for cells in rows:
        names = re.findall(r"`([^`]+)`", cells[0])
        documented.update(names)
        if "required" in cells[1]:
            required.update(names)
    assert documented == set(SAMPLE_COLUMNS) | {SCORE.name}
    assert required == {n for n, c in SAMPLE_COLUMNS.items() if c.required}


def test_loader_validates_the_schema_types():
    # the loader's type checks come from the schema: a column of the format with a type it does not accept fails
    from ttc.replay.pool import SAMPLE_COLUMNS, column

    assert column("score_anything") is column("score_prm")
    assert column("query_id").required and column("sample_idx").required and not column("answer").required
    assert {c.dtype for n, c in SAMPLE_COLUMNS.items() if n in ("query_id", "answer", "text")} == {pl.String}
    with pytest.raises(PoolError, match=r"column 'prm_steps' is not part of the pool format"):
        column("prm_steps")


def test_samples_frame_types_columns_as_the_contract_says():
    from ttc.replay.pool import samples_frame

    df = samples_frame({"query_id": ["a", "a"], "sample_idx": [0, 1], "correct": [True, False],
                        "answer": [None, None], "n_tokens": [None, 3], "score_rm": [1, 0]})
    assert dict(df.schema) == {"query_id": pl.String, "sample_idx": pl.Int64, "correct": pl.Boolean,
                               "answer": pl.String, "n_tokens": pl.Int64, "score_rm": pl.Float64}
    rows = samples_frame([{"query_id": "a", "sample_idx": 0, "answer": None}])  # rows as well as columns
    assert dict(rows.schema) == {"query_id": pl.String, "sample_idx": pl.Int64, "answer": pl.String}
    with pytest.raises(PoolError, match="not part of the pool format"):
        samples_frame({"query_id": ["a"], "sample_idx": [0], "reward": [0.5]})


# ----------------------------------------------------------------------------------- the contract: one writer

def _leftovers(d):
    return sorted(p.name for p in d.iterdir() if ".tmp-" in p.name)


def test_write_pool_round_trip(tmp_path):
    from ttc.replay.pool import samples_frame, write_pool

    out = write_pool(tmp_path / "deep" / "p", samples_frame({"query_id": ["b", "a"], "sample_idx": [0, 0],
                                                             "correct": [True, False], "score_rm": [0.5, 0.25]}),
                     {"name": "mine", "when": tmp_path}, pl.DataFrame({"query_id": ["a", "b"]}))
    p = load_pool(out, score="rm")
    assert p.name == "mine" and p.query_ids == ["a", "b"] and p.score.tolist() == [0.25, 0.5]
    assert json.loads((out / "pool.json").read_text())["when"] == str(tmp_path)  # default=str
    assert sorted(f.name for f in out.iterdir()) == ["pool.json", "queries.parquet", "samples.parquet"]
    assert _leftovers(out.parent) == []


def test_write_pool_takes_only_a_new_or_empty_directory(tmp_path):
    from ttc.replay.pool import write_pool

    (tmp_path / "empty").mkdir()
    write_pool(tmp_path / "empty", basic(), {})
    assert load_pool(tmp_path / "empty").n_queries == 2
    with pytest.raises(PoolError, match="exists and is not an empty directory"):
        write_pool(tmp_path / "empty", basic(), {})
    assert load_pool(tmp_path / "empty").n_queries == 2  # untouched


@pytest.mark.parametrize("error", [PoolError("bad"), KeyboardInterrupt()])
def test_write_pool_leaves_nothing_when_interrupted_or_refused(tmp_path, error):
    # the check runs on the finished pool before the rename: whatever stops the write, `out` never appears
    from ttc.replay.pool import write_pool

    def check(d):
        assert (d / "samples.parquet").exists() and d.name.startswith(".p.tmp-")
        raise error

    with pytest.raises(type(error)):
        write_pool(tmp_path / "p", basic(), {}, check=check)
    assert list(tmp_path.iterdir()) == []


def test_write_pool_check_refuses_an_invalid_pool(tmp_path):
    from ttc.replay.pool import write_pool

    with pytest.raises(PoolError, match=r"column 'score_x' has values outside \[0, 1\]"):
        write_pool(tmp_path / "p", basic(score_x=[0.5, 2.0, 0.1, 0.1]), {}, check=load_pool)
    assert list(tmp_path.iterdir()) == []


def test_atomic_file_writes_and_stale_temps(tmp_path):
    from ttc.replay.pool import atomic_write_json, atomic_write_parquet, remove_stale_temps, tmp_name

    atomic_write_json({"a": 1}, tmp_path / "pool.json")
    atomic_write_parquet(basic(), tmp_path / "samples.parquet")
    assert json.loads((tmp_path / "pool.json").read_text()) == {"a": 1}
    assert load_pool(tmp_path).n_queries == 2
    assert _leftovers(tmp_path) == []
    tmp_name(tmp_path / "x.parquet").write_bytes(b"torn")  # what a killed writer leaves
    tmp_name(tmp_path / "pool").mkdir()
    assert remove_stale_temps(tmp_path) == 2 and _leftovers(tmp_path) == []


def test_one_writer():
    # no module but replay/pool.py (pools) and replay/outputs.py (every other output) renames files into place:
    # everything is written through their writers
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    others = [f for d in ("replay", "harvest") for f in sorted((root / d).rglob("*.py"))
              if f not in (root / "replay" / "pool.py", root / "replay" / "outputs.py")]
    offenders = [str(f.relative_to(root)) for f in others if re.search(r"os\.(replace|rename)\(", f.read_text())]
    assert offenders == []
    import ttc.harvest.importers
    import ttc.harvest.pipeline
    import ttc.harvest.scoring
    import ttc.replay.pool
    import ttc.replay.synth

    for mod in (ttc.harvest.pipeline, ttc.harvest.scoring):
        assert mod.atomic_write_parquet is ttc.replay.pool.atomic_write_parquet
        assert mod.atomic_write_json is ttc.replay.pool.atomic_write_json
    assert ttc.harvest.importers.write_pool is ttc.replay.pool.write_pool
    assert ttc.harvest.importers.samples_frame is ttc.replay.pool.samples_frame is ttc.replay.synth.samples_frame
    assert ttc.harvest.scoring.COLUMN_TYPES["score_judge"] == ttc.replay.pool.SCORE.dtype


# ------------------------------------------------------------------------ deepconf-online's record lows (LOWS)


def _lows(pos, val, tok=(5, 3, 4, 2)):
    return basic(n_tokens=list(tok), conf_lows_pos=pl.Series(pos, dtype=pl.List(pl.Int64)),
                 conf_lows=pl.Series(val, dtype=pl.List(pl.Float64)))


def test_record_lows_load_only_when_asked_and_in_pool_order(tmp_path):
    # rows written out of order: the lows follow their responses into (query_id, sample_idx) order
    df = _lows([[0, 3], [2], [], [1]], [[9.0, 4.5], [7.0], [], [3.0]]).reverse()
    d = write_pool(tmp_path, df)
    plain = load_pool(d)
    assert plain.lows is None and plain.has_lows                       # not read unless a policy needs them
    loff, lpos, lval = load_pool(d, lows=True).lows
    assert loff.tolist() == [0, 2, 3, 3, 4] and lpos.tolist() == [0, 3, 2, 1] and lval.tolist() == [9.0, 4.5, 7.0, 3.0]
    assert load_pool(d, lows=None).lows is not None                    # None: read when present


@pytest.mark.parametrize("pos,val,tok,match", [
    ([[0, 3], [2], [], [1]], [[9.0], [7.0], [], [3.0]], (5, 3, 4, 2), r"row 0: 'conf_lows_pos' has 2 entries and "
                                                                       r"'conf_lows' 1"),
    ([[0, 3], [2], [], [2]], [[9.0, 4.5], [7.0], [], [3.0]], (5, 3, 4, 2), r"row 3: 'conf_lows_pos' holds a position "
                                                                           r">= the response's n_tokens"),
    ([[3, 3], [2], [], [1]], [[9.0, 4.5], [7.0], [], [3.0]], (5, 3, 4, 2), r"row 0: 'conf_lows_pos' is not increasing"),
    ([[0, 3], [2], [], [1]], [[4.5, 4.5], [7.0], [], [3.0]], (5, 3, 4, 2), r"row 0: 'conf_lows' is not strictly "
                                                                           r"decreasing"),
    ([[0, 3], [-1], [], [1]], [[9.0, 4.5], [7.0], [], [3.0]], (5, 3, 4, 2), r"row 1: 'conf_lows_pos' holds a negative"),
    ([[0, 3], [2], [], [1]], [[9.0, float("nan")], [7.0], [], [3.0]], (5, 3, 4, 2), r"row 0: 'conf_lows' holds NaN"),
])
def test_record_lows_are_validated(tmp_path, pos, val, tok, match):
    d = write_pool(tmp_path, _lows(pos, val, tok))
    load_pool(d)                                                       # not read: not checked
    with pytest.raises(PoolError, match=match):
        load_pool(d, lows=True)


def test_record_lows_missing_or_half_there(tmp_path):
    with pytest.raises(PoolError, match=r"deepconf-online needs each response's record lows .*'conf_lows_pos' and "
                                        r"'conf_lows'.*--confidence group-lows\), and this pool has none"):
        load_pool(write_pool(tmp_path, basic(n_tokens=[1, 2, 3, 4])), lows=True)
    half = basic(n_tokens=[1, 2, 3, 4], conf_lows_pos=pl.Series([[0]] * 4, dtype=pl.List(pl.Int64)))
    with pytest.raises(PoolError, match="column 'conf_lows_pos' without 'conf_lows'"):
        load_pool(write_pool(tmp_path, half, name="half"))
    wrong = basic(n_tokens=[1, 2, 3, 4], conf_lows_pos=pl.Series([[0.5]] * 4), conf_lows=pl.Series([[1.0]] * 4))
    with pytest.raises(PoolError, match="column 'conf_lows_pos' must be a list of integers"):
        load_pool(write_pool(tmp_path, wrong, name="wrong"))
    untimed = basic(conf_lows_pos=pl.Series([[0]] * 4, dtype=pl.List(pl.Int64)), conf_lows=pl.Series([[1.0]] * 4))
    with pytest.raises(PoolError, match="the record lows need an 'n_tokens' column"):
        load_pool(write_pool(tmp_path, untimed, name="untimed"), lows=True)
