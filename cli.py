"""`ttc`: the project's command line (typer). `ttc replay` replays allocation policies over a cached pool.

How a command ends (issue 11): bad input, i.e. any UserError (replay/errors.py: PoolError, HarvestError,
SourceError, SynthError, MissingExtra, BackendError, InputError) or an option the parser refuses, is one
`error: ...` line on stderr and exit status 2 (BackendError, a failing server or engine, 1). Any other exception is a
bug in ttc, never the user's mistake: its traceback, then a line asking to report it, and exit status 1. Commands
therefore catch nothing themselves; the command group below (_Commands) does it for all of them.

One convention for every command (issue 11):
- a pool a command reads is a positional argument, defaulting to the embedded pool where one pool is read
  (`ttc replay [POOL]`, `ttc info [POOL]`, `ttc score POOL`, `ttc report POOL...`); a directory a command writes
  is `--out`;
- lists are comma-separated (`--budgets 4,8`, `--sizes 10,20`); `--policy` and `--oracle` also repeat;
- `--seeds N` is a number of seeds, with `--seed-start S` the first; `--seed S` is one seed (synth, harvest);
- `--queries` / `--limit` count queries, `--responses` responses per query (`-n` in harvest);
- an enumeration is a choice: `--help` lists its values and the parser refuses any other;
- the options `ttc harvest` and `ttc score` share are declared once (_SCORING, and _ENGINE: where the work runs).
Old spellings (`replay --pool`, `import --per-query`, `harvest --n`, `theory --n/--trials/--seed`) still work,
hidden from `--help`, with a deprecation warning."""
from __future__ import annotations

import enum
import functools
import gc
import inspect
import math
import shlex
import sys
import traceback
from pathlib import Path
from typing import Any, List, Optional

import typer
from typer.core import TyperGroup, TyperOption

from ttc.replay.errors import NOTES, InputError, UserError

# click's parser errors, from typer (which vendors click since 0.26 and depended on it before)
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _version() -> str:
    """ttc's version and the versions a bug report needs, from package metadata (nothing heavy is imported)."""
    import platform
    from importlib import metadata

    def v(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    libs = ", ".join(f"{d} {v(d)}" for d in ("numpy", "numba", "polars", "typer"))
    return f"ttc {v('ttc')} (python {platform.python_version()}, {platform.system()}; {libs})"


class _Commands(TyperGroup):
    """The `ttc` command group: what a command raises ends here, one of two ways (module docstring)."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        ctx.meta["ttc.argv"] = list(args)  # the command line as given, for a bug report
        return super().parse_args(ctx, args)

    def invoke(self, ctx: typer.Context):
        NOTES.deferred = True  # notes are printed when the command ends, unless it ends in one error line
        try:
            return super().invoke(ctx)
        except _UsageError as e:  # the parser refused an option: the same one line as any bad input
            NOTES.clear()
            if type(e).__name__ == "NoArgsIsHelpError":
                raise
            sub = e.ctx.info_name if e.ctx is not None and e.ctx.parent is not None else None
            typer.echo(f"error: {e.format_message()} (see: ttc {sub + ' ' if sub else ''}--help)", err=True)
            raise typer.Exit(e.exit_code) from None
        except UserError as e:
            NOTES.clear()
            typer.echo(f"error: {type(e).__name__ + ': ' if e.show_type else ''}{e}", err=True)
            raise typer.Exit(e.exit_code) from None
        except (_ClickException, typer.Exit, typer.Abort):
            raise  # the parser's and typer's own ways to end
        except Exception:
            traceback.print_exc(file=sys.stderr)
            argv = shlex.join(["ttc", *ctx.meta.get("ttc.argv", [])])
            typer.echo(f"This is a bug in ttc, not a problem with your input: please report it with the traceback "
                       f"above, the command line ({argv}) and the output of `ttc --version` ({_version()}).",
                       err=True)
            raise typer.Exit(1) from None
        finally:
            NOTES.deferred = False
            for line in NOTES:
                typer.echo(line, err=True)
            NOTES.clear()


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True,
                  help="Adaptive test-time compute allocation: harvest sample pools, replay allocation policies.")


def _print_version(value: bool):
    if value:
        typer.echo(_version())
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print ttc's version (and its libraries') and exit.")):
    """Adaptive test-time compute allocation: harvest sample pools, replay allocation policies."""


# seeds are int64 in the engine (and numpy's generators take no negative seed): refused by the parser outside
# 0 .. 2**62, so that seed_start + seeds stays an int64
_SEED_MAX = 2**62


def _fail(msg: str):
    """Refuse the user's input: `error: msg` and exit status 2 (the command group prints it)."""
    raise InputError(msg)


def _floats(text: str, name: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        _fail(f"{name} takes comma-separated numbers, got {text!r}")
    if not vals:
        _fail(f"{name} is empty")
    return vals


def _ints(text: str, name: str) -> list[int]:
    vals = _floats(text, name)
    if any(not math.isfinite(v) or v != int(v) for v in vals):
        _fail(f"{name} takes comma-separated integers, got {text!r}")
    return [int(v) for v in vals]


def _renamed(ctx: typer.Context, new: str, old: str, new_flag: str, old_flag: str) -> Any:
    """The value of parameter `new`, or of its deprecated hidden spelling `old` (with a warning); never both."""
    value = ctx.params[old]
    if value is None:
        return ctx.params[new]
    src = ctx.get_parameter_source(new)
    if src is not None and src.name == "COMMANDLINE":
        _fail(f"{old_flag} is the old spelling of {new_flag}; give only {new_flag}")
    typer.echo(f"warning: {old_flag} is deprecated; use {new_flag}", err=True)
    return value


def _value(choice):
    """The string an enumerated option stands for (None stays None)."""
    return choice.value if isinstance(choice, enum.Enum) else choice


def _option_group(group: dict, arg: str):
    """A decorator giving a command the options of `group` (parameter -> (type, option)), after its own, and handing
    them to it as one dict, the keyword `arg`."""
    def decorate(command):
        sig = inspect.signature(command, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != arg]
        shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
                  for name, (annotation, option) in group.items()]

        @functools.wraps(command)
        def wrapper(**kwargs):
            return command(**{k: v for k, v in kwargs.items() if k not in group},
                           **{arg: {name: kwargs[name] for name in group}})

        wrapper.__signature__ = sig.replace(parameters=own + shared)
        wrapper.__annotations__ = {p.name: p.annotation for p in own + shared}
        return wrapper
    return decorate


def _allowed(name: str) -> str:
    """' Allowed: (0, 1).': a parameter's allowed values for its --help, from the declaration RunConfig checks them
    against (replay/policies.py param())."""
    from ttc.replay.policies import PARAMS_BY_NAME, allowed

    why = PARAMS_BY_NAME[name].metadata["why"]
    return f" Allowed: {allowed(name)}" + (f" ({why})." if why else ".")


def _config_group(mode: str, panel: str | None = None) -> dict:
    """The options of RunConfig's parameters, each declared once in replay/policies.py (param(): its help, flag,
    default and whether a replay sweeps it). mode "replay": the swept ones as comma lists, the others one value;
    "run": one value each; "tune": each an optional comma list (a grid to tune over)."""
    from ttc.replay.policies import PARAMS, flag, param_type

    group = {}
    for f in PARAMS:
        m = f.metadata
        if mode == "run" and not m["live"]:
            continue
        names = [flag(f.name)] + ([m["short"]] if m["short"] else [])
        kw = {"rich_help_panel": panel} if panel else {}
        typ = param_type(f.name)
        values = "" if typ is str else _allowed(f.name)  # (a string's choices: typer lists them)
        if mode == "tune" or (mode == "replay" and m["sweep"]):
            default = None if mode == "tune" else m["replay_default"] or (
                None if f.default is None else format(f.default, "g"))
            group[f.name] = (Optional[str], typer.Option(default, *names, help=m["doc"] + " A comma list." + values,
                                                         **kw))
        elif typ is str:  # a string parameter: its choices, which --help lists and the parser holds to
            kind = _choice(f.name, m["choices"])
            group[f.name] = (kind, typer.Option(kind(f.default), *names, help=m["doc"], **kw))
        else:
            group[f.name] = (Optional[typ] if f.default is None else typ,
                             typer.Option(f.default, *names, help=m["doc"] + values, **kw))
    return group


def _config_values(params: dict, mode: str) -> dict:
    """The parsed values of _config_group's options: lists where the option takes one (None: not given)."""
    from ttc.replay.policies import PARAMS, flag, param_type

    out = {}
    for f in PARAMS:
        if f.name not in params:  # (a parameter the command does not take: ttc run's replay-only ones)
            continue
        text = params[f.name]
        if mode == "tune" or (mode == "replay" and f.metadata["sweep"]):
            if text is None:
                if mode != "tune":
                    out[f.name] = [None]
                continue
            kind = param_type(f.name)
            if kind is str:
                values = [v.strip() for v in text.split(",") if v.strip()]
                bad = [v for v in values if v not in f.metadata["choices"]]
                if bad or not values:
                    _fail(f"{flag(f.name)} takes {', '.join(f.metadata['choices'])} (a comma list), got {text!r}")
                out[f.name] = values
            else:
                out[f.name] = (_ints if kind is int else _floats)(text, flag(f.name))
        else:
            out[f.name] = _value(text)
    return out


# ------------------------------------------------------------------------------- the enumerated options' values
# The registries import nothing heavy (no numba, polars or torch), so every choice is read from its entry: replay's
# policies, elimination and selection rules (replay/policies.py, whose kernel codes are looked up only when a run
# needs them), harvest's oracles, backends and import formats (harvest/registry.py), data set tasks, PRM step modes
# and prompt templates.
from ttc.harvest import registry as harvest_registry  # noqa: E402
from ttc.harvest.datasets import TASKS  # noqa: E402
from ttc.harvest.oracles.code_exec import VERDICTS as HUMANEVAL_VERDICTS  # noqa: E402
from ttc.harvest.oracles.sandbox import MODES as SANDBOX_MODES  # noqa: E402
from ttc.harvest.prm import ENGINES as PRM_ENGINES  # noqa: E402
from ttc.harvest.prm import STEP_MODES  # noqa: E402
from ttc.harvest.prompts import TEMPLATES  # noqa: E402
from ttc.replay import policies as replay_registry  # noqa: E402

POLICY_NAMES = tuple(replay_registry.REGISTRY)
ELIMINATION_RULES = tuple(replay_registry.ELIMINATION_RULES)
SELECTIONS = tuple(replay_registry.SELECTION_RULES)
LIVE_SELECTIONS = replay_registry.LIVE_SELECTIONS  # what `ttc run` can return
BUDGET_UNITS = replay_registry.BUDGET_UNITS
ORACLES = tuple(harvest_registry.ORACLES)
BACKENDS = tuple(harvest_registry.BACKENDS)
IMPORT_FORMATS = tuple(harvest_registry.IMPORTERS)
SIGNALS = tuple(harvest_registry.SIGNALS)  # confidence signals: --confidence
THEORY_ENGINES = ("check", "bisect", "off")  # replay.theory.ENGINE_MODES
HARVEST_ENGINES = ("local", "ray")  # ttc harvest / score --engine: this process, or Ray Data (harvest/ray_engine.py)


def _choice(name: str, values) -> type[enum.Enum]:
    """An enumeration typer turns into a choice: `--help` lists the values, the parser refuses any other."""
    return enum.Enum(name, [(v, v) for v in values], type=str)


Eliminate = _choice("Eliminate", ELIMINATION_RULES)
Select = _choice("Select", SELECTIONS)
Unit = _choice("Unit", BUDGET_UNITS)
ImportFormat = _choice("ImportFormat", IMPORT_FORMATS)
Backend = _choice("Backend", BACKENDS)
Template = _choice("Template", TEMPLATES)
Task = _choice("Task", TASKS)
StepMode = _choice("StepMode", STEP_MODES)
PrmEngine = _choice("PrmEngine", PRM_ENGINES)
SandboxMode = _choice("SandboxMode", SANDBOX_MODES)
Verdict = _choice("Verdict", HUMANEVAL_VERDICTS)
TheoryEngine = _choice("TheoryEngine", THEORY_ENGINES)
HarvestEngine = _choice("HarvestEngine", HARVEST_ENGINES)


def _formats(text: str) -> tuple[str, ...]:
    """--format's comma list of figure formats, each png, pdf or svg, in the order given, once each."""
    out = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    bad = [f for f in out if f not in ("png", "pdf", "svg")]
    if bad or not out:
        raise typer.BadParameter(f"{text!r}: give png, pdf and/or svg, comma-separated", param_hint="--format")
    return out


def _pool_named(value):
    """A POOL argument may name an embedded pool (`ttc replay math500-llama3.1-8b-48`): the data/... paths of a
    checkout do not exist after a wheel install (replay/data.py's resolve_pool)."""
    from ttc.replay.data import resolve_pool

    if isinstance(value, list):
        return [resolve_pool(v) for v in value]
    return resolve_pool(value)


def _names(what: str, allowed: tuple[str, ...]):
    """The callback of a repeatable, comma-separated choice (`--policy a,b --policy c`): the parser refuses an unknown
    name, and the command receives the flat list."""
    def callback(param: typer.CallbackParam, value: Optional[List[str]]) -> list[str]:
        names = [n.strip() for item in value or [] for n in str(item).split(",") if n.strip()]
        for n in names:
            if n not in allowed:
                raise typer.BadParameter(f"unknown {what} {n!r}; choose from {', '.join(allowed)}", param=param)
        return names
    return callback


def _described(entries: dict) -> str:
    """`name: doc; ...` of harvest registry entries (oracles, backends, import formats), for --help."""
    return "; ".join(f"{name}: {e.doc}" for name, e in entries.items())


def _formats_taking(option: str) -> str:
    """The import formats that take an option (harvest/registry.py), for the start of its --help."""
    return ", ".join(harvest_registry.taking(harvest_registry.IMPORTERS, option))


_CISC_TEMP_HELP = ("cisc: the temperature T of its softmax(score / T) vote weights (replay.policies.CISC_TEMP; inf: "
                   "plain majority vote, ties to the answer drawn first, as ESC's and Adaptive-Consistency's scripts "
                   "break them).")
_INVALID_VOTES_HELP = ("Count each query's invalid answers (no answer extracted) as one answer category that votes, "
                       "leads and can stop a query, as Adaptive-Consistency's criteria do; by default an invalid "
                       "answer agrees with nothing.")
_DEEPCONF_ETA_HELP = "deepconf: the percentage of valid draws it keeps, by score (the paper: 10 or 90)."
_SIDE_HELP = ("side-eb, uab: a column of the pool's responses read as their side signal in [0, 1] (uab: the "
              "confidence exp(mean token log-prob), which it needs: math500-llama3.1-8b-48's score_conf)")


def _side_option(default: str) -> typer.Option:
    """The --side option of every command that replays side-reading policies, declared here once; `default` says
    what the command does without it."""
    return typer.Option(None, "--side", metavar="COLUMN", help=f"{_SIDE_HELP}; {default}.")


_FORCE_HELP = ("Replace existing outputs that were not written by this command (by default only its own earlier "
               "output is replaced).")
# ---------------------------------------------------------------------------------------------------------- replay

@app.command("replay")
@_option_group(_config_group("replay", "Policy parameters (replay/policies.py RunConfig)"), "params")
def replay_cmd(
    ctx: typer.Context,
    pool: Optional[Path] = typer.Argument(None, callback=_pool_named, metavar="POOL", show_default=False,
                                          help="Pool directory or an embedded pool's name (default: "
                                          "lastletters-gpt35-40)."),
    pool_option: Optional[Path] = typer.Option(None, "--pool", hidden=True, help="Deprecated: the POOL argument."),
    policy: Optional[List[str]] = typer.Option(
        None, "--policy", metavar="NAME[,NAME...]", callback=_names("policy", POLICY_NAMES),
        help=f"Policies, repeat or comma-separate: {', '.join(POLICY_NAMES)}. Default: all the pool supports."),
    budgets: str = typer.Option("4,8,16,32", help="Average budgets per query (samples, or tokens with --unit tokens)."),
    seeds: int = typer.Option(100, help="Number of seeds (permutations) per configuration."),
    seed_start: int = typer.Option(0, min=0, max=_SEED_MAX,
                                   help="First seed; seeds are seed_start .. seed_start + seeds - 1."),
    score: str = typer.Option("gt", help="Score column (score_<name> or <name>), or gt: 1 if correct else 0."),
    eliminate: Eliminate = typer.Option(Eliminate("threshold"), help="Elimination rule."),
    select: Select = typer.Option(Select("bon"), help="Selection for accuracy."),
    cisc_temp: float = typer.Option(0.2, help=_CISC_TEMP_HELP),
    deepconf_eta: float = typer.Option(10.0, help=_DEEPCONF_ETA_HELP),
    unit: Unit = typer.Option(Unit("samples"), help="Budget unit."),
    conf: float = typer.Option(0.95, help="sc-beta: confidence P(p1 > p2) needed to stop."),
    prior: Optional[str] = typer.Option(None, metavar="COLUMN", help="marginal-gain: a column of the pool's "
                                        "queries.parquet holding each query's predicted success probability in "
                                        "[0, 1] (default: none, Laplace's estimate from its own scores)."),
    side: Optional[str] = _side_option("default: none, side-eb reads 0.5 and uab is refused"),
    invalid_votes: bool = typer.Option(False, "--invalid-votes", help=_INVALID_VOTES_HELP),
    out: Optional[Path] = typer.Option(None, help="Write one row per (configuration, budget, seed) to this Parquet "
                                       "file."),
    per_query: Optional[Path] = typer.Option(None, help="Write the per-query allocation of every run to this Parquet "
                                             "file."),
    curve: Optional[Path] = typer.Option(None, help="Write uniform's exact curves (coverage@k, best-of-k) to this "
                                         "Parquet file."),
    threads: Optional[int] = typer.Option(None, help="Worker threads (default: all cores); results do not depend on "
                                          "it."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
    params: dict = None,
    wide: bool = typer.Option(False, "--wide", help="Print every configuration's row with every column (the full "
                              "grid) instead of each policy at its best configuration per budget."),
):
    """Replay allocation policies over a cached pool at many budgets and seeds; print mean ± standard error."""
    from ttc.replay.run import ReplayRequest, run_replay

    pool = _renamed(ctx, "pool", "pool_option", "the POOL argument (ttc replay POOL)", "--pool")
    req = ReplayRequest(
        pool=pool, policies=policy or [], budgets=_floats(budgets, "--budgets"), seeds=seeds, seed_start=seed_start,
        score=score, eliminate=_value(eliminate), select=_value(select), cisc_temp=cisc_temp,
        deepconf_eta=deepconf_eta, unit=_value(unit), conf=conf, out=out, per_query=per_query, curve=curve,
        threads=threads, force=force, prior=prior, side=side, invalid_votes=invalid_votes,
        wide=wide, **_config_values(params, "replay"))
    run_replay(req)


# ---------------------------------------------------------------------------------------------------------- import

@app.command("import")
def import_cmd(
    ctx: typer.Context,
    fmt: ImportFormat = typer.Argument(..., metavar="FORMAT", help=f"The dump's format (the README's table): "
                                       f"{_described(harvest_registry.IMPORTERS)}."),
    source: Path = typer.Argument(..., help="The dump as published: a file (generic: .parquet, .csv, .jsonl), or a "
                                  "directory for " + " and ".join(n for n, i in harvest_registry.IMPORTERS.items()
                                                                  if i.directory) + "."),
    out: Path = typer.Option(..., "--out", help="Pool directory to write (new or empty)."),
    query_id: str = typer.Option("query_id", help="generic: the query id column."),
    correct: Optional[str] = typer.Option(None, help="generic: the ground-truth column (bool or 0/1)."),
    answer: Optional[str] = typer.Option(None, help="generic: the final-answer column (empty = invalid)."),
    score: Optional[List[str]] = typer.Option(None, metavar="NAME=COLUMN",
                                              help="generic: a score column in [0, 1] (repeat)."),
    n_tokens: Optional[str] = typer.Option(None, help="generic: the token-count column."),
    sample_idx: Optional[str] = typer.Option(None, help="generic: the generation-order column (default: row order)."),
    hash_answers: bool = typer.Option(False, help="generic: store answers as hashes (no third-party text)."),
    sql: Optional[str] = typer.Option(None, metavar="QUERY", help="generic: a polars SQL query over the table "
                                      "`source`, run before the column flags map its result: derive columns "
                                      "(REGEXP_REPLACE(path, '.*/q(\\d+)/.*', '\\1') AS qid, EXP(logprob) AS "
                                      "conf), drop repeated rows (SELECT DISTINCT), fill nulls (COALESCE(correct, "
                                      "false)), filter (WHERE). No Python runs."),
    limit: Optional[int] = typer.Option(None, help=f"{_formats_taking('limit')}: only the first N queries (a quick "
                                        "look before a long import)."),
    responses: Optional[int] = typer.Option(None, help=f"{_formats_taking('per_query')}: only the first M responses "
                                            "of each query."),
    per_query: Optional[int] = typer.Option(None, hidden=True, help="Deprecated: --responses."),
    workers: Optional[int] = typer.Option(None, help=f"{_formats_taking('workers')}: processes that run tests or "
                                          "grade answers (default: all cores)."),
    timeout: Optional[float] = typer.Option(None, help="humaneval: seconds per program (default 10); "
                                            "search-and-learn, boinf, autotts: seconds per math-verify grade "
                                            "(default 5)."),
    sandbox: Optional[SandboxMode] = typer.Option(None, help=f"{_formats_taking('sandbox')}: isolation of the "
                                                  "programs, as in ttc score (default auto)."),
    gold: Optional[str] = typer.Option(None, metavar="COLUMN", help="generic: a gold-answer column; correct = the "
                                       "--answer compared with it (--compare), for a dump without correctness."),
    compare: Optional[str] = typer.Option(None, metavar="HOW", help=f"{_formats_taking('compare')}: how an answer "
                                          "is compared with the gold one: integer (AIME), choice (a letter A-J, "
                                          "GPQA; not generic), math (math-verify), exact (equal strings); default "
                                          "auto: by the data set's name (generic: exact); pool.json records which."),
    verdict: Optional[Verdict] = typer.Option(None, help=f"{_formats_taking('verdict')}: isolated (default: the test "
                                              "in a process of its own, calling the program's function across and "
                                              "comparing plain values) or source (HumanEval's own check: one "
                                              "process, the returned object's ==; forgeable, docs/harvest.md)."),
):
    """Convert a sample dump into a pool. Named formats are public dumps and the outputs of search-and-learn, Large
    Language Monkeys and LiveCodeBench; `generic` maps any table: one row per response, or one row per query with
    list columns (exploded in list order)."""
    from ttc.harvest.importers import import_pool, written_pools
    from ttc.replay.outputs import check_new_pool
    from ttc.replay.pool import load_pool

    fmt = _value(fmt)
    check_new_pool(out, reads=[source])  # before reading the dump (and grading it)
    responses = _renamed(ctx, "responses", "per_query", "--responses", "--per-query")
    pairs = [s.split("=", 1) for s in (score or [])]
    if any(len(p) != 2 or not p[0] or not p[1] for p in pairs):
        _fail("--score takes NAME=COLUMN, e.g. --score prm=prm_min")
    # the importer's keywords: those its registry entry takes, and any other given, which import_pool refuses
    values = {"query_id": query_id, "correct": correct, "answer": answer, "scores": dict(pairs) if pairs else None,
              "n_tokens": n_tokens, "sample_idx": sample_idx, "hash_answers": hash_answers, "sql": sql, "limit": limit,
              "per_query": responses, "workers": workers, "timeout": timeout, "sandbox": _value(sandbox),
              "compare": compare, "gold": gold, "verdict": _value(verdict)}
    defaults = {"query_id": "query_id", "hash_answers": False}
    takes = harvest_registry.IMPORTERS[fmt].options
    options = {k: v for k, v in values.items() if v is not None and (k in takes or v != defaults.get(k))}
    pool = import_pool(fmt, source, out, options)
    for path in written_pools(pool):
        p = load_pool(path)
        for w in p.meta.get("warnings", []):
            typer.echo(f"warning: {path.name}: {w}" if path != pool else f"warning: {w}", err=True)
        line = f"wrote {path}: {p.n_queries} queries, {p.off[-1]} responses"
        if p.has_gt:
            line += f", pass@1 {float(p.correct.mean()):.4f}"
        typer.echo(line)


# ------------------------------------------------------------------------------------------------------------ info

@app.command("info")
def info_cmd(
    pool: Optional[Path] = typer.Argument(None, callback=_pool_named, metavar="POOL", show_default=False,
                                          help="Pool directory or an embedded pool's name (default: "
                                          "lastletters-gpt35-40)."),
    plot: Optional[Path] = typer.Option(None, help="Write uniform's exact curves as a PNG."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
):
    """What to check before trusting a pool: sizes, columns, difficulty, exact curves, score-vs-truth agreement."""
    from ttc.replay.pool import DEFAULT_POOL
    from ttc.replay.run import run_info

    run_info(pool if pool is not None else DEFAULT_POOL, plot, force=force)


# --------------------------------------------------------------------------------------------------------- signals

@app.command("signals")
def signals_cmd(
    pool: Optional[Path] = typer.Argument(None, callback=_pool_named, metavar="POOL", show_default=False,
                                          help="Pool directory with ground truth (default: the embedded "
                                          "data/lastletters-gpt35-40)."),
    ks: Optional[str] = typer.Option(None, "--ks", help="Failed draws k (comma list; default 1, 2, 4, ... below the "
                                     "largest pool size)."),
    seeds: int = typer.Option(20, help="Number of seeds (replay's permutations) the AUC is averaged over."),
    seed_start: int = typer.Option(0, min=0, max=_SEED_MAX, help="First seed; also seeds the bootstrap."),
    bootstrap: int = typer.Option(200, help="Bootstrap replicates over queries for the standard errors."),
    out: Optional[Path] = typer.Option(None, help="Write one row per (target, signal, k) to this Parquet file."),
    plot: Optional[Path] = typer.Option(None, help="Draw AUC against k per signal to this PNG."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
):
    """How informative each side signal is: among queries whose first k draws all failed, the AUC of each signal
    (scores, lengths, truncation, invalid answers, wrong-answer agreement, query metadata) for 'the query is
    solvable' and 'the next draw is correct', mean over seeds ± a bootstrap standard error over queries."""
    from ttc.replay.signals import SignalsRequest, run_signals

    run_signals(SignalsRequest(pool=pool, ks=_ints(ks, "--ks") if ks else None, seeds=seeds, seed_start=seed_start,
                               bootstrap=bootstrap, out=out, plot=plot, force=force))


# ------------------------------------------------------------------------------------------------------------ tune

_GRID_PANEL = "Parameter grid (comma lists; only parameters the policy uses)"


@app.command("tune")
@_option_group(_config_group("tune", _GRID_PANEL), "params")
def tune_cmd(
    pool: Optional[Path] = typer.Argument(None, callback=_pool_named, metavar="POOL", show_default=False,
                                          help="Pool directory to tune on (default: the embedded "
                                          "data/lastletters-gpt35-40)."),
    policy: Optional[str] = typer.Option(None, "--policy", metavar="NAME", help="The policy to tune (one)."),
    method: Optional[str] = typer.Option(None, "--method", metavar="NAME", help="Or a method of the report's "
                                         "methods table (its fixed parameters are the default; a grid overrides "
                                         "them)."),
    budgets: str = typer.Option("4,8,16,32", help="Average budgets per query; each is tuned separately."),
    seeds: int = typer.Option(100, help="Number of seeds (permutations) per configuration, on each part."),
    seed_start: int = typer.Option(0, min=0, max=_SEED_MAX,
                                   help="First seed; seeds are seed_start .. seed_start + seeds - 1."),
    score: str = typer.Option("gt", help="Score column (score_<name> or <name>), or gt: 1 if correct else 0."),
    eliminate: Optional[Eliminate] = typer.Option(None, help="Elimination rule of --policy (default threshold)."),
    select: Optional[Select] = typer.Option(None, help="Selection for accuracy (--policy; default bon; a method has "
                                            "its own)."),
    metric: Optional[str] = typer.Option(None, help="What is maximised and reported: coverage or accuracy (default: "
                                         "coverage for --policy, accuracy for --method)."),
    unit: Unit = typer.Option(Unit("samples"), help="Budget unit."),
    holdout: Optional[float] = typer.Option(None, help="Share of the queries held out for reporting (default 0.5); "
                                            "the rest tunes. 0: tune and report on every query (flagged)."),
    split_seed: int = typer.Option(0, min=0, max=_SEED_MAX, help="Seed of the split of the queries."),
    report_pool: Optional[Path] = typer.Option(None, callback=_pool_named,
                                               help="Tune on the whole of POOL and report on the whole of this "
                                               "pool instead of splitting one."),
    grid: Optional[List[str]] = typer.Option(None, "--grid", metavar="FIELD=V1,V2", help="A RunConfig field by "
                                             "its own name (the same as its option above), repeat.",
                                             rich_help_panel=_GRID_PANEL),
    conf: float = typer.Option(0.95, help="sc-beta: confidence P(p1 > p2) needed to stop."),
    cisc_temp: float = typer.Option(0.2, help=_CISC_TEMP_HELP),
    deepconf_eta: float = typer.Option(10.0, help=_DEEPCONF_ETA_HELP),
    out: Optional[Path] = typer.Option(None, help="Write the result table (with the split's provenance) to this "
                                       "Parquet file."),
    split_out: Optional[Path] = typer.Option(None, help="Write the split, one row per query (query_id, part, pool), "
                                             "to this Parquet file."),
    invalid_votes: bool = typer.Option(False, "--invalid-votes", help=_INVALID_VOTES_HELP),
    side: Optional[str] = _side_option("default: none, side-eb reads 0.5 and uab is refused"),
    threads: Optional[int] = typer.Option(None, help="Worker threads (default: all cores); results do not depend on "
                                          "it."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
    params: dict = None,
):
    """Choose a policy's (or method's) parameters on one part of the queries (or one pool) and report them on the
    held-out part (or another pool); every number tuned on the data it reports is flagged."""
    from ttc.replay.tune import TuneRequest, run_tune

    values = _config_values(params, "tune")
    for item in grid or []:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            _fail(f"--grid takes FIELD=V1,V2, got {item!r}")
        if name in values:
            _fail(f"--grid {name}: the parameter is already given")
        ints = name in replay_registry.RunConfig.__dataclass_fields__ and replay_registry.param_type(name) is int
        values[name] = (_ints if ints else _floats)(text, f"--grid {name}")
    run_tune(TuneRequest(pool=pool, policy=policy, method=method, grid=values, budgets=_floats(budgets, "--budgets"),
                         seeds=seeds, seed_start=seed_start, score=score, eliminate=_value(eliminate),
                         select=_value(select), metric=metric, unit=_value(unit), holdout=holdout,
                         split_seed=split_seed, report_pool=report_pool, conf=conf, cisc_temp=cisc_temp,
                         deepconf_eta=deepconf_eta, out=out, split_out=split_out,
                         threads=threads, force=force, invalid_votes=invalid_votes, side=side))


# --------------------------------------------------------------------------------------------------------- compare

@app.command("compare")
def compare_cmd(
    pools: Optional[List[Path]] = typer.Argument(None, callback=_pool_named, metavar="POOL", show_default=False,
                                                 help="Pool directories with ground truth (default: every embedded "
                                                 "pool in data/)."),
    budgets: Optional[str] = typer.Option(None, help="Average budgets per query (samples); each is tuned "
                                          "separately (default 4,8,16,32; the coverage view's)."),
    depth: bool = typer.Option(False, "--depth", help="The depth view instead, on pools with probes (ttc import "
                               "autotts): the leaderboard's width x depth entries against its width-only ones at "
                               "equal token budgets, no verifier (answer agreement, majority answer), the best of "
                               "each kind and their difference ± SE per budget."),
    token_multiples: Optional[str] = typer.Option(None, help="With --depth: token budgets per query, in multiples of "
                                                  "each pool's median response length (default 1,2,4,8,16, the "
                                                  "leaderboard's)."),
    seeds: int = typer.Option(100, help="Number of seeds (permutations) per configuration, on each part."),
    seed_start: int = typer.Option(0, min=0, max=_SEED_MAX,
                                   help="First seed; seeds are seed_start .. seed_start + seeds - 1."),
    holdout: float = typer.Option(0.5, help="Share of each pool's queries held out for reporting; the rest tunes. "
                                  "0: tune and report on every query (flagged)."),
    split_seed: int = typer.Option(0, min=0, max=_SEED_MAX, help="Seed of the split of the queries."),
    policy: Optional[List[str]] = typer.Option(
        None, "--policy", metavar="NAME[,NAME...]", callback=_names("policy", POLICY_NAMES),
        help="Published policies to compare, repeat or comma-separate (default: every one the pool supports); the "
             "oracle and this project's own (side-eb) are always compared."),
    side: Optional[str] = _side_option("every pool must have it (default: side-eb tries each score column, chosen on "
                                       "the tuning part, and uab is listed as not run)"),
    out: Optional[Path] = typer.Option(None, help="Directory for compare.parquet, compare.md and split.parquet."),
    threads: Optional[int] = typer.Option(None, help="Worker threads (default: all cores); results do not depend on "
                                          "it."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
):
    """Every published policy, tuned on held-out queries, against side-eb tuned alike and the hindsight oracle, per
    pool and budget: the best published, side-eb's paired difference from it and the share of the gap to the oracle
    it closes. With --depth, width x depth policies against width-only ones at equal tokens instead."""
    from ttc.replay.compare import CompareRequest, run_compare

    if depth and budgets is not None:
        _fail("--budgets are the coverage view's sample budgets; the depth view's are --token-multiples")
    if not depth and token_multiples is not None:
        _fail("--token-multiples are the depth view's budgets: add --depth")
    kw = {"budgets": _floats(budgets, "--budgets")} if budgets is not None else {}
    if token_multiples is not None:
        kw["token_multiples"] = _floats(token_multiples, "--token-multiples")
    run_compare(CompareRequest(pools=list(pools or []), seeds=seeds, seed_start=seed_start, holdout=holdout,
                               split_seed=split_seed, policies=policy or None, side=side, out=out, threads=threads,
                               force=force, depth=depth, **kw))


# ----------------------------------------------------------------------------------------------------- leaderboard

@app.command("leaderboard")
def leaderboard_cmd(
    pools: Optional[List[Path]] = typer.Argument(None, metavar="POOL_OR_DIR", show_default=False,
                                                 help="Pool directories with ground truth, or directories of pools "
                                                 "(e.g. the --out of ttc import boinf)."),
    embedded: bool = typer.Option(False, "--embedded", help="Add the embedded pools (data/)."),
    budgets: str = typer.Option("1,2,4,8,16", help="Sample budgets per query (reasoning pools saturate early)."),
    token_multiples: str = typer.Option("1,2,4,8,16", help="Token budgets per query, in multiples of each pool's "
                                        "median response length."),
    tracks: str = typer.Option("coverage,sc", help="coverage: a verifier stops a query at its first correct "
                               "response (threshold rule on the ground truth); sc: answer agreement stops it and the "
                               "majority answer is given (pools with answers)."),
    units: Optional[str] = typer.Option(None, help="samples, tokens or both (default: samples everywhere, tokens "
                                        "where a pool has token counts; naming tokens refuses a pool without)."),
    seeds: int = typer.Option(100, help="Seeds (permutations) per configuration, on each half."),
    seed_start: int = typer.Option(0, help="First seed; seeds are seed_start .. seed_start + seeds - 1."),
    holdout: float = typer.Option(0.5, help="Share of each pool's queries held out for reporting; the rest tunes. "
                                  "0: tune and report on every query (flagged)."),
    split_seed: int = typer.Option(0, help="Seed of the split of the queries."),
    out: Optional[Path] = typer.Option(None, help="Directory for leaderboard.parquet, aggregate.parquet, "
                                       "leaderboard.md and figures/."),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="Write the heatmaps and curves (PDF, PNG)."),
    side: Optional[str] = _side_option("a comma list: each pool reads the first of them it has (default: "
                                       "score_conf,score_mean_logprob, the importers' and --confidence mean-logprob's "
                                       "columns); a pool with none runs uab nowhere and says so"),
    threads: Optional[int] = typer.Option(None, help="Worker threads (default: all cores); results do not depend on "
                                          "it."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
):
    """Every policy and rule combination each pool supports, tuned on a seeded half of its queries and reported on
    the other half against uniform and the hindsight oracle, at sample and token budgets; then across pools: mean
    rank, pools beating uniform beyond 2 SE, median efficiency gain."""
    from ttc.replay.leaderboard import LeaderboardRequest, run_leaderboard

    names = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    run_leaderboard(LeaderboardRequest(
        pools=list(pools or []), embedded=embedded, budgets=_floats(budgets, "--budgets"),
        token_multiples=_floats(token_multiples, "--token-multiples"), tracks=names(tracks),
        units=names(units) if units is not None else None, seeds=seeds, seed_start=seed_start, holdout=holdout,
        split_seed=split_seed, out=out, figures=figures, threads=threads, force=force,
        **({} if side is None else {"sides": names(side)})))


# ----------------------------------------------------------------------------------------------------------- bench

@app.command("bench")
def bench_cmd(
    queries: int = typer.Option(500, help="Queries in the synthetic pool."),
    responses: int = typer.Option(64, help="Responses per query."),
    budgets: str = typer.Option("4,8,16,32", help="Average budgets per query."),
    seeds: int = typer.Option(100, help="Number of seeds per (policy, budget)."),
    repeats: int = typer.Option(3, help="Timing repeats; the median is reported."),
    reference_seeds: int = typer.Option(1, help="Seeds the plain-Python reference runs per row (0: skip it)."),
    reference_s: Optional[float] = typer.Option(
        None, help="Seconds after its first decision at which a reference run is stopped and timed on the "
        "decisions it made (default 3; 0: every run to its end; the table says on how many decisions each row's "
        "rate was measured)."),
    growth: str = typer.Option("500,5000,50000", help="Pool sizes (queries) for the growth table, and beside them a "
                               "control with the smallest size's queries and the largest pool's responses (what the "
                               "query count adds and what the pool's bytes add); empty: skip."),
    growth_decisions: int = typer.Option(400_000, help="Decisions per cell and round of the growth table (its seeds "
                                         "scaled to it, fewer where they would take over 0.5 s; 3 rounds, one "
                                         "thread's CPU time)."),
    threads: Optional[int] = typer.Option(None, help="Worker threads (default: all cores)."),
    depth: bool = typer.Option(True, "--depth/--no-depth", help="Also time the depth policies (parallel-probe, cmc, "
                               "a width policy under the stability rule) on a synthetic probed pool (at most 100 "
                               "queries x 64 traces, at most 50 seeds) against their references."),
):
    """Time every policy on a synthetic pool against the plain-Python reference, and its growth with pool size.
    It says how long it will take before it starts (at the defaults it took 2 min 54 s on the 2-core machine, and
    4 min 34 s on a first run, which compiles its kernels: docs/performance.md)."""
    from ttc.replay.run import run_bench

    run_bench(queries=queries, responses=responses, budgets=_floats(budgets, "--budgets"), seeds=seeds,
              repeats=repeats, reference_seeds=reference_seeds, reference_s=reference_s,
              growth=_ints(growth, "--growth") if growth.strip() else [], threads=threads, depth=depth,
              growth_decisions=growth_decisions)


# ---------------------------------------------------------------------------------------------------------- report

@app.command("report")
def report_cmd(
    pools: List[Path] = typer.Argument(..., callback=_pool_named, metavar="POOL...",
                                       help="Pool directories or embedded pools' names (one report section each)."),
    out: Path = typer.Option(..., "--out", help="Directory for report.md, the figures and tables/*.csv."),
    budgets: str = typer.Option("4,8,16,32", help="Average budgets per query (samples)."),
    seeds: int = typer.Option(100, help="Number of seeds (permutations) per configuration."),
    seed_start: int = typer.Option(0, min=0, max=_SEED_MAX,
                                   help="First seed; seeds are seed_start .. seed_start + seeds - 1."),
    score: str = typer.Option("gt", help="Score column (score_<name> or <name>), or gt: 1 if correct else 0."),
    select: Select = typer.Option(Select("bon"), help="Selection for accuracy."),
    cisc_temp: float = typer.Option(0.2, help=_CISC_TEMP_HELP),
    deepconf_eta: float = typer.Option(10.0, help=_DEEPCONF_ETA_HELP),
    gamma: float = typer.Option(1.0, help="Threshold gamma of every table but the gamma sweep." + _allowed("gamma")),
    max_samples: int = typer.Option(0, help="Per-query cap of the adaptive policies (0 = the pool size)."
                                    + _allowed("max_samples")),
    latex: bool = typer.Option(False, "--latex", help="Also write every table as LaTeX (tables/*.tex)."),
    fmt: str = typer.Option("png", "--format", help="The figures' formats, comma-separated: png (200 dpi), pdf, "
                            "svg (vector, for a paper); report.md shows png when written, else the first."),
    invalid_votes: bool = typer.Option(False, "--invalid-votes", help=_INVALID_VOTES_HELP),
    side: Optional[str] = _side_option("read on each pool that has it (at least one must), every table's side-eb and "
                                       "uab read it; a pool without it lists uab as not run (default: none)"),
    threads: Optional[int] = typer.Option(None, help="Worker threads (default: all cores); results do not depend on "
                                          "it."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
):
    """The study in one command: curves, policy x budget tables, parameter sweeps, hard subsets and allocation."""
    from ttc.replay.report import ReportRequest, run_report

    req = ReportRequest(pools=pools, out=out, budgets=_floats(budgets, "--budgets"), seeds=seeds,
                        seed_start=seed_start, score=score, select=_value(select), gamma=gamma,
                        cisc_temp=cisc_temp, deepconf_eta=deepconf_eta,
                        max_samples=max_samples, latex=latex, threads=threads, force=force,
                        formats=_formats(fmt),
                        invalid_votes=invalid_votes, side=side)
    run_report(req)


# --------------------------------------------------------------------------------- harvest, score, merge (GPU box)

_BACKEND_PANEL = "Backend (--backend)"


def _backend_option(o) -> tuple:
    """(type, typer option) of a backend option of harvest/registry.py; its help names the backends that take it."""
    takes = harvest_registry.taking(harvest_registry.BACKENDS, o.param)
    required = [b for b in takes if o.param in harvest_registry.BACKENDS[b].required]
    text = f"{', '.join(takes)}: {o.help}" + (f" Required with --backend {' or '.join(required)}." if required else "")
    return (Optional[o.type] if o.default is None else o.type,
            typer.Option(o.default, o.flag, help=text, rich_help_panel=_BACKEND_PANEL))


# The options of `ttc harvest` that reach a backend's constructor, declared in harvest/registry.py: parameter ->
# (type, option).
_BACKEND_OPTIONS = {param: _backend_option(o) for param, o in harvest_registry.BACKEND_OPTIONS.items()}

_PANEL = "Scoring (--oracle)"
# The options `ttc harvest --oracle` and `ttc score` share, declared once: parameter -> (type, option).
_SCORING = {
    "workers": (Optional[int], typer.Option(None, help="Grading processes for gt / exec (default: all cores).",
                                            rich_help_panel=_PANEL)),
    "timeout": (Optional[float], typer.Option(None, help="Seconds per grade: gt (math-verify) 5, exec (program run) "
                                              "10 by default.", rich_help_panel=_PANEL)),
    "memory_mb": (int, typer.Option(512, "--memory-mb", help="exec: address-space limit of each program, in MiB.",
                                    rich_help_panel=_PANEL)),
    "sandbox": (SandboxMode, typer.Option(SandboxMode("auto"), help="exec: isolation of the programs: auto (OS "
                                          "namespaces; refused in one line where this machine gives none), strict "
                                          "(the same), guard (the in-process guard only, no OS isolation: only when "
                                          "named, never a fallback). Each run says its level on stderr; pool.json "
                                          "records it.", rich_help_panel=_PANEL)),
    "prm_model": (Optional[str], typer.Option(None, help="prm: the process reward model (default "
                                              "Qwen/Qwen2.5-Math-PRM-7B).", rich_help_panel=_PANEL)),
    "prm_batch_size": (int, typer.Option(8, help="prm: responses per forward pass.", rich_help_panel=_PANEL)),
    "prm_step_mode": (StepMode, typer.Option(StepMode("step"), help="prm: how responses are cut into steps: step "
                                             "('Step N:') or blank (blank lines).", rich_help_panel=_PANEL)),
    "prm_dtype": (Optional[str], typer.Option(None, help="prm: dtype (default bfloat16 on CUDA, float32 on CPU).",
                                              rich_help_panel=_PANEL)),
    "prm_device": (Optional[str], typer.Option(None, help="prm: device (default cuda when available).",
                                               rich_help_panel=_PANEL)),
    "prm_max_length": (Optional[int], typer.Option(None, help="prm: longest input in tokens (default: the model's "
                                                   "context).", rich_help_panel=_PANEL)),
    "prm_engine": (PrmEngine, typer.Option(PrmEngine("auto"), help="prm: transformers (CPU), vllm (vLLM's pooling "
                                           "runner on a GPU), or auto (vllm where it is installed and CUDA is "
                                           "there).", rich_help_panel=_PANEL)),
    "judge_model": (Optional[str], typer.Option(None, help="judge: the judge model (hub name, path, or served name).",
                                                rich_help_panel=_PANEL)),
    "judge_backend": (Backend, typer.Option(Backend("vllm"), help="judge: the backend that runs the judge.",
                                            rich_help_panel=_PANEL)),
    "judge_base_url": (Optional[str], typer.Option(None, help="judge with --judge-backend openai: server URL ending "
                                                   "in /v1.", rich_help_panel=_PANEL)),
    "judge_api_key_env": (str, typer.Option("OPENAI_API_KEY", help="judge with openai: environment variable holding "
                                            "the API key.", rich_help_panel=_PANEL)),
    "judge_samples": (int, typer.Option(1, help="judge: verdicts per response (1 = greedy; more = sampled at 0.6).",
                                        rich_help_panel=_PANEL)),
    "judge_max_tokens": (int, typer.Option(1024, help="judge: max tokens of each verdict.", rich_help_panel=_PANEL)),
    "progress": (bool, typer.Option(True, "--progress/--no-progress", help="Progress bars.")),
}


def _with_scoring_options(command):
    """Give a command the options of _SCORING, after its own, and hand them to it as one dict, `scoring`."""
    return _option_group(_SCORING, "scoring")(command)


_with_backend_options = _option_group(_BACKEND_OPTIONS, "backend_options")

_ENGINE_PANEL = "Engine (--engine)"
# Where `ttc harvest` and `ttc score` run, declared once: parameter -> (type, option). The Ray options are refused with
# --engine local (_ray_engine).
_ENGINE = {
    "engine": (HarvestEngine, typer.Option(HarvestEngine("local"), help="Where the work runs: local (this process) or "
                                           "ray (a Ray Data job: generation and scoring in actor pools across a Ray "
                                           "cluster, the pool written here; a grading actor uses --workers "
                                           "processes, default 1; needs the ray extra; docs/harvest.md).",
                                           rich_help_panel=_ENGINE_PANEL)),
    "address": (Optional[str], typer.Option(None, help="ray: a running cluster's address (what `ray start --head` "
                                            "prints, or auto); default: start a local cluster for this command.",
                                            rich_help_panel=_ENGINE_PANEL)),
    "ray_workers": (Optional[int], typer.Option(None, help="ray without --address: CPUs of the local cluster (default: "
                                                "all cores).", rich_help_panel=_ENGINE_PANEL)),
    "ray_retries": (int, typer.Option(3, help="ray: restarts of a lost worker and retries of its batches, and attempts "
                                      "of a failing row before it is recorded as failed (a rerun retries it).",
                                      rich_help_panel=_ENGINE_PANEL)),
}
_with_engine_options = _option_group(_ENGINE, "engine_options")


def _ray_engine(ctx: typer.Context, engine_options: dict):
    """The RayEngine of --engine ray (not yet connected), or None for --engine local, which refuses the Ray options
    rather than ignoring them. Without the ray extra: one error line naming it, before anything is read or written."""
    if _value(engine_options["engine"]) == "local":
        for param, flag in (("address", "--address"), ("ray_workers", "--ray-workers"),
                            ("ray_retries", "--ray-retries")):
            src = ctx.get_parameter_source(param)
            if src is not None and src.name == "COMMANDLINE":
                _fail(f"{flag} applies to --engine ray")
        return None
    from ttc.harvest.ray_engine import RayEngine, RayOptions

    return RayEngine(RayOptions(address=engine_options["address"], workers=engine_options["ray_workers"],
                                retries=engine_options["ray_retries"]))

_DATA_PANEL = "Data set (--dataset FILE or hub name)"
# How `ttc harvest --dataset` and `ttc run --dataset` read a data set (harvest/datasets.py load_queries), declared once.
_DATASET = {
    "task": (Optional[Task], typer.Option(None, help="Task of a file's queries (default: detected).",
                                          rich_help_panel=_DATA_PANEL)),
    "id_column": (Optional[str], typer.Option(None, help="File column holding the query id.",
                                              rich_help_panel=_DATA_PANEL)),
    "problem_column": (Optional[str], typer.Option(None, help="File column holding the problem text.",
                                                   rich_help_panel=_DATA_PANEL)),
    "answer_column": (Optional[str], typer.Option(None, help="File column holding the gold answer.",
                                                  rich_help_panel=_DATA_PANEL)),
    "split": (Optional[str], typer.Option(None, help="Hub data set split.", rich_help_panel=_DATA_PANEL)),
}
_with_dataset_options = _option_group(_DATASET, "data")

_CONF_PANEL = "Confidence signals (--confidence)"


def _signal_param_help(option: str, text: str) -> str:
    """The help of a --confidence-* parameter, prefixed with the signals that read it (harvest/registry.py)."""
    return f"{', '.join(harvest_registry.taking(harvest_registry.SIGNALS, option))}: {text}"


# The per-response confidence signals `ttc harvest` records from token log-probs (harvest/registry.py SIGNALS),
# declared once: parameter -> (type, option). Log-probs are requested from the backend only when --confidence is given.
_CONFIDENCE = {
    "confidence": (Optional[List[str]], typer.Option(
        None, metavar="NAME[,NAME...]", callback=_names("confidence signal", SIGNALS), rich_help_panel=_CONF_PANEL,
        help="Record confidence signals from the backend's token log-probs as score columns in [0, 1], the raw value "
        f"beside each (repeat or comma-separate): {_described(harvest_registry.SIGNALS)}.")),
    "confidence_window": (int, typer.Option(harvest_registry.SIGNAL_DEFAULTS["window"], rich_help_panel=_CONF_PANEL,
                                            help=_signal_param_help("window", "tokens per sliding window."))),
    "confidence_top_k": (int, typer.Option(harvest_registry.SIGNAL_DEFAULTS["top_k"], rich_help_panel=_CONF_PANEL,
                                           help=_signal_param_help("top_k", "most likely tokens per position whose "
                                                                   "log-probs make its confidence."))),
    "confidence_tail": (int, typer.Option(harvest_registry.SIGNAL_DEFAULTS["tail"], rich_help_panel=_CONF_PANEL,
                                          help=_signal_param_help("tail", "last tokens averaged."))),
}
_with_confidence_options = _option_group(_CONFIDENCE, "signals")


def _confidence_spec(ctx: typer.Context, signals: dict):
    """The ConfidenceSpec of the _CONFIDENCE options (None without --confidence); a parameter given on the command
    line that no requested signal reads is refused."""
    from ttc.harvest.confidence import parse_signals

    given = [p for p in ("window", "top_k", "tail")
             if (src := ctx.get_parameter_source("confidence_" + p)) is not None and src.name == "COMMANDLINE"]
    return parse_signals(signals["confidence"], window=signals["confidence_window"],
                         top_k=signals["confidence_top_k"], tail=signals["confidence_tail"], given=given)


def _score_options(scoring: dict):
    """ScoreOptions from the _SCORING options."""
    from ttc.harvest.scoring import ScoreOptions

    s = dict(scoring)
    judge_backend = _value(s["judge_backend"])
    entry = harvest_registry.BACKENDS[judge_backend]
    # the judge's backend options are the backend options of harvest/registry.py spelled --judge-<flag> (_SCORING)
    backend_kw: dict = {"chat": True} if entry.chat == "server" else {}
    for param, o in harvest_registry.BACKEND_OPTIONS.items():
        flag, value = "--judge-" + o.flag[2:], s.get("judge_" + param, o.default)
        if param not in entry.options:
            if value != o.default:
                applies = harvest_registry.taking(harvest_registry.BACKENDS, param)
                _fail(f"{flag} applies to --judge-backend {' or '.join(applies)}, not {judge_backend}")
        elif value is not None:
            backend_kw[o.keyword] = value
        elif param in entry.required:
            _fail(f"--judge-backend {judge_backend} needs {flag} ({o.help.rstrip('.')})")
    return ScoreOptions(workers=s["workers"], timeout_s=s["timeout"], memory_mb=s["memory_mb"],
                        sandbox=_value(s["sandbox"]),
                        prm_model=s["prm_model"], prm_batch_size=s["prm_batch_size"],
                        prm_step_mode=_value(s["prm_step_mode"]), prm_dtype=s["prm_dtype"],
                        prm_device=s["prm_device"], prm_max_length=s["prm_max_length"],
                        prm_engine=_value(s["prm_engine"]),
                        judge_model=s["judge_model"], judge_backend=judge_backend, judge_backend_options=backend_kw,
                        judge_samples=s["judge_samples"], judge_options={"max_tokens": s["judge_max_tokens"]},
                        progress=s["progress"])


def _harvest_print_scores(results, pool):
    from ttc.replay.pool import load_pool

    for r in results:
        columns = harvest_registry.ORACLES[r.oracle].columns
        cols = ", ".join(columns)
        if r.status == "skipped":
            typer.echo(f"{r.oracle}: already scored with these settings ({cols})")
            continue
        s = r.summary
        detail = (f"; {s['answered']:,} with an answer, {s['correct']:,} correct" if "correct" in s else
                  f"; {s['unparseable_verdicts']:,} of {s['verdicts']:,} verdicts unparseable (counted as no)"
                  if s.get("unparseable_verdicts") else "")
        typer.echo(f"{r.oracle}: scored {s.get('responses', 0):,} responses{detail} -> {cols}"
                   + (" (replaced the existing columns)" if r.replaced else "")
                   + (" (resumed an interrupted scoring)" if r.status == "resumed" else ""))
        for col in columns:
            if col == "correct" or col.startswith("score_"):
                load_pool(pool, score="gt" if col == "correct" else col)  # replay must accept what was written


@app.command("harvest")
@_with_dataset_options
@_with_backend_options
@_with_confidence_options
@_with_scoring_options
@_with_engine_options
def harvest_cmd(
    ctx: typer.Context,
    dataset: str = typer.Option(..., help="math500, aime24, aime25, lcb-exec (HuggingFace hub), hf:OWNER/NAME, or a "
                                "JSONL / JSON / Parquet file (e.g. ../shared/data/benchmarks/math500.jsonl)."),
    model: str = typer.Option(..., help="Hub name or local path (openai backend: the served model name)."),
    out: Path = typer.Option(..., help="Pool directory to write or resume; give each --shard its own."),
    responses: Optional[int] = typer.Option(None, "--responses", "-n", show_default=False,
                                            help="Responses per query (required)."),
    n_option: Optional[int] = typer.Option(None, "--n", hidden=True, help="Deprecated: --responses."),
    max_tokens: int = typer.Option(..., help="Most tokens per response (a response cut here has no answer)."),
    backend: Backend = typer.Option(Backend("vllm"), help=f"The generation backend: "
                                    f"{_described(harvest_registry.BACKENDS)}."),
    template: Optional[Template] = typer.Option(None, help="Prompt template (default: by task and data set)."),
    chat: Optional[bool] = typer.Option(None, "--chat/--no-chat", help="Apply the model's chat template (default: "
                                        "when the tokenizer has one; openai: --chat sends chat requests)."),
    temperature: float = typer.Option(0.6, help="Sampling temperature."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling threshold."),
    seed: int = typer.Option(0, min=0, max=_SEED_MAX,
                             help="Run seed; each query's seed is derived from it and the query id."),
    shard: Optional[str] = typer.Option(None, metavar="I/N", help="Only shard I of N (0-based; by hash of query id)."),
    limit: Optional[int] = typer.Option(None, help="Only the first K queries of the data set."),
    shard_size: int = typer.Option(32, help="Queries per part file (a crash loses at most one part)."),
    oracle: Optional[List[str]] = typer.Option(None, metavar="NAME[,NAME...]", callback=_names("oracle", ORACLES),
                                               help=f"Score right after generating (repeat or comma-separate): "
                                               f"{_described(harvest_registry.ORACLES)}."),
    revision: Optional[str] = typer.Option(None, help="Model revision (commit, branch or tag)."),
    scoring: dict = None,
    backend_options: dict = None,
    data: dict = None,
    signals: dict = None,
    engine_options: dict = None,
):
    """Generate N responses per query and write them as a pool (resumable part files), optionally scored."""
    from ttc.harvest.pipeline import HarvestSpec, ShardSpec, plan_harvest
    from ttc.harvest.scoring import check_applicable, parse_oracles, score_pool
    from ttc.harvest.types import Sampling

    backend, template, task = _value(backend), _value(template), _value(data["task"])
    n = _renamed(ctx, "responses", "n_option", "--responses", "--n")
    if n is None:
        _fail("missing option --responses (-n): the number of responses per query")
    progress = scoring["progress"]
    _harvest_check_backend_options(ctx, backend, backend_options)
    for name, v in (("--responses", n), ("--max-tokens", max_tokens), ("--shard-size", shard_size)):
        if v < 1:
            _fail(f"{name} must be at least 1, got {v}")
    if limit is not None and limit < 1:
        _fail(f"--limit must be at least 1, got {limit}")
    ray_engine = _ray_engine(ctx, engine_options)
    try:
        from ttc.harvest.datasets import load_queries
        from ttc.harvest.prompts import default_template, template_info

        shard_spec = ShardSpec.parse(shard) if shard is not None else None
        confidence = _confidence_spec(ctx, signals)
        oracles = parse_oracles(oracle)
        opts = _score_options(scoring)
        queries = load_queries(dataset, task=task, limit=limit, id_column=data["id_column"],
                               problem_column=data["problem_column"], answer_column=data["answer_column"],
                               split=data["split"])
        tasks = sorted({q.task for q in queries})
        name = template or default_template(tasks[0], dataset)
        info = template_info(name)
        if info["task"] != "any" and tasks != [info["task"]]:
            _fail(f"template {name!r} is for {info['task']} queries; this data set holds {', '.join(tasks)}")
        for o in oracles:
            check_applicable(queries, o, opts)
        ds = _harvest_dataset_record(dataset, task, limit, data)
        if ray_engine is None:  # with ray: the workers' GPUs
            _check_cuda(backend_options.get("device"))
        from ttc.harvest.fingerprint import model_fingerprint

        spec = HarvestSpec(model=model, backend=backend, revision=revision, dataset=ds,
                           sampling=Sampling(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                             seed=seed),
                           template={**info, "chat_option": chat},
                           weights=model_fingerprint(model, revision, backend, dtype=backend_options.get("dtype")),
                           confidence=confidence)
        plan = plan_harvest(out, queries, spec, shard_spec)
        pending = plan.pending
        where = f"shard {shard_spec} holds {len(plan.queries)} of {len(queries)}" if shard_spec else \
            f"{len(queries)}"
        typer.echo(f"{out}: {where} queries ({name} prompts); {len(plan.done)} already written, {len(pending)} to "
                   f"generate ({len(pending) * n:,} responses)")
        if ray_engine is not None:
            _harvest_ray(ray_engine, plan, backend, model, revision, chat, backend_options, confidence, name, info,
                         shard_size, progress, oracles, opts, out)
        elif pending:
            _harvest_local(plan, backend, model, revision, chat, backend_options, confidence, name, info, shard_size,
                           progress)
        if oracles and ray_engine is None:
            _harvest_print_scores(score_pool(out, oracles, opts, skip_scored=True), out)
        if shard_spec:
            typer.echo(f"when every shard is done: ttc merge {out.parent}/<shard dirs> --out POOL")
    except KeyboardInterrupt:
        typer.echo(f"interrupted; finished parts are kept in {out}: rerun the same command to resume", err=True)
        raise typer.Exit(130) from None


def _harvest_check_backend_options(ctx: typer.Context, backend: str, backend_options: dict) -> None:
    """A backend option given on the command line that --backend does not take is refused, not ignored; the ones it
    requires must be given."""
    entry = harvest_registry.BACKENDS[backend]
    for param, o in harvest_registry.BACKEND_OPTIONS.items():
        src = ctx.get_parameter_source(param)
        if param not in entry.options and src is not None and src.name == "COMMANDLINE":
            applies = harvest_registry.taking(harvest_registry.BACKENDS, param)
            _fail(f"{o.flag.split('/')[0]} applies to --backend {' or '.join(applies)}, not {backend}")
    for param in entry.required:
        if backend_options[param] is None:
            o = harvest_registry.BACKEND_OPTIONS[param]
            _fail(f"--backend {backend} needs {o.flag} ({o.help.rstrip('.')})")


def _harvest_dataset_record(dataset: str, task, limit, data: dict) -> dict:
    """The data set as pool.json's generation block records it (a local file also by its resolved path)."""
    ds = {"source": dataset, "task": task, "limit": limit, "split": data["split"],
          "columns": {"id": data["id_column"], "problem": data["problem_column"], "answer": data["answer_column"]}}
    if Path(dataset).expanduser().is_file():
        ds["path"] = str(Path(dataset).expanduser().resolve())
    return ds


def _check_cuda(device) -> None:
    """--device cuda... on a machine whose torch sees no CUDA device: one error line before a model loads."""
    if device and str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            _fail(f"--device {device}: torch {torch.__version__} sees no CUDA device on this machine; use "
                  "--device cpu, or install a CUDA build of torch")


def _harvest_local(plan, backend: str, model: str, revision, chat, backend_options: dict, confidence, name: str,
                   info: dict, shard_size: int, progress: bool) -> None:
    """`--engine local`: generate the plan's pending queries in this process, print the rates, and release the
    backend (its GPU memory) before an oracle loads."""
    from ttc.harvest.backends import make_backend
    from ttc.harvest.pipeline import run_harvest
    from ttc.harvest.prompts import render

    gen = make_backend(backend, **_backend_kwargs(backend, model, revision, chat, backend_options, confidence))
    tok = getattr(gen, "tokenizer", None)
    render_chat = False if harvest_registry.BACKENDS[backend].chat == "server" else chat
    res = run_harvest(plan, gen, lambda q: render(name, q, tok, chat=render_chat), shard_size=shard_size,
                      progress=progress, stop=info.get("stop") or ())
    typer.echo(f"wrote {res.written_now} queries, {res.responses:,} responses, {res.tokens:,} tokens in "
               f"{res.seconds:,.1f} s ({res.responses / max(res.seconds, 1e-9):,.1f} responses/s, "
               f"{res.tokens / max(res.seconds, 1e-9):,.0f} tokens/s)")
    from ttc.harvest.backends import release_backend

    release_backend(gen)  # give the GPU back before a PRM or judge loads (best effort)


def _backend_kwargs(backend: str, model: str, revision, chat, backend_options: dict, confidence) -> dict:
    """The keyword arguments make_backend gets from `ttc harvest`'s options (None: the backend's own default), for
    the backend built here (--engine local) or in each Ray actor (--engine ray)."""
    entry = harvest_registry.BACKENDS[backend]
    kw = {"model": model, "revision": revision}
    if entry.chat == "server":  # the server applies the chat template; --chat picks its chat endpoint
        kw["chat"] = bool(chat)
    for param in entry.options:
        if backend_options[param] is not None:
            kw[harvest_registry.BACKEND_OPTIONS[param].keyword] = backend_options[param]
    if backend == "vllm" and confidence is not None and confidence.top_logprobs > 20:
        kw["max_logprobs"] = confidence.top_logprobs  # vLLM's engine refuses more than 20 by default
    return kw


def _harvest_ray(engine, plan, backend, model, revision, chat, backend_options, confidence, name, info, shard_size,
                 progress, oracles, opts, out):
    """`ttc harvest --engine ray`: the plan's pending queries generated by a Ray Data job (each actor builds the
    backend from these options), then the oracles scored by Ray jobs, on one cluster. The driver renders the prompts
    with the model's tokenizer (loaded here, without the weights), as the local engine does with its backend's."""
    from ttc.harvest.backends import make_backend
    from ttc.harvest.prompts import render
    from ttc.harvest.ray_engine import generation_gpus
    from ttc.harvest.run import load_tokenizer
    from ttc.harvest.scoring import score_pool

    entry = harvest_registry.BACKENDS[backend]
    kw = _backend_kwargs(backend, model, revision, chat, backend_options, confidence)
    with engine:
        pending = plan.pending
        if pending:
            tok = load_tokenizer(backend, model, revision, kw)
            render_chat = False if entry.chat == "server" else chat
            res = engine.harvest(plan, functools.partial(make_backend, backend, **kw),
                                 lambda q: render(name, q, tok, chat=render_chat), shard_size=shard_size,
                                 gpus=generation_gpus(backend, kw, engine.resources()), progress=progress,
                                 stop=info.get("stop") or (), generate=entry.load().generate)
            job = engine.jobs[-1]
            typer.echo(f"wrote {res.written_now} queries, {res.responses:,} responses, {res.tokens:,} tokens in "
                       f"{res.seconds:,.1f} s ({res.responses / max(res.seconds, 1e-9):,.1f} responses/s, "
                       f"{res.tokens / max(res.seconds, 1e-9):,.0f} tokens/s; ray: {job['placement']})")
        if oracles:
            _harvest_print_scores(score_pool(out, oracles, opts, skip_scored=True, engine=engine), out)


@app.command("score")
@_with_scoring_options
@_with_engine_options
def score_cmd(
    ctx: typer.Context,
    pool: Path = typer.Argument(..., metavar="POOL",
                                help="Pool directory with a text column (written by ttc harvest)."),
    oracle: List[str] = typer.Option(..., metavar="NAME[,NAME...]", callback=_names("oracle", ORACLES),
                                     help=f"Oracles (repeat or comma-separate; re-scoring replaces an oracle's "
                                     f"columns): {_described(harvest_registry.ORACLES)}."),
    scoring: dict = None,
    engine_options: dict = None,
):
    """Add oracle columns to a pool (answer/correct, score_prm_*, score_judge), recording each oracle in pool.json.
    Scoring again replaces the oracle's columns; an interrupted scoring resumes with the same options."""
    from ttc.harvest.scoring import score_pool

    engine = _ray_engine(ctx, engine_options)
    opts = _score_options(scoring)
    try:
        if engine is None:
            _harvest_print_scores(score_pool(pool, oracle, opts), pool)
        else:
            with engine:
                _harvest_print_scores(score_pool(pool, oracle, opts, engine=engine), pool)
    except KeyboardInterrupt:
        typer.echo(f"interrupted; rerun the same command to finish scoring {pool}", err=True)
        raise typer.Exit(130) from None


@app.command("merge")
def merge_cmd(
    shards: List[Path] = typer.Argument(..., help="Shard directories written by ttc harvest --shard I/N."),
    out: Path = typer.Option(..., "--out", help="Merged pool directory (new or empty)."),
    allow_missing: bool = typer.Option(False, help="Merge even when shards or queries are missing (recorded in "
                                       "pool.json)."),
):
    """Join harvest shards into one pool, refusing mixed configurations, duplicate queries and (unless
    --allow-missing) missing ones."""
    from ttc.harvest.pipeline import merge_pools
    from ttc.replay.outputs import check_new_pool

    check_new_pool(out, reads=shards)
    rep = merge_pools(shards, out, allow_missing=allow_missing)
    typer.echo(f"merged {len(shards)} director{'y' if len(shards) == 1 else 'ies'} into {out}: {rep.queries:,} "
               f"queries, {rep.responses:,} responses")
    if rep.missing_shards or rep.missing:
        typer.echo(f"incomplete: shards missing {rep.missing_shards or 'none'}, {len(rep.missing)} queries of the "
                   "given shards missing (listed in pool.json)", err=True)


# ------------------------------------------------------------------------------------------------------------- run
# `ttc run`: live allocation against a model (harvest/run/). Its choices: the live policies (replay/live.py
# LIVE_POLICIES: every policy but the hindsight oracle), the oracles it scores with live (harvest/run/ LIVE_ORACLES)
# and the registry's others, which it refuses with the reason; tests/test_run_cli.py holds them to those lists.
LIVE_POLICY_NAMES = tuple(name for name, p in replay_registry.REGISTRY.items() if p.live)  # (others: replay only)
RUN_ORACLES = ("gt", "sc") + tuple(o for o in ORACLES if o != "gt") + ("confidence",)
RunPolicy = _choice("RunPolicy", LIVE_POLICY_NAMES + replay_registry.DEPTH_POLICIES)  # (depth's: harvest/run/depth.py)
RunSelect = _choice("RunSelect", LIVE_SELECTIONS)  # cisc and deepconf are computed by replay only
RunOracle = _choice("RunOracle", RUN_ORACLES)
RunUnit = _choice("RunUnit", ("samples", "tokens"))
_RUN_PANEL = "Allocation (as in ttc replay)"


@app.command("run")
@_with_dataset_options
@_with_backend_options
@_with_confidence_options
@_with_scoring_options
@_option_group(_config_group("run", _RUN_PANEL), "params")
def run_cmd(
    ctx: typer.Context,
    model: str = typer.Option(..., help="Hub name or local path (openai backend: the served model name)."),
    out: Path = typer.Option(..., help="Directory for results.jsonl, results.parquet, run.json and the pool of "
                             "every response (new, or a run of the same command to resume)."),
    budget: float = typer.Option(..., help="Average budget per query, in responses (or tokens with --unit tokens); "
                                 "the run spends round(budget x queries) in all, shared across the queries."),
    max_tokens: int = typer.Option(..., help="Most tokens per response (a response cut here has no answer)."),
    dataset: Optional[str] = typer.Option(None, help="The queries: math500, aime24, aime25 (HuggingFace hub), "
                                          "hf:OWNER/NAME, or a JSONL / JSON / Parquet file, as ttc harvest reads "
                                          "them."),
    batch: Optional[Path] = typer.Option(None, help="The queries as an OpenAI Batch API input file (JSONL of "
                                         "chat-completion requests: custom_id, method, url, body.messages, as vllm "
                                         "run-batch reads): custom_id is the query id, a top-level \"gold\" its gold "
                                         "answer."),
    policy: RunPolicy = typer.Option(RunPolicy("elimination"), help="The allocation policy (every replay policy "
                                     "but the hindsight ones; parallel-probe and cmc with a backend that can probe a "
                                     "trace, docs/run.md \"Depth policies\").", rich_help_panel=_RUN_PANEL),
    oracle: RunOracle = typer.Option(RunOracle("gt"), help="What scores each response: gt (the final answer graded "
                                     "against the gold one), sc (answer agreement, no gold needed), exec (lcb-exec "
                                     "predictions run in the sandbox), prm (a process reward model: --prm-model, "
                                     "--score), judge (an LLM judge: --judge-model) or confidence (the response's "
                                     "own log-prob confidence: --confidence); each backend call's new responses are "
                                     "scored in one oracle call (docs/run.md)."),
    score: Optional[str] = typer.Option(None, help="--oracle prm: the score the policy reads, prm_min (default), "
                                        "prm_last or prm_prod; --oracle confidence: which --confidence signal (default "
                                        "the first) (what ttc replay --score reads from the pool)."),
    unit: RunUnit = typer.Option(RunUnit("samples"), help="Budget unit.", rich_help_panel=_RUN_PANEL),
    eliminate: Optional[Eliminate] = typer.Option(None, help="Elimination rule (default: threshold with gt, "
                                                  "sc-share with sc).", rich_help_panel=_RUN_PANEL),
    select: Optional[RunSelect] = typer.Option(None, help="Which response each query returns (default: bon with gt, "
                                            "sc with sc).", rich_help_panel=_RUN_PANEL),
    conf: float = typer.Option(0.95, help="sc-beta: confidence P(p1 > p2) needed to stop.",
                               rich_help_panel=_RUN_PANEL),
    prior: Optional[str] = typer.Option(None, metavar="COLUMN", help="marginal-gain: the field of each query holding "
                                        "its predicted success probability in [0, 1], a column of the --dataset file "
                                        "or a top-level key of each --batch line; the run's pool records it in "
                                        "queries.parquet, for ttc replay --prior (default: none, Laplace's estimate "
                                        "from its own scores).", rich_help_panel=_RUN_PANEL),
    side: Optional[str] = typer.Option(None, metavar="COLUMN", help="side-eb: a score column this run records for "
                                       "every response, read as its side signal as it arrives: a --confidence "
                                       "signal's (score_mean_logprob, ...) or the oracle's (prm: score_prm_min, ...; "
                                       "judge: score_judge); ttc replay RUN/pool --side reads the same column "
                                       "(default: none, 0.5).", rich_help_panel=_RUN_PANEL),
    max_per_query: int = typer.Option(256, help="Most responses one query may get (the pool size of a replay: a "
                                      "query that wants more is exhausted).", rich_help_panel=_RUN_PANEL),
    lookahead: int = typer.Option(1, help="Responses generated per query per backend call: more means fewer calls "
                                  "and up to lookahead - 1 unused responses per query; decisions do not change."),
    probe_every: int = typer.Option(500, help="--depth-rule stability, --policy parallel-probe and cmc: probe each "
                                    "trace for its answer so far every this many tokens (the probe spacing replay "
                                    "reads from a probed pool's offsets; AutoTTS's 500)."),
    free_slots: bool = typer.Option(True, "--free-slots/--no-free-slots", help="With a backend that takes "
                                    "concurrent requests (openai): ask for each query's next response as soon as "
                                    "the run wants it, --concurrency in flight, so a request that finishes early "
                                    "frees its slot; --no-free-slots: one backend call per allocation round, which "
                                    "waits for its slowest request. Decisions do not change."),
    retries: int = typer.Option(2, help="Retries of a failed backend call, with exponential backoff from "
                                "--retry-delay (the openai client also retries each request: --max-retries)."),
    retry_delay: float = typer.Option(1.0, help="Seconds before the first retry; doubled for each next one."),
    stream: bool = typer.Option(False, "--stream", help="Read the --batch requests one at a time as they come (a "
                                "growing file, or - for stdin) and run each with --policy streaming under a budget "
                                "rate: query t may spend budget x (t + 1) minus what the earlier ones spent; each "
                                "result is appended to results.jsonl when its query is done."),
    stream_idle: float = typer.Option(0.0, help="--stream from a file: stop after this many seconds without a new "
                                      "line (0: at the end of the file)."),
    backend: Backend = typer.Option(Backend("vllm"), help=f"The generation backend: "
                                    f"{_described(harvest_registry.BACKENDS)}."),
    template: Optional[Template] = typer.Option(None, help="Prompt template of --dataset queries (default: by task "
                                                "and data set)."),
    chat: Optional[bool] = typer.Option(None, "--chat/--no-chat", help="Apply the model's chat template (default: "
                                        "when the tokenizer has one; openai: --chat sends chat requests)."),
    temperature: float = typer.Option(0.6, help="Sampling temperature."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling threshold."),
    seed: int = typer.Option(0, min=0, max=_SEED_MAX, help="Run seed: each response's seed (as ttc harvest derives "
                             "it) and the query order (as ttc replay --seed-start derives it)."),
    limit: Optional[int] = typer.Option(None, help="Only the first K queries of the data set."),
    revision: Optional[str] = typer.Option(None, help="Model revision (commit, branch or tag)."),
    scoring: dict = None,
    backend_options: dict = None,
    data: dict = None,
    signals: dict = None,
    params: dict = None,
):
    """Spend one budget across a batch of queries, live against a model, with an adaptive policy.

    Each allocation round is one backend call (an OpenAI-compatible server: each query's next request as soon as
    the run wants it, --concurrency in flight), each response is scored as it comes, and the policy moves the budget
    to the queries that need it. Writes one result per query (OpenAI Batch output JSONL and Parquet), run.json
    (outcome and cost) and the pool of every response (ttc replay reads it). A killed run resumes when rerun."""
    from ttc.harvest.run import RunRequest, report_lines, run_command
    from ttc.harvest.types import Sampling

    given = {name for name in {**scoring, **backend_options} if _given(ctx, name)}
    req = RunRequest(
        out=out, model=model, backend=_value(backend), budget=budget, dataset=dataset, batch=batch,
        policy=_value(policy), unit=_value(unit), oracle=_value(oracle), eliminate=_value(eliminate), conf=conf,
        prior=prior, side=side, select=_value(select), **_config_values(params, "run"), score=score,
        scoring=_run_score_options(ctx, scoring, _value(oracle), given), max_per_query=max_per_query,
        lookahead=lookahead, probe_every=probe_every, free_slots=free_slots, retries=retries,
        retry_delay_s=retry_delay,
        grade_timeout_s=scoring["timeout"] if scoring["timeout"] is not None else 5.0,
        sampling=Sampling(n=1, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed),
        template=_value(template), chat=chat, revision=revision, limit=limit, task=_value(data["task"]),
        id_column=data["id_column"], problem_column=data["problem_column"], answer_column=data["answer_column"],
        split=data["split"], confidence=_confidence_spec(ctx, signals), backend_options=dict(backend_options),
        progress=scoring["progress"], stream=stream, stream_idle_s=stream_idle)
    try:
        outcome = run_command(req, given=given, argv=["ttc", *ctx.meta.get("ttc.argv", [])], echo=typer.echo)
    except KeyboardInterrupt:
        typer.echo(f"interrupted; what was generated is kept in {out}/pool: rerun the same command to resume",
                   err=True)
        raise typer.Exit(130) from None
    for line in report_lines(outcome):
        typer.echo(line)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether option `name` was given on the command line (not its default)."""
    src = ctx.get_parameter_source(name)
    return src is not None and src.name == "COMMANDLINE"


def _run_score_options(ctx: typer.Context, scoring: dict, oracle: str, given: set):
    """The scoring options ttc run reads: --progress, --timeout (gt: per grade), and those of the oracle (exec, prm,
    judge: harvest/registry.py ORACLES[...].options); one given for another oracle is refused. Returns the
    ScoreOptions of exec / prm / judge (None for the others)."""
    from ttc.harvest.run import SCORER_ORACLES

    reads = {"progress"} | (set(harvest_registry.ORACLES[oracle].options) if oracle in SCORER_ORACLES
                            else {"timeout"})
    for name in scoring:
        if name not in reads and name in given:
            flag = next(p.opts[0] for p in ctx.command.params if p.name == name)
            takes = [o for o in SCORER_ORACLES if name in harvest_registry.ORACLES[o].options]
            _fail(f"{flag} applies to ttc run --oracle {' or '.join(takes)}, not {oracle}" if takes else
                  f"{flag} does not apply to ttc run")
    return _score_options(scoring) if oracle in SCORER_ORACLES else None


@app.command("synth")
def synth_cmd(
    out: Path = typer.Option(..., "--out", help="Pool directory to write (new or empty)."),
    queries: int = typer.Option(200, help="Number of queries."),
    responses: int = typer.Option(64, help="Responses per query."),
    difficulty: str = typer.Option("mixture:0.6,0.9,0.15", help="Success rates p_i: beta:A,B (p ~ Beta(A,B)), "
                                   "mixture:A,B,UNSOLVABLE_SHARE (p = 0 with that probability, else Beta(A,B)), "
                                   "or linear (p_i = i/n)."),
    fp: float = typer.Option(0.05, help="Reward model: share of wrong responses scored >= gamma."),
    fn: float = typer.Option(0.1, help="Reward model: share of correct responses scored < gamma."),
    gamma: float = typer.Option(0.5, help="The threshold at which --fp and --fn hold exactly (replay with it)."),
    score_dist: str = typer.Option("beta:4,1", help="Score given the verdict: beta:A,B (positive gamma + (1-gamma) "
                                   "Beta(A,B), negative gamma Beta(B,A)), binary (1 / 0), or none (no score "
                                   "column)."),
    wrong_answers: int = typer.Option(4, help="Distinct wrong answers per query (they repeat)."),
    answer_skew: float = typer.Option(1.0, help="Wrong answer k has probability ~ k^-skew (0: all equally likely)."),
    invalid_rate: float = typer.Option(0.1, help="Share of wrong responses with no answer, solvable queries."),
    invalid_rate_unsolvable: float = typer.Option(0.5, help="The same on unsolvable queries (p_i = 0)."),
    tokens: float = typer.Option(300.0, help="Mean token count of a correct response (0: no n_tokens column)."),
    tokens_sigma: float = typer.Option(0.5, help="Log-standard deviation of the lognormal token counts."),
    tokens_wrong: float = typer.Option(1.5, help="Wrong responses are this many times longer on average."),
    exact_counts: bool = typer.Option(False, "--exact-counts", help="Exactly round(p_i N) correct per query "
                                      "(at random positions) instead of independent draws."),
    seed: int = typer.Option(0, min=0, max=_SEED_MAX, help="Seed; the same seed and parameters give identical files."),
    side_signal: str = typer.Option("none", help="A side-information column score_side: solvable:AUC (each "
                                    "response's signal separates queries with and without a correct response in "
                                    "their pool with that AUC; solvable:0.5 is the no-information control), or none "
                                    "(no column)."),
):
    """A synthetic pool from known parameters: difficulty, a noisy reward model with set false-positive and
    false-negative rates, repeating wrong answers, invalid outputs, token counts. Every parameter goes to
    pool.json and the true p_i to queries.parquet."""
    from ttc.replay.synth import SynthSpec, summary_lines, write_synth

    spec = SynthSpec(queries=queries, responses=responses, difficulty=difficulty, fp=fp, fn=fn, gamma=gamma,
                     score_dist=score_dist, wrong_answers=wrong_answers, answer_skew=answer_skew,
                     invalid_rate=invalid_rate, invalid_rate_unsolvable=invalid_rate_unsolvable, tokens=tokens,
                     tokens_sigma=tokens_sigma, tokens_wrong=tokens_wrong, exact_counts=exact_counts, seed=seed,
                     side_signal=side_signal)
    path, meta = write_synth(out, spec)
    for line in summary_lines(path, spec, meta):
        typer.echo(line)


@app.command("theory")
def theory_cmd(
    ctx: typer.Context,
    sizes: str = typer.Option("10,20,50,100,200,500,1000", help="Query counts of the synthetic pools (p_i = i/n)."),
    n_option: Optional[str] = typer.Option(None, "--n", hidden=True, help="Deprecated: --sizes."),
    delta: float = typer.Option(0.1, help="Budget needed to cover every query with probability 1 - delta."),
    seeds: int = typer.Option(200, help="Number of seeds (permutations) per pool size."),
    trials: Optional[int] = typer.Option(None, hidden=True, help="Deprecated: --seeds."),
    seed_start: int = typer.Option(0, min=0, max=_SEED_MAX, help="First seed; also the seed of the pools."),
    seed: Optional[int] = typer.Option(None, min=0, max=_SEED_MAX, hidden=True, help="Deprecated: --seed-start."),
    m: int = typer.Option(4, "--m", help="Explore-then-commit: first-stage responses per query."),
    depth: int = typer.Option(64, help="Pool depth: query i holds max(m+1, ceil(depth / p_i)) responses."),
    engine: TheoryEngine = typer.Option(TheoryEngine("check"), help="check: the engine confirms each budget (passes "
                                        "at B, fails at B-1); bisect: full bisection over B with the engine (slow); "
                                        "off: closed forms only."),
    out: Optional[Path] = typer.Option(None, "--out", help="Directory for theory.png and theory.csv."),
    fmt: str = typer.Option("png", "--format", help="The figure's formats, comma-separated: png (200 dpi), pdf, svg."),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
):
    """Measure the budget uniform, elimination and explore-then-commit need to cover every query with
    probability 1 - delta as n grows, against the spec's rates n max 1/p_i, sum 1/p_i, sum max(m, 1/p_i)."""
    from ttc.replay.theory import TheorySetting, run_theory

    sizes = _renamed(ctx, "sizes", "n_option", "--sizes", "--n")
    seeds = _renamed(ctx, "seeds", "trials", "--seeds", "--trials")
    seed_start = _renamed(ctx, "seed_start", "seed", "--seed-start", "--seed")
    run_theory(TheorySetting(ns=tuple(_ints(sizes, "--sizes")), delta=delta, trials=seeds, m=m, depth=depth,
                             seed=seed_start, engine=_value(engine)), out=out, force=force, formats=_formats(fmt))


def _unwrapped(doc: str) -> str:
    """A docstring's paragraphs each on one line: typer keeps the source's line breaks, which in a terminal of
    another width broke `ttc --help`'s lines down to single words (issue 28); rich wraps them to the width."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


for _c in app.registered_commands:
    if _c.help is None and _c.callback is not None and _c.callback.__doc__:
        _c.help = _unwrapped(_c.callback.__doc__)


def _no_type_for_flags(display_type_rich):
    """A flag takes no value, yet typer's help showed `--force <bool>`, and `--force true` was then read as a
    pool (issue 28): a flag's type column is empty."""
    def display(self, ctx):
        return None if getattr(self, "is_flag", False) else display_type_rich(self, ctx)
    return display


TyperOption.display_type_rich = _no_type_for_flags(TyperOption.display_type_rich)


def main():  # pragma: no cover
    """The `ttc` executable. numba's import and first dispatch leave ~150,000 long-lived objects that CPython's
    collector walks in every full collection and once more at exit: 0.5 s of a 2.1 s warm `ttc replay`, measured.
    A command process is short-lived, so full collections are made 100 times rarer and what exists at the end is
    frozen (not walked again at exit). Here, not in the command group: tests invoke `app` in one long process."""
    gc.set_threshold(*gc.get_threshold()[:2], 1000)
    try:
        app()
    finally:
        gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
