"""Plain-Python reference of the depth policies and rules (docs/semantics.md, "Depth"): the test oracle of
replay/kernel.py's depth_view and parallel_probe, written from the doc and from Parallel-Probe's structure as
AutoTTS's replay evaluator runs it (branches as objects, histories as lists, a Counter for the vote), not from the
kernel. Like replay/reference.py it imports nothing else from the package.

A trace here is (probes, total, final answer, final correct): probes a list of (offset, answer id or -1, correct).
"""

from collections import Counter

COST_MODES = ("tokens", "autotts")


def trace_events(probes, total, final, final_ok, cap=0, cost="tokens"):
    """The events a trace can produce, in order: [(cumulative cost, answer, correct, finished)], its reachable
    probes then its end (its final answer, or with a trace cap its last probe at or below the cap, at cost cap)."""
    if cost not in COST_MODES:
        raise ValueError(cost)
    end = total if cost == "tokens" or not probes else max(total, probes[-1][0])
    events = []
    for off, a, ok in probes:
        if cost == "tokens" and off >= total:
            break
        if cap and off > cap:
            break
        events.append((off, a, ok, False))
    if cap and end > cap:
        last = events[-1] if events else (0, -1, 0, False)
        events.append((cap, last[1], last[2], True))
    else:
        events.append((end, final, final_ok, True))
    return events


def stopped_trace(probes, total, final, final_ok, rule="whole", m=3, cap=0, cost="tokens"):
    """(cost, answer, correct) of a trace run until the depth rule stops it: "whole" runs it to its end (or the
    cap); "stability" stops it at the first reachable probe whose answer is valid and equal to the m - 1 probes
    before it."""
    events = trace_events(probes, total, final, final_ok, cap, cost)
    if rule == "stability":
        probes_seen = [e for e in events if not e[3]]
        for k in range(len(probes_seen)):
            window = [e[1] for e in probes_seen[max(0, k - m + 1):k + 1]]
            if len(window) == m and window[0] >= 0 and all(a == window[0] for a in window):
                return probes_seen[k][0], probes_seen[k][1], probes_seen[k][2]
    elif rule != "whole":
        raise ValueError(rule)
    e = events[-1]
    return e[0], e[1], e[2]


class _Branch:
    """One trace as AutoTTS's data_loader.Branch: explore() gives the next event and its cost."""

    def __init__(self, events):
        self.events = events
        self.i = 0
        self.paid = 0

    def next_cost(self):
        return max(0, self.events[self.i][0] - self.paid)

    def explore(self):
        c, a, ok, fin = self.events[self.i]
        cost = max(0, c - self.paid)
        self.paid += cost
        if not fin:
            self.i += 1
        return a, ok, fin, cost


def _winner(answers):
    """Counter's majority over the valid answers (ties: the first met); (-1, 0) when none is valid."""
    valid = [(a, ok) for a, ok in answers if a >= 0]
    if not valid:
        return -1, 0
    top = Counter(a for a, _ in valid).most_common(1)[0][0]
    return top, next(ok for a, ok in valid if a == top)


def _parallel_probe_query(traces, chains, T, patience, warm, max_steps=100):
    """Parallel-Probe on one query as a generator: it yields the cost of each exploration before making it and is
    sent True (go on) or False (the budget ended the run: it returns). State is kept in self-describing lists;
    `result` holds (answer, correct, answered, started)."""
    result = {"ans": -1, "ok": 0, "answered": False, "started": 0, "done": False, "branches": [], "hist": []}
    branches, hist, off_track, status = [], [], [], []
    for t in traces[:chains]:
        b = _Branch(t)
        go = yield ("start", b.next_cost())
        if not go:
            return result
        a, ok, fin, _ = b.explore()
        branches.append(b)
        hist.append([(a, ok)])
        off_track.append(0)
        status.append("finished" if fin else "live")
        result["started"] += 1
        result["branches"], result["hist"], result["status"] = branches, hist, status
    yield ("round", 0)
    prev, stable, step = None, 0, 0
    while step < max_steps:
        for k, b in enumerate(branches):
            if status[k] == "live":
                go = yield ("segment", b.next_cost())
                if not go:
                    return result
                a, ok, fin, _ = b.explore()
                hist[k].append((a, ok))
                if fin:
                    status[k] = "finished"
        active = [k for k in range(len(branches)) if status[k] != "pruned"]
        w, wok = _winner([hist[k][-1] for k in active])
        if step >= warm and len(active) > 1:
            for k in active:
                if status[k] == "live":
                    off_track[k] = off_track[k] + 1 if hist[k][-1][0] != w else 0
            pruned = [k for k in active if status[k] == "live" and off_track[k] >= patience]
            for k in pruned:
                status[k] = "pruned"
            if pruned:
                active = [k for k in active if status[k] != "pruned"]
                if not active:  # every trace pruned: the previous winner stands
                    result["done"] = True
                    return result
                w, wok = _winner([hist[k][-1] for k in active])
        stable = stable + 1 if w == prev else 0
        prev = w
        result["ans"], result["ok"] = w, wok
        if stable >= T:
            result["answered"] = result["done"] = True
            return result
        if all(s != "live" for s in status):
            result["done"] = True
            return result
        step += 1
        yield ("round", step)
    result["done"] = True
    return result


def parallel_probe(queries, order, budget, *, chains, T, patience, warm, unit="tokens", cap=0, cost="tokens"):
    """Parallel-Probe over a batch under one budget: queries[i] = list of traces (probes, total, final, final_ok)
    in permutation order, order = the queries in rank order. Every query starts its chains in rank order, then one
    step each per round; the first exploration that does not fit ends the run, and each query not done holds the
    majority of its unpruned traces' latest answers. Returns (per query (answer, correct, answered, started),
    samples, tokens)."""
    return parallel_probe_events([[trace_events(*t, cap=cap, cost=cost) for t in q] for q in queries], order, budget,
                                 chains=chains, T=T, patience=patience, warm=warm, unit=unit)


def parallel_probe_events(queries, order, budget, *, chains, T, patience, warm, unit="tokens"):
    """parallel_probe on the traces' events (trace_events' lists, per query in permutation order), read only as
    the run reaches them: a sequence that produces an event when it is first indexed (replay/live.py's live traces)
    sees exactly the explorations the run makes."""
    gens, results, done = {}, {}, set()
    spent = {"samples": 0, "tokens": 0}

    def grant(kind, c):
        if kind == "start" and unit == "samples" and spent["samples"] >= budget:
            return False
        if unit == "tokens" and c > budget - spent["tokens"]:
            return False
        spent["tokens"] += c
        if kind == "start":
            spent["samples"] += 1
        return True

    ended = False
    for i in order:
        g = _parallel_probe_query(queries[i], chains, T, patience, warm)
        gens[i] = g
        msg = next(g)
        while msg[0] == "start":
            ok = grant(*msg)
            if not ok:
                ended = True
                try:
                    g.send(False)
                except StopIteration as stop:
                    results[i] = stop.value
                break
            msg = g.send(True)
        if ended:
            break
    if not ended:
        while True:
            moved = False
            for i in order:
                if i in done:
                    continue
                moved = True
                g = gens[i]
                try:
                    msg = g.send(True)  # the step: its segments, until the next round marker
                    while msg[0] == "segment":
                        if not grant(*msg):
                            ended = True
                            g.send(False)
                        msg = g.send(True)
                except StopIteration as stop:
                    results[i] = stop.value
                    done.add(i)
                if ended:
                    break
            if ended or not moved:
                break
    out = []
    for i in range(len(queries)):
        r = results.get(i)
        g = gens.get(i)
        if r is None and g is not None:  # cut by the budget: its current state, through the generator's frame
            r = g.gi_frame.f_locals["result"] if g.gi_frame is not None else None
        if r is None:
            out.append((-1, 0, False, 0))
            continue
        if not r["done"] and r["started"]:
            st = r.get("status", [])
            w, wok = _winner([h[-1] for k, h in enumerate(r["hist"]) if st[k] != "pruned"])
            if any(s != "pruned" for s in st):
                r["ans"], r["ok"] = w, wok
        out.append((r["ans"], r["ok"], r["answered"], r["started"]))
    return out, spent["samples"], spent["tokens"]


def cmc_schedule(beta):
    """AutoTTS's CMC knobs from its one scalar beta (its `_schedule`, Python's round: half to even)."""
    b = max(0.0, min(1.0, float(beta)))
    return {"n_init": max(2, round(2 + 6 * b)), "max_branch": min(64, round(4 + 60 * b)),
            "warm_up": max(2, round(2 + 8 * b)), "abandon_patience": max(3, round(3 + 9 * b)),
            "T_ema": max(2, round(2 + 6 * b)), "ema_alpha": round(0.70 - 0.40 * b, 4),
            "conf_thresh": round(0.85 + 0.12 * b, 4), "delta_slack": round(0.04 - 0.03 * b, 4),
            "burst_aligned": max(1, round(1 + 2 * b)), "widen_burst": max(1, round(1 + 3 * b)),
            "trend_thresh": round(0.04 - 0.03 * b, 4), "min_complete": max(2, round(2 + 3 * b))}


def beta_majority_confidence(top1, top2):
    """1 - BetaCDF(1/2; top1 + 1, top2 + 1) = P(Binomial(top1 + top2 + 1, 1/2) <= top1), summed in floating point
    term by term from k = 0 (0 when top1 = 0)."""
    if top1 <= 0:
        return 0.0
    n = top1 + top2 + 1
    from math import comb
    s = 0.0
    for k in range(top1 + 1):
        s += comb(n, k) * 0.5 ** n
    return s


def _pool_stats(completed):
    """(winner, its correctness, top1, top2, confidence) over the completed answers (a Counter: ties to the first
    completed); answers -1 (none) vote like any other here only under --invalid-votes (they are coded then)."""
    valid = [(a, ok) for a, ok in completed if a >= 0]
    if not valid:
        return None, 0, 0, 0, 0.0
    common = Counter(a for a, _ in valid).most_common(2)
    w, t1 = common[0]
    t2 = common[1][1] if len(common) > 1 else 0
    return w, next(ok for a, ok in valid if a == w), t1, t2, beta_majority_confidence(t1, t2)


def _cmc_query(traces, k):
    """AutoTTS's Confidence Momentum Controller (r0004 of its search) on one query, as a generator like
    _parallel_probe_query: it yields ("start" | "segment", cost) before each exploration and ("round", step) between
    outer steps."""
    result = {"ans": -1, "ok": 0, "answered": False, "started": 0, "done": False}
    branches, completed = [], []
    pos = 0

    def spawn():
        nonlocal pos
        if pos >= len(traces):
            return None
        b = _Branch(traces[pos])
        pos += 1
        return b

    def final():
        w, wok, *_ = _pool_stats(completed)
        if w is None:
            latest = [(br["ans"], br["ok"]) for br in branches if not br["abandoned"] and br["seen"]]
            w, wok = _winner(latest)
        result["ans"], result["ok"] = (w, wok) if w is not None else (-1, 0)

    result["final"] = final
    for _ in range(k["n_init"]):
        b = spawn()
        if b is None:
            break
        go = yield ("start", b.next_cost())
        if not go:
            return result
        a, ok, fin, _ = b.explore()
        branches.append({"b": b, "ans": a, "ok": ok, "finished": fin, "abandoned": False, "probes": 0,
                         "disagree": 0, "seen": True})
        result["started"] += 1
        if fin:
            completed.append((a, ok))
    result["branches"] = branches
    ema, hist, step = 0.0, [], 0
    yield ("round", 0)
    while step < 500:
        w, _, _, _, conf = _pool_stats(completed)
        warm = step >= k["warm_up"]
        ema = (1.0 - k["ema_alpha"]) * ema + k["ema_alpha"] * conf
        hist.append(ema)
        if len(hist) > k["T_ema"]:
            hist.pop(0)
        if warm and w is not None:
            for br in branches:
                if br["abandoned"] or br["finished"]:
                    continue
                br["disagree"] = br["disagree"] + 1 if br["ans"] != w else 0
            alive = sum(1 for br in branches if not br["abandoned"] and not br["finished"])
            cands = sorted([br for br in branches if not br["abandoned"] and not br["finished"]
                            and br["disagree"] >= k["abandon_patience"]], key=lambda br: -br["disagree"])
            for br in cands[:max(0, alive - 2)]:
                br["abandoned"] = True
        active = sorted([br for br in branches if not br["abandoned"] and not br["finished"]],
                        key=lambda br: -br["probes"])
        for br in active:
            aligned = warm and w is not None and br["ans"] == w
            for _ in range(k["burst_aligned"] if aligned else 1):
                if br["finished"]:
                    break
                go = yield ("segment", br["b"].next_cost())
                if not go:
                    return result
                a, ok, fin, _ = br["b"].explore()
                br["probes"] += 1
                br["ans"], br["ok"], br["finished"] = a, ok, fin
                if fin:
                    completed.append((a, ok))
                    break
        w, wok, _, _, conf = _pool_stats(completed)
        ema = (1.0 - k["ema_alpha"]) * ema + k["ema_alpha"] * conf
        hist[-1] = ema
        delta = hist[-1] - hist[0] if len(hist) >= 2 else 0.0
        n_complete = len(completed)
        if warm and n_complete >= k["min_complete"] and ema >= k["conf_thresh"] and delta >= -k["delta_slack"]:
            result["ans"], result["ok"] = w, wok
            result["answered"] = result["done"] = True
            return result
        if all(br["finished"] or br["abandoned"] for br in branches):
            break
        if (len(branches) < k["max_branch"] and delta <= k["trend_thresh"] and step >= max(1, k["warm_up"] // 2)
                and ema < k["conf_thresh"]):
            for _ in range(k["widen_burst"]):
                if len(branches) >= k["max_branch"]:
                    break
                b = spawn()
                if b is None:
                    break
                go = yield ("start", b.next_cost())
                if not go:
                    return result
                a, ok, fin, _ = b.explore()
                branches.append({"b": b, "ans": a, "ok": ok, "finished": fin, "abandoned": False, "probes": 0,
                                 "disagree": 0, "seen": True})
                result["started"] += 1
                if fin:
                    completed.append((a, ok))
        step += 1
        yield ("round", step)
    final()
    result["done"] = True
    return result


def cmc(queries, order, budget, *, beta=0.5, unit="tokens", cap=0, cost="tokens"):
    """CMC over a batch under one budget, scheduled as parallel_probe: every query opens its first traces in rank
    order, then one outer step each per round; the first exploration that does not fit ends the run, and each query
    not done holds CMC's final answer (the completed answers' winner, else the majority of its kept traces' latest).
    Returns (per query (answer, correct, answered, started), samples, tokens)."""
    return cmc_events([[trace_events(*t, cap=cap, cost=cost) for t in q] for q in queries], order, budget, beta=beta,
                      unit=unit)


def cmc_events(queries, order, budget, *, beta=0.5, unit="tokens"):
    """cmc on the traces' events, read only as the run reaches them (parallel_probe_events)."""
    k = cmc_schedule(beta)
    spent = {"samples": 0, "tokens": 0}

    def grant(kind, c):
        if kind == "start" and unit == "samples" and spent["samples"] >= budget:
            return False
        if unit == "tokens" and c > budget - spent["tokens"]:
            return False
        spent["tokens"] += c
        if kind == "start":
            spent["samples"] += 1
        return True

    gens, results, done = {}, {}, set()

    def advance(i):
        """Run query i's generator to its next round marker; False when the budget ended the run."""
        g = gens[i]
        try:
            msg = g.send(True) if i in started else next(g)
            started.add(i)
            while msg[0] != "round":
                if not grant(*msg):
                    try:
                        g.send(False)
                    except StopIteration as stop:
                        results[i] = stop.value
                    return False
                msg = g.send(True)
        except StopIteration as stop:
            results[i] = stop.value
            done.add(i)
        return True

    started = set()
    ended = False
    for i in order:
        gens[i] = _cmc_query(queries[i], k)
        if not advance(i):
            ended = True
            break
    while not ended:
        moved = False
        for i in order:
            if i in done:
                continue
            moved = True
            if not advance(i):
                ended = True
                break
        if not moved:
            break
    out = []
    for i in range(len(queries)):
        r = results.get(i)
        g = gens.get(i)
        if r is None and g is not None and g.gi_frame is not None:
            r = g.gi_frame.f_locals["result"]
        if r is None:
            out.append((-1, 0, False, 0))
            continue
        if not r["done"] and "final" in r:
            r["final"]()
        out.append((r["ans"], r["ok"], r["answered"], r["started"]))
    return out, spent["samples"], spent["tokens"]
