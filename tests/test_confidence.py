"""Confidence signals (harvest/confidence.py, registry SIGNALS): the arithmetic against a plain-Python transcription of
DeepConf's own definitions on hand-made log-prob arrays (exact equality: every value is a multiple of 1/8), the maps to
[0, 1], and the three backends: transformers end to end through `ttc harvest` on the tiny model (checked against a
teacher-forced forward pass), vLLM against the stand-in module, OpenAI-compatible servers against the loopback
server, both endpoints. Log-probs are requested only when a signal is asked for."""
from __future__ import annotations

import importlib.util
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from ttc.harvest.confidence import ConfidenceSpec, SignalError, confidence_map, exp_map, parse_signals, token_confidence
from ttc.harvest.registry import SIGNALS
from ttc.replay.errors import InputError

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures" / "harvest"
ALL = tuple(n for n, e in SIGNALS.items() if e.scores)  # the score signals
FULL = tuple(SIGNALS)  # and the record lows (group-lows: two list columns)


# ------------------------------------------------------- the reference: DeepConf's definitions, literally, in Python


def ref_token_conf(top, k):
    """deepconf processors.compute_conf: -sum(log of the top-k probabilities) / k."""
    return -sum(sorted(top, reverse=True)[:k]) / k


def ref_groups(confs, window):
    """deepconf utils.compute_least_grouped: sliding means; one group (the mean) when shorter than the window."""
    if len(confs) < window:
        return [sum(confs) / len(confs)]
    return [sum(confs[i:i + window]) / window for i in range(len(confs) - window + 1)]


def ref_lows(confs, window):
    """DeepConf's online filter (processors.py ConfPerReqLogitsProcessor), literally: at step t the deque of the last
    `window` confidences; from a full deque on, the mean of its values at each step. A response shorter than the window
    is one group at its last token (compute_least_grouped; the source's post-hoc min_conf check). The record lows: the
    steps where that mean is below every earlier one."""
    groups = ([(len(confs) - 1, sum(confs) / len(confs))] if len(confs) < window else
              [(t, sum(confs[t - window + 1:t + 1]) / window) for t in range(window - 1, len(confs))])
    pos, val = [], []
    for t, g in groups:
        if not val or g < val[-1]:
            pos.append(t)
            val.append(g)
    return pos, val


def ref_signals(sampled, tops, k, window, tail):
    confs = [ref_token_conf(t, k) for t in tops]
    groups = ref_groups(confs, window)
    m = max(1, int(len(groups) * 0.1))                   # utils.calculate_bottom_window_confidence
    raw = {"mean-logprob": sum(sampled) / len(sampled), "mean-conf": sum(confs) / len(confs),
           "lowest-group": min(groups), "bottom-10": sum(sorted(groups)[:m]) / m,
           "tail": sum(confs[-tail:]) / len(confs[-tail:])}        # utils.calculate_tail_confidence
    out = {}
    for name, x in raw.items():
        e = SIGNALS[name]
        out[e.raw] = x
        out[e.column] = math.exp(x) if name == "mean-logprob" else max(0.0, 1 - math.log(k) / x)
    out["conf_lows_pos"], out["conf_lows"] = ref_lows(confs, window)
    return out


def eighths(rng, n, lo=-80, hi=0):
    return [rng.randint(lo, hi) / 8 for _ in range(n)]


def compute(sampled, tops, k, window, tail, signals=ALL):
    spec = ConfidenceSpec(tuple(signals), window=window, top_k=k, tail=tail)
    confs = [token_confidence(t, k) for t in tops] if spec.top_logprobs else None
    return spec.compute(sampled, confs)


# ---------------------------------------------------------------------------------------------- the arithmetic


def test_hand_computed_values():
    # per-token top-3 log-probs whose confidences are 2, 4, 1, 3, 6 (and the alternatives beyond k are ignored)
    tops = [[-1, -2, -3, -9], [-4, -4, -4], [0, -1, -2], [-3, -2, -4], [-6, -6, -6, -50]]
    assert [token_confidence(t, 3) for t in tops] == [2, 4, 1, 3, 6]
    sampled = [-0.5, -1.0, -0.25, -0.25, -1.0]
    got = compute(sampled, tops, k=3, window=2, tail=3)
    # windows of 2: 3, 2.5, 2, 4.5 -> lowest 2; bottom 10% of 4 windows is max(1, 0) = 1 window -> 2; tail 10/3
    assert got["mean_logprob"] == -0.6 and got["score_mean_logprob"] == math.exp(-0.6)
    assert got["conf_mean"] == 16 / 5 and got["conf_lowest_group"] == 2.0 and got["conf_bottom10_group"] == 2.0
    assert got["conf_tail"] == 10 / 3
    assert got["score_lowest_group"] == 1 - math.log(3) / 2 and got["score_tail_conf"] == 1 - math.log(3) / (10 / 3)
    # a response shorter than the window is one group: the mean of all its tokens
    short = compute(sampled, tops, k=3, window=8, tail=100)
    assert short["conf_lowest_group"] == short["conf_bottom10_group"] == short["conf_tail"] == 16 / 5


@pytest.mark.parametrize("n,window,tail,k", [(1, 1, 1, 1), (7, 3, 2, 4), (40, 4, 9, 8), (230, 8, 50, 16),
                                             (12, 12, 12, 2), (11, 12, 3, 4)])
def test_exact_against_the_plain_python_reference(n, window, tail, k):
    """Multiples of 1/8 and k a power of two make every token confidence and every sum exact, so the prefix-sum
    windows and the literal definition agree to the bit (each divides an exact sum once; where several window means
    are averaged, bottom-10 of 37 and of 223 windows, the window is a power of two too)."""
    rng = random.Random(f"{n}-{window}-{tail}-{k}")
    sampled = eighths(rng, n, -40)
    tops = [sorted(eighths(rng, k + rng.randint(0, 2)), reverse=True) for _ in range(n)]
    assert compute(sampled, tops, k, window, tail, FULL) == ref_signals(sampled, tops, k, window, tail)


def test_close_to_the_reference_on_arbitrary_floats():
    rng = random.Random(5)
    for trial in range(20):
        n, k = rng.randint(1, 600), rng.randint(1, 20)
        sampled = [math.log(rng.random()) for _ in range(n)]
        tops = [[math.log(rng.random()) * 3 for _ in range(k)] for _ in range(n)]
        window, tail = rng.randint(1, 64), rng.randint(1, 700)
        got, want = compute(sampled, tops, k, window, tail), ref_signals(sampled, tops, k, window, tail)
        del want["conf_lows_pos"], want["conf_lows"]  # (positions are exact or not: the eighths tests check them)
        assert got.keys() == want.keys()
        for c in want:
            assert got[c] == pytest.approx(want[c], rel=1e-12, abs=1e-12), (trial, c)


def test_only_the_requested_signals_and_their_columns():
    got = compute([-1.0], [[-1.0]], 1, 1, 1, signals=("tail", "mean-logprob"))
    assert sorted(got) == ["conf_tail", "mean_logprob", "score_mean_logprob", "score_tail_conf"]
    spec = ConfidenceSpec(("tail", "mean-logprob"))
    assert spec.columns() == ["score_mean_logprob", "mean_logprob", "score_tail_conf", "conf_tail"]  # registry order
    assert ConfidenceSpec(("mean-logprob",)).top_logprobs == 0 and spec.top_logprobs == 20
    with pytest.raises(SignalError, match="needs top-20 log-probs"):
        spec.compute([-1.0], None)


def test_infinite_and_empty_and_nan():
    # a -inf among the top k: that token's confidence is +inf, every window holding it too, the others unchanged
    tops = [[-1.0, -1.0], [-1.0, -math.inf], [-2.0, -2.0], [-3.0, -3.0]]
    got = compute([-0.5] * 4, tops, k=2, window=2, tail=1)
    assert got["conf_lowest_group"] == 2.5 and got["conf_mean"] == math.inf and got["score_mean_conf"] == 1.0
    assert got["conf_tail"] == 3.0
    empty = ConfidenceSpec(FULL).compute([], [])
    assert all(empty[SIGNALS[s].raw] is None and empty[SIGNALS[s].column] == 0.0 for s in ALL)
    assert empty["conf_lows_pos"] == [] and empty["conf_lows"] == []
    # the record lows with an infinite group: +inf is a first low, every finite group below it a later one
    assert compute([-0.5] * 4, tops, k=2, window=2, tail=1, signals=("group-lows",)) == {
        "conf_lows_pos": [1, 3], "conf_lows": [math.inf, 2.5]}
    with pytest.raises(SignalError, match="NaN"):
        compute([math.nan], [[-1.0]], 1, 1, 1)
    with pytest.raises(SignalError, match="without its top log-probs"):
        token_confidence([], 3)


def test_maps_are_monotone_onto_the_unit_interval():
    k = 20
    assert confidence_map(math.log(k), k) == 0.0 and confidence_map(math.inf, k) == 1.0
    assert confidence_map(math.log(k) - 1e-9, k) == 0.0 and confidence_map(0.0, k) == 0.0   # rounding below ln k
    xs = [math.log(k) * (1 + i / 10) for i in range(200)]
    ys = [confidence_map(x, k) for x in xs]
    assert all(0 <= a < b <= 1 for a, b in zip(ys, ys[1:]))
    # C = ln k is reached when the top k share the mass evenly: the bound the map's 0 stands for
    assert token_confidence([math.log(1 / k)] * k, k) == pytest.approx(math.log(k))
    assert exp_map(0.0) == 1.0 and exp_map(-math.inf) == 0.0 and exp_map(-1.0) == math.exp(-1.0)


def test_parse_signals_refuses_what_does_nothing():
    assert parse_signals(None) is None and parse_signals([]) is None
    spec = parse_signals(["tail,mean-logprob", "tail"], tail=7, given=["tail"])
    assert spec.signals == ("tail", "mean-logprob") and spec.tail == 7
    with pytest.raises(InputError, match="--confidence-window applies only with --confidence"):
        parse_signals(None, given=["window"])
    with pytest.raises(InputError, match="--confidence-window applies to --confidence lowest-group or bottom-10"):
        parse_signals(["tail"], given=["window"])
    with pytest.raises(InputError, match="--confidence-top-k applies to"):
        parse_signals(["mean-logprob"], given=["top_k"])
    with pytest.raises(InputError, match="unknown confidence signal 'min'"):
        parse_signals(["min"])
    with pytest.raises(InputError, match="--confidence-window must be a positive integer, got 0"):
        parse_signals(["lowest-group"], window=0)


def test_record_states_parameters_and_maps():
    rec = ConfidenceSpec(("mean-logprob", "lowest-group"), window=16, top_k=5).record()
    assert rec["signals"] == ["mean-logprob", "lowest-group"] and rec["window"] == 16 and rec["top_k"] == 5
    assert "tail" not in rec                                        # a parameter no requested signal reads
    assert rec["columns"]["score_mean_logprob"]["map"].startswith("exp(x)")
    assert rec["columns"]["score_lowest_group"]["raw"] == "conf_lowest_group"
    assert "1 - ln(k) / x" in rec["columns"]["score_lowest_group"]["map"]
    json.dumps(rec)


# ------------------------------------------------------------------------------------- transformers, end to end

torch_needed = pytest.mark.skipif(importlib.util.find_spec("torch") is None or
                                  importlib.util.find_spec("transformers") is None, reason="needs torch, transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    sys.path.insert(0, str(HERE))
    from support.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


def _harvest(tiny, out, *extra):
    from typer.testing import CliRunner

    from ttc.cli import app

    sys.path.insert(0, str(HERE))
    from support.tiny_model import single_thread_torch

    data = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
    args = ["harvest", "--dataset", str(data), "--limit", "3", "--model", str(tiny), "--backend", "transformers",
            "--responses", "3", "--max-tokens", "14", "--template", "plain", "--temperature", "1.0", "--out", str(out),
            "--no-progress", *extra]
    with single_thread_torch():
        return CliRunner().invoke(app, args)


@torch_needed
def test_transformers_harvest_records_signals_that_a_forward_pass_reproduces(tiny, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ttc.harvest.backends import encode_prompt
    from ttc.harvest.pipeline import part_files, read_meta
    from ttc.replay.pool import load_pool

    pool = tmp_path / "p"
    r = _harvest(tiny, pool, "--confidence", "mean-logprob,mean-conf,lowest-group", "--confidence",
                 "bottom-10,tail,group-lows", "--confidence-window", "4", "--confidence-top-k", "5",
                 "--confidence-tail", "3")
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(part_files(pool)).sort("query_id", "sample_idx")
    for name in ALL:
        assert load_pool(pool, score=SIGNALS[name].column).n_queries == 3      # replay accepts every score column
    rec = read_meta(pool)["generation"]["confidence"]
    assert rec["signals"] == list(FULL) and (rec["window"], rec["top_k"], rec["tail"]) == (4, 5, 3)
    lows_pos = rec["columns"]["conf_lows_pos"]
    assert lows_pos["values"] == "conf_lows" and "score_" not in str(lows_pos)
    lows = load_pool(pool, score="tail_conf", lows=True).lows              # the pool contract takes them
    assert lows is not None and len(lows[0]) == df.height + 1

    # the same numbers from scratch: one teacher-forced pass over prompt + response, the reference on its log-probs
    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    prompts = dict(pl.read_parquet(pool / "queries.parquet").select("query_id", "prompt").iter_rows())
    checked = 0
    for row in df.iter_rows(named=True):
        ids = (tok(row["text"], add_special_tokens=False)["input_ids"]
               + [tok.eos_token_id] * (row["finish_reason"] == "stop"))
        assert len(ids) == row["n_tokens"]
        prompt = encode_prompt(tok, prompts[row["query_id"]])
        with torch.inference_mode():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
        lp = torch.log_softmax(logits, dim=-1)
        sampled = lp.gather(1, torch.tensor(ids).view(-1, 1)).view(-1).tolist()
        tops = lp.topk(5, dim=-1).values.tolist()
        want = ref_signals(sampled, tops, 5, 4, 3)
        for c, v in want.items():
            assert row[c] == pytest.approx(v, rel=1e-4, abs=1e-5), (row["query_id"], row["sample_idx"], c)
        checked += 1
    assert checked == 9 and df["score_lowest_group"].n_unique() > 1


@torch_needed
def test_without_confidence_nothing_is_requested_and_a_changed_request_is_refused(tiny, tmp_path):
    from ttc.harvest.pipeline import part_files, read_meta

    pool = tmp_path / "p"
    r = _harvest(tiny, pool, "--limit", "1")
    assert r.exit_code == 0, r.output
    cols = pl.read_parquet_schema(part_files(pool)[0]).names()
    assert not [c for c in cols if c.startswith("score_") or c.startswith("conf_")]
    assert "confidence" not in read_meta(pool)["generation"]
    r = _harvest(tiny, pool, "--confidence", "tail")      # the parts would lack the columns: refused, listed
    assert r.exit_code == 2 and "another configuration" in r.output and "confidence" in r.output
    r = _harvest(tiny, tmp_path / "q", "--confidence-window", "8")
    assert r.exit_code == 2 and "error: --confidence-window applies only with --confidence" in r.output
    r = _harvest(tiny, tmp_path / "q", "--confidence", "mean-logprob", "--confidence-top-k", "8")
    assert r.exit_code == 2 and "--confidence-top-k applies to --confidence mean-conf" in r.output
    r = _harvest(tiny, tmp_path / "q", "--confidence", "tail", "--confidence-top-k", "100")
    assert r.exit_code == 2 and "exceeds the vocabulary" in r.output and "Traceback" not in r.output
    r = _harvest(tiny, tmp_path / "q", "--confidence", "lowest", "--limit", "1")
    assert r.exit_code == 2 and "unknown confidence signal 'lowest'" in r.output


@torch_needed
def test_greedy_and_batched_rows_get_their_own_signals(tiny):
    from ttc.harvest.backends import TransformersBackend
    from ttc.harvest.types import Sampling

    sys.path.insert(0, str(HERE))
    from support.tiny_model import single_thread_torch

    spec = ConfidenceSpec(ALL, window=3, top_k=4, tail=2)
    with single_thread_torch():
        b = TransformersBackend(str(tiny), device="cpu", batch_size=2)
        rows = b.generate(["the sum of"], Sampling(n=3, temperature=1.0, max_tokens=10), [40], confidence=spec)[0]
        alone = TransformersBackend(str(tiny), device="cpu", batch_size=1).generate(
            ["the sum of"], Sampling(n=3, temperature=1.0, max_tokens=10), [40], confidence=spec)[0]
        plain = b.generate(["the sum of"], Sampling(n=3, temperature=1.0, max_tokens=10), [40])[0]
        greedy = b.generate(["the sum of"], Sampling(n=2, temperature=0.0, max_tokens=10), [40], confidence=spec)[0]
    assert [r.text for r in rows] == [r.text for r in plain]           # asking for log-probs changes no sample
    assert all(r.signals is None for r in plain)
    for a, b_ in zip(rows, alone):                                       # a row's signals do not depend on its batch
        assert a.text == b_.text and a.signals == pytest.approx(b_.signals, rel=1e-5)
    assert greedy[0].signals == greedy[1].signals and greedy[0].signals["score_mean_logprob"] > 0


# ------------------------------------------------------------------------------------- vLLM (stand-in module)





def _vllm_reference(out, k, spec):
    """The reference signals of a stand-in CompletionOutput: its own log-prob dicts, read the plain way."""
    sampled = [d[t].logprob for t, d in zip(out.token_ids, out.logprobs)]
    tops = [sorted((lp.logprob for lp in d.values()), reverse=True)[:k] for d in out.logprobs]
    want = ref_signals(sampled, tops, k, spec.window, spec.tail)
    return {c: want[c] for c in spec.columns()}


@torch_needed
def test_vllm_requests_logprobs_only_when_asked_and_reads_them(fake_vllm, tiny):
    import vllm

    from ttc.harvest.backends import VLLMBackend, _vllm_params, encode_prompt
    from ttc.harvest.types import Sampling

    s = Sampling(n=4, temperature=1.0, max_tokens=30)
    assert "logprobs" not in _vllm_params(s, 1, None)
    assert _vllm_params(s, 1, None, ConfidenceSpec(("mean-logprob",)))["logprobs"] == 0
    assert _vllm_params(s, 1, None, ConfidenceSpec(("tail",), top_k=7))["logprobs"] == 7
    b = VLLMBackend(str(tiny))
    for spec in (ConfidenceSpec(FULL, window=4, top_k=8, tail=4), ConfidenceSpec(("mean-logprob",))):
        rows = b.generate(["the sum of", "a value"], s, [11, 5000], confidence=spec)
        assert [r.text for rs in rows for r in rs] == [r.text for rs in b.generate(["the sum of", "a value"], s,
                                                                                     [11, 5000]) for r in rs]
        k = spec.top_logprobs
        outs = vllm.LLM("m").generate(
            [{"prompt_token_ids": encode_prompt(b.tokenizer, p)} for p in ("the sum of", "a value")],
            [vllm.SamplingParams(n=4, temperature=1.0, max_tokens=30, seed=seed, logprobs=k) for seed in (11, 5000)])
        for ro, rs in zip(outs, rows):
            for o in sorted(ro.outputs, key=lambda o: o.index):
                assert rs[o.index].signals == _vllm_reference(o, max(k, 1), spec)
    # with k alternatives, about half the positions hold the sampled token as a (k + 1)-th entry, which never counts
    sizes = {len(d) for o in outs[0].outputs for d in o.logprobs}
    assert sizes == {1}
    o = vllm.LLM("m").generate([{"prompt_token_ids": [1, 2]}],
                               [vllm.SamplingParams(n=1, max_tokens=30, seed=3, logprobs=6)])[0].outputs[0]
    assert {len(d) for d in o.logprobs} == {6, 7}


@torch_needed
def test_vllm_data_parallel_workers_send_the_signals(fake_vllm, tiny, monkeypatch):
    from ttc.harvest.backends import VLLMBackend
    from ttc.harvest.types import Sampling

    spec = ConfidenceSpec(("lowest-group", "mean-logprob"), window=3, top_k=4)
    s = Sampling(n=2, temperature=1.0, max_tokens=12)
    single = VLLMBackend(str(tiny)).generate(["the", "a", "so"], s, [1, 2000, 9000], confidence=spec)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    dp = VLLMBackend(str(tiny), data_parallel_size=2)
    try:
        assert dp.generate(["the", "a", "so"], s, [1, 2000, 9000], confidence=spec) == single
    finally:
        dp.close()
    assert all(r.signals is not None for rs in single for r in rs)


@torch_needed
def test_vllm_through_the_cli_raises_the_engines_logprob_limit(fake_vllm, tiny, tmp_path):
    from typer.testing import CliRunner

    from ttc.cli import app
    from ttc.harvest.pipeline import part_files

    data = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
    base = ["harvest", "--dataset", str(data), "--limit", "2", "--model", str(tiny), "--backend", "vllm",
            "--responses", "2", "--max-tokens", "8", "--no-progress", "--confidence", "tail,mean-logprob"]
    r = CliRunner().invoke(app, base + ["--out", str(tmp_path / "a"), "--confidence-top-k", "32"])
    assert r.exit_code == 0, r.output
    (engine,) = [json.loads(line) for line in fake_vllm.read_text().splitlines()]
    assert engine["max_logprobs"] == 32
    df = pl.read_parquet(part_files(tmp_path / "a"))
    assert df["score_tail_conf"].is_between(0, 1).all() and df["conf_tail"].null_count() == 0
    fake_vllm.write_text("")
    r = CliRunner().invoke(app, base + ["--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    assert "max_logprobs" not in json.loads(fake_vllm.read_text().splitlines()[0])   # 20: vLLM's default suffices


# ------------------------------------------------------------------------------ OpenAI-compatible (loopback server)


def _server_module():
    spec = importlib.util.spec_from_file_location("fake_openai_server", FIX / "fake_openai_server.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def server(monkeypatch):
    pytest.importorskip("openai")
    proc = subprocess.Popen([sys.executable, str(FIX / "fake_openai_server.py"), "--key", "k"], stdout=subprocess.PIPE,
                            text=True)
    monkeypatch.setenv("TTC_CONF_KEY", "k")
    try:
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _bodies(url):
    import urllib.request

    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return json.load(r)["bodies"]


@pytest.mark.parametrize("chat", [False, True])
def test_openai_asks_for_logprobs_only_when_a_signal_needs_them(server, chat):
    from ttc.harvest.backends import OpenAIBackend
    from ttc.harvest.types import Sampling

    mod = _server_module()
    b = OpenAIBackend(server + "/v1", "tiny", api_key_env="TTC_CONF_KEY", chat=chat, n_per_request=None)
    s = Sampling(n=3, temperature=0.7, max_tokens=9)
    plain = b.generate(["p one"], s, [100])[0]
    assert all(r.signals is None for r in plain)
    assert not any("logprobs" in body or "top_logprobs" in body for body in _bodies(server))
    for spec in (ConfidenceSpec(FULL, window=2, top_k=4, tail=2), ConfidenceSpec(("mean-logprob",))):
        rows = b.generate(["p one"], s, [100], confidence=spec)[0]
        assert [r.text for r in rows] == [r.text for r in plain]
        body = _bodies(server)[-1]
        k = spec.top_logprobs
        assert (body["logprobs"], body.get("top_logprobs")) == ((True, k) if chat else (k, None))
        for j, r in enumerate(rows):
            sampled, top = mod.logprobs_for("p one", 100 + j, 0.7, len(r.text.split()), k)
            want = ref_signals(sampled, [[v for _, v in alts] for alts in top] if k else [[-1.0]] * len(sampled),
                               max(k, 1), spec.window, spec.tail)
            assert r.signals == {c: want[c] for c in spec.columns()}


def test_openai_through_the_cli_writes_the_columns(server, tmp_path):
    from typer.testing import CliRunner

    from ttc.cli import app
    from ttc.harvest.pipeline import part_files, read_meta
    from ttc.replay.pool import load_pool

    data = HERE / "fixtures" / "harvest_pipeline" / "math_small.jsonl"
    pool = tmp_path / "o"
    r = CliRunner().invoke(app, ["harvest", "--dataset", str(data), "--limit", "2", "--model", "tiny", "--backend",
                                 "openai", "--base-url", server + "/v1", "--api-key-env", "TTC_CONF_KEY", "--responses",
                                 "3", "--max-tokens", "8", "--template", "plain", "--out", str(pool), "--no-progress",
                                 "--confidence", "mean-logprob,lowest-group", "--confidence-window", "3",
                                 "--confidence-top-k", "4"])
    assert r.exit_code == 0, r.output
    df = pl.read_parquet(part_files(pool))
    assert {"score_mean_logprob", "mean_logprob", "score_lowest_group", "conf_lowest_group"} <= set(df.columns)
    assert load_pool(pool, score="lowest_group").n_queries == 2
    assert read_meta(pool)["generation"]["confidence"]["top_k"] == 4
    assert all(b["logprobs"] == 4 for b in _bodies(server))


# --------------------------------------------------------------------- the record lows: DeepConf online's stopping data


def _filter_stop(confs, window, s):
    """Tokens a trace holds when DeepConf's online filter runs with threshold s (processors.py, literally: a deque of
    the last `window` confidences and their running sum; from a full deque on, the end-of-sequence token is forced at
    the first step whose mean is below s, which the trace then holds), and whether it was stopped."""
    from collections import deque

    group, total = deque(maxlen=window), 0.0
    for t, c in enumerate(confs):
        if len(group) < window:
            group.append(c)
            total += c
        else:
            total -= group.popleft()
            group.append(c)
            total += c
        if len(group) >= window and total / len(group) < s:
            return t + 1, True
    return len(confs), False


@pytest.mark.parametrize("n,window", [(1, 1), (5, 1), (9, 3), (40, 4), (64, 8), (7, 8), (8, 8)])
def test_record_lows_give_the_filter_stop_for_every_threshold(n, window):
    """The claim deepconf-online rests on: for every threshold s the online filter stops a trace at the first record
    low below s, having paid position + 1 tokens, and at none when no record low is below s; a trace shorter than the
    window is never stopped by the filter, and the source's post-hoc check (min_conf < s) drops it from the vote
    exactly when its one record low is below s. Eighths keep every sum exact, so the filter's running sum and the
    prefix sums agree to the bit; every threshold between and at the group values is tried."""
    rng = random.Random(f"lows-{n}-{window}")
    for _trial in range(30):
        confs = [rng.randint(8, 120) / 8 for _ in range(n)]
        spec = ConfidenceSpec(("group-lows", "lowest-group"), window=window, top_k=1)
        got = spec.compute([-1.0] * n, confs)
        pos, val = got["conf_lows_pos"], got["conf_lows"]
        assert (pos, val) == ref_lows(confs, window)
        assert val[-1] == got["conf_lowest_group"]                          # the last low is the lowest group
        assert all(a < b for a, b in zip(pos, pos[1:])) and all(a > b for a, b in zip(val, val[1:]))
        assert 0 <= pos[0] and pos[-1] < n
        levels = sorted(set(val) | {v + d for v in val for d in (-1 / 16, 1 / 16)})
        for s in levels:
            below = [p for p, v in zip(pos, val) if v < s]
            paid = below[0] + 1 if below else n
            tokens, stopped = _filter_stop(confs, window, s)
            if n >= window:
                assert (tokens, stopped) == (paid, bool(below)), (confs, s)
            else:                                                           # never stopped; dropped post hoc
                assert (tokens, stopped) == (n, False) and paid == n
            assert bool(below) == (got["conf_lowest_group"] < s)           # the source's post-hoc min_conf < s
