"""Math ground truth: pull the final answer out of a response, canonicalise it for voting, grade it against gold.

Two different notions of "same answer" live here on purpose:

* `normalize_answer` is a cheap, purely textual canonical form. It is the pool's `answer` column, which
  self-consistency (majority vote) groups on, so it must be deterministic and fast, and it only merges spellings that
  are the same answer written differently. What collapses (each group maps to one string):
    - math delimiters and spacing: "$5$", "\\(5\\)", "5.", "5 " -> "5"; "\\left(1,2\\right)", "( 1, 2 )" -> "(1,2)"
    - fraction/binomial spellings: "\\dfrac12", "\\tfrac{1}{2}", "\\frac1{2}", "\\frac{1}{2}", "1/2" -> "\\frac{1}{2}";
      "\\sqrt2" -> "\\sqrt{2}"
    - text wrappers: "\\text{Evelyn}", "\\mathrm{Evelyn}", "\\textbf{Evelyn}" -> "Evelyn"; a choice letter
      "\\text{(A)}", "(A)" -> "A"
    - units and decorations after a value: "10\\%", "10%", "10^\\circ", "10^{\\circ}", "10\\text{ cm}",
      "10\\mbox{ cm}^2" -> "10"
    - a leading variable assignment: "x = 5", "x=5" -> "5"; "x \\in [-2,7]" -> "[-2,7]"
    - numbers: "1,000", "1{,}000", "1\\,000" -> "1000"; "5.0", "5.00" -> "5"; "0.50" -> "0.5"; ".5" -> "0.5"
  What does NOT collapse (values are not evaluated): "0.5" vs "\\frac{1}{2}", "\\sqrt{20}" vs "2\\sqrt{5}",
  "1,2" vs "2,1", "x+1" vs "1+x". Grading handles those; the vote just sees them as different answers.

* `grade` / `grade_many` decide correctness with math-verify (symbolic and numeric equivalence, sets, intervals,
  relations). math-verify's own timeouts use `signal.alarm`, which only works in a process's main thread and cannot
  interrupt long C-level work (huge integer powers), so grading runs in worker processes (pebble's ProcessPool)
  that are killed and replaced when a grade overruns: a hung or crashing grade counts False and never stalls the
  rest.
"""
from __future__ import annotations

import atexit
import math
import os
import re
import signal
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib import metadata

from ttc.replay.extras import check

try:
    MATH_VERIFY_VERSION: str = metadata.version("math-verify")
except metadata.PackageNotFoundError:  # pragma: no cover - math-verify is a harvest dependency
    MATH_VERIFY_VERSION = "not installed"

# ---------------------------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------------------------

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_FINAL_IS = re.compile(r"final answer is", re.IGNORECASE)
_HOPE = re.compile(r"\.?\s*I hope it is correct.*$", re.IGNORECASE | re.DOTALL)


def _balanced_group(text: str, start: int) -> str | None:
    """Contents of the brace group opening at text[start] == "{", or None when it never closes (truncated text).
    Escaped braces (\\{ \\}) are characters, not grouping, as in LaTeX."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
        i += 1
    return None


def _box_content(text: str, end_of_cmd: int) -> str | None:
    i = end_of_cmd
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        return _balanced_group(text, i)
    if i > end_of_cmd:  # "\boxed 5": the argument is the next token
        m = re.match(r"[^\s$]+", text[i:])
        return m.group(0) if m else None
    return None


def _delimited(rest: str) -> str:
    """The answer after "final answer is": a $...$ / \\(...\\) span when it opens with one, else the rest of the
    line without the Minerva sign-off ("I hope it is correct")."""
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(open_):
            end = rest.find(close, len(open_))
            if end >= 0:
                return rest[len(open_):end]
            break
    line = rest.split("\n", 1)[0]
    return _HOPE.sub("", line).strip().rstrip(".")


def extract_answer(text: str | None) -> str | None:
    """The response's final answer as written (LaTeX, unnormalised), or None when it states none.

    The last \\boxed{...} / \\fbox{...} with balanced braces wins (models restate or correct earlier boxes);
    otherwise the last "the final answer is X" (Minerva format). A box that never closes is skipped, since it is
    usually a truncated generation."""
    if not text:
        return None
    for m in reversed(list(_BOX_CMD.finditer(text))):
        content = _box_content(text, m.end())
        if content is not None and content.strip():
            return content.strip()
    hits = list(_FINAL_IS.finditer(text))
    if hits:
        rest = text[hits[-1].end():].lstrip(" \t:")
        ans = _delimited(rest).strip()
        return ans or None
    return None


# ---------------------------------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------------------------------

_TEXT_CMDS = ("text", "textbf", "textit", "textrm", "texttt", "mathrm", "mathbf", "mathit", "mbox", "operatorname")
_TEXT_ALT = "|".join(_TEXT_CMDS)
_TEXT_CMD = re.compile(r"\\(?:" + _TEXT_ALT + r")\s*(?=\{)")
_NUMBER = r"-?(?:\d+(?:\.\d*)?|\.\d+)"
_TRAILING_UNIT = re.compile(r"^(.*[\d}])\s*\\(?:" + _TEXT_ALT + r")\s*\{\s*[a-zA-Z][a-zA-Z .]*\}(?:\^\{?\d\}?)?$")
_ASSIGN = re.compile(r"^[a-zA-Z](?:_\{?[a-zA-Z0-9]+\}?)?\s*=\s*(?P<rhs>[^=]+)$")
_IN = re.compile(r"^[a-zA-Z]\s*\\in\s*(?P<rhs>.+)$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_DROP = ("\\displaystyle", "\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\quad", "\\qquad", "~")


def _unwrap_commands(s: str, pattern: re.Pattern) -> str:
    """Replace `\\cmd{body}` by `body` for every match of pattern (which stops right before the brace)."""
    while True:
        m = pattern.search(s)
        if not m:
            return s
        body = _balanced_group(s, m.end())
        if body is None:
            return s[:m.start()] + s[m.end():]
        s = s[:m.start()] + body + s[m.end() + len(body) + 2:]


def _strip_spaces(s: str) -> str:
    """Remove whitespace, but keep one space where it separates a LaTeX command from a following letter
    ("\\pi r" must not become the unknown command "\\pir")."""
    s = re.sub(r"\s+", " ", s)
    s = re.sub(r"(\\[a-zA-Z]+) (?=[a-zA-Z])", "\\1\x00", s)
    return s.replace(" ", "").replace("\x00", " ")


def _canonical_number(s: str) -> str:
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if re.fullmatch(_NUMBER, s):
        neg = s.startswith("-")
        body = s[1:] if neg else s
        if "." in body:
            body = body.rstrip("0").rstrip(".")
            if body.startswith("."):
                body = "0" + body
            if body == "":
                body = "0"
        s = ("-" if neg and body != "0" else "") + body
    return s


def normalize_answer(s: str | None) -> str | None:
    """Canonical string for an extracted answer, so spellings of the same answer vote together (see the module
    docstring for exactly which spellings collapse). None (or nothing left after stripping) -> None."""
    if s is None:
        return None
    s = str(s).strip()
    if not s:
        return None
    box = _BOX_CMD.match(s)
    if box:  # a whole answer that is itself boxed
        inner = _box_content(s, box.end())
        if inner is not None:
            s = inner
    s = s.replace("\\$", "").replace("$", "")
    for d in ("\\(", "\\)", "\\[", "\\]"):
        s = s.replace(d, "")
    s = s.replace("\n", " ").strip()
    m = _TRAILING_UNIT.match(s)
    if m:  # "5\text{ cm}", "15\mbox{ cm}^2", "\frac{270}7\text{ degrees}": a value followed by its unit in text
        s = m.group(1)
    s = _unwrap_commands(s, _TEXT_CMD)
    for d in _DROP:
        s = s.replace(d, " " if d in ("\\quad", "\\qquad", "~") else "")
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°", "", s)
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("{,}", ",")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\[dt]binom", r"\\binom", s)
    s = s.strip()
    m = _IN.match(s)
    if m:
        s = m.group("rhs")
    m = _ASSIGN.match(s)
    if m and m.group("rhs").strip():
        s = m.group("rhs")
    s = _strip_spaces(s)
    s = s.rstrip(".")
    # \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}, \frac{1}2 -> \frac{1}{2}, \sqrt2 -> \sqrt{2}
    s = re.sub(r"\\(frac|binom)(\d)(\d)", r"\\\1{\2}{\3}", s)
    s = re.sub(r"\\(frac|binom)(\d)(?=\{)", r"\\\1{\2}", s)
    s = re.sub(r"\\(frac|binom)(\{[^{}]*\})(\d)", r"\\\1\2{\3}", s)
    s = re.sub(r"\\sqrt ?(\d|[a-zA-Z](?![a-zA-Z]))", r"\\sqrt{\1}", s)
    m = re.fullmatch(r"(-?)(\d+)/(\d+)", s)
    if m:
        s = f"{m.group(1)}\\frac{{{m.group(2)}}}{{{m.group(3)}}}"
    m = re.fullmatch(r"\(([A-Z])\)", s)
    if m:  # a multiple-choice letter
        s = m.group(1)
    s = _canonical_number(s)
    return s or None


# ---------------------------------------------------------------------------------------------------------------
# Grading
# ---------------------------------------------------------------------------------------------------------------

GradeFn = Callable[[str, str, int], bool]


def _as_latex(s: str) -> str:
    """Answers are bare LaTeX ("\\frac{1}{2}", "x \\in [-2,7]"); math-verify's LaTeX extractor wants math
    delimiters. "$...$" was checked to parse all 500 MATH-500 gold answers to themselves."""
    s = s.strip()
    if s.startswith("$") or "\\boxed" in s or "\\fbox" in s:
        return s
    return f"${s}$"


@lru_cache(maxsize=4096)
def _parse_cached(latex: str, timeout: int):
    # Gold strings repeat for every sample of a query; parse them once per worker.
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    return parse(latex, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=timeout)


def _mv_grade(pred: str, gold: str, timeout: int) -> bool:
    """One math-verify grade, in the calling process (must be a main thread: math-verify uses signal.alarm).
    A pred that still contains a box or "final answer is" is reduced to its extracted answer first."""
    from math_verify import verify

    extracted = extract_answer(pred)
    if extracted is not None:
        pred = extracted
    if not pred.strip() or not gold.strip():
        return False
    gold_p = _parse_cached(_as_latex(gold), timeout)
    pred_p = _parse_cached(_as_latex(pred), timeout)
    if not gold_p or not pred_p:
        return False
    return bool(verify(gold_p, pred_p, timeout_seconds=timeout))


def _worker_init(memory_mb: int) -> None:
    """A grading worker: Ctrl-C is the parent's to handle; an address-space cap so a runaway grade (sympy on a
    huge expression) dies alone; math-verify imported before the first grade."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import resource

        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # pragma: no cover - best effort
        pass
    try:
        import math_verify  # noqa: F401
    except ImportError:  # pragma: no cover - every grade then fails and counts False
        pass


def _safe_grade(grade_fn: GradeFn, pred: str, gold: str, inner_timeout: int) -> bool:
    try:
        return bool(grade_fn(pred, gold, inner_timeout))
    except BaseException:  # noqa: BLE001 - any failure of a grade is a wrong answer, never a crash
        return False


def _probe() -> bool:
    return True


_CTX = None
_CTX_LOCK = threading.Lock()


def _mp_context():
    """forkserver where available: workers fork from a small server that has math-verify (sympy, antlr) imported
    already, so replacing a killed worker costs milliseconds, and nothing is forked from a parent that may hold
    CUDA or vLLM threads. spawn elsewhere."""
    global _CTX
    import multiprocessing as mp

    with _CTX_LOCK:
        if _CTX is None:
            if "forkserver" in mp.get_all_start_methods():
                _CTX = mp.get_context("forkserver")
                try:  # only effective if this process has not started its forkserver yet
                    _CTX.set_forkserver_preload(["math_verify", __name__])
                except (AttributeError, ValueError):  # pragma: no cover
                    pass
            else:  # pragma: no cover - non-POSIX
                _CTX = mp.get_context("spawn")
        return _CTX


_STARTUP_S = 120.0  # generous: the first worker may have to start the forkserver and import sympy
_WORKER_MEMORY_MB = 4096


class _GradePool:
    """Grading processes (pebble's ProcessPool: a task that overruns its timeout, or whose worker dies, is cut
    and its worker replaced by the library). A grade that overruns, raises or takes its worker down counts
    False; nothing stalls the batch. The pool survives between `run` calls."""

    def __init__(self, grade_fn: GradeFn, workers: int):
        import pebble

        self.grade_fn = grade_fn
        self.size = max(1, workers)
        self.pid = os.getpid()
        self.pool = pebble.ProcessPool(max_workers=self.size, initializer=_worker_init,
                                       initargs=(_WORKER_MEMORY_MB,), context=_mp_context())
        self._checked = False

    def _check_start(self):
        """Workers that die at startup would make every grade a silent False: one probe task first."""
        if self._checked:
            return
        from concurrent.futures import TimeoutError as FutureTimeout

        try:
            self.pool.schedule(_probe, timeout=_STARTUP_S).result()
        except (FutureTimeout, Exception) as e:
            raise RuntimeError("math grading workers do not start (traceback above, if any); a script that grades "
                               f"needs the usual `if __name__ == '__main__':` guard ({type(e).__name__})") from None
        self._checked = True

    def run(self, pairs: list[tuple[str, str]], timeout_s: float, progress: bool = False) -> list[bool]:
        from concurrent.futures import wait

        from ttc.replay.progress import progress as progress_display

        if not pairs:
            return []
        self._check_start()
        inner = max(1, math.ceil(timeout_s))  # math-verify's own alarms take whole seconds
        hard = float(timeout_s) + 1.0          # wall clock per grade, with a little slack for IPC
        results = [False] * len(pairs)
        try:
            with progress_display(len(pairs), "grading", "answers", enabled=progress) as bar:
                futures = {self.pool.schedule(_safe_grade, args=(self.grade_fn, p, g, inner), timeout=hard): i
                           for i, (p, g) in enumerate(pairs)}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, timeout=1.0)
                    for f in done:
                        try:
                            results[futures[f]] = bool(f.result())
                        except Exception:  # TimeoutError (cut), ProcessExpired (the worker died): a wrong answer
                            results[futures[f]] = False
                    bar.advance(len(done))
        except BaseException:
            self.close()
            raise
        return results

    def close(self) -> None:
        if os.getpid() != self.pid:  # inherited across a fork: the workers are the parent's to stop
            return
        self.pool.stop()
        self.pool.join(timeout=10)


_SHARED: _GradePool | None = None
_SHARED_LOCK = threading.Lock()


def _shared_pool() -> _GradePool:
    """One warm worker for `grade`, so grading one pair at a time costs a message, not a process start."""
    global _SHARED
    if _SHARED is None or _SHARED.pid != os.getpid():
        _SHARED = _GradePool(_mv_grade, 1)
        atexit.register(_SHARED.close)
    return _SHARED


def grade_many(preds: Sequence[str | None], golds: Sequence[str | None], *, workers: int | None = None,
               timeout_s: float = 5.0, progress: bool = False, grade_fn: GradeFn | None = None) -> list[bool]:
    """Correctness of each pred against its gold, with math-verify in `workers` processes (default: CPU count).

    Identical (pred, gold) pairs are graded once: sampled pools repeat answers heavily. A None or empty pred or
    gold is False without grading. Each grade has `timeout_s` of wall clock in its worker; one that overruns,
    raises, or takes its worker down counts False and the worker is replaced, so nothing stalls the batch.
    `grade_fn(pred, gold, timeout_int)` replaces the math-verify grade (a picklable top-level function; used by
    the tests to inject hangs and crashes).

    Workers start with multiprocessing's forkserver, so, as with any process pool, a calling script needs an
    `if __name__ == "__main__":` guard."""
    if len(preds) != len(golds):
        raise ValueError(f"grade_many: {len(preds)} preds but {len(golds)} golds")
    if grade_fn is None:  # a worker without math-verify would count every grade False
        check("math_verify", "grading math answers")
    keys: dict[tuple[str, str], int] = {}
    slot: list[int | None] = []
    for p, g in zip(preds, golds):
        if p is None or g is None or not str(p).strip() or not str(g).strip():
            slot.append(None)
            continue
        key = (str(p), str(g))
        slot.append(keys.setdefault(key, len(keys)))
    pairs = list(keys)
    workers = workers if workers is not None else (os.cpu_count() or 1)
    pool = _GradePool(grade_fn or _mv_grade, workers)
    try:
        graded = pool.run(pairs, timeout_s, progress)
    finally:
        pool.close()
    return [False if s is None else graded[s] for s in slot]


def grade(pred: str | None, gold: str | None, timeout_s: float = 5.0) -> bool:
    """Is pred (an extracted answer, e.g. extract_answer(text)) equivalent to gold? math-verify, gold first.

    Runs in a kept-warm worker process (shared by the calling process's threads), so a hang is cut at timeout_s
    and counts False; for many grades grade_many is faster (several workers, duplicate pairs graded once)."""
    if pred is None or gold is None or not str(pred).strip() or not str(gold).strip():
        return False
    check("math_verify", "grading math answers")  # a worker without it would count every grade False
    with _SHARED_LOCK:
        return _shared_pool().run([(str(pred), str(gold))], timeout_s)[0]
