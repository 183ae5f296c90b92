"""The harvest pipeline with a fake backend: shard splitting, per-query seeds, atomic part files, resuming after a
crash (same samples as an uninterrupted run), merge checks, and oracle columns (dispatch, replacement, resume)."""
import json

import polars as pl
import pytest

from ttc.harvest.pipeline import (
    SEED_SPACING,
    HarvestError,
    ShardSpec,
    atomic_write_parquet,
    merge_pools,
    part_files,
    plan_harvest,
    query_seed,
    read_meta,
    run_harvest,
    split_shard,
)
from ttc.harvest.types import Query, Response

from support.fake_harvest import (
    FakeBackend,
    N,
    _flip_until_silent,
    harvest,
    make_queries,
    prompt,
    samples,
    shards,
    spec,
)

# --- shards and seeds -----------------------------------------------------------------------------------------

def test_shard_parse_accepts_i_of_n_and_refuses_bad_syntax():
    assert ShardSpec.parse("2/4") == ShardSpec(2, 4)
    assert ShardSpec.parse(" 0/1 ") == ShardSpec(0, 1)
    for bad in ["4/4", "-1/3", "0/0", "1", "a/b", "1/2/3", "", "1.5/3"]:
        with pytest.raises(HarvestError, match="--shard"):
            ShardSpec.parse(bad)


def test_shards_partition_the_queries_independent_of_order_and_limit():
    qs = [Query(query_id=f"id-{i}", task="math", problem="p") for i in range(1000)]
    shards = [split_shard(qs, ShardSpec(i, 4)) for i in range(4)]
    ids = [q.query_id for s in shards for q in s]
    assert sorted(ids) == sorted(q.query_id for q in qs)           # every query in exactly one shard
    assert all(200 <= len(s) <= 300 for s in shards)              # roughly balanced
    first = {q.query_id for q in shards[1]}
    reordered = split_shard(list(reversed(qs[:300])), ShardSpec(1, 4))
    assert {q.query_id for q in reordered} == first & {q.query_id for q in qs[:300]}
    assert split_shard(qs, None) == qs


def test_query_seeds_are_spaced_so_child_seeds_never_collide():
    ids = [f"q{i}" for i in range(5000)]
    seeds = [query_seed(7, q) for q in ids]
    assert seeds == [query_seed(7, q) for q in ids]                # deterministic
    assert all(s % SEED_SPACING == 0 and 0 <= s < 2 ** 62 for s in seeds)
    assert len(set(seeds)) == len(seeds)                           # ranges [s, s + n) disjoint for n < spacing
    assert [query_seed(8, q) for q in ids[:50]] != seeds[:50]     # the run seed matters


def test_atomic_write_keeps_old_file_when_interrupted(tmp_path):
    f = tmp_path / "x.parquet"
    atomic_write_parquet(pl.DataFrame({"a": [1]}), f)

    def boom():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write_parquet(pl.DataFrame({"a": [2, 3]}), f, before_rename=boom)
    assert pl.read_parquet(f)["a"].to_list() == [1]
    assert [p.name for p in tmp_path.iterdir()] == ["x.parquet"]  # no temporary file left


# --- a harvest -----------------------------------------------------------------------------------------------

def test_harvest_writes_parts_queries_and_provenance(tmp_path):
    out = tmp_path / "pool"
    backend = FakeBackend()
    res = harvest(out, backend=backend)
    assert res.complete and res.written_now == 10 and res.responses == 10 * N
    assert [p.name for p in part_files(out)] == [f"part-{i:05d}.parquet" for i in range(4)]  # 3+3+3+1 queries
    df = samples(out)
    assert df.columns == ["query_id", "sample_idx", "text", "n_tokens", "finish_reason"]
    assert df.height == 10 * N and df["sample_idx"].to_list()[:N] == list(range(N))
    q = pl.read_parquet(out / "queries.parquet").sort("query_id")
    assert q["query_id"].to_list() == [f"q{i:03d}" for i in range(10)]
    assert q["prompt"][0] == "Problem: What is 0 mod 3?\nSolution:"
    assert q["level"].dtype == pl.Int64 and json.loads(q["fields"][1]) == {"level": 2, "subject": "Arithmetic"}
    meta = read_meta(out)
    assert meta["complete"] and meta["model"] == "fake-model" and meta["dataset"] == "fixture"
    gen = meta["generation"]
    assert gen["sampling"] == {"n": N, "temperature": 0.6, "top_p": 1.0, "max_tokens": 16, "seed": 0}
    assert gen["dataset"]["n_queries"] == 10 and len(gen["dataset"]["digest"]) == 32
    assert meta["backend"] == {"backend": "fake", "model": "fake-model"}
    assert "python" in meta["versions"] and "polars" in meta["versions"]
    assert meta["runs"][0]["queries_written"] == 10 and meta["shard"] is None
    # each query was generated with its own derived seed
    assert sorted(s for b in backend.batches for s in b) == sorted(query_seed(0, f"q{i:03d}") for i in range(10))


def test_samples_do_not_depend_on_batching(tmp_path):
    harvest(tmp_path / "a", shard_size=3)
    harvest(tmp_path / "b", shard_size=10)
    assert samples(tmp_path / "a").equals(samples(tmp_path / "b"))
    harvest(tmp_path / "c", seed=1)
    assert not samples(tmp_path / "a").equals(samples(tmp_path / "c"))


def test_crash_then_resume_equals_uninterrupted_run(tmp_path):
    full, crashed = tmp_path / "full", tmp_path / "crashed"
    harvest(full)
    with pytest.raises(RuntimeError, match="simulated crash"):
        harvest(crashed, backend=FakeBackend(fail_on_call=3))
    assert len(part_files(crashed)) == 2                            # the two finished parts survive
    listed = pl.read_parquet(crashed / "queries.parquet")["query_id"].to_list()
    assert sorted(listed) == sorted(samples(crashed)["query_id"].unique().to_list())  # and only those
    assert read_meta(crashed)["complete"] is False
    (crashed / "samples" / ".part-00002.parquet.tmp-999").write_bytes(b"torn")  # a killed writer's leftover
    backend = FakeBackend()
    res = harvest(crashed, backend=backend)
    assert res.written_before == 6 and res.written_now == 4 and res.complete
    assert sum(len(b) for b in backend.batches) == 4                # only the missing queries were generated
    assert samples(crashed).equals(samples(full))
    assert not list((crashed / "samples").glob(".*"))
    meta = read_meta(crashed)
    assert meta["complete"] and [r["queries_written"] for r in meta["runs"]] == [6, 4]
    assert pl.read_parquet(crashed / "queries.parquet").sort("query_id").equals(
        pl.read_parquet(full / "queries.parquet").sort("query_id"))
    # a rerun of a finished pool generates nothing
    again = FakeBackend()
    assert harvest(crashed, backend=again).written_now == 0 and again.calls == 0


def test_resume_with_other_options_is_refused(tmp_path):
    out = tmp_path / "pool"
    harvest(out, queries=make_queries(4))
    with pytest.raises(HarvestError, match="sampling.temperature: 0.6 vs 0.8"):
        plan_harvest(out, make_queries(4), spec(temperature=0.8))
    with pytest.raises(HarvestError, match="dataset.digest"):
        plan_harvest(out, make_queries(5), spec())
    with pytest.raises(HarvestError, match="own --out"):
        plan_harvest(out, make_queries(4), spec(), ShardSpec(0, 2))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(HarvestError, match="not empty"):
        plan_harvest(tmp_path / "other", make_queries(4), spec())


def test_bad_backend_output_and_bad_datasets_are_refused(tmp_path):
    class Short(FakeBackend):
        def generate(self, prompts, sampling, seeds):
            return [rs[:-1] for rs in super().generate(prompts, sampling, seeds)]

    with pytest.raises(HarvestError, match="returned 3 responses for query 'q000', expected 4"):
        harvest(tmp_path / "short", backend=Short())
    assert part_files(tmp_path / "short") == []
    dup = make_queries(3) + [make_queries(1)[0]]
    with pytest.raises(HarvestError, match="more than once"):
        plan_harvest(tmp_path / "dup", dup, spec())
    with pytest.raises(HarvestError, match="--responses"):
        plan_harvest(tmp_path / "n", make_queries(3), spec(n=SEED_SPACING))


# --- merging shards ------------------------------------------------------------------------------------------

def test_merged_shards_equal_an_unsharded_run(tmp_path):
    dirs = shards(tmp_path)
    assert read_meta(dirs[0])["shard"]["index"] == 0 and read_meta(dirs[0])["expected_query_ids"]
    harvest(tmp_path / "whole")
    rep = merge_pools(dirs, tmp_path / "merged")
    assert rep.queries == 10 and rep.responses == 10 * N and not rep.missing and not rep.missing_shards
    assert samples(tmp_path / "merged").equals(samples(tmp_path / "whole"))
    meta = read_meta(tmp_path / "merged")
    assert meta["complete"] and len(meta["merged_from"]) == 3 and "expected_query_ids" not in meta
    assert meta["generation"] == read_meta(tmp_path / "whole")["generation"]
    q = pl.read_parquet(tmp_path / "merged" / "queries.parquet")
    assert q.height == 10 and q["query_id"].is_unique().all()


def test_merge_refuses_mismatched_provenance_and_duplicates(tmp_path):
    a = shards(tmp_path / "a", count=2)
    b = shards(tmp_path / "b", count=2, seed=5)
    with pytest.raises(HarvestError, match="another configuration.*sampling.seed"):
        merge_pools([a[0], b[1]], tmp_path / "m1")
    twin = tmp_path / "twin"
    harvest(twin, shard=ShardSpec(0, 2))
    with pytest.raises(HarvestError, match="both shard 0/2"):
        merge_pools([a[0], twin], tmp_path / "m2")
    # the same queries in two inputs (a part copied by hand into the other shard)
    src = part_files(a[0])[0]
    (a[1] / "samples" / "part-00099.parquet").write_bytes(src.read_bytes())
    with pytest.raises(HarvestError, match="duplicate queries"):
        merge_pools(a, tmp_path / "m3")
    assert not (tmp_path / "m1").exists() and not (tmp_path / "m3").exists()
    c = shards(tmp_path / "c", count=2)
    with pytest.raises(HarvestError, match="not an empty directory"):
        merge_pools(c, a[0])


def test_merge_reports_missing_shards_and_unfinished_queries(tmp_path):
    dirs = shards(tmp_path, count=3)
    with pytest.raises(HarvestError, match=r"shard 1/3 not given.*--allow-missing"):
        merge_pools([dirs[0], dirs[2]], tmp_path / "m")
    rep = merge_pools([dirs[0], dirs[2]], tmp_path / "m", allow_missing=True)
    assert rep.missing_shards == [1] and read_meta(tmp_path / "m")["complete"] is False
    # an interrupted shard: its unwritten queries are named
    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError):
        harvest(crashed, shard=ShardSpec(1, 3), backend=FakeBackend(fail_on_call=2), shard_size=1)
    expected = read_meta(crashed)["expected_query_ids"]
    with pytest.raises(HarvestError, match=f"{len(expected) - 1} queries of the given shards not generated.*"
                                           f"{expected[1]}"):
        merge_pools([dirs[0], crashed, dirs[2]], tmp_path / "m2")


# --- oracle columns ------------------------------------------------------------------------------------------

class FakePRM:
    """Step scores from the text alone: 0.9 per step, 0.2 for a step mentioning 'thinking'."""

    def __init__(self, fail_on_call=None):
        self.calls = 0
        self.fail_on_call = fail_on_call
        self.stats = {}

    def score(self, problems, responses):
        from ttc.harvest.prm import split_steps

        self.calls += 1
        if self.fail_on_call == self.calls:
            raise RuntimeError("PRM crashed")
        return [[0.2 if "thinking" in s else 0.9 for s in split_steps(r)] for r in responses]

    def info(self):
        return {"model": "fake-prm", "device": "cpu"}


def test_gt_and_prm_columns_replace_and_resume(tmp_path):
    from ttc.harvest.scoring import ScoreOptions, score_pool
    from ttc.replay.pool import load_pool

    out = tmp_path / "pool"
    harvest(out)
    res = score_pool(out, ["gt"], ScoreOptions(workers=1, progress=False))
    assert res[0].status == "scored" and not res[0].replaced
    df = samples(out)
    # answers: the boxed value, null when truncated; correct matches the gold (i mod 3)
    gold = {f"q{i:03d}": str(i % 3) for i in range(10)}
    for row in df.iter_rows(named=True):
        if row["finish_reason"] == "length":
            assert row["answer"] is None and row["correct"] is False
        else:
            assert row["answer"] == row["text"][-2] and row["correct"] == (row["answer"] == gold[row["query_id"]])
    assert load_pool(out).n_queries == 10
    meta = read_meta(out)
    assert meta["oracles"]["gt"]["task"] == "math" and "scoring_in_progress" not in meta

    # PRM crashes on the second part: the first keeps its new columns, a rerun finishes the rest only
    crashing = FakePRM(fail_on_call=2)
    opts = ScoreOptions(progress=False, prm_model="fake-prm", prm_factory=lambda o: crashing)
    with pytest.raises(RuntimeError, match="PRM crashed"):
        score_pool(out, ["prm"], opts)
    assert read_meta(out)["scoring_in_progress"]["prm"]["done"] == ["samples/part-00000.parquet"]
    second = FakePRM()
    res = score_pool(out, ["prm"], ScoreOptions(progress=False, prm_model="fake-prm", prm_factory=lambda o: second))
    assert res[0].status == "resumed" and second.calls == 3
    df = samples(out)
    expect_min = [0.2 if r == "length" else 0.9 for r in df["finish_reason"]]
    assert df["score_prm_min"].to_list() == pytest.approx(expect_min)
    assert df["prm_steps"].to_list()[0] in ([0.9, 0.9], [0.2])
    assert df["score_prm_prod"].to_list() == pytest.approx(
        [0.2 if r == "length" else 0.81 for r in df["finish_reason"]])
    assert load_pool(out, score="prm_min").score.min() >= 0.2
    # every part shares one schema (column order included)
    schemas = {tuple(pl.read_parquet_schema(p).items()) for p in part_files(out)}
    assert len(schemas) == 1

    # scoring again with another configuration replaces the columns and the record
    again = FakePRM()
    res = score_pool(out, ["prm"], ScoreOptions(progress=False, prm_model="fake-prm", prm_step_mode="blank",
                                                prm_factory=lambda o: again))
    assert res[0].status == "scored" and res[0].replaced and again.calls == 4
    assert read_meta(out)["oracles"]["prm"]["step_mode"] == "blank"
    assert samples(out).columns.count("score_prm_min") == 1
    # harvest --oracle on a finished pool keeps what is already scored with the same settings
    res = score_pool(out, ["gt"], ScoreOptions(workers=1, progress=False), skip_scored=True)
    assert res[0].status == "skipped"


def test_scoring_errors_are_clear(tmp_path):
    from ttc.harvest.scoring import ScoreOptions, score_pool

    out = tmp_path / "pool"
    harvest(out, queries=make_queries(3))
    with pytest.raises(HarvestError, match="unknown oracle 'bleu'"):
        score_pool(out, ["bleu"])
    with pytest.raises(HarvestError, match="oracle 'exec' grades task lcb-exec.*'math'.*--oracle gt"):
        score_pool(out, ["exec"])
    with pytest.raises(HarvestError, match="--judge-model"):
        score_pool(out, ["judge"])
    nogold = tmp_path / "nogold"
    harvest(nogold, queries=[Query(query_id="a", task="math", problem="p")])
    with pytest.raises(HarvestError, match="needs gold answers, and 1 queries have none"):
        score_pool(nogold, ["gt"], ScoreOptions(progress=False))
    notext = tmp_path / "notext"
    notext.mkdir()
    pl.DataFrame({"query_id": ["a"], "sample_idx": [0], "correct": [True]}).write_parquet(notext / "samples.parquet")
    with pytest.raises(HarvestError, match="no 'text' column"):
        score_pool(notext, ["gt"])
    with pytest.raises(HarvestError, match="both write 'answer'"):
        score_pool(out, ["gt,exec"])


def test_judge_column_from_the_judges_verdicts(tmp_path):
    from ttc.harvest.scoring import ScoreOptions, score_pool

    class FakeJudge:
        """Says yes exactly when the judged response boxed a 1; records the sampling it was asked for."""
        tokenizer = None

        def __init__(self):
            self.sampling = None

        def generate(self, prompts, sampling, seeds, stop=None):
            self.sampling = sampling
            return [[Response("Verdict: yes" if "\\boxed{1}" in p else "Verdict: no", 3, "stop")] * sampling.n
                    for p in prompts]

        def info(self):
            return {"backend": "fake-judge"}

    out = tmp_path / "pool"
    harvest(out)
    judge = FakeJudge()
    res = score_pool(out, ["judge"], ScoreOptions(progress=False, judge_model="fake", judge_samples=2,
                                                  judge_factory=lambda o: judge))
    assert res[0].summary["unparseable_verdicts"] == 0 and judge.sampling.n == 2
    df = samples(out)
    assert df["score_judge"].to_list() == [1.0 if "\\boxed{1}" in t else 0.0 for t in df["text"]]
    rec = read_meta(out)["oracles"]["judge"]
    assert rec["model"] == "fake" and rec["samples"] == 2 and rec["runtime"]["backend"] == {"backend": "fake-judge"}


def test_the_same_data_from_another_path_resumes_and_merges(tmp_path):
    out = tmp_path / "s0"
    harvest(out, shard=ShardSpec(0, 2))
    moved = spec()
    moved.dataset["source"] = "/elsewhere/copy.jsonl"
    plan = plan_harvest(out, make_queries(), moved, ShardSpec(0, 2))   # accepted: same ids and problems
    assert plan.pending == []
    plan = plan_harvest(tmp_path / "s1", make_queries(), moved, ShardSpec(1, 2))
    run_harvest(plan, FakeBackend(), prompt, progress=False)
    assert merge_pools([out, tmp_path / "s1"], tmp_path / "m").queries == 10


# --- damaged parts (issue 13) -----------------------------------------------------------------------------------

def test_merge_refuses_a_part_with_a_flipped_bit(tmp_path):
    dirs = shards(tmp_path, count=2)
    part = part_files(dirs[1])[0]
    _flip_until_silent(part, tmp_path)
    from ttc.replay.pool import PoolError

    with pytest.raises(PoolError, match=r"part-\d+\.parquet is damaged: its content does not match the checksum"):
        merge_pools(dirs, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_every_part_carries_the_digest_of_its_content(tmp_path):
    from ttc.replay.pool import DIGEST_KEY, frame_digest, verify_file

    harvest(tmp_path / "p")
    for part in part_files(tmp_path / "p"):
        assert pl.read_parquet_metadata(part)[DIGEST_KEY] == frame_digest(pl.read_parquet(part))
        verify_file(part)
