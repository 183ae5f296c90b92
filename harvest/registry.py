"""The registry of harvest's reward oracles, generation backends, confidence signals and import formats: each
declared once here, with its name, the implementation that runs it (a "module:attribute" path, imported only when it
is used), what it needs, the options it reads and its one-line description.

Who reads it: harvest/scoring.py dispatches `ttc score` / `ttc harvest --oracle` through ORACLES (columns, tasks,
gold answers, the implementation class); harvest/backends.py's make_backend builds BACKENDS; harvest/importers.py's
import_pool runs IMPORTERS (options, directory sources); harvest/confidence.py computes SIGNALS (columns, maps to
[0, 1], what each needs from the backend). The command line takes its choices, the backend options of `ttc harvest`
(flags, defaults, help, which backend each applies to) and the help of --oracle, --backend, --confidence and the
import FORMAT from here, and the tables of oracles, backends and signals in docs/harvest.md and of import formats in
README.md are rendered from here: tests/test_registry.py holds them to it, and `python -m ttc.harvest.registry --write`
rewrites them.

This module imports only the standard library, so cli.py reads it at start-up (`ttc --help` loads no polars, numba or
torch).

Adding an oracle = its implementation class (harvest/scoring.py: config, score, optional check and runtime) + one
`Oracle` entry + `python -m ttc.harvest.registry --write`. A backend = its class (generate, info) + one `Backend` entry
(+ an `Option` for each command-line option no backend had) + the same command. An import format = its function
(src, out, options) + one `Importer` entry + the same command. A confidence signal = its function of the token
log-probs (harvest/confidence.py) + one `Signal` entry + the same command.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


# ---------------------------------------------------------------------------------------------------------- oracles


@dataclass(frozen=True)
class Oracle:
    """A reward oracle: it reads each response's text and writes `columns` into the pool (replacing them when they
    exist). impl: the class that scores ("module:Class"); tasks: the query tasks it grades (None: any); needs:
    "gold" (every query's gold answer), "code" (each query's code and input fields, LiveCodeBench execution),
    "model" (a model to load or query: --prm-model, --judge-model); gives: what replay reads from its columns
    ("gt": ground truth, "answers", "scores"); options: the scoring options it reads (cli.py's _SCORING); extra:
    the pip extra that brings its dependencies (None: the base install; "backend": that of the backend it runs on);
    doc: one line for --help; how: the docs table's account of how it scores."""

    name: str
    impl: str
    doc: str
    how: str
    columns: tuple[str, ...]
    tasks: tuple[str, ...] | None = None
    needs: frozenset = frozenset()
    gives: frozenset = frozenset()
    options: tuple[str, ...] = ()
    extra: str | None = None

    def load(self):
        return _load(self.impl)


ORACLES = {o.name: o for o in (
    Oracle("gt", "ttc.harvest.scoring:MathAnswerOracle", "math answers graded against the gold answer",
           "last `\\boxed{}` (or \"the final answer is\"), normalised; null when absent or the response hit "
           "`--max-tokens`; graded with math-verify (gold first) in worker processes with `--timeout` (5 s) per grade; "
           "each distinct answer of a query is graded once",
           ("answer", "correct"), tasks=("math",), needs=frozenset({"gold"}), gives=frozenset({"gt", "answers"}),
           options=("workers", "timeout"), extra="grade"),
    Oracle("exec", "ttc.harvest.scoring:CodeExecOracle", "lcb-exec programs run with the predicted output",
           "the literal between `[ANSWER]` tags (same null rule); the function plus the completed assertion run in a "
           "sandboxed process (`--timeout` 10 s, `--memory-mb` 512, an environment without secrets, a temporary "
           "directory)",
           ("answer", "correct"), tasks=("lcb-exec",), needs=frozenset({"gold", "code"}),
           gives=frozenset({"gt", "answers"}), options=("workers", "timeout", "memory_mb", "sandbox")),
    Oracle("prm", "ttc.harvest.scoring:PRMOracle", "a process reward model's per-step scores",
           "a process reward model (default `Qwen/Qwen2.5-Math-PRM-7B`, bf16 on CUDA; vLLM's pooling runner where "
           "vLLM and CUDA are there, else transformers: `--prm-engine`) scores each step (\"Step k:\" "
           "markers, or blank lines with `--prm-step-mode blank`); min, last and product of the step probabilities; "
           "no steps = 0",
           ("score_prm_min", "score_prm_last", "score_prm_prod", "prm_steps"), needs=frozenset({"model"}),
           gives=frozenset({"scores"}),
           options=("prm_model", "prm_engine", "prm_batch_size", "prm_step_mode", "prm_dtype", "prm_device",
                    "prm_max_length"),
           extra="harvest"),
    Oracle("judge", "ttc.harvest.scoring:JudgeOracle",
           "an LLM judge's verdict on the final answer against the gold one",
           "a judge model asked whether the response's final answer matches the gold one; the share of yes verdicts "
           "over `--judge-samples`",
           ("score_judge",), needs=frozenset({"gold", "model"}), gives=frozenset({"scores"}),
           options=("judge_model", "judge_backend", "judge_base_url", "judge_api_key_env", "judge_samples",
                    "judge_max_tokens"), extra="backend"),
)}


# --------------------------------------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class Option:
    """A command-line option of `ttc harvest` that reaches a backend's constructor: param (the command's parameter),
    flag, keyword (the constructor's), type, default and help (cli.py prefixes it with the backends that take it).
    A default of None means "the backend's own default": the keyword is then left out."""

    param: str
    flag: str
    keyword: str
    type: type
    default: Any
    help: str


BACKEND_OPTIONS = {o.param: o for o in (
    Option("dtype", "--dtype", "dtype", str, None, "model dtype, e.g. bfloat16 (default: transformers float32 on "
           "CPU and the model's own on CUDA, vllm auto)."),
    Option("device", "--device", "device", str, None, "device (default cuda when available)."),
    Option("batch_size", "--batch-size", "batch_size", int, 16, "sample rows decoded together."),
    Option("trust_remote_code", "--trust-remote-code/--no-trust-remote-code", "trust_remote_code", bool, False,
           "allow model code from the hub."),
    Option("tensor_parallel_size", "--tensor-parallel-size", "tensor_parallel_size", int, 1, "GPUs per model replica."),
    Option("data_parallel_size", "--data-parallel-size", "data_parallel_size", int, 1,
           "model replicas (each on its own GPUs)."),
    Option("gpu_memory_utilization", "--gpu-memory-utilization", "gpu_memory_utilization", float, 0.9,
           "share of GPU memory the engine may take."),
    Option("prefix_caching", "--prefix-caching/--no-prefix-caching", "enable_prefix_caching", bool, True,
           "reuse the KV cache of shared prompt prefixes."),
    Option("max_model_len", "--max-model-len", "max_model_len", int, None, "context length (default: the model's)."),
    Option("base_url", "--base-url", "base_url", str, None, "server URL ending in /v1, e.g. http://localhost:8000/v1 "
           "for `vllm serve`."),
    Option("api_key_env", "--api-key-env", "api_key_env", str, "OPENAI_API_KEY",
           "environment variable holding the API key."),
    Option("concurrency", "--concurrency", "concurrency", int, 8, "requests in flight."),
    Option("max_retries", "--max-retries", "max_retries", int, 5,
           "retries of a request that failed with a connection error, 408, 409, 429 or 5xx (the openai client's "
           "exponential backoff)."),
    Option("request_timeout", "--request-timeout", "timeout_s", float, 600.0, "seconds before a request times out."),
)}


@dataclass(frozen=True)
class Backend:
    """A generation backend: impl (the class, "module:Class", built with model=, revision= and the keywords of its
    options); options: the BACKEND_OPTIONS it takes; required: those it cannot do without; needs: "gpu" (a CUDA GPU),
    "server" (a running OpenAI-compatible server); chat: who applies the chat template, "tokenizer" (the prompt
    is rendered with the model's tokenizer here) or "server" (the prompt goes as one user message and `chat=` tells
    the backend which endpoint); extra: the pip extra it needs; concurrent: generate may be called from several
    threads at once, its `concurrency` option bounding the requests in flight over all of them (`ttc run` then asks
    for each query's next response as soon as the run wants it, instead of a call per round: harvest.live.BackendSource
    slots); stops: generate takes conf_stop: it can stop a trace mid-way on its group confidence (deepconf-online
    under ttc run; a backend that cannot generates each trace whole and the run pays it up to where the filter would
    have stopped it); probes: generate takes trace_cap, probe_every and depth_m: it can stop a trace part-way and ask
    it for its answer so far (ttc run --trace-cap, --depth-rule stability; a backend that cannot is refused them);
    doc: one line for --help and the docs table."""

    name: str
    impl: str
    doc: str
    options: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    needs: frozenset = frozenset()
    chat: str = "tokenizer"
    extra: str | None = None
    concurrent: bool = False
    stops: bool = False
    probes: bool = False

    def load(self):
        return _load(self.impl)


BACKENDS = {b.name: b for b in (
    Backend("transformers", "ttc.harvest.backends:TransformersBackend", "a transformers causal LM on CPU or one GPU, "
            "with its own seeded sampling loop (small models, tests)",
            ("dtype", "device", "batch_size", "trust_remote_code"), extra="harvest", stops=True, probes=True),
    Backend("vllm", "ttc.harvest.backends:VLLMBackend", "vLLM's offline engine (continuous batching, prefix caching): "
            "the GPU path", ("dtype", "tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization",
                             "prefix_caching", "max_model_len", "trust_remote_code"),
            needs=frozenset({"gpu"}), extra="gpu"),
    Backend("openai", "ttc.harvest.backends:OpenAIBackend", "any OpenAI-compatible server (`vllm serve`, hosted APIs) "
            "through the openai client", ("base_url", "api_key_env", "concurrency", "max_retries", "request_timeout"),
            required=("base_url",), needs=frozenset({"server"}), chat="server", extra="openai", concurrent=True),
)}


# ------------------------------------------------------------------------------------------- confidence signals


@dataclass(frozen=True)
class Signal:
    """A per-response confidence signal `ttc harvest --confidence NAME` records from the backend's token log-probs
    (harvest/confidence.py). impl: the function of (sampled log-probs, token confidences, spec) giving the raw value
    ("module:function"); column: its score column in [0, 1]; raw: the column keeping the raw value; needs: "sampled"
    (the sampled tokens' log-probs) or "top-k" (the k largest log-probs at every position, DeepConf's token
    confidence); options: the parameters it reads (window, top_k, tail: --confidence-window, ...); map: the map to
    [0, 1] (harvest.confidence.MAPS); map_doc: that map in words; how: what the raw value is; doc: one line for
    --help. kind: "score" (one number per response: a score column and its raw value) or "lows" (two list columns
    per response, `column` the positions and `raw` the values of a sequence's record lows, no score and no map:
    what replay's deepconf-online reads to stop a trace at any threshold; replay/pool.py declares them)."""

    name: str
    impl: str
    doc: str
    how: str
    column: str
    raw: str
    map: str
    map_doc: str
    needs: str = "top-k"
    options: tuple[str, ...] = ("top_k",)
    kind: str = "score"

    def load(self):
        return _load(self.impl)

    @property
    def scores(self) -> bool:
        """Whether it writes a score column in [0, 1] (one a run can select, or read as a side signal)."""
        return self.kind == "score"


# DeepConf's defaults (deepconf/wrapper.py: window_size 2048, logprobs=20; utils.py: tail_tokens 2048)
SIGNAL_DEFAULTS = {"window": 2048, "top_k": 20, "tail": 2048}
_CONF_MAP = "1 - ln(k) / x, clipped to [0, 1] (x >= ln k always; 0 = mass spread evenly over the top k)"
SIGNALS = {s.name: s for s in (
    Signal("mean-logprob", "ttc.harvest.confidence:mean_logprob", "mean log-prob of the sampled tokens (CISC-style "
           "response probability)", "the mean over generated tokens of the sampled token's log-prob",
           "score_mean_logprob", "mean_logprob", "exp", "exp(x): the geometric-mean token probability",
           needs="sampled", options=()),
    Signal("mean-conf", "ttc.harvest.confidence:mean_confidence", "DeepConf's average trace confidence",
           "the mean of the token confidences C_i over all generated tokens", "score_mean_conf", "conf_mean",
           "confidence", _CONF_MAP),
    Signal("lowest-group", "ttc.harvest.confidence:lowest_group", "DeepConf's lowest group confidence (sliding window)",
           "the smallest mean of C_i over a window of `--confidence-window` consecutive tokens (sliding by one; a "
           "shorter response is one window)", "score_lowest_group", "conf_lowest_group", "confidence", _CONF_MAP,
           options=("top_k", "window")),
    Signal("bottom-10", "ttc.harvest.confidence:bottom_groups", "DeepConf's bottom-10% group confidence",
           "the mean of the lowest 10% (at least one) of those window means", "score_bottom10_group",
           "conf_bottom10_group", "confidence", _CONF_MAP, options=("top_k", "window")),
    Signal("tail", "ttc.harvest.confidence:tail_confidence", "DeepConf's tail confidence",
           "the mean of C_i over the last `--confidence-tail` generated tokens", "score_tail_conf", "conf_tail",
           "confidence", _CONF_MAP, options=("top_k", "tail")),
    Signal("group-lows", "ttc.harvest.confidence:group_lows", "DeepConf online's stopping data: the record lows of the "
           "group confidence, so that replay stops a trace where DeepConf's online filter would at any threshold",
           "the positions t (0-based token index) where the group confidence of the window ending at t (tokens t - "
           "window + 1 .. t, as DeepConf's online filter checks it once the window is full; a shorter response: one "
           "group ending at its last token) is below every earlier one, and those group confidences",
           "conf_lows_pos", "conf_lows", "none", "none: two list columns (positions, values), raw units",
           options=("top_k", "window"), kind="lows"),
)}


# -------------------------------------------------------------------------------------------------------- importers

# The importer keywords `ttc import` sets, and their flags where the two differ.
IMPORT_FLAGS = {"per_query": "--responses", "scores": "--score"}


@dataclass(frozen=True)
class Importer:
    """A `ttc import` FORMAT: impl (the function, "module:function", called as f(src, out, **options)); doc: one line
    for --help and error messages; source: what SOURCE is (the README's table); derives: how each column is derived;
    options: the importer keywords `ttc import` may pass (IMPORT_FLAGS names their flags where they differ);
    directory: SOURCE may be a directory (otherwise it must be a file); extra: the pip extra it needs."""

    name: str
    impl: str
    doc: str
    source: str
    derives: str
    options: tuple[str, ...] = ()
    directory: bool = False
    extra: str | None = None

    def load(self):
        return _load(self.impl)

    def flags(self) -> list[str]:
        return [flag(o) for o in self.options]


def flag(keyword: str) -> str:
    """The `ttc import` option that sets an importer keyword."""
    return IMPORT_FLAGS.get(keyword, "--" + keyword.replace("_", "-"))


_SUBSET = ("limit", "per_query")
IMPORTERS = {i.name: i for i in (
    Importer("lastletters-esc", "ttc.harvest.importers:import_lastletters",
             "ESC's GPT-3.5 last-letter dump (T0.7.jsonl)",
             "ESC's `T0.7.jsonl`", "answer after \"The answer is\"; correct = exact match"),
    Importer("math500-ivt", "ttc.harvest.importers:import_math500_llama",
             "MATH-500 x 48 Llama-3.1-8B correctness + logprob (pool.jsonl)",
             "`pool.jsonl` (MATH-500 x 48 Llama-3.1-8B)",
             "correct as published; `score_conf` = exp(mean token log-prob)"),
    Importer("qwen-math-rm", "ttc.harvest.importers:import_qwen_math_rm",
             "Qwen2.5-Math reward-model example (math_cot_100.jsonl)", "Qwen2.5-Math's `math_cot_100.jsonl`",
             "correct as published; `score_rm` = logistic(reward)"),
    Importer("humaneval", "ttc.harvest.importers:import_humaneval",
             "HumanEval completions run against the tests (a directory, e.g. CodeT's dump)",
             "a directory with a HumanEval problem file and one completions file (prompt, samples), e.g. CodeT's dump",
             "each completion truncated at the first `\\nclass`, `\\ndef`, `\\n#`, `\\nif`, `\\nprint`, run as "
             "prompt + "
             "completion in a sandboxed process and the prompt + test + `check(entry_point)` in another that calls "
             "it across (`--verdict isolated`; `--verdict source`: HumanEval's own, all in one process) "
             "(`--timeout`, default 10 s); answer = "
             "hash of the whitespace-collapsed completion (a weak proxy: only textually identical programs agree)",
             _SUBSET + ("workers", "timeout", "sandbox", "verdict"), directory=True),
    Importer("search-and-learn", "ttc.harvest.importers:import_search_and_learn",
             "a HuggingFace search-and-learn result table (JSONL / Parquet)",
             "a [search-and-learn](https://github.com/huggingface/search-and-learn) result table (JSONL / Parquet: "
             "`answer`, `completions`, `scores`, `completion_tokens`)",
             "answer extracted and normalised from each completion; correct = math-verify against the gold `answer` "
             "(version in pool.json); `score_prm_min` / `_last` / `_prod` from the per-step scores, each step clipped "
             "to [0, 1] (clipped values are counted and reported; no steps = 0); `n_tokens` from `completion_tokens` "
             "when it is one count per completion (`--timeout`, default 5 s per grade)",
             _SUBSET + ("workers", "timeout"), extra="grade"),
    Importer("llmonkeys", "ttc.harvest.importers:import_llmonkeys",
             "Large Language Monkeys per-problem YAML files (a directory)",
             "a directory of [Large Language Monkeys](https://github.com/ScalingIntelligence/large_language_monkeys) "
             "per-problem YAML files (after its evaluate script)",
             "correct = `is_corrects`; answer extracted from each sample (MATH: \"The final answer is\"; GSM8K: "
             "`#### N`); query id = file stem", _SUBSET, directory=True, extra="grade"),
    Importer("livecodebench", "ttc.harvest.importers:import_livecodebench",
             "LiveCodeBench evaluated output (..._eval_all.json)",
             "LiveCodeBench's evaluated output (`..._eval_all.json`)",
             "correct = `graded_list`; code execution: answer = the predicted output (`pred_list`) as a canonical "
             "Python literal; code generation: no answer column (program texts are no answer to vote on)", _SUBSET),
    Importer("boinf", "ttc.harvest.importers:import_boinf",
             "BoInf answer dumps (analysis_{dataset}_{model}.jsonl, or their directory)",
             "a [BoInf](https://github.com/jkomiyama/BoInf-code-publish) file `analysis_<dataset>_<model>.jsonl`, or a "
             "directory of them (one pool per file, `--out`/`<model>-<dataset>`)",
             "one response per entry of `all_answers`, in generation order: answer = the extracted answer, correct = "
             "it graded against `gold_answer` (`--compare`, default by data set: AIME as integers, MATH-500 with "
             "math-verify, GPQA as letters), `n_tokens` = its completion tokens", ("compare", "workers", "timeout"),
             directory=True, extra="grade"),
    Importer("autotts", "ttc.harvest.importers:import_autotts",
             "AutoTTS reasoning traces with probe answers ({model}-{dataset}.json, or their directory)",
             "an [AutoTTS](https://github.com/zhengkid/AutoTTS) replay file `<model>-<dataset>.json`, or a directory "
             "of them (one pool per file, `--out`/`<model>-<dataset>`)",
             "one response per trace: answer = the final answer, correct = it graded against `gold_answer` "
             "(`--compare`, default by data set: AIME as integers, MATH with math-verify, GPQA as letters), `n_tokens` "
             "= the trace's total; probes as list columns `probe_answer` (\"ERR\" = null), `probe_tokens` "
             "(500, 1000, ...), `probe_correct` (graded alike)", ("compare", "workers", "timeout"), directory=True,
             extra="grade"),
    Importer("generic", "ttc.harvest.importers:import_generic",
             "a CSV / JSONL / Parquet table mapped with the column flags",
             "any CSV / JSONL / Parquet", "columns mapped by flags (below), after an optional `--sql` query (derived "
             "columns, de-duplication, nulls filled); `--gold COLUMN` grades `--answer` against it (`--compare` "
             "exact, integer or math) when the dump has no correctness",
             ("query_id", "correct", "answer", "scores", "n_tokens", "sample_idx", "hash_answers", "sql", "gold",
              "compare")),
)}


def taking(entries: dict, option: str) -> list[str]:
    """The names of the entries (backends, importers, oracles) that take an option."""
    return [name for name, e in entries.items() if option in e.options]


# ------------------------------------------------------------------------------------------------ the docs tables


def _code(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def oracle_table() -> str:
    """docs/harvest.md's table of oracles."""
    lines = ["| oracle | tasks | needs | columns | extra | how |", "|---|---|---|---|---|---|"]
    for o in ORACLES.values():
        needs = ", ".join(sorted(o.needs)) or "-"
        extra = "its backend's" if o.extra == "backend" else o.extra or "-"
        lines.append(f"| `{o.name}` | {', '.join(o.tasks) if o.tasks else 'any'} | {needs} | {_code(o.columns)} | "
                     f"{extra} | {o.how} |")
    return "\n".join(lines)


def backend_table() -> str:
    """docs/harvest.md's table of backends."""
    lines = ["| backend | needs | extra | options | what it is |", "|---|---|---|---|---|"]
    for b in BACKENDS.values():
        opts = ", ".join(f"`{BACKEND_OPTIONS[o].flag.split('/')[0]}`" + (" (required)" if o in b.required else "")
                         for o in b.options)
        lines.append(f"| `{b.name}` | {', '.join(sorted(b.needs)) or '-'} | {b.extra or '-'} | {opts} | {b.doc} |")
    return "\n".join(lines)


def signal_table() -> str:
    """docs/harvest.md's table of confidence signals."""
    lines = ["| signal | needs | score column | raw column | raw value | map to [0, 1] |", "|---|---|---|---|---|---|"]
    for s in SIGNALS.values():
        needs = "sampled log-probs" if s.needs == "sampled" else "top-k log-probs"
        col = f"`{s.column}`" if s.scores else f"`{s.column}` (list of int)"
        raw = f"`{s.raw}`" if s.scores else f"`{s.raw}` (list of float)"
        lines.append(f"| `{s.name}` | {needs} | {col} | {raw} | {s.how} | {s.map_doc} |")
    return "\n".join(lines)


def importer_table() -> str:
    """README.md's table of import formats."""
    lines = ["| FORMAT | SOURCE | options | extra | what it derives |", "|---|---|---|---|---|"]
    for i in IMPORTERS.values():
        opts = "column flags (below)" if i.name == "generic" else (_code(i.flags()) or "-")
        lines.append(f"| `{i.name}` | {i.source} | {opts} | {i.extra or '-'} | {i.derives} |")
    return "\n".join(lines)


def methods_table() -> str:
    """README.md's table of the field's methods (replay/policies.py METHODS; imported here only when rendering)."""
    from ttc.replay.policies import markdown_methods

    return markdown_methods()


TABLES = {"docs/harvest.md": (oracle_table, backend_table, signal_table),
          "README.md": (importer_table, methods_table)}


def rewrite_option_rows(text: str) -> str:
    """README.md's rows of --policy, --eliminate and --select: the choices after the row's '): ' are the
    registries' (replay/policies.py), rendered as --help renders them."""
    from ttc.replay.policies import ELIMINATION_RULES, REGISTRY, SELECTION_RULES, markdown_choices

    out = []
    for line in text.splitlines(keepends=True):
        for flag, entries in (("--policy", REGISTRY), ("--eliminate", ELIMINATION_RULES),
                              ("--select", SELECTION_RULES)):
            if line.startswith(f"| `{flag}") and "): " in line:
                head = line[:line.index("): ") + 3]
                line = f"{head}{markdown_choices(entries)} |\n"
        out.append(line)
    return "".join(out)


def rewrite_tables(text: str, tables) -> str:
    """`text` with each markdown table whose header row is a rendered table's header replaced by that table."""
    lines = text.splitlines(keepends=True)
    for render in tables:
        new = render()
        header = new.splitlines()[0]
        starts = [i for i, ln in enumerate(lines) if ln.rstrip("\n") == header]
        if len(starts) != 1:
            raise SystemExit(f"expected one table starting {header!r}, found {len(starts)}")
        end = starts[0]
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[starts[0]:end] = [ln + "\n" for ln in new.splitlines()]
    return "".join(lines)


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - exercised through tests/test_registry.py
    """`python -m ttc.harvest.registry`: print the tables; with --write, rewrite them in README.md and
    docs/harvest.md."""
    import sys
    from pathlib import Path

    argv = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parent.parent
    for rel, renders in TABLES.items():
        if "--write" in argv:
            path = root / rel
            text = rewrite_tables(path.read_text(), renders)
            path.write_text(rewrite_option_rows(text) if rel == "README.md" else text)
            print(f"rewrote {len(renders)} table(s) in {rel}")
        else:
            for render in renders:
                print(f"{rel}:\n{render()}\n")


if __name__ == "__main__":  # pragma: no cover
    main()
