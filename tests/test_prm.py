"""PRM scoring on CPU against a tiny random reward model of Qwen2.5-Math-PRM's shape, built in-process.

The tiny PRM itself is tests/support/tiny_prm.py (the pipeline's end-to-end and the live-oracle tests build it too).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from ttc.harvest.prm import PRM_SYSTEM_PROMPT, STEP_SEPARATOR, PRMScorer, aggregate, split_steps  # noqa: E402

from support.tiny_prm import tiny_model, tiny_prm, tiny_tokenizer  # noqa: E402

PROBLEMS = ["What is 2 + 2?", "Find x if 3x = 12.", "Sum of the roots of x^2 - 5x + 6?"]
RESPONSES = [
    "Step 1: 2 + 2 = 4.\nStep 2: The answer is \\boxed{4}.",
    "We solve it.\nStep 1: Divide by 3.\n\nStep 2: x = 4.\nStep 3: \\boxed{4}",
    "By Vieta the sum is 5.\n\nSo the answer is \\boxed{5}.",          # no markers: blank-line steps
    "",                                                                 # no steps
    "Step 1: " + "long reasoning " * 30 + "\nStep 2: done \\boxed{1}",
    "**Step 1:** guess 7.\n## Step 2. check.\nStep 3: \\boxed{7}",
]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return tiny_model(tok)


def _pairs(n=None):
    problems = [PROBLEMS[i % len(PROBLEMS)] for i in range(len(RESPONSES))]
    return problems[:n], RESPONSES[:n]


# ---------------------------------------------------------------- split_steps / aggregate

def test_split_steps_markers_keep_preamble_with_first_step():
    text = "Let me think.\nStep 1: a = 1\n\nStep 2: b = 2\nThe answer is 3."
    assert split_steps(text, "step") == ["Let me think.\nStep 1: a = 1", "Step 2: b = 2\nThe answer is 3."]


def test_split_steps_marker_variants_and_mid_line_mentions():
    text = "**Step 1:** guess\n## Step 2. check, as in Step 1: fine\n  step 10) last\n- Step 11: more"
    assert split_steps(text, "step") == ["**Step 1:** guess", "## Step 2. check, as in Step 1: fine",
                                         "step 10) last", "- Step 11: more"]
    assert split_steps("Step 1 is easy.\nStep 2 too.", "step") == ["Step 1 is easy.\nStep 2 too."]


def test_split_steps_without_markers_falls_back_to_blank_lines():
    assert split_steps("a\n\nb\n \t\n\n\nc\n", "step") == ["a", "b", "c"]


def test_split_steps_blank_mode_ignores_markers():
    text = "Step 1: a\nStep 2: b\n\nStep 3: c"
    assert split_steps(text, "blank") == ["Step 1: a\nStep 2: b", "Step 3: c"]


@pytest.mark.parametrize("mode", ["step", "blank"])
def test_split_steps_empty_responses_have_no_steps(mode):
    assert split_steps("", mode) == []
    assert split_steps("  \n\n \n", mode) == []


def test_split_steps_rejects_unknown_mode():
    with pytest.raises(ValueError, match="step mode"):
        split_steps("x", "lines")


def test_aggregate_on_fixed_lists():
    assert aggregate([0.9, 0.2, 0.8]) == {"min": 0.2, "last": 0.8, "prod": pytest.approx(0.144)}
    assert aggregate([0.5]) == {"min": 0.5, "last": 0.5, "prod": 0.5}
    assert aggregate([]) == {"min": 0.0, "last": 0.0, "prod": 0.0}
    assert PRMScorer.aggregate([1.0, 0.25]) == {"min": 0.25, "last": 0.25, "prod": 0.25}
    with pytest.raises(ValueError):
        aggregate([0.5, math.nan])
    with pytest.raises(ValueError):
        aggregate([1.5])


# ---------------------------------------------------------------- scoring

def test_scores_one_per_step_in_unit_interval(model, tok):
    scorer = PRMScorer(model, tok, device="cpu", batch_size=4, progress=False)
    problems, responses = _pairs()
    scores = scorer.score(problems, responses)
    assert [len(s) for s in scores] == [len(scorer.steps(r)) for r in responses] == [2, 3, 2, 0, 2, 3]
    flat = [x for s in scores for x in s]
    assert all(0.0 <= x <= 1.0 for x in flat)
    assert max(flat) - min(flat) > 0.01          # the stand-in is not a constant; comparisons below have teeth
    assert scorer.stats == {"responses": 6, "no_steps": 1, "truncated": 0, "dropped_steps": 0}


def test_batching_invariance(model, tok):
    problems, responses = _pairs()
    one = PRMScorer(model, tok, device="cpu", batch_size=1, progress=False).score(problems, responses)
    four = PRMScorer(model, tok, device="cpu", batch_size=4, progress=False).score(problems, responses)
    rev = PRMScorer(model, tok, device="cpu", batch_size=4, progress=True).score(problems[::-1], responses[::-1])
    for a, b, c in zip(one, four, rev[::-1]):
        assert len(a) == len(b) == len(c)
        assert a == pytest.approx(b, abs=1e-5)
        assert a == pytest.approx(c, abs=1e-5)


def test_matches_hand_computation(model, tok):
    problem, response = "What is 2 + 2?", "Step 1: 2 + 2 = 4.\nStep 2: So \\boxed{4}."
    text = (f"<|im_start|>system\n{PRM_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{problem}<|im_end|>\n"
            "<|im_start|>assistant\nStep 1: 2 + 2 = 4.<extra_0>Step 2: So \\boxed{4}.<extra_0><|im_end|>\n")
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    sep = tok.convert_tokens_to_ids(STEP_SEPARATOR)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    positions = (ids[0] == sep).nonzero().flatten()
    expected = torch.softmax(logits[positions], dim=-1)[:, 1].tolist()
    got = PRMScorer(model, tok, device="cpu", progress=False).score([problem], [response])
    assert len(expected) == 2
    assert got[0] == pytest.approx(expected, abs=1e-6)


def test_separator_text_inside_inputs_is_ignored(model, tok):
    scorer = PRMScorer(model, tok, device="cpu", progress=False)
    dirty = scorer.score([f"What {STEP_SEPARATOR}is 2 + 2?"], [f"Step 1: 2 + 2{STEP_SEPARATOR} = 4.\nStep 2: 4"])
    clean = scorer.score(["What is 2 + 2?"], ["Step 1: 2 + 2 = 4.\nStep 2: 4"])
    assert dirty[0] == pytest.approx(clean[0], abs=1e-6)


def test_too_long_responses_score_the_steps_that_fit(model, tok):
    problem = PROBLEMS[0]
    response = "\n".join(f"Step {k}: " + "we add the numbers again. " * 3 for k in range(1, 7))
    full_scorer = PRMScorer(model, tok, device="cpu", progress=False)
    full = full_scorer.score([problem], [response])[0]
    assert len(full) == 6
    ids, _ = full_scorer._encode(problem, response)
    sep = tok.convert_tokens_to_ids(STEP_SEPARATOR)
    third_sep = [k for k, t in enumerate(ids) if t == sep][2]
    short = PRMScorer(model, tok, device="cpu", progress=False, max_length=third_sep + 5)
    got = short.score([problem, problem, "tiny"], [response, "Step 1: ok", response])
    assert got[0] == pytest.approx(full[:3], abs=1e-5)           # causal: surviving steps keep their exact scores
    assert len(got[1]) == 1 and len(got[2]) == 3
    assert short.last_dropped == [3, 0, 3]
    assert short.stats["truncated"] == 2 and short.stats["dropped_steps"] == 6
    nothing = PRMScorer(model, tok, device="cpu", progress=False, max_length=8)
    assert nothing.score([problem], [response]) == [[]] and nothing.last_dropped == [6]


def test_accepts_tuple_outputs_and_rejects_wrong_heads(model, tok):
    class TupleOut(torch.nn.Module):
        """Returns (logits,) like the remote code with return_dict=False."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.config = inner.config

        def forward(self, **kw):
            return (self.inner(**kw).logits,)

    problems, responses = _pairs(3)
    want = PRMScorer(model, tok, device="cpu", progress=False).score(problems, responses)
    got = PRMScorer(TupleOut(model), tok, device="cpu", progress=False).score(problems, responses)
    for a, b in zip(want, got):
        assert a == pytest.approx(b, abs=1e-6)

    from transformers import Qwen2Config, Qwen2Model
    base = Qwen2Model(Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=4, num_key_value_heads=2))
    with pytest.raises(ValueError, match=r"\[batch, seq, 2\]"):
        PRMScorer(base, tok, device="cpu", progress=False).score(problems, responses)


def test_tokenizer_without_separator_is_refused(model):
    with pytest.raises(ValueError, match="one token"):
        PRMScorer(model, tiny_tokenizer(with_separator=False), device="cpu", progress=False)
    with pytest.raises(ValueError, match="needs its tokenizer"):
        PRMScorer(model, None, device="cpu")


@pytest.mark.parametrize("head,loader", [("mlp", "native"), ("token-classification", "transformers")])
def test_loads_saved_checkpoints(tmp_path, head, loader):
    path = tiny_prm(tmp_path, head=head, seed=3)
    tok = tiny_tokenizer()
    problems, responses = _pairs(3)
    scorer = PRMScorer(str(path), device="cpu", batch_size=2, progress=False)
    assert scorer.loader == loader and scorer.max_length == 2048
    assert scorer.dtype == torch.float32
    want = PRMScorer(tiny_model(tok, head, seed=3), tok, device="cpu", progress=False).score(problems, responses)
    got = scorer.score(problems, responses)
    for a, b in zip(want, got):
        assert len(a) == len(b) > 0
        assert a == pytest.approx(b, abs=1e-5)
    info = scorer.info()
    assert info["model"] == str(path) and info["loader"] == loader and info["dtype"] == "float32"


def test_native_class_matches_published_parameter_names(tok):
    names = set(tiny_model(tok).state_dict())
    assert {"score.0.weight", "score.0.bias", "score.2.weight", "score.2.bias",
            "model.embed_tokens.weight"} <= names
    assert all(n.startswith(("model.", "score.")) for n in names)


def test_remote_code_checkpoint_goes_through_automodel_and_falls_back(tmp_path, monkeypatch):
    """A checkpoint like the published one (auto_map -> remote code) is loaded with AutoModel(trust_remote_code);
    when that code cannot load on this transformers, the native class takes the same weights, with a warning."""
    import json

    import transformers

    path = tiny_prm(tmp_path, seed=5)
    config = json.loads((path / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel"}
    (path / "config.json").write_text(json.dumps(config))
    calls = []

    def remote_code_fails(name, **kw):
        calls.append(kw.get("trust_remote_code"))
        raise ImportError("cannot import name 'is_flash_attn_greater_or_equal_2_10'")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", remote_code_fails)
    with pytest.warns(UserWarning, match="remote code failed"):
        scorer = PRMScorer(str(path), device="cpu", progress=False)
    assert calls == [True] and scorer.loader == "native"
    tok = tiny_tokenizer()
    want = PRMScorer(tiny_model(tok, seed=5), tok, device="cpu", progress=False).score(PROBLEMS[:1], RESPONSES[:1])
    assert scorer.score(PROBLEMS[:1], RESPONSES[:1])[0] == pytest.approx(want[0], abs=1e-5)
    with pytest.raises(ImportError):
        PRMScorer(str(path), device="cpu", progress=False, loader="transformers")


def test_vllm_pooling_path_scores_what_the_transformers_path_scores(tmp_path, monkeypatch):
    """The GPU path (vLLM's pooling runner, STEP pooling at <extra_0>) gets the same token ids and reads the same
    label as the transformers path: against a stand-in vllm that pools the same checkpoint the way vLLM's STEP
    pooler does, the per-step scores agree and empty / step-less responses are handled alike."""
    from ttc.harvest.prm import VLLMPRMScorer

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures" / "harvest" / "fake_vllm"))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    path = tiny_prm(tmp_path)
    problems, responses = _pairs()
    ref = PRMScorer(str(path), device="cpu", dtype="float32", batch_size=3, progress=False)
    vl = VLLMPRMScorer(str(path), max_length=ref.max_length, progress=False)
    assert vl.llm.kwargs["runner"] == "pooling" and vl.llm.kwargs["max_model_len"] == ref.max_length
    want, got = ref.score(problems, responses), vl.score(problems, responses)
    assert [len(w) for w in want] == [len(g) for g in got] and any(len(w) == 0 for w in want)
    for w, g in zip(want, got):
        assert np.allclose(w, g, atol=1e-5), (w, g)
    assert vl.stats == ref.stats
    assert vl.info()["engine"] == "vllm"
