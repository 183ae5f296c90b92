"""DeepConf online's stop for real (harvest.confidence.GroupStop, the transformers backend's conf_stop): the filter fed
one token confidence at a time fires exactly where the recorded record lows say it would, so a pool's group-lows and
a run that stops traces agree to the token, and the stopped trace's own lows end at its last token (replaying it
stops it there). Then end to end on the tiny model: a stopped trace is the unstopped one's prefix, nothing else
moves, and the backends that cannot stop a trace refuse a threshold."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttc.harvest.confidence import ConfidenceSpec, GroupStop, _windows, group_lows
from ttc.harvest.registry import BACKENDS
from ttc.replay.errors import InputError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WINDOW = 4
# a few fixed values make ties (equal windows, equal record-low candidates); +inf is what a -inf top log-prob gives
CONF = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, 3.125]),
                 st.just(math.inf))


def _lows(confs, window):
    return group_lows(None, np.asarray(confs, dtype=np.float64), ConfidenceSpec(("group-lows",), window=window))


def _bits(values):
    return [float(v).hex() for v in values]


@st.composite
def traces(draw):
    window = draw(st.integers(1, 6))
    confs = draw(st.lists(CONF, min_size=1, max_size=30))
    pos, val = _lows(confs, window)
    # thresholds at, just above and just below the lows (ties with a group value must not stop), or anywhere
    near = [f(v) for v in val if math.isfinite(v) for f in (lambda v: v, lambda v: math.nextafter(v, math.inf),
                                                            lambda v: math.nextafter(v, -math.inf))]
    s = draw(st.one_of(st.sampled_from(near), CONF) if near else CONF)
    return confs, window, s


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_the_filter_fires_at_the_first_record_low_below_the_threshold(case):
    confs, window, s = case
    pos, val = _lows(confs, window)
    g = GroupStop(window, s)
    fired = [t for t, c in enumerate(confs) if g.feed(c)]
    if len(confs) >= window:                           # every step from a full window on: its group against s
        groups = _windows(np.asarray(confs, dtype=np.float64), window)
        assert fired == [t for t in range(window - 1, len(confs)) if groups[t - window + 1] < s]
    below = [p for p, v in zip(pos, val) if v < s]
    if len(confs) < window or not below:               # a trace shorter than the window is never stopped
        assert fired == []
        return
    t = fired[0]
    assert t == below[0] >= window - 1
    # the truncated trace (tokens 0..t) records the same lows up to t, to the bit, and its last one is below s
    k = pos.index(t)
    ppos, pval = _lows(confs[:t + 1], window)
    assert ppos == pos[:k + 1] and _bits(pval) == _bits(val[:k + 1]) and pval[-1] < s


def test_a_window_holding_an_infinite_confidence_never_stops():
    g = GroupStop(2, math.inf)
    assert [g.feed(c) for c in (1.0, math.inf, 2.0, 3.0)] == [False, False, False, True]
    assert BACKENDS["transformers"].stops and not BACKENDS["vllm"].stops and not BACKENDS["openai"].stops


# ------------------------------------------------------------------------------------- the transformers backend


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from support.tiny_model import make_tiny_model

    # EOS no likelier than any other token: traces of tens of tokens, several record lows each
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama", eos_logit=0.0)


SPEC = ConfidenceSpec(("group-lows", "mean-logprob"), window=WINDOW, top_k=5)
PROMPTS = ["the sum of", "what is the answer ?"]


def _run(backend, sampling, seeds, conf_stop=None, spec=SPEC, prompts=PROMPTS):
    from support.tiny_model import single_thread_torch

    with single_thread_torch():
        return backend.generate(prompts[:len(seeds)], sampling, seeds, confidence=spec, conf_stop=conf_stop)


def _check_stopped(full, got, s, tok):
    """got is full stopped where its recorded lows say the filter stops at threshold s, or full itself."""
    pos, val = full.signals["conf_lows_pos"], full.signals["conf_lows"]
    below = [i for i, v in enumerate(val) if v < s]
    if full.n_tokens < WINDOW or not below:
        assert got == full
        return False
    i = below[0]
    p = pos[i]
    assert got.finish_reason == "confidence" and got.n_tokens == p + 1
    assert got.signals["conf_lows_pos"] == pos[:i + 1] and got.signals["conf_lows"] == val[:i + 1]
    ids = tok(got.text, add_special_tokens=False)["input_ids"]
    whole = tok(full.text, add_special_tokens=False)["input_ids"]
    ends_eos = full.finish_reason == "stop" and p == full.n_tokens - 1   # the EOS is no text
    assert len(ids) == p + 1 - ends_eos and ids == whole[:len(ids)]
    return True


@pytest.mark.parametrize("batch_size", [1, 6])
def test_a_stopped_trace_is_the_unstopped_ones_prefix_and_nothing_else_moves(tiny, batch_size):
    from ttc.harvest.backends import TransformersBackend
    from ttc.harvest.types import Sampling

    b = TransformersBackend(str(tiny), device="cpu", batch_size=batch_size)
    sampling = Sampling(n=6, temperature=1.0, max_tokens=40)
    seeds = [40, 9000]
    full = _run(b, sampling, seeds)
    # the trace with the most record lows, stopped at a middle one: s between it and the low before
    j = max(range(6), key=lambda r: len(full[0][r].signals["conf_lows"]))
    pos, val = full[0][j].signals["conf_lows_pos"], full[0][j].signals["conf_lows"]
    assert len(val) >= 3 and pos[0] == WINDOW - 1
    i = len(val) // 2
    s = (val[i] + val[i - 1]) / 2
    got = _run(b, sampling, seeds, [s, None])
    assert got[1] == full[1]                                   # no threshold for that prompt: untouched
    stopped = [_check_stopped(f, g, s, b.tokenizer) for f, g in zip(full[0], got[0])]
    assert stopped[j] and got[0][j].n_tokens == pos[i] + 1
    # a threshold below every low stops nothing; Nones and no conf_stop at all are the same run
    floor = min(v for rows in full for r in rows for v in r.signals["conf_lows"]) - 1.0
    assert _run(b, sampling, seeds, [floor, floor]) == full
    assert _run(b, sampling, seeds, [None, None]) == full == _run(b, sampling, seeds, None)


def test_greedy_rows_stop_once_and_are_repeated(tiny):
    from ttc.harvest.backends import TransformersBackend
    from ttc.harvest.types import Sampling

    b = TransformersBackend(str(tiny), device="cpu")
    sampling = Sampling(n=3, temperature=0.0, max_tokens=40)
    full = _run(b, sampling, [1])[0]
    assert full[0].n_tokens >= WINDOW
    s = full[0].signals["conf_lows"][0] + 1.0                  # above the first group: stop there
    got = _run(b, sampling, [1], [s])[0]
    assert got[0] == got[1] == got[2] and got[0].n_tokens == WINDOW and got[0].finish_reason == "confidence"
    assert _check_stopped(full[0], got[0], s, b.tokenizer)


def test_a_threshold_needs_the_group_lows_and_is_a_number(tiny):
    from ttc.harvest.backends import TransformersBackend
    from ttc.harvest.types import Sampling

    b = TransformersBackend(str(tiny), device="cpu")
    sampling = Sampling(n=1, temperature=1.0, max_tokens=5)
    for spec in (None, ConfidenceSpec(("lowest-group",), window=WINDOW)):
        with pytest.raises(InputError, match="needs a confidence spec with the group-lows signal"):
            _run(b, sampling, [1], [3.0], spec=spec)
        assert _run(b, sampling, [1], [None], spec=spec) == _run(b, sampling, [1], spec=spec)
    for bad in (float("nan"), "3", True):
        with pytest.raises(InputError, match="must be a number or None"):
            _run(b, sampling, [1], [bad])
    with pytest.raises(ValueError, match="one per prompt"):
        _run(b, sampling, [1], [3.0, 3.0])


# ------------------------------------------------------------------------------- backends that cannot stop a trace





def test_vllm_and_openai_refuse_a_threshold(fake_vllm, tiny):
    from ttc.harvest.backends import OpenAIBackend, VLLMBackend
    from ttc.harvest.types import Sampling

    sampling = Sampling(n=2, temperature=1.0, max_tokens=8)
    v = VLLMBackend(str(tiny))
    with pytest.raises(InputError, match="cannot stop a trace mid-way on its confidence.*logits processor.*"
                                         "use the transformers backend"):
        v.generate(["a b"], sampling, [1], confidence=SPEC, conf_stop=[3.0])
    assert v.generate(["a b"], sampling, [1], conf_stop=[None]) == v.generate(["a b"], sampling, [1])
    pytest.importorskip("openai")
    o = OpenAIBackend("http://127.0.0.1:9/v1", "m", max_retries=0)   # refused before any request is sent
    try:
        with pytest.raises(InputError, match="cannot stop a trace mid-way on its confidence.*transformers backend"):
            o.generate(["a b"], sampling, [1], confidence=SPEC, conf_stop=[3.0])
    finally:
        o.close()
