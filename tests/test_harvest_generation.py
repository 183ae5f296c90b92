"""Harvest generation: data sets, prompt templates, the transformers backend on a tiny random model, and the vLLM
backend's plumbing against a stand-in `vllm` module (tests/fixtures/harvest/fake_vllm)."""
from __future__ import annotations

import json
import sys
import types
import warnings
from pathlib import Path

import pytest

from ttc.harvest.datasets import load_queries
from ttc.harvest.prompts import TEMPLATES, default_template, fill, render, template_info
from ttc.harvest.types import Query, Sampling

HERE = Path(__file__).parent
FIX = HERE / "fixtures" / "harvest"
BENCH = HERE.parent.parent / "shared" / "data" / "benchmarks"
sys.path.insert(0, str(HERE))
from support.tiny_model import make_tiny_model, single_thread_torch


def bench(name: str) -> Path:
    p = BENCH / name
    if not p.exists():
        pytest.skip(f"shared benchmark file {p} is absent")
    return p


MATH_Q = Query("q1", "math", r"Compute $\frac{1}{2} + {x}$ where {problem} is literal.", gold=r"\frac{1}{2}")
LCB_Q = load_queries(FIX / "lcb_exec_small.jsonl")[0] if (FIX / "lcb_exec_small.jsonl").exists() else None


# ------------------------------------------------------------------------------------------------------ prompts


def test_math_fewshot_asks_for_numbered_steps_and_a_boxed_answer():
    text = render("math-fewshot", MATH_Q)
    assert "Step 1:" in text and "Step 2:" in text and r"\boxed{" in text
    assert text.count("Problem:\n") == 4                       # 3 examples + the query
    # the query comes last, verbatim (its braces are not placeholders), and the prompt ends on the cue
    assert text.endswith("Problem:\n" + MATH_Q.problem + "\nSolution:\n")


def test_aime_zeroshot_and_plain():
    text = render("aime-zeroshot", MATH_Q)
    assert "Problem:\n" + MATH_Q.problem + "\nSolution:\n" in text and r"\boxed{}" in text
    assert text.count("Problem:") == 1
    assert render("plain", MATH_Q) == MATH_Q.problem


def test_lcb_template_has_answer_tags_and_the_query_code():
    q = LCB_Q
    text = render("lcb-exec-cot", q)
    assert "[ANSWER]" in text and "[/ANSWER]" in text
    assert text.rstrip().endswith("[THOUGHT]")
    assert q.fields["code"] in text and f"assert {q.fields['input']} == ??" in text
    assert text.count("[PYTHON]") == 2                          # one worked example, then the query


def test_template_errors_and_info():
    with pytest.raises(ValueError, match="unknown prompt template"):
        render("nope", MATH_Q)
    with pytest.raises(ValueError, match="for 'lcb-exec' queries"):
        render("lcb-exec-cot", MATH_Q)
    with pytest.raises(ValueError, match="needs field 'code'"):
        fill("lcb-exec-cot", Query("x", "lcb-exec", "p"))
    for name in TEMPLATES:
        info = template_info(name)
        assert info["name"] == name and isinstance(info["version"], int) and "{" in info["text"]
        json.dumps(info)                                        # recorded in pool.json as is
    assert default_template("math", "aime25") == "aime-zeroshot"
    assert default_template("math", "math500") == "math-fewshot"
    assert default_template("lcb-exec") == "lcb-exec-cot" and default_template("custom") == "plain"


class _ChatTok:
    chat_template = "{{ messages }}"

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, **kw):
        self.calls.append((messages, kw))
        return "<CHAT>" + messages[-1]["content"] + "</CHAT>"


def test_chat_template_applied_when_the_tokenizer_has_one():
    tok = _ChatTok()
    out = render("aime-zeroshot", MATH_Q, tok)
    assert out == "<CHAT>" + fill("aime-zeroshot", MATH_Q) + "</CHAT>"
    messages, kw = tok.calls[0]
    assert messages == [{"role": "user", "content": fill("aime-zeroshot", MATH_Q)}]
    assert kw["add_generation_prompt"] is True and kw["tokenize"] is False
    assert render("aime-zeroshot", MATH_Q, tok, chat=False) == fill("aime-zeroshot", MATH_Q)
    plain_tok = types.SimpleNamespace(chat_template=None)
    assert render("aime-zeroshot", MATH_Q, plain_tok) == fill("aime-zeroshot", MATH_Q)
    with pytest.raises(ValueError, match="no chat template"):
        render("aime-zeroshot", MATH_Q, plain_tok, chat=True)


# ----------------------------------------------------------------------------------------------------- datasets


def test_shared_math500():
    qs = load_queries(bench("math500.jsonl"))
    assert len(qs) == 500 and len({q.query_id for q in qs}) == 500
    first = qs[0]
    assert first.query_id == "test/algebra/1004.json" and first.gold == "4" and first.task == "math"
    assert first.problem.startswith("If $2^8=4^x$") and first.fields["subject"] == "Algebra"
    assert first.fields["level"] == 1 and "answer" not in first.fields
    assert [q.query_id for q in load_queries(bench("math500.jsonl"), limit=3)] == [q.query_id for q in qs[:3]]


@pytest.mark.parametrize("name,ids,first_gold", [("aime25.jsonl", range(90, 120), "70"),
                                                 ("aime24.jsonl", range(60, 90), "204")])
def test_shared_aime(name, ids, first_gold):
    qs = load_queries(bench(name))
    assert [q.query_id for q in qs] == [str(i) for i in ids]
    assert qs[0].gold == first_gold and all(q.task == "math" and q.gold for q in qs)


def test_lcb_fixture():
    qs = load_queries(FIX / "lcb_exec_small.jsonl")
    assert [q.query_id for q in qs] == ["101", "102", "103"]
    q = qs[1]
    assert q.task == "lcb-exec" and q.gold == "'ba-dc'"
    assert q.fields["function_name"] == "joinReversed" and q.fields["input"] == "joinReversed(words = ['ab', 'cd'])"
    assert q.problem.endswith("assert joinReversed(words = ['ab', 'cd']) == ??")


def test_lcb_repeated_question_ids_get_an_index(tmp_path):
    rows = [json.loads(line) for line in (FIX / "lcb_exec_small.jsonl").read_text().splitlines()]
    rows[2]["question_id"] = rows[0]["question_id"]
    f = tmp_path / "lcb.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    assert [q.query_id for q in load_queries(f)] == ["101#0", "102", "101#1"]


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_user_files_with_column_mapping(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"key": ["a", "b"], "text": ["1+1?", "2+2?"], "sol": [2, 4], "tag": ["x", "y"]}), f)
    qs = load_queries(f, id_column="key", problem_column="text", answer_column="sol")
    assert [(q.query_id, q.problem, q.gold, q.task, q.fields) for q in qs] == [
        ("a", "1+1?", "2", "math", {"tag": "x"}), ("b", "2+2?", "4", "math", {"tag": "y"})]
    # no answer column at all: custom prompts, gold None
    g = _write_jsonl(tmp_path / "prompts.jsonl", [{"id": 7, "prompt": "write a haiku"}])
    (q,) = load_queries(g)
    assert (q.query_id, q.task, q.gold, q.problem) == ("7", "custom", None, "write a haiku")


def test_dataset_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_queries(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="unknown dataset 'math5000'"):
        load_queries("math5000")
    f = _write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "problem": "p", "answer": "1"},
                                            {"id": 1, "problem": "q", "answer": "2"}])
    with pytest.raises(ValueError, match="duplicate query ids '1'"):
        load_queries(f)
    with pytest.raises(ValueError, match="no column 'nope'"):
        load_queries(f, id_column="nope")
    g = _write_jsonl(tmp_path / "b.jsonl", [{"id": 1, "text": "p"}])
    with pytest.raises(ValueError, match="no problem column.*problem_column="):
        load_queries(g)
    h = _write_jsonl(tmp_path / "c.jsonl", [{"id": 1, "problem": "p"}])
    with pytest.raises(ValueError, match="no answer column"):
        load_queries(h, task="math")
    lcb = _write_jsonl(tmp_path / "d.jsonl", [{"question_id": 1, "code": "def f(): pass", "input": "f()"}])
    with pytest.raises(ValueError, match="missing column 'output'"):
        load_queries(lcb, task="lcb-exec")
    bad = tmp_path / "e.jsonl"
    bad.write_text('{"id": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"e.jsonl:2: invalid JSON"):
        load_queries(bad)
    with pytest.raises(ValueError, match="unsupported file type"):
        load_queries(_write_jsonl(tmp_path / "f.csv", []))


def test_hub_names_without_datasets_say_to_pass_a_local_file(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)         # import fails as when it is not installed
    with pytest.raises(ValueError, match="not installed; pass a local file instead.*math500.jsonl"):
        load_queries("math500")


def test_hub_names_map_to_hub_ids_splits_and_columns(monkeypatch):
    calls = []
    tables = {
        "HuggingFaceH4/MATH-500": [{"problem": "p", "solution": "s", "answer": "3", "subject": "Algebra",
                                    "level": 2, "unique_id": "test/algebra/1.json"}],
        "math-ai/aime25": [{"problem": "p", "answer": "70", "id": "0"}],
        "livecodebench/execution-v2": [{"question_id": 5, "id": "sample_0", "function_name": "f",
                                        "code": "def f(a):\n    return a", "input": "f(a = 1)", "output": "1"}],
    }

    def load_dataset(repo, *args, split):
        calls.append((repo, args, split))
        if repo not in tables:
            raise ConnectionError("offline")
        return tables[repo]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    (m,) = load_queries("math500")
    assert (m.query_id, m.gold, m.fields["level"]) == ("test/algebra/1.json", "3", 2)
    (a,) = load_queries("aime25")
    assert (a.query_id, a.gold) == ("0", "70")
    (c,) = load_queries("lcb-exec")
    assert (c.query_id, c.task, c.gold) == ("5", "lcb-exec", "1")
    assert calls == [("HuggingFaceH4/MATH-500", (), "test"), ("math-ai/aime25", (), "test"),
                     ("livecodebench/execution-v2", (), "test")]
    with pytest.raises(ValueError, match="could not load HuggingFaceH4/aime_2024.*offline.*local file"):
        load_queries("aime24")


# --------------------------------------------------------------------------------------- transformers backend


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with single_thread_torch():
        yield


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def tiny_chat_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny-chat"), chat=True)


@pytest.fixture(scope="module")
def tf(tiny_dir):
    from ttc.harvest.backends import TransformersBackend

    return TransformersBackend(str(tiny_dir), device="cpu")


PROMPTS = ["what is the sum of 2 and 3 ?", "find x if x + 1 = 4", "the final answer is"]
S = Sampling(n=6, temperature=1.0, top_p=1.0, max_tokens=12)


def texts(rows):
    return [[r.text for r in prompt_rows] for prompt_rows in rows]


def test_same_seed_same_samples_other_seed_other_samples(tf):
    a = tf.generate(PROMPTS, S, [11, 2000, 30000])
    b = tf.generate(PROMPTS, S, [11, 2000, 30000])
    assert a == b
    c = tf.generate(PROMPTS, S, [12345, 2000, 30000])
    assert texts(c)[0] != texts(a)[0] and c[1:] == a[1:]
    assert len(set(texts(a)[0])) > 1                            # the n samples of one prompt differ


def test_a_prompts_samples_do_not_depend_on_the_batch(tf, tiny_dir):
    from ttc.harvest.backends import TransformersBackend

    together = tf.generate(PROMPTS, S, [11, 2000, 30000])
    alone = tf.generate([PROMPTS[1]], S, [2000])
    assert alone[0] == together[1]
    small_batches = TransformersBackend(str(tiny_dir), device="cpu", batch_size=4)
    assert small_batches.generate([PROMPTS[1]], S, [2000]) == alone
    # sample j uses seed + j: more samples extend the same pool
    more = tf.generate([PROMPTS[1]], Sampling(n=9, temperature=1.0, max_tokens=12), [2000])
    assert more[0][:6] == alone[0]


def test_token_counts_and_finish_reasons(tf):
    tok = tf.tokenizer
    max_tokens = 10
    rows = tf.generate(["what is the answer ?"], Sampling(n=40, temperature=1.0, max_tokens=max_tokens), [7])[0]
    reasons = {r.finish_reason for r in rows}
    assert reasons == {"stop", "length"}                      # EOS ~1 step in 10: both happen among 40
    for r in rows:
        ids = tok(r.text, add_special_tokens=False)["input_ids"]   # the vocabulary round-trips
        if r.finish_reason == "length":
            assert r.n_tokens == max_tokens == len(ids)
        else:
            assert r.n_tokens == len(ids) + 1 <= max_tokens     # EOS counted, not in the text


def test_greedy_and_top_p(tf):
    g = tf.generate(PROMPTS[:1], Sampling(n=3, temperature=0.0, max_tokens=8), [1])[0]
    assert len(g) == 3 and len({r.text for r in g}) == 1
    assert tf.generate(PROMPTS[:1], Sampling(n=1, temperature=0.0, max_tokens=8), [999])[0][0] == g[0]
    # a nucleus smaller than the top token's mass keeps only the top token: sampling becomes greedy
    nucleus = tf.generate(PROMPTS[:1], Sampling(n=4, temperature=1.0, top_p=1e-6, max_tokens=8), [5])[0]
    assert all(r == g[0] for r in nucleus)


def test_stop_strings_cut_the_text(tf):
    rows = tf.generate(PROMPTS[:1], Sampling(n=30, temperature=1.0, max_tokens=25), [3], stop=["step"])[0]
    plain = tf.generate(PROMPTS[:1], Sampling(n=30, temperature=1.0, max_tokens=25), [3])[0]
    hit = [(r, p) for r, p in zip(rows, plain) if "step" in p.text]
    assert hit, "no sample contained the stop word"
    for r, p in hit:
        assert "step" not in r.text and r.finish_reason == "stop"
        assert p.text.startswith(r.text.rstrip()) and r.n_tokens <= p.n_tokens


def test_seed_rules(tf):
    with pytest.warns(UserWarning, match="less than n=6 apart.*identical prompts get identical samples"):
        twins = tf.generate([PROMPTS[0], PROMPTS[0]], S, [100, 103])
    assert twins[0][3:] == twins[1][:3]                         # the overlap the warning is about
    with pytest.warns(UserWarning, match="less than n=6 apart.*share random streams"):
        tf.generate(PROMPTS[:2], Sampling(n=6, temperature=1.0, max_tokens=2), [100, 103])
    with pytest.raises(ValueError, match="out of range"):
        tf.generate(PROMPTS[:1], S, [-1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tf.generate([PROMPTS[0], PROMPTS[0]], Sampling(n=6, temperature=1.0, max_tokens=2), [100, 106])
    with pytest.raises(ValueError, match="prompts but"):
        tf.generate(PROMPTS, S, [1])


def test_chat_tokenizer_renders_and_encodes_one_bos(tiny_chat_dir):
    from ttc.harvest.backends import TransformersBackend, encode_prompt

    b = TransformersBackend(str(tiny_chat_dir), device="cpu")
    text = render("aime-zeroshot", MATH_Q, b.tokenizer)
    assert text.startswith("<s>[ user ]") and text.endswith("[ assistant ] ")
    ids = encode_prompt(b.tokenizer, text)
    bos = b.tokenizer.bos_token_id
    assert ids[0] == bos and ids[1] != bos
    assert encode_prompt(b.tokenizer, "find x")[0] == bos and encode_prompt(b.tokenizer, "find x").count(bos) == 1
    (rows,) = b.generate([text], Sampling(n=2, temperature=1.0, max_tokens=5), [0])
    assert len(rows) == 2


def test_in_memory_model_and_info(tiny_dir, tf):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ttc.harvest.backends import TransformersBackend, make_backend

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    b = TransformersBackend(model, tokenizer=AutoTokenizer.from_pretrained(tiny_dir), device="cpu")
    assert b.generate(PROMPTS[:1], S, [11]) == tf.generate(PROMPTS[:1], S, [11])
    info = tf.info()
    assert info["backend"] == "transformers" and info["model"] == str(tiny_dir)
    assert info["versions"]["torch"] and info["versions"]["transformers"] and info["eos_token_ids"] == [3]
    json.dumps(info)
    assert isinstance(make_backend("transformers", model=str(tiny_dir), device="cpu"), TransformersBackend)
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("tgi")


# ------------------------------------------------------------------------------------- vLLM backend plumbing


def test_vllm_backend_passes_engine_options_and_per_prompt_seeds(fake_vllm, tiny_dir):
    from ttc.harvest.backends import VLLMBackend, encode_prompt

    b = VLLMBackend(str(tiny_dir), seed=7, max_model_len=512, gpu_memory_utilization=0.8)
    (engine,) = [json.loads(line) for line in fake_vllm.read_text().splitlines()]
    assert engine["model"] == str(tiny_dir) and engine["seed"] == 7 and engine["max_model_len"] == 512
    assert engine["enable_prefix_caching"] is True and engine["tensor_parallel_size"] == 1
    assert engine["gpu_memory_utilization"] == 0.8 and engine["revision"] is None
    rows = b.generate(PROMPTS, S, [11, 2000, 30000])
    assert [len(r) for r in rows] == [6, 6, 6]
    for prompt_rows in rows:
        for r in prompt_rows:
            assert r.n_tokens == len(r.text.split()) and r.finish_reason in ("stop", "length")
    # completions come back in index order and sample j is the child with seed s + j
    one = b.generate([PROMPTS[0]], Sampling(n=1, temperature=1.0, max_tokens=12), [11 + 4])
    assert one[0][0] == rows[0][4]
    import vllm

    fake = vllm.LLM("m").generate([{"prompt_token_ids": encode_prompt(b.tokenizer, PROMPTS[0])}],
                                  [vllm.SamplingParams(n=6, temperature=1.0, max_tokens=12, seed=11)])
    assert [o.text for o in sorted(fake[0].outputs, key=lambda o: o.index)] == texts(rows)[0]
    info = b.info()
    assert info["backend"] == "vllm" and "vllm" in info["versions"]
    assert info["engine"]["data_parallel_size"] == 1 and info["engine"]["enable_prefix_caching"] is True


def test_vllm_data_parallel_workers_give_the_same_results(fake_vllm, tiny_dir, monkeypatch):
    from ttc.harvest.backends import BackendError, VLLMBackend

    single = VLLMBackend(str(tiny_dir)).generate(PROMPTS, S, [11, 2000, 30000])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    dp = VLLMBackend(str(tiny_dir), data_parallel_size=2)
    try:
        assert dp.generate(PROMPTS, S, [11, 2000, 30000]) == single
        assert dp.generate(PROMPTS[:1], S, [11]) == single[:1]     # one worker idle
    finally:
        dp.close()
    engines = [json.loads(line) for line in fake_vllm.read_text().splitlines()]
    workers = engines[1:]
    assert sorted(e["gpus"] for e in workers) == ["4", "5"] and len({e["pid"] for e in engines}) == 3
    with pytest.raises(BackendError, match="failed to start.*refused"):
        VLLMBackend("fail-to-load", tokenizer=str(tiny_dir), data_parallel_size=2)
    with pytest.raises(ValueError, match="needs 6 GPUs"):
        VLLMBackend(str(tiny_dir), data_parallel_size=3, tensor_parallel_size=2)


def test_vllm_missing_says_how_to_get_it(monkeypatch):
    from ttc.harvest.backends import VLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ValueError, match="pip install vllm"):
        VLLMBackend("some/model")
