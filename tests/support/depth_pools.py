"""Random probed pools for the depth tests: traces with probes every `step` tokens (some with none extracted), a
final answer, and correctness a function of the answer within a query (answer 0 is the correct one)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ttc.replay.pool import Pool


def probed_arrays(rng, n_queries=4, max_traces=6, n_answers=3, step=500, max_probes=6, extra=0.3):
    """(off, tok, ans, correct, poff, ptok, pans, pok): answer ids in 0 .. n_answers - 1 (-1 none); `extra`: the
    chance a trace has one probe at or past its end (as the AutoTTS files have)."""
    sizes = rng.integers(1, max_traces + 1, n_queries)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(off[-1])
    tok, ans, poff, ptok, pans = [], [], [0], [], []
    for _ in range(total):
        k = int(rng.integers(0, max_probes + 1))
        t = int(step * k + rng.integers(1, step)) if rng.random() > 0.1 else int(step * max(k, 1))
        kk = k + (1 if rng.random() < extra else 0)
        tok.append(t)
        a = int(rng.integers(-1, n_answers))
        ans.append(a)
        for q in range(kk):
            ptok.append(step * (q + 1))
            # answers drift towards the final one: a stability rule has something to find
            pans.append(a if rng.random() < 0.5 else int(rng.integers(-1, n_answers)))
        poff.append(len(ptok))
    ans = np.array(ans, np.int64)
    pans = np.array(pans, np.int64)
    return (off, np.array(tok, np.int64), ans, (ans == 0).astype(np.int8), np.array(poff, np.int64),
            np.array(ptok, np.int64), pans, (pans == 0).astype(np.int8))


def probed_pool(rng, **kw) -> Pool:
    off, tok, ans, correct, poff, ptok, pans, pok = probed_arrays(rng, **kw)
    p = Pool.from_arrays(off, correct=correct, tok=tok)
    return dataclasses.replace(p, ans=ans, has_answers=True, probe_off=poff, probe_tok=ptok, probe_ans=pans,
                               probe_ok=pok.astype(bool), has_probes=True)


def traces_of(off, tok, ans, correct, poff, ptok, pans, pok):
    """The reference's form: per query, per response in pool order, (probes, total, final, final_ok)."""
    out = []
    for i in range(len(off) - 1):
        q = []
        for j in range(off[i], off[i + 1]):
            probes = [(int(ptok[k]), int(pans[k]), int(pok[k])) for k in range(poff[j], poff[j + 1])]
            q.append((probes, int(tok[j]), int(ans[j]), int(correct[j])))
        out.append(q)
    return out


def probed_pool_dir(path, n_queries=8, seed=3, keep=None, max_traces=8, **kw):
    """A probed pool on disk (probed_arrays' traces, answers written "a0", "a1", ...), only the queries in `keep`
    when given (a pool of those queries alone, to compare a sub-pool with)."""
    import polars as pl

    from ttc.replay.pool import samples_frame, write_pool

    off, tok, ans, correct, poff, ptok, pans, pok = probed_arrays(np.random.default_rng(seed), n_queries=n_queries,
                                                                 max_traces=max_traces, **kw)
    word = lambda a: None if a < 0 else f"a{a}"  # noqa: E731
    rows = {"query_id": [], "sample_idx": [], "correct": [], "answer": [], "n_tokens": []}
    probes = {"probe_answer": [], "probe_tokens": [], "probe_correct": []}
    for i in range(n_queries):
        if keep is not None and i not in keep:
            continue
        for j in range(off[i], off[i + 1]):
            rows["query_id"].append(f"q{i:03d}")
            rows["sample_idx"].append(int(j - off[i]))
            rows["correct"].append(bool(correct[j]))
            rows["answer"].append(word(ans[j]))
            rows["n_tokens"].append(int(tok[j]))
            ks = range(poff[j], poff[j + 1])
            probes["probe_answer"].append([word(pans[k]) for k in ks])
            probes["probe_tokens"].append([int(ptok[k]) for k in ks])
            probes["probe_correct"].append([None if pans[k] < 0 else bool(pok[k]) for k in ks])
    df = samples_frame(rows).with_columns(
        pl.Series("probe_answer", probes["probe_answer"], pl.List(pl.String)),
        pl.Series("probe_tokens", probes["probe_tokens"], pl.List(pl.Int64)),
        pl.Series("probe_correct", probes["probe_correct"], pl.List(pl.Boolean)))
    return write_pool(path, df, {"name": path.name})
