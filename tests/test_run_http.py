"""`ttc run --backend openai` through real HTTP against a loopback server that answers from a pool
(tests/fixtures/harvest/pool_openai_server.py: the k-th response of a query for the seed is the pool's k-th in `ttc
replay`'s permutation), with injected faults (HTTP 500s, dropped connections, a request that times out): the run
equals `ttc replay POOL --seed-start SEED --seeds 1` query by query and in total, and the faults change nothing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("openai")

from typer.testing import CliRunner  # noqa: E402

from ttc.cli import app  # noqa: E402

HERE = Path(__file__).resolve().parent
SERVER = HERE / "fixtures" / "harvest" / "pool_openai_server.py"
sys.path.insert(0, str(HERE))
from support.synth_run import HTTP_SEED, SynthPool, run_args  # noqa: E402

KEY = "test-key-run"
runner = CliRunner()


def write_pool(sp: SynthPool, out: Path) -> Path:
    from ttc.replay.pool import samples_frame
    from ttc.replay.pool import write_pool as write

    rows = {"query_id": [], "sample_idx": [], "answer": [], "correct": [], "n_tokens": []}
    for i, q in enumerate(sp.ids):
        for k in range(sp.size):
            a = sp.answers[i][k]
            rows["query_id"].append(q)
            rows["sample_idx"].append(k)
            rows["answer"].append(a)
            rows["correct"].append(a == sp.gold[i])
            rows["n_tokens"].append(sp.tokens[i][k])
    queries = pl.DataFrame({"query_id": sp.ids, "problem": [f"problem {q}" for q in sp.ids], "gold": sp.gold})
    return write(out, samples_frame(rows), {"name": "synth-for-http"}, queries=queries)


class Server:
    def __init__(self, pool: Path, *faults: str):
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--pool", str(pool), "--seed", str(HTTP_SEED),
                                      "--key", KEY, *faults], stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict:
        import urllib.request

        return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats").read())

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("http")
    sp = SynthPool(d, n=10, size=8, seed=3)
    return sp, write_pool(sp, d / "pool")


def ok(r):
    assert r.exit_code == 0, (r.exit_code, r.output)
    return r


@pytest.mark.parametrize("policy, unit, budget, extra", [
    ("elimination", "samples", "3", []),
    ("elimination", "samples", "3", ["--no-free-slots"]),
    ("ucb", "tokens", "40", ["--lambda", "0.5"]),
    ("two-stage", "samples", "4", ["--rho", "0.25"]),
    ("streaming", "samples", "3", ["--max-samples", "5"]),
])
def test_run_over_http_equals_replay_despite_faults(setup, tmp_path, policy, unit, budget, extra):
    sp, pool = setup
    server = Server(pool, "--fail-every", "7", "--drop-every", "11", "--stall-every", "29", "--stall", "2.5")
    try:
        r = ok(runner.invoke(app, run_args(sp, server.url, tmp_path / "run", "--policy", policy, "--unit", unit,
                                           "--budget", budget, "--request-timeout", "1", "--max-retries", "8",
                                           "--concurrency", "4", *extra), env={"TTC_RUN_TEST_KEY": KEY}))
        stats = server.stats()
    finally:
        server.close()
    assert stats["failed"] > 0 and stats["dropped"] > 0, stats  # the faults happened and were retried
    ok(runner.invoke(app, ["replay", str(pool), "--policy", policy, "--unit", unit, "--budgets", budget, "--seeds",
                           "1", "--seed-start", str(HTTP_SEED), "--per-query", str(tmp_path / "pq.parquet"), "--out",
                           str(tmp_path / "r.parquet"), *(e for e in extra if e != "--no-free-slots")]))
    got = pl.read_parquet(tmp_path / "run" / "results.parquet").sort("query_id")
    want = pl.read_parquet(tmp_path / "pq.parquet").sort("query_id")
    assert got["query_id"].to_list() == want["query_id"].to_list()
    assert got["responses"].to_list() == want["n_drawn"].to_list()
    for a, b in (("answered", "answered"), ("exhausted", "exhausted"), ("capped", "capped"),
                 ("covered", "covered"), ("correct", "selected_correct")):
        assert got[a].to_list() == want[b].to_list(), a
    total = pl.read_parquet(tmp_path / "r.parquet").row(0, named=True)
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["spent"]["samples"] == total["samples_used"]
    assert summary["spent"]["tokens"] == total["tokens_used"]
    assert summary["outcome"]["accuracy"] == pytest.approx(total["accuracy"])
    assert "exhausted" in r.output and "backend calls" in r.output


def test_a_query_the_server_always_refuses_is_recorded_and_the_others_go_on(setup, tmp_path):
    """A 400 for one query (the client does not retry it): that query's result line carries the error, the run
    goes on, and every other query is answered as without the fault."""
    sp, pool = setup
    clean = Server(pool)
    try:
        ok(runner.invoke(app, run_args(sp, clean.url, tmp_path / "clean", "--policy", "uniform", "--budget", "3"),
                         env={"TTC_RUN_TEST_KEY": KEY}))
    finally:
        clean.close()
    # one query's prompt is one the server does not hold: HTTP 400 for it, every time
    data = tmp_path / "q.jsonl"
    rows = [json.loads(x) for x in sp.path.read_text().splitlines()]
    rows[2]["problem"] = "a prompt the server does not know"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server = Server(pool)
    try:
        args = run_args(sp, server.url, tmp_path / "bad", "--policy", "uniform", "--budget", "3", "--max-retries", "1")
        args[args.index("--dataset") + 1] = str(data)
        r = ok(runner.invoke(app, args, env={"TTC_RUN_TEST_KEY": KEY}))
    finally:
        server.close()
    bad = sp.ids[2]
    lines = {json.loads(x)["custom_id"]: json.loads(x) for x in (tmp_path / "bad" / "results.jsonl").read_text()
             .splitlines()}
    assert lines[bad]["error"]["code"] == "backend_error" and lines[bad]["response"] is None
    assert "1 failed" in r.output
    a = pl.read_parquet(tmp_path / "clean" / "results.parquet").filter(pl.col("query_id") != bad)
    b = pl.read_parquet(tmp_path / "bad" / "results.parquet").filter(pl.col("query_id") != bad)
    # uniform: the failed query's budget goes to the others in the last round; the shared queries drew at least
    # as much, the same responses first
    assert all(y >= x for x, y in zip(a["responses"], b["responses"]))
    assert b["responses"].sum() == 3 * sp.n


def test_missing_server_option_and_bad_key_are_one_line(setup, tmp_path):
    sp, pool = setup
    args = run_args(sp, "http://127.0.0.1:9/v1", tmp_path / "o", "--budget", "2")
    del args[args.index("--base-url"):args.index("--base-url") + 2]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "needs --base-url" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()
    # a refused key is the user's error (issue 28: it exited 1 after three attempts, "rerun to resume", with --out
    # created): one request (GET /models) before anything is written or generated, exit 2, one line
    server = Server(pool)
    try:
        r = runner.invoke(app, run_args(sp, server.url, tmp_path / "k", "--budget", "2"),
                          env={"TTC_RUN_TEST_KEY": "wrong"})
        stats = server.stats()
    finally:
        server.close()
    assert r.exit_code == 2 and "refused access (HTTP 401" in r.output and "TTC_RUN_TEST_KEY" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert stats["model_lists"] == 1 and stats["requests"] == 0 and not (tmp_path / "k").exists()
    # a server without /models: the first generation's 401 stops the run at once, no retry, exit 2
    server = Server(pool, "--no-models")
    try:
        r = runner.invoke(app, run_args(sp, server.url, tmp_path / "m", "--budget", "2", "--concurrency", "1"),
                          env={"TTC_RUN_TEST_KEY": "wrong"})
        stats = server.stats()
    finally:
        server.close()
    assert r.exit_code == 2 and "refused access (HTTP 401" in r.output and "Traceback" not in r.output, r.output
    assert stats["requests"] == 1  # (before: three attempts of the first call)


def data_and_batch_runs(sp, pool, tmp_path, messages, **body):
    """The same queries run twice against the loopback server, as the data set (tmp_path/data) and as an OpenAI Batch
    file whose requests carry `messages(query id)` (tmp_path/batch); returns the batch run's arguments and the
    server's stats."""
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"custom_id": q, "method": "POST", "url": "/v1/chat/completions",
                                         "body": {**body, "messages": messages(q)}, "gold": g}) + "\n"
                             for q, g in zip(sp.ids, sp.gold)))
    server = Server(pool)
    try:
        ok(runner.invoke(app, run_args(sp, server.url, tmp_path / "data", "--policy", "ucb", "--budget", "3"),
                         env={"TTC_RUN_TEST_KEY": KEY}))
        args = run_args(sp, server.url, tmp_path / "batch", "--policy", "ucb", "--budget", "3")
        i = args.index("--dataset")
        args[i:i + 2] = ["--batch", str(batch)]
        del args[args.index("--template"):args.index("--template") + 2]
        ok(runner.invoke(app, args, env={"TTC_RUN_TEST_KEY": KEY}))
        return args, server.stats()
    finally:
        server.close()


def test_a_batch_file_goes_to_the_chat_endpoint_and_runs_as_its_data_set(setup, tmp_path):
    """An OpenAI Batch file of the same queries (custom_id = id, one user message = the problem, a gold answer),
    sent to the server as chat requests (the default for a batch file on the openai backend), allocates as the
    data set does: the same responses, query by query."""
    sp, pool = setup
    data_and_batch_runs(sp, pool, tmp_path, lambda q: [{"role": "user", "content": f"problem {q}"}],
                        model="pool-model", max_tokens=64)
    a = pl.read_parquet(tmp_path / "data" / "results.parquet")
    b = pl.read_parquet(tmp_path / "batch" / "results.parquet")
    assert a.select("query_id", "responses", "text", "correct").equals(b.select("query_id", "responses", "text",
                                                                                 "correct"))
    meta = json.loads((tmp_path / "batch" / "pool" / "pool.json").read_text())
    assert meta["backend"]["chat"] is True and meta["generation"]["template"]["name"] == "batch-messages"


def test_prompt_tokens_are_the_servers_count(setup, tmp_path):
    """usage.prompt_tokens of every response (the loopback server counts a prompt's words) is the run's prompt-token
    cost: per query, its prompt's count times the responses it got; in all, over every response generated; and a
    rerun of the finished run, which sends nothing, writes the same counts."""
    sp, pool = setup
    server = Server(pool)
    try:
        args = run_args(sp, server.url, tmp_path / "run", "--policy", "elimination", "--budget", "3",
                        "--lookahead", "2")
        r = ok(runner.invoke(app, args, env={"TTC_RUN_TEST_KEY": KEY}))
        served = server.stats()["served"]
        again = ok(runner.invoke(app, args, env={"TTC_RUN_TEST_KEY": KEY}))
        assert server.stats()["served"] == served  # the rerun sent nothing
    finally:
        server.close()
    words = {q: len(f"problem {q}".split()) for q in sp.ids}
    res = pl.read_parquet(tmp_path / "run" / "results.parquet")
    assert res["prompt_tokens"].to_list() == [words[q] * n for q, n in zip(res["query_id"], res["responses"])]
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["cost"]["prompt_tokens"] == sum(words[q] * n for q, n in zip(res["query_id"], res["generated"]))
    assert summary["cost"]["prompt_tokens"] == 2 * served  # every request carried one prompt of 2 words
    assert "prompt tokens not counted" not in r.output and f"{summary['cost']['prompt_tokens']:,} prompt tokens" \
        in r.output
    line = json.loads((tmp_path / "run" / "results.jsonl").read_text().splitlines()[0])
    assert line["response"]["body"]["usage"]["prompt_tokens"] == res["prompt_tokens"][0]
    assert pl.read_parquet(tmp_path / "run" / "results.parquet").equals(res) and "generated nothing" in again.output


def test_a_batch_system_message_reaches_the_server(setup, tmp_path):
    """A batch request with a system message goes to the chat endpoint with it (the server sees the roles system,
    user, and counts the system message's words in usage.prompt_tokens); it allocates as the data set does, since the
    server answers by the user message."""
    sp, pool = setup
    system = "You are a careful solver."
    args, stats = data_and_batch_runs(sp, pool, tmp_path, lambda q: [{"role": "system", "content": system},
                                                                    {"role": "user", "content": f"problem {q}"}])
    b = pl.read_parquet(tmp_path / "batch" / "results.parquet")
    assert stats["roles"] == {"system,user": b["generated"].sum()}
    a = pl.read_parquet(tmp_path / "data" / "results.parquet")
    assert a.select("query_id", "responses", "text", "correct").equals(b.select("query_id", "responses", "text",
                                                                                 "correct"))
    per_prompt = (2 + len(system.split())) + (2 + 2)  # two messages, each with its role markers
    assert b["prompt_tokens"].to_list() == [per_prompt * n for n in b["responses"]]
    prompts = pl.read_parquet(tmp_path / "batch" / "pool" / "queries.parquet")["prompt"].to_list()
    assert json.loads(prompts[0])[0] == {"role": "system", "content": system}
    # --no-chat sends prompts to the completions endpoint, which takes no system message: refused up front
    args[args.index("--out") + 1] = str(tmp_path / "nochat")
    r = runner.invoke(app, [*args, "--no-chat"], env={"TTC_RUN_TEST_KEY": KEY})
    assert r.exit_code == 2 and "holds 2 messages" in r.output and not (tmp_path / "nochat").exists()


def _freed(log: list) -> list:
    """Requests (query, sample) that started before some other query's request for an earlier sample had ended: a
    slot freed before its round was over."""
    return [(i, k) for i, k, start, _ in log
            if any(j != i and kk < k and end > start for j, kk, _, end in log)]


@pytest.mark.parametrize("free", [True, False])
def test_a_request_that_finishes_early_frees_its_slot(setup, tmp_path, free):
    """Elimination at 4 responses per query (blocks of rounds the budget pays in full) against a server whose
    answers take 2 ms per token (1-29 tokens each): with free slots a query whose response came back asks for its
    next one while other queries' responses of an earlier round are still being generated; one call per round
    (--no-free-slots) never does. Both equal the replay."""
    sp, pool = setup
    server = Server(pool, "--delay-per-token", "0.002")
    try:
        ok(runner.invoke(app, run_args(sp, server.url, tmp_path / "run", "--policy", "elimination", "--budget", "4",
                                       "--concurrency", "4", *([] if free else ["--no-free-slots"])),
                         env={"TTC_RUN_TEST_KEY": KEY}))
        log = server.stats()["log"]
    finally:
        server.close()
    freed = _freed(log)
    assert bool(freed) == free, freed[:5]
    ok(runner.invoke(app, ["replay", str(pool), "--policy", "elimination", "--budgets", "4", "--seeds", "1",
                           "--seed-start", str(HTTP_SEED), "--per-query", str(tmp_path / "pq.parquet"), "--out",
                           str(tmp_path / "r.parquet")]))
    got = pl.read_parquet(tmp_path / "run" / "results.parquet").sort("query_id")
    want = pl.read_parquet(tmp_path / "pq.parquet").sort("query_id")
    assert got["responses"].to_list() == want["n_drawn"].to_list()
    assert got["correct"].to_list() == want["selected_correct"].to_list()
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["this_process"]["slots"] == (4 if free else 0)


def test_a_server_that_never_answers_is_not_met_with_silence(setup, tmp_path):
    """Issue 27: against a server that accepts and never answers, `ttc run` printed nothing for 150 s (and with the
    default timeouts could stay silent for hours). It says at once what it starts (its first line), and each request
    in flight past its time limit is reported as it happens (harvest/backends.py OpenAIBackend._watch; the timing is
    tests/test_openai_backend.py's)."""
    import socket

    sp, _ = setup
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    try:
        r = runner.invoke(app, run_args(sp, url, tmp_path / "run", "--policy", "uniform", "--budget", "1",
                                        "--request-timeout", "1", "--max-retries", "0", "--retries", "0"),
                          env={"TTC_RUN_TEST_KEY": KEY})
    finally:
        silent.close()
    lines = r.output.splitlines()
    assert lines and lines[0].startswith(f"{tmp_path / 'run'}: {sp.n} queries, uniform"), r.output  # at once
    assert any(x.startswith(f"warning: {url}/completions: ") and "had no answer for 1 s" in x for x in lines), r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("module, oracle, words", [("openai", "gt", "--backend openai needs openai"),
                                                   ("math_verify", "gt", "--oracle gt needs math-verify")])
def test_a_missing_extra_is_refused_before_anything_is_written(setup, tmp_path, monkeypatch, module, oracle, words):
    """Issue 28: without the openai extra, --out was created first (a rerun with any changed option was then refused);
    with openai but not grade, --oracle gt sent 8 requests before asking for math-verify."""
    sp, pool = setup
    monkeypatch.setitem(sys.modules, module, None)  # the import system's "not installed"
    r = runner.invoke(app, run_args(sp, "http://127.0.0.1:9/v1", tmp_path / "o", "--budget", "2", "--oracle", oracle),
                      env={"TTC_RUN_TEST_KEY": KEY})
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert words in r.output and "pip install 'ttc[" in r.output and not (tmp_path / "o").exists()
