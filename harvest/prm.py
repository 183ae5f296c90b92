"""Process-reward scoring: one probability per reasoning step from Qwen2.5-Math-PRM (or any PRM built the same way).

How the model is meant to be used (its model card): a chat with the system prompt `PRM_SYSTEM_PROMPT`, the problem as
the user turn and the response as the assistant turn, with the separator token "<extra_0>" written after every step.
The model emits two logits per token; a step's reward is softmax(logits)[1] at that step's separator.

Choices this module pins (documented here because pools depend on them):
- Steps ("step" mode): the response is cut at the "Step N:" markers the harvest prompt asks for, a marker counting only
  at the start of a line (markdown decoration such as "**Step 2:**", "## Step 2." or "- Step 2)" allowed). Text before
  the first marker is KEPT with the first step and text after the last marker stays with the last step, so the PRM sees
  every word the generator wrote (a wrong preamble must be able to cost reward). A response with no marker at all falls
  back to blank-line steps, the granularity the PRM was trained on. "blank" mode always cuts at blank lines. Pieces are
  stripped; empty pieces are dropped; a blank response has no steps.
- Separator text already inside a problem or response is removed, so every separator in the input marks one step.
- Too long for the model: the tokenized chat is cut on the right at `max_length` tokens and only the steps whose
  separator survives are scored. The model is causal, so each surviving step gets exactly the score it would get with
  unlimited context; the steps past the cut are reported (`last_dropped`, `stats`) instead of being given made-up
  numbers. Such a response therefore has fewer scores than steps, and its "last" aggregate is that of the last step
  that fit. Truncating on the left instead would change every surviving score (the steps would lose their problem).
- Batches are right-padded: with a causal model, padding after the last real token changes no real token's logits,
  so scores do not depend on batch size or batch composition (up to floating-point noise).
"""
from __future__ import annotations

import math
import re
import warnings
from functools import lru_cache
from typing import Any, Sequence

from ttc.replay.errors import InputError

PRM_DEFAULT = "Qwen/Qwen2.5-Math-PRM-7B"
STEP_SEPARATOR = "<extra_0>"
PRM_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
STEP_MODES = ("step", "blank")
LOADERS = ("auto", "transformers", "native")
ENGINES = ("auto", "transformers", "vllm")  # --prm-engine: auto = vllm where it is installed and CUDA is there


def resolve_engine(engine: str, device: str | None = None) -> str:
    """The engine `auto` stands for on this machine: vLLM's pooling runner on a GPU box that has vLLM, else
    transformers (the CPU path)."""
    if engine not in ENGINES:
        raise InputError(f"--prm-engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine != "auto":
        return engine
    import importlib.util

    if importlib.util.find_spec("vllm") is None or (device is not None and not str(device).startswith("cuda")):
        return "transformers"
    import torch

    return "vllm" if torch.cuda.is_available() else "transformers"

# "Step 3:" / "**Step 3:**" / "## Step 3." / "- Step 3)" at the start of a line.
_STEP_MARKER = re.compile(r"^[ \t>#*_-]*step[ \t]+\d+[ \t]*[*_]*[ \t]*[:.)]", re.IGNORECASE | re.MULTILINE)
_BLANK_LINE = re.compile(r"\n[ \t\r]*\n")


def split_steps(text: str, mode: str = "step") -> list[str]:
    """Cut a response into the steps the PRM scores (rules in the module docstring)."""
    if mode not in STEP_MODES:
        raise InputError(f"step mode must be one of {', '.join(STEP_MODES)}, got {mode!r}")
    if mode == "step":
        starts = [m.start() for m in _STEP_MARKER.finditer(text)]
        if starts:
            bounds = [0] + starts[1:] + [len(text)]   # the preamble joins the first step
            pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
            return [p.strip() for p in pieces if p.strip()]
    return [p.strip() for p in _BLANK_LINE.split(text) if p.strip()]


def aggregate(step_scores: Sequence[float]) -> dict[str, float]:
    """Collapse per-step rewards into the pool's score columns. No steps means nothing to vouch for: 0.0."""
    s = [float(x) for x in step_scores]
    if not s:
        return {"min": 0.0, "last": 0.0, "prod": 0.0}
    if not all(0.0 <= x <= 1.0 for x in s):       # also rejects NaN
        raise ValueError(f"step scores must lie in [0, 1], got {s}")
    return {"min": min(s), "last": s[-1], "prod": math.prod(s)}


@lru_cache(maxsize=1)
def native_prm_class():
    """The Qwen2.5-Math-PRM architecture (Qwen2 decoder + Linear-ReLU-Linear head, 2 labels per token) without the
    checkpoint's remote code, whose copy of the Qwen2 internals can break on newer transformers. Parameter names match
    the published checkpoint (model.*, score.0.*, score.2.*), so `from_pretrained` loads its weights unchanged."""
    import torch
    from torch import nn
    from transformers import Qwen2Model, Qwen2PreTrainedModel
    from transformers.modeling_outputs import TokenClassifierOutput

    class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.model = Qwen2Model(config)
            self.score = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.ReLU(),
                                       nn.Linear(config.hidden_size, 2))
            self.post_init()

        def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                    position_ids: torch.Tensor | None = None, **kwargs: Any) -> TokenClassifierOutput:
            kwargs.setdefault("use_cache", False)
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                **kwargs).last_hidden_state
            return TokenClassifierOutput(logits=self.score(hidden))

    return Qwen2ForProcessRewardModel


def _resolve_dtype(dtype: Any, device_type: str):
    import torch
    if dtype is None:
        return torch.bfloat16 if device_type == "cuda" else torch.float32
    if isinstance(dtype, str):
        names = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
        resolved = getattr(torch, names.get(dtype, dtype), None)
        if not isinstance(resolved, torch.dtype):
            raise InputError(f"unknown dtype {dtype!r}")
        return resolved
    return dtype


def _load_model(name: str, *, revision: str | None, dtype: Any, loader: str):
    """Load a PRM checkpoint; returns (model, loader actually used).

    "transformers": transformers' Auto classes (token-classification checkpoints through
    AutoModelForTokenClassification, anything else through AutoModel with the checkpoint's remote code, which is how
    the model card loads Qwen2.5-Math-PRM). "native": `native_prm_class`. "auto": token-classification checkpoints
    and Qwen2ForProcessRewardModel checkpoints without remote code go their obvious way; a Qwen2ForProcessRewardModel
    checkpoint with remote code tries it first and falls back to the native class, with a warning, if it fails."""
    import transformers
    from packaging.version import Version
    from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification

    # transformers renamed `torch_dtype` to `dtype` in 4.56.
    dtype_kw = {"dtype": dtype} if Version(transformers.__version__) >= Version("4.56") else {"torch_dtype": dtype}
    config = AutoConfig.from_pretrained(name, revision=revision, trust_remote_code=True)
    archs = list(getattr(config, "architectures", None) or [])
    has_remote = "AutoModel" in (getattr(config, "auto_map", None) or {})

    def auto_class():
        if any(a.endswith("ForTokenClassification") for a in archs):
            return AutoModelForTokenClassification.from_pretrained(name, revision=revision, **dtype_kw)
        return AutoModel.from_pretrained(name, revision=revision, trust_remote_code=True, **dtype_kw)

    def native():
        return native_prm_class().from_pretrained(name, revision=revision, **dtype_kw)

    if loader == "native":
        return native(), "native"
    if loader == "transformers":
        return auto_class(), "transformers"
    if "Qwen2ForProcessRewardModel" in archs:
        if not has_remote:
            return native(), "native"
        try:
            return auto_class(), "transformers"
        except Exception as exc:  # remote code written for an older transformers; same weights, same maths natively
            warnings.warn(f"PRM remote code failed to load ({type(exc).__name__}: {exc}); "
                          "loading the same checkpoint with the built-in Qwen2 PRM architecture",
                          stacklevel=3)  # the code that built the PRMScorer, past its __init__
            return native(), "native"
    return auto_class(), "transformers"


def _step_token(tokenizer) -> int:
    """The id of the step separator, refusing a tokenizer that cannot build the PRM's input."""
    if not getattr(tokenizer, "chat_template", None):
        raise InputError("the PRM tokenizer has no chat template")
    sep = tokenizer.convert_tokens_to_ids(STEP_SEPARATOR)
    if sep is None or tokenizer.encode(STEP_SEPARATOR, add_special_tokens=False) != [sep]:
        raise InputError(f"the PRM tokenizer does not encode {STEP_SEPARATOR!r} as one token; "
                         "is this a Qwen2.5-Math-PRM tokenizer?")
    return sep


class PRMScorer:
    """Scores (problem, response) pairs step by step with a process reward model.

    `model` is a hub name / local path, or an in-memory model (then `tokenizer` is required). The model must return
    per-token logits of shape [batch, seq, 2], as `.logits` or as its first output.
    """

    aggregate = staticmethod(aggregate)

    def __init__(self, model: Any = PRM_DEFAULT, tokenizer: Any = None, device: Any = None, dtype: Any = None,
                 batch_size: int = 8, step_mode: str = "step", *, max_length: int | None = None,
                 revision: str | None = None, loader: str = "auto", system_prompt: str = PRM_SYSTEM_PROMPT,
                 progress: bool = True):
        import torch

        if step_mode not in STEP_MODES:
            raise InputError(f"step mode must be one of {', '.join(STEP_MODES)}, got {step_mode!r}")
        if loader not in LOADERS:
            raise InputError(f"loader must be one of {', '.join(LOADERS)}, got {loader!r}")
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        self.device = torch.device(device) if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = _resolve_dtype(dtype, self.device.type)
        self.batch_size = int(batch_size)
        self.step_mode = step_mode
        self.system_prompt = system_prompt
        self.progress = progress
        self.revision = revision

        if isinstance(model, str):
            self.model_name = model
            if tokenizer is None:
                from transformers import AutoTokenizer
                tokenizer = AutoTokenizer.from_pretrained(model, revision=revision, trust_remote_code=True)
            model, self.loader = _load_model(model, revision=revision, dtype=self.dtype, loader=loader)
        else:
            if tokenizer is None:
                raise ValueError("an in-memory PRM model needs its tokenizer")
            self.model_name = getattr(model, "name_or_path", None) or type(model).__name__
            self.loader = "in-memory"
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.tokenizer = tokenizer

        self.sep_id = _step_token(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        if max_length is None:
            max_length = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 4096
        self.max_length = int(max_length)
        self.last_dropped: list[int] = []
        self.stats: dict[str, int] = {}

    def steps(self, response: str) -> list[str]:
        return split_steps(response.replace(STEP_SEPARATOR, ""), self.step_mode)

    def _encode(self, problem: str, response: str) -> tuple[list[int], int]:
        """Token ids of the chat (cut at max_length) and the number of steps the response has."""
        steps = self.steps(response)
        if not steps:
            return [], 0
        messages = [{"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": problem.replace(STEP_SEPARATOR, "")},
                    {"role": "assistant", "content": STEP_SEPARATOR.join(steps) + STEP_SEPARATOR}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        # The chat template already writes every special token the model expects; add none.
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if ids.count(self.sep_id) != len(steps):
            raise RuntimeError(f"expected {len(steps)} step separators in the PRM input, "
                               f"found {ids.count(self.sep_id)}")
        return ids[: self.max_length], len(steps)

    def _prepare(self, problems: Sequence[str], responses: Sequence[str]):
        """Every response's input ids, and the empty result lists the engine fills; steps cut by max_length are
        counted in last_dropped."""
        if len(problems) != len(responses):
            raise ValueError(f"{len(problems)} problems but {len(responses)} responses")
        encoded = [self._encode(p, r) for p, r in zip(problems, responses)]
        self.last_dropped = [n - ids.count(self.sep_id) for ids, n in encoded]
        return encoded, [[] for _ in encoded]

    def _count(self, encoded):
        self.stats = {"responses": len(encoded), "no_steps": sum(1 for _, n in encoded if n == 0),
                      "truncated": sum(1 for d in self.last_dropped if d > 0),
                      "dropped_steps": sum(self.last_dropped)}

    def score(self, problems: Sequence[str], responses: Sequence[str]) -> list[list[float]]:
        """Per-step rewards in [0, 1], one list per response (empty when it has no steps or none fit)."""
        import torch

        encoded, results = self._prepare(problems, responses)
        todo = sorted((i for i, (ids, _) in enumerate(encoded) if self.sep_id in ids),
                      key=lambda i: -len(encoded[i][0]))     # longest first: less padding, OOM shows up at once
        from ttc.replay.progress import progress

        with progress(len(todo), "PRM scoring", "responses", enabled=self.progress) as bar, torch.inference_mode():
            advance = bar.advance
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start:start + self.batch_size]
                width = len(encoded[batch[0]][0])
                input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
                attention = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    ids = encoded[i][0]
                    input_ids[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
                    attention[row, :len(ids)] = 1
                out = self.model(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                                 use_cache=False)
                logits = getattr(out, "logits", None)
                if logits is None:
                    logits = out[0]
                if logits.dim() != 3 or logits.shape[-1] != 2:
                    raise InputError(f"the PRM must return per-token logits of shape [batch, seq, 2], "
                                     f"got {tuple(logits.shape)}")
                for row, i in enumerate(batch):
                    ids = encoded[i][0]
                    pos = torch.tensor([k for k, t in enumerate(ids) if t == self.sep_id], device=logits.device)
                    probs = logits[row, pos].float().softmax(dim=-1)[:, 1]
                    if not torch.isfinite(probs).all():
                        raise RuntimeError(f"the PRM produced non-finite scores for response {i}")
                    results[i] = probs.cpu().tolist()
                advance(len(batch))
        self._count(encoded)
        return results

    def info(self) -> dict[str, Any]:
        """Provenance for pool.json."""
        import torch
        import transformers
        return {"model": self.model_name, "revision": self.revision, "loader": self.loader,
                "dtype": str(self.dtype).removeprefix("torch."), "device": self.device.type,
                "step_mode": self.step_mode, "separator": STEP_SEPARATOR, "system_prompt": self.system_prompt,
                "max_length": self.max_length, "truncation": "right, at step boundaries (steps past the cut unscored)",
                "transformers": transformers.__version__, "torch": torch.__version__}


class VLLMPRMScorer(PRMScorer):
    """The GPU path: the same PRM served by vLLM's pooling runner, which scores a response's steps with STEP pooling
    (the model's two-label head at every `<extra_0>` token, softmaxed; label 1 = the step is correct), batched and
    paged by the engine instead of padded batches. The input is exactly PRMScorer's (the same chat, the same step
    split, the same cut at max_length), given to vLLM as token ids, so the two paths score the same tokens; the
    transformers path stays for the CPU and the tests."""

    def __init__(self, model: str = PRM_DEFAULT, *, dtype: Any = None, step_mode: str = "step",
                 max_length: int | None = None, revision: str | None = None,
                 system_prompt: str = PRM_SYSTEM_PROMPT, progress: bool = True, tokenizer: Any = None,
                 **engine_kwargs: Any):
        from ttc.replay.extras import require

        vllm = require("vllm", "PRM scoring with --prm-engine vllm")
        if step_mode not in STEP_MODES:
            raise InputError(f"step mode must be one of {', '.join(STEP_MODES)}, got {step_mode!r}")
        self.step_mode, self.system_prompt, self.progress, self.revision = step_mode, system_prompt, progress, revision
        self.model_name, self.loader = model, "vllm"
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model, revision=revision, trust_remote_code=True)
        self.tokenizer = tokenizer
        self.sep_id = _step_token(tokenizer)
        kw = {"model": model, "revision": revision, "trust_remote_code": True, **engine_kwargs}
        if dtype is not None:
            kw["dtype"] = str(dtype).removeprefix("torch.")
        if max_length is not None:
            kw["max_model_len"] = int(max_length)
        try:
            self.llm = vllm.LLM(runner="pooling", **kw)
        except TypeError:  # vLLM before 0.10 names the pooling runner a task
            self.llm = vllm.LLM(task="reward", **kw)
        if max_length is None:  # the engine's context, so _encode cuts where vLLM would refuse
            config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
            max_length = getattr(config, "max_model_len", None) or 4096
        self.max_length = int(max_length)
        self.dtype = kw.get("dtype", "auto")
        self.last_dropped = []
        self.stats = {}

    def score(self, problems: Sequence[str], responses: Sequence[str]) -> list[list[float]]:
        from ttc.replay.progress import progress

        encoded, results = self._prepare(problems, responses)
        todo = [i for i, (ids, _) in enumerate(encoded) if self.sep_id in ids]
        reward = getattr(self.llm, "reward", None) or self.llm.encode
        with progress(len(todo), "PRM scoring (vLLM)", "responses", enabled=self.progress) as bar:
            step = 1024  # one engine call per block: vLLM schedules inside it; the bar moves between blocks
            for start in range(0, len(todo), step):
                block = todo[start:start + step]
                outs = reward([{"prompt_token_ids": encoded[i][0]} for i in block], use_tqdm=False)
                for i, out in zip(block, outs):
                    data = out.outputs.data
                    rows = data.tolist() if hasattr(data, "tolist") else list(data)
                    want = encoded[i][0].count(self.sep_id)
                    if len(rows) != want or any(len(r) != 2 for r in rows):
                        raise RuntimeError(f"vLLM returned {len(rows)} step scores for response {i}, which has "
                                           f"{want} steps in its input (is the pooler STEP at {STEP_SEPARATOR!r}?)")
                    probs = [float(r[1]) for r in rows]
                    if not all(0.0 <= p <= 1.0 for p in probs):
                        raise RuntimeError(f"vLLM returned step scores outside [0, 1] for response {i}: is the "
                                           "pooler applying softmax?")
                    results[i] = probs
                bar.advance(len(block))
        self._count(encoded)
        return results

    def info(self) -> dict[str, Any]:
        from .backends import package_version

        return {"model": self.model_name, "revision": self.revision, "engine": "vllm", "loader": "vllm pooling",
                "pooling": f"STEP at {STEP_SEPARATOR}: softmax over the two labels, label 1",
                "dtype": self.dtype, "step_mode": self.step_mode, "separator": STEP_SEPARATOR,
                "system_prompt": self.system_prompt, "max_length": self.max_length,
                "truncation": "right, at step boundaries (steps past the cut unscored)",
                "vllm": package_version("vllm"), "transformers": package_version("transformers")}
