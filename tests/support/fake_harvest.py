"""`ttc harvest`'s pipeline with a fake backend whose responses depend only on (prompt, seed, i), as the Backend
protocol demands: small pools, shards and damaged parts for the harvest, merge, score and output-safety tests."""
import hashlib

import polars as pl

from ttc.harvest.pipeline import HarvestSpec, ShardSpec, part_files, plan_harvest, run_harvest
from ttc.harvest.types import Query, Response, Sampling

N = 4


class FakeBackend:
    """Responses that depend only on (prompt, seed, i), as the Backend protocol demands: a boxed number, some
    responses cut off (finish_reason "length"). `fail_on_call` raises on that generate call (1-based)."""

    def __init__(self, fail_on_call=None):
        self.calls = 0
        self.fail_on_call = fail_on_call
        self.batches = []
        self.tokenizer = None

    def generate(self, prompts, sampling, seeds):
        self.calls += 1
        if self.fail_on_call == self.calls:
            raise RuntimeError("simulated crash in generation")
        self.batches.append(list(seeds))
        out = []
        for p, s in zip(prompts, seeds):
            rs = []
            for i in range(sampling.n):
                h = int(hashlib.sha256(f"{p}|{s + i}|{sampling.temperature}".encode()).hexdigest(), 16)
                val = h % 3
                length = h % 7 == 0
                text = f"Step 1: think.\nStep 2: so \\boxed{{{val}}}" if not length else "Step 1: thinking and"
                rs.append(Response(text=text, n_tokens=5 + h % 11, finish_reason="length" if length else "stop"))
            out.append(rs)
        return out

    def info(self):
        return {"backend": "fake", "model": "fake-model"}


def make_queries(k=10):
    return [Query(query_id=f"q{i:03d}", task="math", problem=f"What is {i} mod 3?", gold=str(i % 3),
                  fields={"level": 1 + i % 5, "subject": "Arithmetic"}) for i in range(k)]


def spec(**sampling):
    return HarvestSpec(model="fake-model", backend="fake",
                       sampling=Sampling(n=sampling.pop("n", N), max_tokens=16, **sampling),
                       template={"name": "plain", "text": "{problem}"}, dataset={"source": "fixture", "task": "math",
                                                                                  "limit": None})


def prompt(q):
    return f"Problem: {q.problem}\nSolution:"


def harvest(out, queries=None, shard=None, backend=None, shard_size=3, **sampling):
    plan = plan_harvest(out, queries or make_queries(), spec(**sampling), shard)
    return run_harvest(plan, backend or FakeBackend(), prompt, shard_size=shard_size, progress=False, argv=["test"])


def samples(pool):
    return pl.read_parquet(part_files(pool)).sort("query_id", "sample_idx")


def shards(tmp_path, count=3, **kw):
    dirs = []
    for i in range(count):
        d = tmp_path / f"shard-{i}"
        harvest(d, shard=ShardSpec(i, count), **kw)
        dirs.append(d)
    return dirs


def _flip_until_silent(part, tmp_path):
    """Flip single bits of a part until one decodes without error to different values (what a flipped bit on disk
    usually does: 129 of 203 tried did): that is the damage only a checksum notices."""
    data = part.read_bytes()
    orig = pl.read_parquet(part)
    probe = tmp_path / "probe.parquet"
    for pos in range(len(data) // 4, len(data) - 64):
        b = bytearray(data)
        b[pos] ^= 0x04
        probe.write_bytes(bytes(b))
        try:
            df = pl.read_parquet(probe)
        except BaseException:  # noqa: B036  polars may panic on a damaged file
            continue
        if not df.equals(orig):
            part.write_bytes(bytes(b))
            return
    raise AssertionError("no silent bit flip found")
