"""Generation backends behind `harvest.types.Backend`: transformers (CPU/GPU, small models and tests), vLLM
(offline engine, the GPU path) and any OpenAI-compatible HTTP server (`vllm serve`, hosted APIs) through the `openai`
client. Each is declared in harvest/registry.py's BACKENDS (name, class, command-line options, needs, extra);
make_backend builds them from there.

Seeding, the same in all three: prompt i comes with its own seed s_i, and its j-th sample is drawn with seed
s_i + j. That is how vLLM itself seeds the n children of one request (`ParentRequest` gives child j the seed
seed + j), so the transformers backend reproduces the rule and the HTTP backend can split n samples over several
requests (`n_per_request`) without changing which seed draws which sample. Two consequences:
- a prompt's samples depend only on (text, sampling, s_i), never on the other prompts in the call, the batch size
  or the number of calls, and asking for more samples later extends a pool: n=16 starts with the n=8 samples;
- seeds of different prompts must be at least n apart, or their samples share random streams; for the SAME
  prompt text that means identical samples. The pipeline derives s_i by hashing (run seed, query id), which keeps
  them far apart; `check_seeds` warns when two prompts of one call overlap.
  (vLLM only: numerics of batched GPU kernels can still flip a token now and then, so reproducibility there is
  best effort, as vLLM documents for per-request seeds.)

Token counts (`Response.n_tokens`) are generated token ids up to and including the end-of-sequence token, as
vLLM counts `len(token_ids)`; finish_reason is "stop" (EOS or a stop string) or "length" (max_tokens reached), or
"confidence" on the transformers backend when `conf_stop` cut the trace (DeepConf online's filter, check_conf_stop).

Prompts are token ids built by `encode_prompt`: the tokenizer's special tokens (BOS) are added unless the text
already starts with the BOS string, which is the case after most chat templates; the transformers and vLLM
backends share the rule, so a prompt is the same token sequence on both.
"""
from __future__ import annotations

import math
import numbers
import os
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from itertools import pairwise
from typing import Any

from ttc.harvest.confidence import ConfidenceSpec, GroupStop, token_confidence
from ttc.harvest.types import Response, Sampling
from ttc.replay.errors import InputError, UserError

MAX_SEED = 2**63 - 1
# --trace-cap (ttc run, the depth view of docs/semantics.md): a trace still running at the cap stops there and is asked
# for its answer so far by this continuation of it, decoded greedily for at most PROBE_TOKENS tokens (until its box
# closes or EOS). AutoTTS's release (3cd98d1) does not ship the prompt its probes were made with (its README: a
# probe response per trace prefix, costing nothing: kappa_probe = 0), so this is the project's: the forced-answer
# form its answer extraction reads (the last closed \boxed{}). The trace pays the cap; the probe is not charged.
PROBE_PROMPT = ("\n\nConsidering the limited time, I have to give the solution based on the thinking so far. The "
                "final answer is \\boxed{")
PROBE_TOKENS = 24


class StabilityRule:
    """--depth-rule stability on one trace, live: fed the answers of its probes in order (None: no valid answer), it
    says stop at the first that makes the last m answers valid and equal, the rule replay applies to a probed pool's
    probes (replay/reference_depth.py stopped_trace)."""

    def __init__(self, m: int):
        if not isinstance(m, numbers.Integral) or isinstance(m, bool) or m < 1:
            raise InputError(f"depth_m must be a whole number >= 1, got {m!r}")
        self.m, self.last = int(m), []

    def feed(self, answer: str | None) -> bool:
        self.last = (self.last + [answer])[-self.m:]
        return len(self.last) == self.m and self.last[0] is not None and all(a == self.last[0] for a in self.last)


def probe_value(probe: str) -> str | None:
    """The answer a probe's continuation gives (the math extractor, normalised, as --oracle gt and sc read a
    response): what the stability rule and the depth policies compare. A continuation that never closes the
    \\boxed{ the probe prompt opened (it ran out of PROBE_TOKENS, or stopped) gave no answer: None."""
    from .scoring import response_answer

    depth = 1
    for ch in probe:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return response_answer("gt", PROBE_PROMPT + probe, "stop")
    return None


class BackendError(UserError, RuntimeError):
    """A backend could not produce responses (server errors after retries, a dead worker, ...): the environment failed,
    not the input, so the command line exits with status 1 and names the error (`error: BackendError: ...`)."""

    exit_code = 1
    show_type = True


# ----------------------------------------------------------------------------------------------------- shared


def package_version(pkg: str) -> str | None:
    """The installed version of a distribution (None when absent), read from metadata: nothing is imported."""
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def check_sampling(prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> None:
    if len(prompts) != len(seeds):
        raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds; each prompt needs its own seed")
    # n, max_tokens, temperature and top_p were checked when the Sampling was made (harvest/types.py)
    check_seeds(prompts, seeds, sampling.n, sampling.temperature)


def check_seeds(prompts: Sequence[str], seeds: Sequence[int], n: int, temperature: float = 1.0) -> None:
    """Validate seeds and warn when two prompts' seed ranges [s, s + n) overlap: for identical prompts the
    overlapping samples are copies of each other (sample j uses seed + j), for different prompts their draws are
    correlated. A warning, not an error: a caller may want identical prompts with one seed to answer alike (a
    judge scoring duplicate responses); a harvest should never see it. Greedy decoding ignores seeds."""
    for s in seeds:
        if not isinstance(s, int) or isinstance(s, bool) or s < 0 or s + n - 1 > MAX_SEED:
            raise InputError(f"seed {s!r} out of range: seeds are integers in [0, 2**63 - n]")
    if temperature == 0 or len(seeds) < 2:
        return
    order = sorted(range(len(seeds)), key=lambda i: seeds[i])
    close = [(a, b) for a, b in pairwise(order) if seeds[b] - seeds[a] < n]
    if not close:
        return
    same = [(a, b) for a, b in close if prompts[a] == prompts[b]]
    a, b = (same or close)[0]
    what = ("identical prompts get identical samples" if same else "different prompts share random streams")
    warnings.warn(f"{len(close)} pair(s) of prompts have seeds less than n={n} apart (e.g. prompts {a} and {b}, "
                  f"seeds {seeds[a]} and {seeds[b]}): sample j uses seed + j, so {what}; derive per-prompt seeds "
                  "at least n apart (e.g. by hashing)", stacklevel=3)


def check_conf_stop(prompts: Sequence[str], conf_stop: Sequence[float | None] | None,
                    confidence: ConfidenceSpec | None) -> list[float | None]:
    """One group-confidence threshold per prompt (None: that prompt's traces run to their end). A trace is stopped
    where the group-lows signal says DeepConf's online filter would stop it, so that signal must be recorded: its
    positions and values are what replay reads from the stopped trace, and its `window` is the filter's. A list of
    Nones stops nothing and needs nothing, as on the backends that cannot stop a trace."""
    if conf_stop is None:
        return [None] * len(prompts)
    stops = list(conf_stop)
    if len(stops) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(stops)} conf_stop thresholds; give one per prompt (or None)")
    for s in stops:
        if s is not None and (isinstance(s, bool) or not isinstance(s, numbers.Real) or math.isnan(s)):
            raise InputError(f"a conf_stop threshold must be a number or None, got {s!r}")
    if any(s is not None for s in stops) and (confidence is None or "group-lows" not in confidence.signals):
        raise InputError("conf_stop needs a confidence spec with the group-lows signal (--confidence group-lows), "
                         "whose window and top-k the stopping filter uses")
    return [None if s is None else float(s) for s in stops]


def _refuse_conf_stop(conf_stop: Sequence[float | None] | None, why: str) -> None:
    if conf_stop is not None and any(s is not None for s in conf_stop):
        raise InputError(f"this backend cannot stop a trace mid-way on its confidence ({why}); use the transformers "
                         "backend")


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and text.startswith(bos))
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _load_tokenizer(name_or_path: str, revision: str | None = None, trust_remote_code: bool = False):
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(name_or_path, revision=revision, trust_remote_code=trust_remote_code)
    except Exception as e:
        raise InputError(f"could not load the tokenizer of {name_or_path!r}: {_first_line(e)}") from None


# ------------------------------------------------------------------------------------------------ transformers


class TransformersBackend:
    """Sampling with a transformers causal LM, on CPU or one GPU; for small models and end-to-end tests.

    The decoding loop is written here rather than taken from `model.generate` so that every sample row draws from
    its own `torch.Generator` seeded s + j: `generate` samples all rows from one global generator, which would
    make a row's tokens depend on how many rows share its batch. A prompt is prefilled once (a batch of one) and
    its cache repeated for up to `batch_size` sample rows; rows of different prompts never share a batch.
    Sampling is vLLM's: temperature, then nucleus (top_p), no top-k or penalties; the model's own
    generation_config defaults (top_k=50, repetition penalties, ...) are not applied. temperature 0 is greedy:
    one row is decoded and repeated n times.

    conf_stop (DeepConf online, Fu et al. 2025): a row whose group confidence falls below its prompt's threshold
    at step t, once `window` tokens are in, is done there, finish_reason "confidence", holding t + 1 tokens (the
    one drawn at t included; DeepConf forces end-of-sequence there, which costs the same one token) and the
    signals of those tokens. It draws nothing more, so the prompt's other rows are the samples they would have been
    without it (harvest.confidence.GroupStop)."""

    def __init__(self, model: Any, tokenizer: Any = None, device: str | None = None, dtype: Any = None,
                 batch_size: int = 16, revision: str | None = None, trust_remote_code: bool = False):
        import torch

        if batch_size < 1:
            raise InputError(f"batch_size must be at least 1, got {batch_size}")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.batch_size = batch_size
        self.revision = revision
        if isinstance(model, (str, os.PathLike)):
            from transformers import AutoModelForCausalLM

            self.model_name = str(model)
            torch_dtype = _torch_dtype(dtype) if dtype is not None else (
                "auto" if self.device.type == "cuda" else torch.float32)
            try:
                self.model = AutoModelForCausalLM.from_pretrained(self.model_name, revision=revision, dtype=torch_dtype,
                                                                  trust_remote_code=trust_remote_code)
            except Exception as e:
                raise InputError(f"could not load model {self.model_name!r}: {_first_line(e)}") from None
        else:
            self.model = model
            self.model_name = getattr(model, "name_or_path", None) or type(model).__name__
            if dtype is not None:
                self.model = self.model.to(_torch_dtype(dtype))
        self.model.to(self.device).eval()
        self._cache_kw = _cache_keyword(self.model)
        if tokenizer is None:
            if not isinstance(model, (str, os.PathLike)) and not getattr(model, "name_or_path", None):
                raise ValueError("an in-memory model needs tokenizer=")
            tokenizer = self.model_name
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = _load_tokenizer(str(tokenizer), revision, trust_remote_code)
        self.tokenizer = tokenizer
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        if not self.eos_ids:
            raise InputError(f"{self.model_name}: neither the model nor the tokenizer names an EOS token")

    def info(self) -> dict[str, Any]:
        return {
            "backend": "transformers", "model": self.model_name, "revision": self.revision,
            "device": str(self.device), "dtype": str(next(self.model.parameters()).dtype).replace("torch.", ""),
            "batch_size": self.batch_size, "eos_token_ids": sorted(self.eos_ids),
            "sampler": "own loop: temperature then top_p; sample j of a prompt with seed s uses torch.Generator(s + j)",
            "token_count": "generated token ids up to and including EOS",
            "versions": {"torch": package_version("torch"), "transformers": package_version("transformers")},
        }

    def generate(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int], *,
                 stop: Sequence[str] | None = None, confidence: ConfidenceSpec | None = None,
                 conf_stop: Sequence[float | None] | None = None, trace_cap: int = 0, probe_every: int = 0,
                 depth_m: int = 0) -> list[list[Response]]:
        """trace_cap > 0: a trace still running after trace_cap tokens stops there (finish_reason "cap", n_tokens
        the cap) and is asked for its answer so far (probe_answer): its text is the trace, PROBE_PROMPT and the
        probe's continuation. probe_every > 0 (the stability depth rule, depth_m >= 1): a trace still running
        after each probe_every tokens (below max_tokens) is probed there, and stops at the first probe that makes its
        last depth_m probe answers valid and equal (finish_reason "stable", n_tokens the probe's offset, its text
        as a capped trace's). Probing draws nothing from a trace's generator, so a stopped trace is the prefix of
        the whole one."""
        check_sampling(prompts, sampling, seeds)
        thresholds = check_conf_stop(prompts, conf_stop, confidence)
        if not isinstance(trace_cap, numbers.Integral) or isinstance(trace_cap, bool) or trace_cap < 0:
            raise InputError(f"trace_cap must be a whole number of tokens >= 0, got {trace_cap!r}")
        if not isinstance(probe_every, numbers.Integral) or isinstance(probe_every, bool) or probe_every < 0:
            raise InputError(f"probe_every must be a whole number of tokens >= 0, got {probe_every!r}")
        if probe_every:
            StabilityRule(depth_m)  # (checks it)
        stop = [s for s in (stop or ()) if s]
        capped = sampling if not 0 < trace_cap < sampling.max_tokens else Sampling(
            n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=int(trace_cap),
            seed=sampling.seed)
        out = []
        for text, seed, floor in zip(prompts, seeds, thresholds):
            ids = encode_prompt(self.tokenizer, text)
            probes: dict[str, str] = {}  # trace text -> its probe (greedy: one per distinct text of a prompt)
            depth = (int(probe_every), int(depth_m), sampling.max_tokens, probes) if probe_every else None
            if sampling.temperature == 0:
                rows = self._decode(ids, [seed], capped, stop, confidence, floor, depth) * sampling.n
            else:
                rows = []
                for start in range(0, sampling.n, self.batch_size):
                    chunk = [seed + j for j in range(start, min(sampling.n, start + self.batch_size))]
                    rows.extend(self._decode(ids, chunk, capped, stop, confidence, floor, depth))
            if capped is not sampling:  # the traces still running at the cap: stopped there, and probed
                rows = [self._at_cap(ids, r, probes) if r.finish_reason == "length" else r for r in rows]
            out.append(rows)
        return out

    def _at_cap(self, ids: list[int], r: Response, probes: dict[str, str]) -> Response:
        """A trace stopped by the cap, with its answer so far: the probe's greedy continuation of the prompt, the
        trace's text and PROBE_PROMPT (one probe per distinct trace text of a prompt: greedy, so the same)."""
        if r.text not in probes:
            probes[r.text] = self.probe_answer(ids, r.text)
        return Response(text=r.text + PROBE_PROMPT + probes[r.text], n_tokens=r.n_tokens, finish_reason="cap",
                        signals=r.signals)

    def probe_answer(self, ids: list[int], trace: str) -> str:
        """The continuation of prompt `ids` + `trace` + PROBE_PROMPT, greedy, at most PROBE_TOKENS tokens: until EOS
        or the \\boxed{ the prompt opened closes (its text up to and including that brace)."""
        import torch

        body = self.tokenizer.encode(trace + PROBE_PROMPT, add_special_tokens=False)
        got: list[int] = []
        with torch.inference_mode():
            full = torch.tensor([ids + body], device=self.device)
            try:  # the last position's logits only, as in _decode
                out = self.model(input_ids=full, use_cache=True, logits_to_keep=1)
            except TypeError:
                out = self.model(input_ids=full, use_cache=True)
            past = _kv_cache(out)
            for _ in range(PROBE_TOKENS):
                t = int(out.logits[0, -1, :].argmax())
                if t in self.eos_ids:
                    break
                got.append(t)
                text = self.tokenizer.decode(got, skip_special_tokens=True)
                depth = 1
                for k, ch in enumerate(text):
                    depth += {"{": 1, "}": -1}.get(ch, 0)
                    if depth == 0:
                        return text[:k + 1]
                out = self.model(input_ids=torch.tensor([[t]], device=self.device), use_cache=True,
                                 **{self._cache_kw: past})
                past = _kv_cache(out)
        return self.tokenizer.decode(got, skip_special_tokens=True)

    def _decode(self, ids: list[int], row_seeds: list[int], sampling: Sampling, stop: list[str],
                confidence: ConfidenceSpec | None = None, threshold: float | None = None,
                depth: tuple | None = None) -> list[Response]:
        """depth: (every, m, limit, probes): the stability rule (generate's probe_every, depth_m), probing a running
        trace at every multiple of `every` tokens below `limit` (a trace cut at max_tokens is not probed there: its
        pool reads no probe at or past its end), with `probes` the prompt's cache of probe texts."""
        d = _Decoding(self, ids, row_seeds, sampling, stop, confidence, threshold, depth)
        d.run(sampling.max_tokens)
        return d.responses()

    def trace(self, prompt: str, seed: int, sampling: Sampling, stop: Sequence[str] | None = None) -> "TraceStream":
        """One trace of `prompt` (the sample drawn with `seed`, as generate draws it) advanced a segment at a time
        (TraceStream.segment): the depth policies live (replay.live.run_live_depth)."""
        check_sampling([prompt], Sampling(n=1, temperature=sampling.temperature, top_p=sampling.top_p,
                                          max_tokens=sampling.max_tokens, seed=sampling.seed), [seed])
        ids = encode_prompt(self.tokenizer, prompt)
        return TraceStream(self, ids, _Decoding(self, ids, [seed], sampling, [s for s in (stop or ()) if s]))

    @staticmethod
    def _choose(logits, gens, sampling: Sampling, done):
        import torch

        if sampling.temperature == 0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / sampling.temperature, dim=-1)
        if sampling.top_p < 1.0:
            sp, idx = probs.sort(dim=-1, descending=True)
            before = sp.cumsum(dim=-1) - sp          # mass of the more likely tokens; the top token always stays
            sp = sp.masked_fill(before >= sampling.top_p, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, idx, sp)
        nxt = torch.zeros(probs.shape[0], dtype=torch.long, device=probs.device)
        for r, g in enumerate(gens):
            if done[r] is None:   # a finished row draws nothing, so its generator never advances
                nxt[r] = torch.multinomial(probs[r], 1, generator=g)[0]
        return nxt


class _Decoding:
    """TransformersBackend._decode's state between tokens, so that a decoding can pause at a token count and go on
    later (TraceStream) with the very computations one uninterrupted run makes: the prompt prefilled once, its cache
    repeated for the rows, then one forward pass per token, each fed the tokens drawn before it, every row from
    its own generator (run() feeds a drawn token only when the next one is drawn)."""

    def __init__(self, backend: "TransformersBackend", ids: list[int], row_seeds: list[int], sampling: Sampling,
                 stop: list[str], confidence: ConfidenceSpec | None = None, threshold: float | None = None,
                 depth: tuple | None = None):
        import torch

        self.b, self.ids, self.sampling, self.stop = backend, ids, sampling, stop
        self.confidence, self.depth = confidence, depth
        rows = self.rows = len(row_seeds)
        k = self.k = confidence.top_logprobs if confidence is not None else 0
        self.sampled: list[list[float]] = [[] for _ in range(rows)]     # the sampled tokens' log-probs
        self.confs: list[list[float]] = [[] for _ in range(rows)]       # DeepConf's token confidence, when asked
        dev = backend.device
        self.gens = [torch.Generator(device=dev).manual_seed(s) for s in row_seeds]
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.done: list[str | None] = [None] * rows
        self.cut: list[int | None] = [None] * rows
        self.stoppers = [GroupStop(confidence.window, threshold) for _ in range(rows)] if threshold is not None \
            else None
        self.rules = [StabilityRule(depth[1]) for _ in range(rows)] if depth is not None else None
        self.window = max((len(s) for s in stop), default=0) + 4
        self.step, self.finished, self.feed = 0, False, None
        with torch.inference_mode():
            prompt = torch.tensor([ids], device=dev)
            try:   # logits of the last position only: a long prompt's full logits can take gigabytes
                out = backend.model(input_ids=prompt, use_cache=True, logits_to_keep=1)
            except TypeError:
                out = backend.model(input_ids=prompt, use_cache=True)
            self.past = _kv_cache(out)
            self.logits = out.logits[:, -1, :].float().expand(rows, -1)
            if rows > 1:
                self.past.batch_repeat_interleave(rows)
            if k > self.logits.shape[-1]:
                raise InputError(f"--confidence-top-k {k} exceeds the vocabulary of {backend.model_name} "
                                 f"({self.logits.shape[-1]} tokens)")

    def run(self, until: int) -> None:
        """Decode until every row is done, max_tokens are drawn, or `until` steps (tokens per row) are."""
        import torch

        b, sampling, confidence, k = self.b, self.sampling, self.confidence, self.k
        tokens, done, depth = self.tokens, self.done, self.depth
        with torch.inference_mode():
            while not self.finished and self.step < until:
                if self.feed is not None:
                    out = b.model(input_ids=self.feed.view(self.rows, 1), use_cache=True, **{b._cache_kw: self.past})
                    self.past = _kv_cache(out)
                    self.logits = out.logits[:, -1, :].float()
                    self.feed = None
                logits = self.logits
                nxt = b._choose(logits, self.gens, sampling, done)
                if confidence is not None:
                    # the model's own distribution, before temperature and top-p: what vLLM returns by default
                    lp = torch.log_softmax(logits, dim=-1)
                    chosen = lp.gather(1, nxt.view(-1, 1)).view(-1).tolist()
                    top = lp.topk(k, dim=-1).values.tolist() if k else None
                for r, t in enumerate(nxt.tolist()):
                    if done[r] is not None:
                        continue
                    tokens[r].append(t)
                    if confidence is not None:
                        self.sampled[r].append(chosen[r])
                        if k:
                            self.confs[r].append(token_confidence(top[r], k))
                    if t in b.eos_ids:
                        done[r] = "stop"
                    elif self.stop:
                        tail = b.tokenizer.decode(tokens[r][-self.window:], skip_special_tokens=True)
                        if any(s in tail for s in self.stop):
                            full = b.tokenizer.decode(tokens[r], skip_special_tokens=True)
                            hits = [full.find(s) for s in self.stop if s in full]
                            if hits:
                                done[r], self.cut[r] = "stop", min(hits)
                    # after the checks above: a trace whose last token is EOS or ends a stop string is still one the
                    # filter stopped (its lows end below the threshold there, which is how replay will read it)
                    if self.stoppers is not None and self.stoppers[r].feed(self.confs[r][-1]):
                        done[r] = "confidence"
                    if self.rules is not None and done[r] is None and len(tokens[r]) % depth[0] == 0 \
                            and len(tokens[r]) < depth[2]:
                        trace = b.tokenizer.decode(tokens[r], skip_special_tokens=True)
                        if trace not in depth[3]:
                            depth[3][trace] = b.probe_answer(self.ids, trace)
                        if self.rules[r].feed(probe_value(depth[3][trace])):
                            done[r] = "stable"
                self.step += 1
                if all(d is not None for d in done) or self.step == sampling.max_tokens:
                    self.finished = True
                else:
                    self.feed = nxt

    def text(self, r: int) -> str:
        """Row r's text so far (EOS dropped, cut at a stop string)."""
        body = [t for t in self.tokens[r] if t not in self.b.eos_ids]
        text = self.b.tokenizer.decode(body, skip_special_tokens=True)
        return text[:self.cut[r]] if self.cut[r] is not None else text

    def responses(self) -> list[Response]:
        res = []
        for r in range(self.rows):
            text = self.text(r)
            if self.done[r] == "stable":  # (its tokens hold no EOS: text is the probed trace)
                text = text + PROBE_PROMPT + self.depth[3][text]
            signals = self.confidence.compute(self.sampled[r], self.confs[r] if self.k else None) \
                if self.confidence is not None else None
            res.append(Response(text=text, n_tokens=len(self.tokens[r]), finish_reason=self.done[r] or "length",
                                signals=signals))
        return res


class TraceStream:
    """One trace decoded a segment at a time (TransformersBackend.trace): segment(every) draws up to `every` more
    tokens with the trace's own generator and cache, exactly the tokens one uninterrupted generation of that sample
    draws (tests/test_run_depth.py checks it on the tiny model), and returns (Response, probe): a trace still
    running below max_tokens is probed there as --depth-rule stability probes it (finish_reason "probe", its text
    the trace, PROBE_PROMPT and the probe's continuation; probe that continuation), else its end (the Response
    generate gives, probe None). Its decoding state stays in memory (the model's cache for the trace) until it is
    dropped."""

    def __init__(self, backend: "TransformersBackend", ids: list[int], decoding: _Decoding):
        self.b, self.ids, self.d = backend, ids, decoding
        self.ended = False

    @property
    def tokens(self) -> int:
        return len(self.d.tokens[0]) if self.d is not None else 0

    def text(self) -> str:
        """The trace's text so far."""
        return self.d.text(0)

    def advance_to(self, n: int) -> None:
        """Decode up to n tokens without probing: a trace an earlier process left running at n, taken up again (the
        same tokens, drawn by its own generator); an error if it ends before n."""
        self.d.run(int(n))
        if self.d.finished or self.d.done[0] is not None or len(self.d.tokens[0]) != n:
            raise ValueError(f"the trace ended at {len(self.d.tokens[0])} tokens, before {n}: it is not the trace "
                             "that was left running there (another model or sampler?)")

    def segment(self, every: int) -> tuple[Response, str | None]:
        if self.ended:
            raise ValueError("the trace has ended")
        if not isinstance(every, numbers.Integral) or isinstance(every, bool) or every < 1:
            raise InputError(f"a segment must be a whole number of tokens >= 1, got {every!r}")
        d = self.d
        d.run(d.step + int(every))
        if d.finished or d.done[0] is not None:
            self.ended = True
            self.d = None  # (the cache is no longer needed)
            return d.responses()[0], None
        trace = d.text(0)
        probe = self.b.probe_answer(self.ids, trace)
        return Response(text=trace + PROBE_PROMPT + probe, n_tokens=len(d.tokens[0]), finish_reason="probe"), probe


def _kv_cache(out: Any) -> Any:
    """A forward pass's KV cache: `out.cache` from transformers 5.24, `out.past_key_values` before."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _cache_keyword(model: Any) -> str:
    """The keyword a model's forward takes its KV cache by: `cache` from transformers 5.24 (which warns on
    `past_key_values`, deprecated), `past_key_values` before."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _torch_dtype(dtype: Any):
    import torch

    if isinstance(dtype, str):
        if dtype == "auto":
            return "auto"
        try:
            dtype = getattr(torch, dtype)
        except AttributeError:
            raise InputError(f"unknown dtype {dtype!r}") from None
    if not isinstance(dtype, torch.dtype):
        raise InputError(f"unknown dtype {dtype!r}")
    return dtype


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
        v = getattr(src, "eos_token_id", None) if src is not None else None
        if v is None:
            continue
        ids.update(int(x) for x in (v if isinstance(v, (list, tuple, set)) else [v]))
    return ids


# -------------------------------------------------------------------------------------------------------- vLLM


class VLLMBackend:
    """vLLM's offline engine: one `LLM.generate` call per batch of prompts, with one `SamplingParams(n,
    temperature, top_p, max_tokens, seed=s_i)` per prompt, so continuous batching and prefix caching see all of
    them at once while each prompt keeps its own seed.

    data_parallel_size > 1 starts that many worker processes, each pinned (CUDA_VISIBLE_DEVICES) to its own
    tensor_parallel_size GPUs and holding a full engine; a call's prompts are split into contiguous slices, one
    per worker, and the results put back in order. Per-prompt seeds make the result independent of the split.
    (vLLM's own offline data parallelism needs the same one-process-per-rank launch, with its VLLM_DP_* variables;
    doing it here keeps the backend a plain object.) The GPUs used are the first dp * tp of CUDA_VISIBLE_DEVICES,
    or 0 .. dp * tp - 1 when it is unset. Alternatively run one harvest per GPU on disjoint query shards."""

    def __init__(self, model: str, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                 enable_prefix_caching: bool = True, gpu_memory_utilization: float = 0.9,
                 revision: str | None = None, dtype: str = "auto", max_model_len: int | None = None,
                 seed: int = 0, tokenizer: str | None = None, trust_remote_code: bool = False,
                 use_tqdm: bool = False, **engine_kwargs: Any):
        if tensor_parallel_size < 1 or data_parallel_size < 1:
            raise InputError("tensor_parallel_size and data_parallel_size must be at least 1")
        try:
            import vllm  # noqa: F401  (lazy: only the GPU path needs it)
        except ImportError:
            raise InputError("the vllm backend needs the `vllm` package (pip install vllm, on a GPU machine); "
                             "use the transformers or openai backend otherwise") from None
        self.model_name = str(model)
        self.revision = revision
        self.use_tqdm = use_tqdm
        self.data_parallel_size = data_parallel_size
        self.llm_kwargs: dict[str, Any] = dict(
            model=self.model_name, revision=revision, tensor_parallel_size=tensor_parallel_size,
            enable_prefix_caching=enable_prefix_caching, gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype, seed=seed, trust_remote_code=trust_remote_code, **engine_kwargs)
        if max_model_len is not None:
            self.llm_kwargs["max_model_len"] = max_model_len
        if tokenizer is not None:
            self.llm_kwargs["tokenizer"] = tokenizer
        self.tokenizer = _load_tokenizer(tokenizer or self.model_name, revision, trust_remote_code)
        self._llm = None
        self._workers: list[tuple[Any, Any]] = []
        if data_parallel_size == 1:
            from vllm import LLM

            self._llm = LLM(**self.llm_kwargs)
        else:
            self._start_workers(tensor_parallel_size)

    def info(self) -> dict[str, Any]:
        engine = {k: v for k, v in self.llm_kwargs.items() if k not in ("model", "revision")}
        engine["data_parallel_size"] = self.data_parallel_size
        return {
            "backend": "vllm", "model": self.model_name, "revision": self.revision, "engine": engine,
            "sampler": "SamplingParams per prompt: n, temperature, top_p, max_tokens, seed=s_i (child j uses s_i + j)",
            "token_count": "len(CompletionOutput.token_ids), EOS included",
            "versions": {p: package_version(p) for p in ("vllm", "torch", "transformers")},
        }

    def generate(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int], *,
                 stop: Sequence[str] | None = None, confidence: ConfidenceSpec | None = None,
                 conf_stop: Sequence[float | None] | None = None) -> list[list[Response]]:
        _refuse_conf_stop(conf_stop, "DeepConf does it with a vLLM logits processor, ConfPerReqLogitsProcessor, "
                                     "which is not wired here")
        check_sampling(prompts, sampling, seeds)
        jobs = [(encode_prompt(self.tokenizer, p), _vllm_params(sampling, s, stop, confidence))
                for p, s in zip(prompts, seeds)]
        if self._llm is not None:
            return _vllm_run(self._llm, jobs, sampling.n, self.use_tqdm, confidence)
        k = len(self._workers)
        bounds = [len(jobs) * w // k for w in range(k + 1)]
        busy = []
        for w, (conn, _) in enumerate(self._workers):
            part = jobs[bounds[w]:bounds[w + 1]]
            if part:
                conn.send(("generate", part, sampling.n, confidence))
                busy.append(w)
        out: list[list[Response]] = []
        errors = []
        for w in busy:
            try:
                status, payload = self._workers[w][0].recv()
            except EOFError:
                status, payload = "error", f"exited with code {self._workers[w][1].exitcode}"
            if status != "ok":
                errors.append(f"worker {w}: {payload}")
            else:
                out.extend([Response(*r) for r in rows] for rows in payload)
        if errors:
            raise BackendError("vLLM data-parallel worker failed: " + " | ".join(errors))
        return out

    def _start_workers(self, tp: int) -> None:
        import multiprocessing as mp

        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        need = tp * self.data_parallel_size
        gpus = [g.strip() for g in visible.split(",") if g.strip()] if visible else [str(i) for i in range(need)]
        if len(gpus) < need:
            raise InputError(f"data_parallel_size {self.data_parallel_size} x tensor_parallel_size {tp} needs {need} "
                             f"GPUs, CUDA_VISIBLE_DEVICES lists {len(gpus)}")
        ctx = mp.get_context("spawn")
        for w in range(self.data_parallel_size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_vllm_worker, args=(child, gpus[w * tp:(w + 1) * tp], self.llm_kwargs),
                               daemon=True)
            proc.start()
            self._workers.append((parent, proc))
        failed = []
        for w, (conn, proc) in enumerate(self._workers):
            try:
                status, payload = conn.recv()
            except EOFError:
                status, payload = "error", f"exited with code {proc.exitcode} before it was ready"
            if status != "ready":
                failed.append(f"worker {w}: {payload}")
        if failed:
            self.close()
            raise BackendError("vLLM data-parallel workers failed to start: " + " | ".join(failed))

    def close(self) -> None:
        for conn, _proc in self._workers:
            try:
                conn.send(("stop",))
            except (OSError, BrokenPipeError):
                pass
        for _conn, proc in self._workers:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
        self._workers = []

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass


def _vllm_params(sampling: Sampling, seed: int, stop: Sequence[str] | None,
                 confidence: ConfidenceSpec | None = None) -> dict[str, Any]:
    kw: dict[str, Any] = dict(n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
                              max_tokens=sampling.max_tokens, seed=seed)
    if stop:
        kw["stop"] = list(stop)
    if confidence is not None:  # logprobs=0: the sampled token's alone; k: its k alternatives too
        kw["logprobs"] = confidence.top_logprobs
    return kw


def _vllm_signals(c: Any, confidence: ConfidenceSpec) -> dict[str, float | None]:
    """The signals of one CompletionOutput from its `logprobs`: per generated token a dict token id -> Logprob, holding
    the k most likely tokens and the sampled one (k + 1 entries when it is not among them)."""
    per_token = c.logprobs
    if per_token is None or len(per_token) != len(c.token_ids):
        raise BackendError(f"vLLM returned log-probs for {0 if per_token is None else len(per_token)} of "
                           f"{len(c.token_ids)} tokens")
    k = confidence.top_logprobs
    sampled, confs = [], []
    for t, d in zip(c.token_ids, per_token):
        try:
            sampled.append(d[t].logprob)
        except (KeyError, TypeError):
            raise BackendError("vLLM's log-probs lack a sampled token's own entry") from None
        if k:
            confs.append(token_confidence((lp.logprob for lp in d.values()), k))
    return confidence.compute(sampled, confs if k else None)


def _vllm_run(llm: Any, jobs: list[tuple[list[int], dict]], n: int, use_tqdm: bool,
              confidence: ConfidenceSpec | None = None) -> list[list[Response]]:
    from vllm import SamplingParams

    prompts = [{"prompt_token_ids": ids} for ids, _ in jobs]
    params = [SamplingParams(**kw) for _, kw in jobs]
    outputs = llm.generate(prompts, params, use_tqdm=use_tqdm)
    if len(outputs) != len(jobs):
        raise BackendError(f"vLLM returned {len(outputs)} results for {len(jobs)} prompts")
    res = []
    for ro in outputs:
        comps = sorted(ro.outputs, key=lambda o: o.index)
        if len(comps) != n:
            raise BackendError(f"vLLM returned {len(comps)} completions for a prompt, expected n={n}")
        res.append([Response(text=c.text, n_tokens=len(c.token_ids), finish_reason=str(c.finish_reason or "unknown"),
                             signals=None if confidence is None else _vllm_signals(c, confidence))
                    for c in comps])
    return res


def _vllm_worker(conn: Any, gpus: list[str], llm_kwargs: dict) -> None:  # pragma: no cover - runs in a child
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    try:
        from vllm import LLM

        llm = LLM(**llm_kwargs)
    except BaseException as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        _, jobs, n, confidence = msg
        try:   # the signals are computed here: only a few numbers per response cross the pipe, not the log-probs
            res = _vllm_run(llm, jobs, n, use_tqdm=False, confidence=confidence)
            conn.send(("ok", [[(r.text, r.n_tokens, r.finish_reason, r.signals) for r in rows] for rows in res]))
        except BaseException as e:
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))


# ------------------------------------------------------------------------------------------------------ OpenAI


def check_base_url(url, flag: str = "--base-url"):
    """A server URL the client can send to: http(s), a host, a numeric port if any. Anything else ('notaurl') was
    retried for minutes as connection errors and ended as a failing server (exit 1) instead of bad input."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(str(url))
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{flag} {url!r} is not a server URL; give http(s)://HOST[:PORT]/v1, e.g. "
                         "http://localhost:8000/v1")


class OpenAIBackend:
    """An OpenAI-compatible server (`vllm serve`, a hosted API) through the official `openai` client: its completions
    endpoint, or chat completions with chat=True; base_url ends in /v1, as for the client.

    Each prompt's n samples go out as requests of `n_per_request` choices (default 1): the request for samples
    j .. j+k-1 carries seed s_i + j (in the client's `extra_body`, with any other server parameters given as
    `extra_body`, e.g. vLLM's top_k), so a vLLM server draws exactly the samples one request with n and seed s_i
    would. Requests run on `concurrency` threads sharing one client; once a request has failed for good, the queued
    ones are not sent. generate may be called from several threads at once (`ttc run` asks for each query's next
    response as soon as it is wanted: harvest.live.BackendSource's slots): all calls together keep at most
    `concurrency` requests in flight. Retries, backoff and timeouts are the client's: connection errors, timeouts,
    408, 409, 429 and 5xx are retried `max_retries` times with exponential backoff (from 0.5 s, doubling up to 8 s,
    with jitter; or the server's Retry-After), other errors fail at once, and `timeout_s` bounds each attempt. A
    request still in flight past each further multiple of `timeout_s` is reported on stderr as it happens (one line:
    a server that accepts and never answers is not met with silence while the client retries).

    The API key is read from the environment variable `api_key_env` and handed to the client, which sends it only in
    the Authorization header; when the variable is unset the placeholder "EMPTY" goes instead (what a local `vllm
    serve` without --api-key expects; the client refuses to run without a key and would otherwise fall back to
    OPENAI_API_KEY, a key meant for another server).

    Token counts: with one choice per request, `usage.completion_tokens` (the server's count, EOS included on
    vLLM); with several, usage only gives their sum, so each choice is re-tokenized with `tokenizer` (+1 for the
    EOS of a "stop" finish) or, without one, counted in whitespace-separated words. info()["token_count"] says
    which. Chat mode sends the prompt as one user message and lets the server apply the chat template: render
    prompts without one (no tokenizer, or chat=False)."""

    RETRIED = "connection errors, timeouts, HTTP 408, 409, 429 and 5xx"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8,
                 max_retries: int = 5, timeout_s: float = 600.0, *, chat: bool = False,
                 n_per_request: int | None = 1, tokenizer: Any = None, extra_body: dict[str, Any] | None = None,
                 revision: str | None = None):
        if concurrency < 1:
            raise InputError(f"concurrency must be at least 1, got {concurrency}")
        if max_retries < 0:
            raise InputError(f"max_retries must be >= 0, got {max_retries}")
        if not timeout_s > 0:
            raise InputError(f"the request timeout must be a positive number of seconds, got {timeout_s}")
        if n_per_request is not None and n_per_request < 1:
            raise InputError(f"n_per_request must be at least 1 (or None: all n in one request), got {n_per_request}")
        if "seed" in (extra_body or {}):
            raise InputError("extra_body may not set seed: each request carries its own (s_i + j)")
        check_base_url(base_url)
        openai = _require_openai()
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.chat = chat
        self.n_per_request = n_per_request
        self.extra_body = dict(extra_body or {})
        self.revision = revision
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = _load_tokenizer(str(tokenizer), revision)
        self.tokenizer = tokenizer
        self.url = self.base_url + ("/chat/completions" if chat else "/completions")
        self._key = os.environ.get(api_key_env) or None
        self._client = openai.OpenAI(base_url=self.base_url, api_key=self._key or "EMPTY", max_retries=max_retries,
                                     timeout=timeout_s)
        self._slots = threading.BoundedSemaphore(concurrency)  # requests in flight, over every generate call
        self._inflight: dict[int, list[float]] = {}  # request -> [start, time limits reported]
        self._inflight_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._next_id = 0

    @property
    def token_count(self) -> str:
        if self.n_per_request == 1:
            return "usage"
        return "tokenizer" if self.tokenizer is not None else "whitespace"

    def info(self) -> dict[str, Any]:
        how = {"usage": "usage.completion_tokens of one-choice requests",
               "tokenizer": "re-tokenized text (+1 EOS on 'stop'); usage when n == 1 or n_per_request == 1",
               "whitespace": "whitespace-separated words (no tokenizer given); usage when a request has one choice"}
        return {
            "backend": "openai", "model": self.model, "revision": self.revision, "base_url": self.base_url,
            "endpoint": self.url, "chat": self.chat, "concurrency": self.concurrency,
            "max_retries": self.max_retries, "retried": self.RETRIED, "timeout_s": self.timeout_s,
            "n_per_request": self.n_per_request, "token_count": self.token_count,
            "token_count_rule": how[self.token_count], "extra_body": self.extra_body, "api_key_env": self.api_key_env,
            "api_key_set": self._key is not None,
            "sampler": "server-side; request for samples j.. of prompt i carries seed s_i + j",
            "versions": {"openai": package_version("openai")},
        }

    def generate(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int], *,
                 stop: Sequence[str] | None = None, confidence: ConfidenceSpec | None = None,
                 conf_stop: Sequence[float | None] | None = None) -> list[list[Response]]:
        _refuse_conf_stop(conf_stop, "the server generates each trace whole")
        check_sampling(prompts, sampling, seeds)
        k = sampling.n if self.n_per_request is None else min(self.n_per_request, sampling.n)
        tasks = [(i, j, min(k, sampling.n - j)) for i in range(len(prompts)) for j in range(0, sampling.n, k)]
        results: list[list[Response | None]] = [[None] * sampling.n for _ in prompts]

        failed = threading.Event()   # once a request has failed for good, queued ones are not sent

        def run(task):
            if failed.is_set():
                return
            i, j, m = task
            try:
                with self._slots:
                    got = self._request(prompts[i], sampling, seeds[i] + j, m, stop, confidence)
                for c, r in enumerate(got):
                    results[i][j + c] = r
            except BaseException:
                failed.set()
                raise

        if len(tasks) == 1:  # (one request: no thread pool of its own, which would cost more than the bookkeeping)
            run(tasks[0])
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                futures = [pool.submit(run, t) for t in tasks]
                for f in futures:
                    f.result()
        return [list(r) for r in results]  # type: ignore[arg-type]

    def close(self) -> None:
        self._client.close()

    def _refused(self, last: str) -> "AccessRefused":
        """A 401 or 403: the key (or its rights) is the user's to fix, so the run stops at once, exit 2, rather than
        retrying three times and saying "rerun to resume" (issue 28)."""
        key = (f"the environment variable {self.api_key_env} is not set" if self._key is None else
               f"the key in {self.api_key_env} was refused")
        return AccessRefused(f"{self.base_url} refused access ({last}): {key}; set {self.api_key_env} to a key the "
                             f"server accepts (--backend-option api_key_env=NAME reads another variable)")

    def check_access(self) -> None:
        """One cheap request (GET /models) before a run writes or generates anything: AccessRefused on a 401 or
        403. Anything else (no /models route, the server still starting) is left to the run's own retries."""
        import openai

        try:
            self._client.with_options(max_retries=0).models.list()
        except openai.APIStatusError as e:
            if e.status_code in (401, 403):
                raise self._refused(self._redact(f"HTTP {e.status_code}: {e.response.text[:200]!r}")) from None
        except Exception:
            return

    def _request(self, prompt: str, sampling: Sampling, seed: int, m: int,
                 stop: Sequence[str] | None, confidence: ConfidenceSpec | None = None) -> list[Response]:
        import openai

        kw: dict[str, Any] = {"model": self.model, "n": m, "temperature": sampling.temperature,
                              "top_p": sampling.top_p, "max_tokens": sampling.max_tokens,
                              "extra_body": {**self.extra_body, "seed": seed}}
        if stop:
            kw["stop"] = list(stop)
        if confidence is not None:  # the chat API's spelling, or the completions API's one integer
            if self.chat:
                kw.update(logprobs=True, top_logprobs=confidence.top_logprobs)
            else:
                kw["logprobs"] = confidence.top_logprobs
        token = self._begin()
        try:
            if self.chat:
                resp = self._client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kw)
            else:
                resp = self._client.completions.create(prompt=prompt, **kw)
        except openai.APIStatusError as e:
            last = self._redact(f"HTTP {e.status_code}: {e.response.text[:200]!r}")
            if e.status_code in (401, 403):
                raise self._refused(last) from None
            if e.status_code in (408, 409, 429) or e.status_code >= 500:
                raise BackendError(f"{self.url}: no answer after {self._attempts(e)} (last: {last})") from None
            raise BackendError(f"{self.url} refused the request ({last})") from None
        except openai.APIConnectionError as e:
            cause = type(e.__cause__).__name__ if e.__cause__ is not None else ""
            last = type(e).__name__ + (f" ({cause})" if cause else "")
            raise BackendError(f"{self.url}: no answer after {self._attempts(e)} (last: {last})") from None
        finally:
            self._end(token)
        return self._parse(resp, m, confidence)

    # A server that accepts and never answers kept `ttc run` silent for as long as the client retried (up to
    # (max_retries + 1) x timeout_s per request: hours with the defaults). A watcher thread says so as it happens:
    # each time requests pass another multiple of timeout_s without an answer, one line on stderr.
    _WATCH_S = 0.25

    def _begin(self) -> int:
        with self._inflight_lock:
            token = self._next_id
            self._next_id += 1
            self._inflight[token] = [time.monotonic(), 0]
            if self._watcher is None or not self._watcher.is_alive():
                self._watcher = threading.Thread(target=self._watch, name="ttc-openai-watch", daemon=True)
                self._watcher.start()
        return token

    def _end(self, token: int) -> None:
        with self._inflight_lock:
            self._inflight.pop(token, None)

    def _watch(self) -> None:
        idle = 0.0
        while idle < 5.0:  # ends after 5 s without a request; _begin starts another
            time.sleep(self._WATCH_S)
            now, late = time.monotonic(), []
            with self._inflight_lock:
                idle = idle + self._WATCH_S if not self._inflight else 0.0
                for rec in self._inflight.values():
                    passed = int((now - rec[0]) // self.timeout_s)
                    if passed > rec[1]:
                        rec[1] = passed
                        late.append(now - rec[0])
            if late:
                n = len(late)
                retries = f"{self.max_retries} time{'s' if self.max_retries != 1 else ''}"
                print(f"warning: {self.url}: {n} request{'s have' if n > 1 else ' has'} had no answer for "
                      f"{min(late):.0f} s{f'-{max(late):.0f} s' if round(max(late)) != round(min(late)) else ''}, "
                      f"past the time limit of an attempt ({self.timeout_s:g} s); the client retries each up to "
                      f"{retries} (--max-retries) before the request fails", file=sys.stderr, flush=True)

    def _attempts(self, e: Exception) -> str:
        """How many attempts the client made: its retry-count header on the last request, or its limit."""
        try:
            n = int(e.request.headers.get("x-stainless-retry-count")) + 1  # type: ignore[attr-defined]
        except (AttributeError, TypeError, ValueError):
            n = self.max_retries + 1
        return f"{n} attempt{'s' if n != 1 else ''}"

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "<api key>") if self._key else text

    def _parse(self, resp: Any, m: int, confidence: ConfidenceSpec | None = None) -> list[Response]:
        try:
            choices = sorted(resp.choices, key=lambda c: c.index or 0)
            if self.chat:
                texts = [(c.message.content if c.message is not None else None) or "" for c in choices]
            else:
                texts = [c.text or "" for c in choices]
            reasons = [str(c.finish_reason or "unknown") for c in choices]
            usage = getattr(resp.usage, "completion_tokens", None) if resp.usage is not None else None
            signals = [None if confidence is None else self._signals(c, confidence) for c in choices]
        except (AttributeError, TypeError) as e:
            raise BackendError(f"{self.url}: malformed response ({type(e).__name__}: {str(e)[:100]})") from None
        if len(choices) != m:
            raise BackendError(f"{self.url}: {len(choices)} choices for n={m}")
        if m == 1:
            if not isinstance(usage, int):
                raise BackendError(f"{self.url}: the response has no usage.completion_tokens to count tokens with")
            counts = [usage]
        elif self.tokenizer is not None:
            counts = [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) + (r == "stop")
                      for t, r in zip(texts, reasons)]
        else:
            counts = [len(t.split()) for t in texts]
        return [Response(text=t, n_tokens=c, finish_reason=r, signals=g)
                for t, c, r, g in zip(texts, counts, reasons, signals)]

    def _signals(self, choice: Any, confidence: ConfidenceSpec) -> dict[str, float | None]:
        """A choice's signals from its `logprobs`: chat gives `content`, a list of tokens each with its logprob and a
        list of top_logprobs; completions gives `token_logprobs` and `top_logprobs`, a dict token text -> logprob per
        position (so two tokens spelled alike count once there: the chat endpoint keeps them apart)."""
        lp = choice.logprobs
        if lp is None:
            raise BackendError(f"{self.url}: the server returned no logprobs (it may not support them; run without "
                               "--confidence)")
        k = confidence.top_logprobs
        if self.chat:
            content = lp.content or []
            sampled = [t.logprob for t in content]
            confs = [token_confidence((a.logprob for a in (t.top_logprobs or [])), k) for t in content] if k else None
        else:
            sampled = list(lp.token_logprobs or [])
            top = list(lp.top_logprobs or [])
            if k and len(top) != len(sampled):
                raise BackendError(f"{self.url}: top_logprobs for {len(top)} of {len(sampled)} tokens")
            confs = [token_confidence((d or {}).values(), k) for d in top] if k else None
        if any(v is None for v in sampled):
            raise BackendError(f"{self.url}: a token came back without its logprob")
        return confidence.compute(sampled, confs)


class AccessRefused(InputError):
    """The server refused the API key (HTTP 401 or 403): the user's to fix, never retried."""


def _require_openai():
    """The openai package, or MissingExtra naming the extra that brings it (harvest/registry.py)."""
    from ttc.replay.extras import MissingExtra

    from .registry import BACKENDS

    try:
        import openai
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != "openai":
            raise
        raise MissingExtra(f"the openai backend needs openai: pip install 'ttc[{BACKENDS['openai'].extra}]'") from None
    return openai


# ------------------------------------------------------------------------------------------------------ factory


def make_backend(name: str, **kw: Any):
    """The backend called `name` in harvest/registry.py's BACKENDS, built from keyword arguments (see each class)."""
    from .registry import BACKENDS

    try:
        entry = BACKENDS[name]
    except KeyError:
        raise InputError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None
    return entry.load()(**kw)


def release_backend(backend) -> None:
    """Free what a backend holds when its run ends: its close(), and the GPU memory torch cached for it (so that a
    PRM or judge loading next, or the next run in a notebook, finds it)."""
    import gc
    import sys

    close = getattr(backend, "close", None)
    if callable(close):
        close()
    gc.collect()
    torch = sys.modules.get("torch")  # only when a backend imported it
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
