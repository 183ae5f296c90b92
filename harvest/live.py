"""A live response source: generate (and score) the k-th response of a query when a policy asks for it.

`replay.live.run_live` runs any replayable policy against it. The k-th response of a query is drawn with the
seed its sample k gets in `ttc harvest` (harvest.pipeline.query_seed(seed, query_id) + k; vLLM's rule for the
n children of one request), so a live run equals the replay of the harvested pool taken in sample order, and
generation can run ahead in batches without changing a decision: `lookahead` responses of a query per call, and
(batch=True) one call for every active query whose cached responses are used up, so a round-robin round is one
backend call, not one per query.

Faults (`ttc run`, harvest/run/): a backend call that raises is retried `retries` times with exponential backoff
(the openai backend's client also retries each HTTP request itself). A call that still fails is then examined: one
prompt that worked before is tried again (a probe; before anything has worked, up to three of the call's prompts
alone, kept when they work): if that fails too the backend is down, and the run stops (BackendError; a rerun
resumes from what was written); if it works, the call's prompts are split in halves until the failing ones are
found, and each of those queries is marked failed (replay.live.Unavailable: it keeps the responses it has, and the
others go on).
"""
from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Sequence

import numpy as np

from ttc.replay.errors import InputError
from ttc.replay.live import Observed, Unavailable

from .pipeline import query_seed
from .types import Backend, Query, Response, Sampling

ORACLES = (None, "gt", "sc")
# the answer extractor each task's responses are read with (harvest/scoring.py response_answer)
ANSWER_RULES = {"math": "gt", "custom": "gt", "lcb-exec": "exec"}
MAX_BACKOFF_S = 30.0


def _message(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:500] if text else type(e).__name__


class PromptCache:
    """Each query's prompt and its length in tokens, computed once: what a live source (BackendSource, and
    harvest.run.depth.BackendTraces for the depth policies) reports per query. Needs queries, prompt, prompt_len and
    the two dicts _prompts, _prompt_tokens."""

    def prompt_of(self, i: int) -> str:
        if i not in self._prompts:
            self._prompts[i] = self.prompt(self.queries[i])
        return self._prompts[i]

    def prompt_tokens_of(self, i: int) -> int | None:
        """Query i's prompt length in tokens: None without prompt_len, or while prompt_len does not know it yet (a
        server's count, known once a response to the prompt came back: harvest.run.ServerUsage)."""
        if self.prompt_len is None:
            return None
        if i not in self._prompt_tokens:
            n = self.prompt_len(self.prompt_of(i))
            if n is None:
                return None
            self._prompt_tokens[i] = int(n)
        return self._prompt_tokens[i]


class BackendSource(PromptCache):
    """Responses generated on demand by a backend, cached per query.

    oracle None: every response counts as wrong, score 0, no answer (the policy sees only lengths: enough for
    token budgets and for tests); "gt": math answers extracted, normalised and graded with math-verify against
    the query's gold answer (score = correctness), as `ttc score --oracle gt` does (no answer when the response
    was cut at max_tokens); each distinct answer of a query is graded once. "sc" (answer agreement, for
    self-consistency): the same answers, no grading and no gold needed; every score is 0, so only answer-based
    rules mean anything (sc-share / sc-beta elimination, entropy, the sc selection). `scorer` (any other oracle:
    exec, prm, judge; harvest.scoring.LiveScorer) scores every response of a backend call in one batched call (a PRM
    forward pass or a judge generate call per response would cost more than the scoring itself), returning what the
    policy sees and the oracle's columns for the pool (`columns(i, k)`, written by on_call's receiver).

    batch: when a query needs a response that is not cached, also generate `lookahead` responses for every other
    query the driver reports active whose cache is used up (replay.live.run_live reports them through `watch`).
    Each query is then topped up only after it consumed what it had, so at most `lookahead` responses per query
    go unused, as without batching.

    plan(targets): a policy whose allocation is known before any response (harvest.run.planned_counts: `uniform`
    with a sample budget) has every query's responses up to targets[q] generated at once, on the first response
    asked for that is not cached: one backend call per distinct count (the backend takes one n per call), each
    query's responses drawn with the seeds they have on demand, so nothing the driver sees changes, only how many
    calls bring it; a query whose call fails keeps what it had before it (the fault handling below), and whatever
    the driver asks for beyond the plan is generated on demand as before.

    Accounting: `calls` (backend calls that returned responses), `generated`, `completion_tokens`,
    `prompt_tokens` (with `prompt_len`, the prompt's length in tokens, counted once per response generated),
    `backend_s` and `score_s` (wall seconds in the backend and in scoring). on_call(records, failures), when given,
    is called after every call with [(query index, first sample index, [(Response, Observed), ...]), ...] and the
    queries marked failed in it ({index: message}), before the driver sees them (harvest/run/ writes them to
    disk there). `fail` holds the queries known to have failed (a resumed run's), as {index: message}."""

    def __init__(self, backend: Backend, queries: Sequence[Query], prompt: Callable[[Query], str], sampling: Sampling,
                 *, lookahead: int = 4, oracle: str | None = None, stop: Sequence[str] = (), batch: bool = True,
                 retries: int = 2, retry_delay_s: float = 1.0, grade_timeout_s: float = 5.0,
                 prompt_len: Callable[[str], int] | None = None,
                 on_call: Callable[[list, dict], None] | None = None, scorer: Any = None,
                 confidence: Any = None, score_signal: str | None = None, side_column: str | None = None,
                 slots: int = 0, stops: bool = False, token_cap: int = 0, depth: tuple[int, int] | None = None):
        if lookahead < 1:
            raise InputError(f"lookahead must be >= 1, got {lookahead}")
        if scorer is not None:
            oracle = getattr(scorer, "name", "scorer")
        elif oracle not in ORACLES:
            raise InputError(f"unknown oracle {oracle!r} for a live source (None, 'gt' or 'sc', or a scorer)")
        if oracle == "gt" and any(q.gold is None for q in queries):
            raise InputError("oracle 'gt' needs a gold answer for every query")
        if retries < 0 or not retry_delay_s >= 0:
            raise InputError(f"retries must be >= 0 and the retry delay >= 0, got {retries} and {retry_delay_s}")
        self.backend, self.queries, self.prompt, self.sampling = backend, list(queries), prompt, sampling
        self.lookahead, self.oracle, self.stop, self.batch = lookahead, oracle, tuple(stop), batch
        self.retries, self.retry_delay_s, self.grade_timeout_s = retries, retry_delay_s, grade_timeout_s
        self.prompt_len, self.on_call, self.scorer = prompt_len, on_call, scorer
        # confidence: the harvest.confidence.ConfidenceSpec the backend computes per response (log-probs are asked
        # for only then); score_signal: with oracle "sc", the signal column that scores instead of 0
        if score_signal is not None and (confidence is None or score_signal not in confidence.columns()):
            raise InputError(f"score_signal {score_signal!r} is not a column of the confidence signals asked for")
        self.confidence, self.score_signal = confidence, score_signal
        # side_column: a score column the run records (a confidence signal's, or one of the scorer's columns) that
        # each response carries as its side signal (Observed.side, read by side-eb: ttc run --side)
        self.side_column = side_column
        self._columns: dict[tuple[int, int], dict] = {}  # (query, sample) -> the scorer's columns (new responses)
        self._prompts: dict[int, str] = {}
        self._prompt_tokens: dict[int, int] = {}
        self._cache: list[list[tuple[Response, Observed]]] = [[] for _ in self.queries]
        self._have = np.zeros(len(self.queries), np.int64)  # len(self._cache[i])
        self._fresh: set[int] = set()  # queries whose cache grew since the driver last asked (fresh())
        self._verdicts: list[dict[str, bool]] = [{} for _ in self.queries]
        self._next_k: Callable[[int], int | None] | None = None
        self._plan: np.ndarray | None = None  # plan(): each query's responses to generate at once (None: none)
        self._good: int | None = None  # a query whose generation has worked (the probe of a failing call)
        self.fail: dict[int, str] = {}
        self.calls = 0  # backend calls that returned responses (for cost accounting and tests)
        self.failed_calls = 0
        self.generated = self.completion_tokens = self.prompt_tokens = 0
        self.backend_s = self.score_s = 0.0
        if slots < 0:
            raise InputError(f"slots must be >= 0, got {slots}")
        self.slots = slots  # > 0: one request per query, `slots` in flight at once (arrive())
        self._pool: Any = None  # their threads (concurrent.futures), made on the first arrive()
        self._flight: dict[int, Any] = {}  # query -> its request in flight: (future, responses asked for)
        # stops: the backend stops a trace mid-way at a group-confidence threshold (the registry's `stops`: generate
        # takes conf_stop); the driver then gives each query's threshold (confidence_stop)
        self.stops = stops
        # token_cap: each trace stops at this many tokens and answers its probe there (ttc run --trace-cap: a backend
        # whose generate takes trace_cap, the registry's `probes`); 0: whole traces
        self.token_cap = token_cap
        # depth: (every, m): each trace is probed every `every` tokens and stops at the first probe that makes its
        # last m valid probe answers agree (ttc run --depth-rule stability: a backend whose generate takes
        # probe_every and depth_m, the registry's `probes`); None: no probes
        self.depth = depth
        self._threshold: Callable[[int], float | None] | None = None
        self._warm = 0

    # ------------------------------------------------------------------------------------------------ the driver

    def watch(self, next_k: Callable[[int], int | None] | None):
        """The driver's view of the run: next_k(i) = the index of the next response query i would ask for, or
        None when it will ask for no more (answered, capped, or its pool size reached); None after the run."""
        self._next_k = next_k

    def confidence_stop(self, threshold: Callable[[int], float | None] | None, warm: int = 0):
        """deepconf-online (replay.live.run_live): threshold(i) = query i's group-confidence threshold, None while it
        is not known (the warm-up), for each response from the warm-th on; a backend that `stops` is asked to stop
        those traces there (conf_stop), and the run then pays for what was generated. A backend that cannot is
        never asked: its traces are generated whole, and the run pays each up to where it would have stopped
        (the same decisions and tokens charged; the generation costs more). None after the run."""
        self._threshold, self._warm = (threshold, warm) if self.stops else (None, 0)

    def plan(self, targets: Sequence[int] | None):
        """Generate every query's responses up to targets[q] together, when the first response not cached is asked
        for (None: no plan). See the class docstring."""
        if targets is not None:
            targets = np.asarray(targets, np.int64).reshape(-1)
            if targets.shape != (len(self.queries),) or (targets < 0).any():
                raise ValueError("a plan needs one count >= 0 per query")
        self._plan = targets

    def response(self, i: int, k: int) -> Observed:
        if k >= len(self._cache[i]) and i not in self.fail:
            self._generate(i, k)
        if k >= len(self._cache[i]):
            raise Unavailable(self.fail.get(i, "no response"))
        return self._cache[i][k][1]

    def ready(self, i: int) -> int:
        """Responses of query i generated already (the driver takes them without asking one at a time)."""
        return len(self._cache[i])

    def fresh(self) -> set[int]:
        """The queries whose generated responses grew since the last call."""
        out, self._fresh = self._fresh, set()
        return out

    def text(self, i: int, k: int) -> str:
        """The text of a response already generated."""
        return self._cache[i][k][0].text

    def item(self, i: int, k: int) -> tuple[Response, Observed]:
        return self._cache[i][k]

    def columns(self, i: int, k: int) -> dict:
        """The scorer's columns of response k of query i, generated by this source ({} without a scorer)."""
        return self._columns.get((i, k), {})

    def preload(self, i: int, items: Sequence[tuple[Response, Observed]]):
        """Responses generated before (a resumed run's cache, in sample order)."""
        if self._cache[i]:
            raise ValueError(f"query {i} already holds responses")
        self._cache[i] = list(items)
        self._have[i] = len(items)
        self._fresh.add(i)
        if items and self._good is None:
            self._good = i
        for _r, o in items:
            if o.answer is not None and self.oracle == "gt":
                self._verdicts[i][o.answer] = bool(o.correct)

    def known_prompt_tokens(self, i: int, n: int):
        """Query i's prompt length as counted before (a resumed run's record of a server's count)."""
        self._prompt_tokens[i] = int(n)

    # -------------------------------------------------------------------------------------------- generation

    def _generate_plan(self, targets: np.ndarray):
        """The plan's calls: the queries that need the same number of responses more go together, the largest
        number first (the queries in index order within a call)."""
        groups: dict[int, list[int]] = {}
        for q in np.nonzero(targets > self._have)[0]:
            q = int(q)
            if q not in self.fail:
                groups.setdefault(int(targets[q] - self._have[q]), []).append(q)
        for count in sorted(groups, reverse=True):
            todo = groups[count]
            got, failures = self._robust(todo, count)
            self._store(todo, got, failures)

    def _generate(self, i: int, upto: int):
        if self._plan is not None:
            targets, self._plan = self._plan, None
            self._generate_plan(targets)
            if upto < len(self._cache[i]) or i in self.fail:
                return
        todo = [i]
        if self.batch and self._next_k is not None:
            every = getattr(self._next_k, "all", None)
            if every is not None:  # one array operation instead of a call per query
                ks = every()
                todo += [int(q) for q in np.nonzero((ks >= 0) & (ks >= self._have))[0]
                         if q != i and int(q) not in self.fail]
            else:
                for q in range(len(self.queries)):
                    k = self._next_k(q) if q != i else None
                    if k is not None and k >= len(self._cache[q]) and q not in self.fail:
                        todo.append(q)
        # One call: query q's responses start at its cached count, with the seeds its pool samples have there.
        count = max(self.lookahead, upto + 1 - len(self._cache[i]))
        got, failures = self._robust(todo, count)
        self._store(todo, got, failures)

    def _store(self, todo: list[int], got: dict[int, list[Response]], failures: dict[int, str]):
        """Score one call's responses, hand them to on_call, and cache them."""
        records = []
        t0 = time.perf_counter()
        done = [q for q in todo if q in got]
        if self.scorer is not None:  # one batched oracle call for the whole backend call
            flat = [(q, r) for q in done for r in got[q]]
            observed, columns = self.scorer.score([self.queries[q] for q, _ in flat], [r for _, r in flat])
            at = 0
            for q in done:
                start, n = len(self._cache[q]), len(got[q])
                records.append((q, start, list(zip(got[q], observed[at:at + n]))))
                for m in range(n):
                    self._columns[(q, start + m)] = {c: v[at + m] for c, v in columns.items()}
                at += n
        else:
            for q in done:
                records.append((q, len(self._cache[q]), list(zip(got[q], self._score(q, got[q])))))
        if self.side_column is not None:
            records = [(q, start, self._with_side(q, start, items)) for q, start, items in records]
        if self.confidence is not None and "group-lows" in self.confidence.signals:
            records = [(q, start, _with_lows(items)) for q, start, items in records]
        self.score_s += time.perf_counter() - t0
        for q, msg in failures.items():
            self.fail[q] = msg
        if self.on_call is not None:
            self.on_call(records, failures)  # written down before the driver sees them
        for q, _start, items in records:
            self._cache[q].extend(items)
            self._have[q] = len(self._cache[q])
            self._fresh.add(q)
            if self._good is None:
                self._good = q
            self.generated += len(items)
            self.completion_tokens += sum(r.n_tokens for r, _ in items)
            self.prompt_tokens += len(items) * (self.prompt_tokens_of(q) or 0)

    def _sampling(self, count: int) -> Sampling:
        s = self.sampling
        return Sampling(n=count, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=s.seed)

    def _args(self, todo: list[int], count: int) -> tuple:
        """A call's arguments for `todo` (count responses each, continuing each query's seeds)."""
        for q in todo:
            self.prompt_tokens_of(q)
        seeds = [query_seed(self.sampling.seed, self.queries[q].query_id) + len(self._cache[q]) for q in todo]
        kw: dict[str, Any] = {"stop": list(self.stop)} if self.stop else {}
        if self.confidence is not None:  # (only then: a backend without signals need not take the keyword)
            kw["confidence"] = self.confidence
        if self.token_cap:
            kw["trace_cap"] = self.token_cap
        if self.depth is not None:
            kw["probe_every"], kw["depth_m"] = self.depth
        if self._threshold is not None:  # a request's responses after the warm-up stop at the query's threshold
            floors = [self._threshold(q) if len(self._cache[q]) >= self._warm else None for q in todo]
            if any(f is not None for f in floors):
                kw["conf_stop"] = floors
        return [self.prompt_of(q) for q in todo], self._sampling(count), seeds, kw

    def _attempts(self, args: tuple, attempts: int) -> tuple[Any, float, int, BaseException | None]:
        """The backend call, tried `attempts` times with exponential backoff: (its output or None, seconds in the
        backend, failed attempts, the last error). Touches nothing of the source, so that a request can run on a
        thread of its own (arrive())."""
        prompts, sampling, seeds, kw = args
        spent, failed, error = 0.0, 0, None
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(MAX_BACKOFF_S, self.retry_delay_s * 2 ** (attempt - 1)))
            t0 = time.perf_counter()
            try:
                out = self.backend.generate(prompts, sampling, seeds, **kw)
            except InputError:
                raise  # the user's input, not a fault: retrying changes nothing
            except Exception as e:
                spent += time.perf_counter() - t0
                failed += 1
                error = e
                continue
            return out, spent + time.perf_counter() - t0, failed, None
        return None, spent, failed, error

    def _done(self, todo: list[int], count: int, result: tuple, timed: bool = True) -> dict[int, list[Response]]:
        """A call's outcome counted (timed: its seconds into backend_s); its responses, or its last error raised."""
        out, spent, failed, error = result
        if timed:
            self.backend_s += spent
        self.failed_calls += failed
        if out is None:
            raise error  # type: ignore[misc]
        if len(out) != len(todo) or any(len(rs) != count for rs in out):
            raise RuntimeError(f"the backend returned {[len(rs) for rs in out]} responses for {len(todo)} "
                               f"prompts x {count}")
        self.calls += 1
        return dict(zip(todo, out))

    def _call(self, todo: list[int], count: int, attempts: int) -> dict[int, list[Response]]:
        """One backend call for `todo` (count responses each, continuing each query's seeds), tried `attempts`
        times with exponential backoff."""
        return self._done(todo, count, self._attempts(self._args(todo, count), attempts))

    def _robust(self, todo: list[int], count: int, done: tuple | None = None
                ) -> tuple[dict[int, list[Response]], dict[int, str]]:
        """The call for `todo`, with the module docstring's fault handling: (responses by query, failed queries).
        done: the call's outcome when it was made already (a request of arrive(), on its own thread)."""
        from .backends import BackendError

        try:
            if done is not None:
                return self._done(todo, count, done, timed=False), {}
            return self._call(todo, count, self.retries + 1), {}
        except InputError:
            raise
        except Exception as e:
            first = e
        got: dict[int, list[Response]] = {}
        failures: dict[int, str] = {}
        attempts = f"{self.retries + 1} attempt{'s' if self.retries else ''}"
        if self._good is not None:
            try:
                self._call([self._good], 1, self.retries + 1)  # the probe: its response is not used
                self.calls -= 1
            except InputError:
                raise
            except Exception as e:
                raise BackendError(f"the backend is failing (a prompt that worked before fails too): {_message(e)}; "
                                   "what was generated is kept, rerun to resume") from None
        else:  # nothing has worked yet: a few of the call's prompts alone, kept when they work
            for q in dict.fromkeys([todo[0], todo[len(todo) // 2], todo[-1]]):
                try:
                    got.update(self._call([q], count, self.retries + 1))
                    self._good = q
                    break
                except InputError:
                    raise
                except Exception as e:
                    failures[q] = f"{_message(e)} (after {attempts}, and {attempts} alone)"
            if self._good is None:
                raise BackendError(f"the backend failed on the run's first call ({attempts}: {_message(first)}), "
                                   f"and on {len(failures)} of its prompts alone; nothing was recorded for this "
                                   "call, rerun to resume") from None

        def split(part: list[int]):
            try:
                got.update(self._call(part, count, 1))
            except InputError:
                raise
            except Exception as e:
                if len(part) == 1:
                    failures[part[0]] = f"{_message(e)} (after {attempts} and an isolated retry)"
                    return
                split(part[:len(part) // 2])
                split(part[len(part) // 2:])

        rest = [q for q in todo if q not in got and q not in failures]
        if len(todo) == 1 and rest:
            failures[todo[0]] = f"{_message(first)} (after {attempts})"
        elif rest:
            split(rest)
        return got, failures

    # ------------------------------------------------------------------------------- requests in flight (slots)

    def arrive(self, waiting: Sequence[tuple[int, int]], ahead: Sequence[int] = ()) -> dict[int, str]:
        """With slots: make sure the run's wanted responses are being generated, and return once some have come.

        waiting: (query, upto) for each query the run waits on, which wants its responses up to index upto - 1;
        ahead: queries the run is likely to want next (active, with nothing generated ahead), asked for with the
        slots the waiting ones leave. A query has one request in flight at a time (its responses from its count so
        far, `lookahead` or as many as the run waits for, or its plan's); at most `slots` are in flight. Blocks
        until at least one request finishes, then scores and stores every finished one (one scorer batch and one
        on_call for them); a request that failed goes through the fault handling of the module docstring (the
        probe runs here, on the driver's thread). Returns the waiting queries that can get no more responses
        (their failures), at once if one of them failed before. backend_s counts the seconds spent waiting here:
        with requests overlapping, the sum of their own seconds says nothing about the run's time."""
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        if self.slots < 1:
            raise RuntimeError("arrive() needs a source made with slots")
        lost = self._lost(waiting)
        if lost:
            return lost
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="ttc-request")
        flight, fail = self._flight, self.fail
        for i, upto in itertools.chain(waiting, ((q, 0) for q in ahead)):
            if len(flight) >= self.slots:
                break
            if i in flight or i in fail:
                continue
            have = len(self._cache[i])
            count = max(self.lookahead, upto - have)
            if self._plan is not None and self._plan[i] > have:
                count = max(count, int(self._plan[i]) - have)
            args = self._args([i], count)
            flight[i] = (self._pool.submit(self._attempts, args, self.retries + 1), count)
        if not flight:
            raise RuntimeError("the run waits for responses and none is being generated")
        t0 = time.perf_counter()
        wait([f for f, _ in self._flight.values()], return_when=FIRST_COMPLETED)
        self.backend_s += time.perf_counter() - t0
        got: dict[int, list[Response]] = {}
        failures: dict[int, str] = {}
        stop: BaseException | None = None  # (the user's input, the backend down, Ctrl-C: raised once the rest is kept)
        for i in [q for q, (f, _) in self._flight.items() if f.done()]:
            f, count = self._flight.pop(i)
            try:
                g, fl = self._robust([i], count, done=f.result())
            except BaseException as e:
                stop = stop or e
                continue
            got.update(g)
            failures.update(fl)
        self._store(sorted(set(got) | set(failures)), got, failures)  # one batch for the scorer and on_call
        if stop is not None:
            raise stop
        return self._lost(waiting)

    def _lost(self, waiting: Sequence[tuple[int, int]]) -> dict[int, str]:
        """The waiting queries that failed with fewer responses than they want."""
        if not self.fail:
            return {}
        return {i: self.fail[i] for i, upto in waiting if i in self.fail and len(self._cache[i]) < upto}

    def close(self, keep: bool = True):
        """Requests still in flight when the run is over (generated ahead): those not started are dropped; keep:
        those running are waited for and stored (they go to the pool like every other response), else left to
        finish unseen (the run stops on an error)."""
        if self._pool is None:
            return
        from concurrent.futures import wait

        for i, (f, _) in list(self._flight.items()):
            if f.cancel() or not keep:
                del self._flight[i]
        wait([f for f, _ in self._flight.values()])
        got: dict[int, list[Response]] = {}
        for i, (f, count) in sorted(self._flight.items()):
            result = f.result()
            if result[0] is not None:
                got.update(self._done([i], count, result, timed=False))
        if got:
            self._store(sorted(got), got, {})
        self._flight.clear()
        self._pool.shutdown(wait=keep, cancel_futures=True)
        self._pool = None

    # ----------------------------------------------------------------------------------------------- scoring

    def _with_side(self, q: int, start: int, items: list) -> list:
        """items with each response's side signal: the value of side_column among the scorer's columns of it, or
        among its confidence signals. Both are the columns the run's pool records, so replay of that pool with --side
        reads the same numbers."""
        from dataclasses import replace

        out = []
        for m, (r, o) in enumerate(items):
            v = self._columns.get((q, start + m), {}).get(self.side_column)
            if v is None and r.signals is not None:
                v = r.signals.get(self.side_column)
            if v is None:
                from .backends import BackendError

                raise BackendError(f"no {self.side_column!r} for a response of query {self.queries[q].query_id!r} "
                                   "(the --side signal): the backend returned no confidence signals")
            out.append((r, replace(o, side=float(v))))
        return out

    def _score(self, i: int, responses: Sequence[Response]) -> list[Observed]:
        if self.oracle is None:
            return [Observed(False, 0.0, None, r.n_tokens) for r in responses]
        from .scoring import response_answer

        q = self.queries[i]
        rule = ANSWER_RULES.get(q.task, "gt")
        out = []
        for r in responses:
            answer = _probed_answer(r) if r.finish_reason in PROBED else response_answer(rule, r.text, r.finish_reason)
            if self.oracle == "sc":
                score = 0.0
                if self.score_signal is not None:
                    if r.signals is None or self.score_signal not in r.signals:
                        from .backends import BackendError

                        raise BackendError(f"the backend returned no confidence signals for query {q.query_id!r}")
                    score = float(r.signals[self.score_signal])
                out.append(Observed(False, score, answer, r.n_tokens))
                continue
            ok = False
            if answer is not None:
                cache = self._verdicts[i]
                if answer not in cache:
                    from .oracles.math_answer import grade

                    cache[answer] = bool(grade(answer, q.gold, timeout_s=self.grade_timeout_s))
                ok = cache[answer]
            out.append(Observed(ok, 1.0 if ok else 0.0, answer, r.n_tokens))
        return out


# finish reasons of a trace stopped part-way and probed (--trace-cap, --depth-rule stability): its answer is its
# probe's box (harvest.backends.probe_value), none when the box never closed
PROBED = ("cap", "stable")


def _probed_answer(r: Response) -> str | None:
    from .backends import PROBE_PROMPT, probe_value

    head, sep, probe = r.text.rpartition(PROBE_PROMPT)
    return probe_value(probe) if sep else None


class LazyBackend:
    """A backend built on its first `generate` (a resumed or finished run that needs no new response never loads
    the model). `factory()` builds it; info() before that says it was not loaded."""

    def __init__(self, factory: Callable[[], Any]):
        self._factory, self._backend = factory, None
        self.load_s = 0.0  # seconds the first generate spent building the backend (loading the model)

    @property
    def loaded(self) -> bool:
        return self._backend is not None

    def get(self):
        if self._backend is None:
            t0 = time.perf_counter()
            self._backend = self._factory()
            self.load_s = time.perf_counter() - t0
        return self._backend

    def generate(self, *args, **kw):
        return self.get().generate(*args, **kw)

    def trace(self, *args, **kw):
        return self.get().trace(*args, **kw)

    def info(self) -> dict:
        return self._backend.info() if self._backend is not None else {"loaded": False}

    def close(self):
        close = getattr(self._backend, "close", None)
        if callable(close):
            close()


def _with_lows(items: list) -> list:
    """items with each response's record lows (deepconf-online's Observed.lows), from its group-lows signal: the
    columns the run's pool records, so a replay of that pool reads the same lows."""
    from dataclasses import replace

    out = []
    for r, o in items:
        sig = r.signals or {}
        pos, val = sig.get("conf_lows_pos"), sig.get("conf_lows")
        out.append((r, o if pos is None or val is None else
                    replace(o, lows=(tuple(int(x) for x in pos), tuple(float(x) for x in val)))))
    return out
