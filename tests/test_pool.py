"""load_pool: layout, ordering, answer ids, score choice, and every validation error with its message."""
import json
import re

import numpy as np
import polars as pl
import pytest

from replay.pool import PoolError, load_pool


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
    from replay.pool import DEFAULT_POOL
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


def test_bad_score_in_unused_column_is_not_checked(tmp_path):
    # only the chosen score column is read and validated
    p = load_pool(write_pool(tmp_path, basic(score_rm=[2.0, 0.0, 0.0, 0.0])), score="gt")
    assert p.score_name == "gt"


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
        load_pool(d).name


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


def test_pool_error_is_value_error():
    # the command line turns ValueError into a message; PoolError must be one
    assert issubclass(PoolError, ValueError)
