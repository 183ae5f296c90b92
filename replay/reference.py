"""Plain-Python reference implementation of docs/semantics.md (the test oracle).

Written straight from docs/semantics.md, as simply as possible: plain loops, one Python object holding
the per-query state, O(n) argmax scans for the index policies.  It imports nothing else from the `replay`
package on purpose (it is the independent twin of replay/kernel.py, shipped in the package so that `ttc bench`
can time it); the fast engine is compared against it for EXACT equality, so every
floating-point formula below is written in the same form and order of operations as in the doc.

Where docs/semantics.md leaves a choice open, the most literal reading is taken and marked with a
comment starting with "AMBIGUITY:".
"""

import heapq
import math
from fractions import Fraction
from functools import lru_cache

POLICIES = ("uniform", "elimination", "ucb", "gap", "gap-literal", "entropy", "two-stage", "streaming", "oracle",
            "optscale", "marginal-gain", "dsc", "side-eb", "deepconf-online", "uab", "pets", "pets-online")
INDEX_POLICIES = ("ucb", "gap", "gap-literal", "entropy", "marginal-gain")
UNITS = ("samples", "tokens")
ELIMS = ("none", "threshold", "sc-share", "sc-beta", "esc", "ac-majority", "ac-entropy", "ac-dirichlet")
ELIMS = ELIMS + ("boinf", "mmc", "lbayes")  # the 2025-26 per-query stops (issue 29)
BOINF_ALPHA = 0.3  # Best-of-Infinity's unknown bucket (its test_main.py's alpha)


# ----------------------------------------------------------------------------------------------------
# tables and the sc-beta stopping test
# ----------------------------------------------------------------------------------------------------

def log_tables(max_n):
    """T[k] = k*math.log(k) (T[0] = 0.0) and L[k] = math.log(k) (L[0] = 0.0) for k = 0..max_n."""
    max_n = int(max_n)
    T = [0.0] * (max_n + 1)
    L = [0.0] * (max_n + 1)
    for k in range(1, max_n + 1):
        T[k] = k * math.log(k)
        L[k] = math.log(k)
    return T, L


@lru_cache(maxsize=None)
def _prob_binomial_half_at_most(a, b):
    """P(Binomial(a+b+1, 1/2) <= a) as an exact Fraction (= P(Beta(a+1, b+1) > 1/2))."""
    m = a + b + 1
    hits = 0
    for k in range(a + 1):
        hits += math.comb(m, k)
    return Fraction(hits, 2 ** m)


def sc_beta_stops(a, b, conf):
    """P(Binomial(a+b+1, 1/2) <= a) >= conf, evaluated EXACTLY with fractions.Fraction
    (conf converted with Fraction(str(conf)))."""
    return _prob_binomial_half_at_most(int(a), int(b)) >= Fraction(str(float(conf)))


@lru_cache(maxsize=None)
def dirichlet_lead_prob(a, others):
    """P(G_a > G_b for every b in `others`), independent G_alpha ~ Gamma(alpha, 1) with integer shapes, as an
    EXACT Fraction: the integral over x > 0 of the Gamma(a) density x^(a-1) e^-x / (a-1)! times each Gamma(b)
    CDF 1 - e^-x Q_b(x), Q_b(x) = sum_{m<b} x^m / m!. Expanding the product, a subset S of the others contributes
    (-1)^|S| x^(a-1) e^-(1+|S|)x prod_{b in S} Q_b(x) / (a-1)!, and int x^n e^(-lam x) dx = n! / lam^(n+1)."""
    a, others = int(a), [int(b) for b in others]
    total = Fraction(0)
    for mask in range(1 << len(others)):
        chosen = [b for j, b in enumerate(others) if mask >> j & 1]
        poly = [Fraction(1)]                       # prod_{b in S} Q_b, coefficients of x^0, x^1, ...
        for b in chosen:
            prod = [Fraction(0)] * (len(poly) + b - 1)
            for p, c in enumerate(poly):
                for m in range(b):
                    prod[p + m] += c / math.factorial(m)
            poly = prod
        lam = 1 + len(chosen)
        part = Fraction(0)
        for p, c in enumerate(poly):
            part += c * Fraction(math.factorial(a - 1 + p), math.factorial(a - 1) * lam ** (a + p))
        total += -part if len(chosen) % 2 else part
    return total


def ac_dirichlet_stops(lead_cnt, other_counts, conf):
    """Adaptive-Consistency's Dirichlet rule (docs/semantics.md): the counts plus one of the leading answer and of
    the (up to) four most frequent other valid answers are the Dirichlet's parameters; it stops when the chance
    that the leading answer's share is the largest is >= conf (the float conf's exact value). A lone answer is
    the source's Beta rule with no runner-up: a second category of parameter 1."""
    others = sorted(other_counts, reverse=True)[:4]
    alphas = tuple(c + 1 for c in others) if others else (1,)
    return dirichlet_lead_prob(lead_cnt + 1, alphas) >= Fraction(float(conf))


@lru_cache(maxsize=None)
def boinf_lead_prob(lead_cnt, others, alpha=BOINF_ALPHA):
    """Best-of-Infinity's P(mode | D): under Dirichlet(lead_cnt + 1, each other count + 1, alpha + 1), the chance
    that the leading answer's component is the largest, in closed form. For independent Gamma(shape, 1) variables it
    is the integral over x > 0 of the Gamma(a) density (a = lead_cnt + 1) times each other Gamma CDF: for shape c + 1,
    1 - e^-x Q_c(x) with Q_c(x) = sum_{m<=c} x^m / m!; for the bucket's s = alpha + 1, P(s, x). Expanding the product
    over the other answers, the subsets of size k give (-1)^k e^-kx times a polynomial (their Q's products, summed),
    and int x^N e^-lam x P(s, x) dx = N! / lam^(N+1) sum_{i<=N} lam^i / i! Gamma(s + i) / Gamma(s) (1 + lam)^-(s + i)
    (P(s, x) as the integral of its density, the x integral first). Everything but (1 + lam)^-s is an exact Fraction;
    the sum over k is taken at 60 digits (mpmath)."""
    import mpmath
    a = int(lead_cnt) + 1
    s = 1 + Fraction(str(float(alpha)))
    polys = [[Fraction(1)]]  # polys[k]: sum over the subsets of size k of the product of their Q's (coefficients)
    for c in others:
        q = [Fraction(1, math.factorial(m)) for m in range(int(c) + 1)]
        new = [list(p) for p in polys] + [[]]
        for k, p in enumerate(polys):
            prod = [Fraction(0)] * (len(p) + len(q) - 1)
            for u, x in enumerate(p):
                for v, y in enumerate(q):
                    prod[u + v] += x * y
            t = new[k + 1]
            t.extend([Fraction(0)] * (len(prod) - len(t)))
            for u, x in enumerate(prod):
                t[u] += x
        polys = new
    with mpmath.workdps(60):
        total = mpmath.mpf(0)
        for k, p in enumerate(polys):
            lam = 1 + k
            r = Fraction(0)
            for n, coef in enumerate(p):
                if coef == 0:
                    continue
                N = a - 1 + n
                inner, rise = Fraction(0), Fraction(1)  # rise: Gamma(s + i) / Gamma(s)
                for i in range(N + 1):
                    inner += Fraction(lam ** i, math.factorial(i)) * rise / Fraction(1 + lam) ** i
                    rise *= s + i
                r += coef * Fraction(math.factorial(N), math.factorial(a - 1) * lam ** (N + 1)) * inner
            term = (mpmath.mpf(r.numerator) / r.denominator
                    * mpmath.power(1 + lam, -mpmath.mpf(s.numerator) / s.denominator))
            total += -term if k % 2 else term
        return float(total)


def boinf_bayes_factor(lead_cnt, other_counts, alpha=BOINF_ALPHA):
    """Best-of-Infinity's Bayes factor as its paper states it (docs/semantics.md, boinf; bf_mc = 0): with m valid
    answers and the unknown bucket, (m + 1) P / (1 - P)."""
    others = tuple(sorted(other_counts, reverse=True))
    p = boinf_lead_prob(lead_cnt, others, alpha)
    q = 1.0 - p
    return math.inf if q <= 0.0 else (1 + len(others) + 1) * p / q


def boinf_stop_prob(lead_cnt, other_counts, bf, mc, alpha=BOINF_ALPHA):
    """The chance that the source's check with mc Monte Carlo draws stops the query (docs/semantics.md, boinf): its
    estimate of P is X / mc, X ~ Binomial(mc, P); X = 0 never stops, 0 < X < mc stops when (m + 1) (X / mc) / (1 - X /
    mc) >= bf, X = mc when its Hoeffding form (m + 1) / exp(-c1 g^2 / 2) >= bf. The binomial sum at 40 digits."""
    import mpmath
    others = tuple(sorted(other_counts, reverse=True))
    p = boinf_lead_prob(lead_cnt, others, alpha)
    p = min(max(p, 0.0), 1.0)
    k = 1 + len(others) + 1
    total = (lead_cnt + sum(others)) + alpha
    c2 = max([alpha, *[float(c) for c in others]])
    g = max(lead_cnt / total - c2 / total, 0.0001)
    hoeff = k * 1.0 / math.exp(-lead_cnt * g * g / 2) >= bf
    with mpmath.workdps(40):
        P = mpmath.mpf(p)
        out = mpmath.mpf(0)
        for x in range(1, mc + 1):
            r = x / mc
            stops = hoeff if x == mc else k * r / (1.0 - r) >= bf
            if stops:
                out += mpmath.binomial(mc, x) * P ** x * (1 - P) ** (mc - x)
        return min(float(out), 1.0)


def mmc_state(votes, m_top, labels=None):
    """MMC's two e-processes over a query's votes in draw order (valid answer ids; invalid ones left out), as its
    source's on_vote does (docs/semantics.md, mmc): before each vote the leader i, the runner-up j and the top m_top
    answers C by count, ties to the answer drawn first; labels (the source's labels known in advance, with their
    order for ties): every answer ranked from the start, count 0 until drawn, ties in that order; the vote is a success
    of the pair e-process when it is i, a failure when j; a success of the other e-process when i, a failure when
    outside C. Each update bets q = (s + 1/2) / (s + f + 1) clipped to [0.50001, 0.99999] from its counts before it,
    then log e = (s + f) log 2 + s log q + f log(1 - q). Returns (pair log e, pair updates, other log e, other updates,
    leader after the last vote == i)."""
    # answer -> count, in order of first appearance or in the labels' order (dicts keep insertion order)
    counts = {b: 0 for b in labels} if labels is not None else {}
    proc = {"pair": [0, 0, 0.0], "other": [0, 0, 0.0]}   # s, f, log e

    def update(name, y):
        e = proc[name]
        q = min(max((e[0] + 0.5) / (e[0] + e[1] + 1), 0.50001), 0.99999)
        e[0] += y
        e[1] += 1 - y
        e[2] = (e[0] + e[1]) * math.log(2.0) + e[0] * math.log(q) + e[1] * math.log1p(-q)

    last_i = None
    for a in votes:
        ranked = sorted(counts, key=lambda b: -counts[b])   # stable: ties keep first appearance
        top = ranked[:m_top]
        i = ranked[0] if ranked else None
        j = ranked[1] if len(ranked) > 1 else None
        if i is not None and j is not None:
            if a == i:
                update("pair", 1)
            elif a == j:
                update("pair", 0)
        if i is not None:
            if a == i:
                update("other", 1)
            elif a not in top:
                update("other", 0)
        last_i = i
        counts[a] = counts.get(a, 0) + 1
    lead = sorted(counts, key=lambda b: -counts[b])[0] if counts else None
    p, o = proc["pair"], proc["other"]
    return p[2], p[0] + p[1], o[2], o[0] + o[1], last_i is not None and lead == last_i


def mmc_stops(votes, m_top, delta, labels=None, min_updates=2, leader_check=True):
    """Both e-processes >= log(1 / delta) after >= min_updates updates each, and (leader_check) the leader unchanged
    by the last vote."""
    l1, u1, l2, u2, same = mmc_state(votes, m_top, labels)
    bar = math.log(1.0 / delta)
    return (same or not leader_check) and l1 >= bar and u1 >= min_updates and l2 >= bar and u2 >= min_updates


def _lbayes_s(tail, nl, vd, cp):
    """The source's S (docs/semantics.md, lbayes) in exact rationals: nl! times the sum, over the ways to spread nl
    draws over the categories of `tail` with each at most vd, of prod p^r / r!, a spread with m categories at vd (ties
    with the head) weighted 1 / binom(cp + m, cp)."""
    A = {(0, 0): Fraction(1)}
    for pj in tail:
        B = {}
        for (t, m), v in A.items():
            for r in range(min(vd, nl - t) + 1):
                key = (t + r, m + (r == vd))
                B[key] = B.get(key, 0) + v * pj ** r / math.factorial(r)
        A = B
    return math.factorial(nl) * sum((v / math.comb(cp + m, cp) for (t, m), v in A.items() if t == nl), Fraction(0))


def lbayes_posterior(prior_counts, n, n1, n2, uniq, L, n3=0):
    """The L-aggregated Bayesian stop's posterior that the leading answer drawn is the mode, EXACTLY (a Fraction):
    the prior p the shares prior_counts / their sum, largest first; n valid draws, head counts n1 >= n2, uniq
    distinct answers drawn. Hypothesis i (the leader is category i) has likelihood p_i^n1 S(p without i; n - n1, n1,
    1) for L = 2; for L = 3 (two or more distinct answers drawn) sum_{j != i} p_i^n1 p_j^n2 S(p without i, j; n - n1
    - n2, n2, 2 if n1 == n2 else 1); for L = 4 (three or more distinct answers drawn, n3 the third count) sum_{j != i,
    k not in (i, j)} p_i^n1 p_j^n2 p_k^n3 S(p without i, j, k; n - n1 - n2 - n3, n3, the heads equal to n3). The
    posterior is the largest likelihood over their sum (the source's known-prior notebook takes the largest, not
    hypothesis 0's)."""
    if n == 0:
        return Fraction(0)
    total = sum(prior_counts)
    p = sorted((Fraction(c, total) for c in prior_counts), reverse=True)
    K = len(p)
    like = []
    for i in range(K):
        rest = p[:i] + p[i + 1:]
        if L == 2 or uniq < 2:
            like.append(p[i] ** n1 * _lbayes_s(rest, n - n1, n1, 1))
        elif L == 4 and uniq >= 3:
            cp = [n1, n2, n3].count(n3)
            like.append(sum((p[i] ** n1 * p[j] ** n2 * p[k] ** n3
                             * _lbayes_s([p[t] for t in range(K) if t not in (i, j, k)], n - n1 - n2 - n3, n3, cp)
                             for j in range(K) if j != i for k in range(K) if k not in (i, j)), Fraction(0)))
        else:
            cp = 2 if n1 == n2 else 1
            like.append(sum((p[i] ** n1 * p[j] ** n2 * _lbayes_s([p[k] for k in range(K) if k not in (i, j)],
                                                                  n - n1 - n2, n2, cp)
                             for j in range(K) if j != i), Fraction(0)))
    total_like = sum(like, Fraction(0))
    return Fraction(0) if total_like == 0 else max(like) / total_like


_M64 = (1 << 64) - 1


def _mix64(z):
    """splitmix64's finaliser on Python ints (docs/semantics.md, Randomness)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def boinf_uniform(i, toks, scores):
    """The uniform that draws the source's Monte Carlo outcome at query i's check: a hash of i and of its draws'
    token counts and scores, in draw order (docs/semantics.md, boinf)."""
    h = _mix64(0x8BB84B93962EACC9 ^ i)
    for t, sc in zip(toks, scores):
        h = _mix64(h ^ ((t * 0x9E3779B97F4A7C15 + 1) & _M64))
        h = _mix64(h ^ int(sc * 4294967296.0))
    return (h >> 11) * (1.0 / 9007199254740992.0)


# ----------------------------------------------------------------------------------------------------
# per-query state and one run
# ----------------------------------------------------------------------------------------------------

class _Query:
    """The per-query state of docs/semantics.md, with its initial values."""

    def __init__(self, pool_size):
        self.pool = pool_size        # N_i (pool size)
        self.N = 0                   # responses drawn
        self.sum = 0.0
        self.best = -1.0
        self.best_j = -1
        self.covered = False
        self.n_invalid = 0
        self.S = 0.0
        self.lead = -1
        self.lead_cnt = 0
        self.second_cnt = 0
        self.wlead = -1
        self.wlead_sum = -1.0
        self.drawn = []              # answer ids in draw order (esc reads its last window)
        self.cnt = {}                # answer id -> count
        self.wsum = {}               # answer id -> summed score
        self.first_j = {}            # answer id -> earliest drawn response with that answer
        self.eliminated = False
        self.capped = False
        self.exhausted = False

    def active(self):
        return not self.eliminated and not self.capped and not self.exhausted


def _tally(s, a, j, weight):
    """Valid answer a of response j into query state s: its count, first response and summed weight, and the
    leaders by count (with the runner-up's count) and by summed weight. Returns a's count before it."""
    c = s.cnt.get(a, 0)
    s.cnt[a] = c + 1
    if c == 0:
        s.first_j[a] = j
        s.wsum[a] = 0.0
    s.wsum[a] += weight
    if a == s.lead:
        s.lead_cnt += 1
    elif c + 1 > s.lead_cnt:
        s.second_cnt = s.lead_cnt
        s.lead = a
        s.lead_cnt = c + 1
    elif c + 1 > s.second_cnt:
        s.second_cnt = c + 1
    if s.wsum[a] > s.wlead_sum:
        s.wlead = a
        s.wlead_sum = s.wsum[a]
    return c


class _Run:
    # called with the run after each decision when set (run_reference's on_draw): `ttc bench` stops a slow
    # reference part-way by raising from it, and times the decisions made so far (replay/bench.py)
    on_draw = None

    def __init__(self, off, correct, score, ans, tok, perm, unit, elim_params):
        self.off = off
        self.correct = correct
        self.score = score
        self.ans = ans
        self.tok = tok
        self.perm = perm
        self.unit = unit
        self.n = len(off) - 1
        self.q = [_Query(off[i + 1] - off[i]) for i in range(self.n)]
        max_pool = 0
        for i in range(self.n):
            max_pool = max(max_pool, self.q[i].pool)
        self.T, self.L = log_tables(max(max_pool, 1) + 1)
        self.samples_used = 0
        self.tokens_used = 0
        self.gamma, self.tau, self.m_min, self.conf = elim_params[:4]
        # (esc's window K, ac-majority's share, ac-entropy's hmax, ac-dirichlet's conf; absent in callers that
        # predate them)
        self.K, self.share, self.hmax = elim_params[4:7] if len(elim_params) > 4 else (1, 0.8, 0.75)
        self.dirichlet_conf = elim_params[7] if len(elim_params) > 7 else 0.95
        self.bf, self.bf_mc = elim_params[8:10] if len(elim_params) > 9 else (10.0, 1000)
        self.mmc_delta, self.mmc_m = elim_params[10:12] if len(elim_params) > 11 else (0.05, 3)
        self.lb_thre, self.lb_l = elim_params[12:14] if len(elim_params) > 13 else (0.95, 2)
        self.mmc_labels, self.mmc_min_updates, self.mmc_leader_check = \
            elim_params[14:17] if len(elim_params) > 16 else ("drawn", 2, "on")

    def used(self):
        return self.samples_used if self.unit == "samples" else self.tokens_used

    def next_response(self, i):
        """Global index j of the next response query i would receive (requires N < pool)."""
        return self.perm[self.off[i] + self.q[i].N]

    # --- observe(i, j), in the exact order of docs/semantics.md ------------------------------------
    def observe(self, i, j):
        s = self.q[i]
        T = self.T
        s.N += 1
        self.samples_used += 1
        self.tokens_used += self.tok[j]
        s.sum += self.score[j]
        if self.score[j] > s.best:             # ties keep the earliest drawn
            s.best = self.score[j]
            s.best_j = j
        if self.correct[j] == 1:
            s.covered = True
        a = self.ans[j]
        s.drawn.append(a)
        if a < 0:
            c = s.n_invalid
            s.n_invalid += 1
        else:
            c = _tally(s, a, j, self.score[j])
        s.S += T[c + 1] - T[c]
        if self.on_draw is not None:
            self.on_draw(self)

    # --- elimination rules --------------------------------------------------------------------------
    def elim_rule(self, i, elim):
        s = self.q[i]
        if elim == "none":
            return False
        if elim == "threshold":
            return s.best >= self.gamma
        if elim == "sc-share":
            return s.N >= self.m_min and s.lead_cnt > self.tau * s.N
        if elim == "sc-beta":
            return s.lead >= 0 and sc_beta_stops(s.lead_cnt, s.second_cnt, self.conf)
        if elim == "ac-majority":
            return s.N >= 2 and s.lead_cnt >= self.share * s.N
        if elim == "esc":
            window = s.drawn[len(s.drawn) - self.K:]
            return s.N >= self.K and window[0] >= 0 and all(a == window[0] for a in window)
        if elim == "ac-entropy":
            if s.N < 2 or s.lead < 0:
                return False
            counts = ([s.n_invalid] if s.n_invalid else []) + [s.cnt[a] for a in sorted(s.cnt)]
            if len(counts) == 1:  # AC's pseudo-category of count 1
                h = (self.L[s.N + 1] - self.T[s.N] / (s.N + 1)) / self.L[2]
            else:
                total = 0.0
                for c in counts:       # invalid first, then answer ids ascending (the slot order)
                    total += self.T[c]
                h = (self.L[s.N] - total / s.N) / self.L[len(counts)]
            return h <= self.hmax + 1e-12  # an exact tie stops (docs/semantics.md, ac-entropy)
        if elim == "ac-dirichlet":
            # invalid answers do not vote: s.cnt holds the valid answers only
            return s.lead >= 0 and ac_dirichlet_stops(s.lead_cnt, [c for a, c in s.cnt.items() if a != s.lead],
                                                      self.dirichlet_conf)
        if elim == "boinf":
            # invalid answers do not vote; a tie for the lead gives the same P whichever of them leads
            if s.lead < 0:
                return False
            others = [c for a, c in s.cnt.items() if a != s.lead]
            if self.bf_mc == 0:
                return boinf_bayes_factor(s.lead_cnt, others) >= self.bf
            drawn = [self.perm[self.off[i] + k] for k in range(s.N)]
            u = boinf_uniform(i, [self.tok[j] for j in drawn], [self.score[j] for j in drawn])
            return u < boinf_stop_prob(s.lead_cnt, others, self.bf, self.bf_mc)
        if elim == "mmc":
            labels = None
            if self.mmc_labels == "pool":  # every valid answer of the query's pool, ties by answer id
                labels = sorted({a for a in self.ans[self.off[i]:self.off[i + 1]] if a >= 0})
            return mmc_stops([a for a in s.drawn if a >= 0], self.mmc_m, self.mmc_delta, labels, self.mmc_min_updates,
                             self.mmc_leader_check == "on")
        if elim == "lbayes":
            # the prior: the query's own answer shares over its whole pool (valid answers; hindsight)
            if s.lead < 0:
                return False
            pool = {}
            for j in range(self.off[i], self.off[i + 1]):
                if self.ans[j] >= 0:
                    pool[self.ans[j]] = pool.get(self.ans[j], 0) + 1
            counts = sorted(s.cnt.values(), reverse=True) + [0, 0]
            post = lbayes_posterior(list(pool.values()), sum(counts), counts[0], counts[1], len(s.cnt), self.lb_l,
                                    counts[2])
            return post >= Fraction(float(self.lb_thre))
        raise ValueError(elim)

    # --- a pull: K responses for query i ------------------------------------------------------------
    def pull(self, i, K, budget, max_samples, elim, reserve=None):
        """One pull as in docs/semantics.md.  `budget` is the total budget this pull is charged against
        (B, or floor(rho*B) in two-stage's stage 1).  `elim` is the elimination rule checked after the
        pull, or None for no check at all (two-stage's stage 2).  `reserve` (streaming only) is a function
        returning the reserve owed to the queries still to come.

        Returns True when the run ends (unit samples: no budget left; unit tokens: a response did not fit)
        -- for streaming with unit tokens: when the current query's turn ends."""
        s = self.q[i]
        ended = False
        if self.unit == "samples":
            left = budget - self.samples_used
            if left <= 0:
                return True                          # the run ends
        # AMBIGUITY (literal): with unit tokens there is no "left <= 0" check; at left == 0 the run goes on,
        # 0-token responses are still drawn and a query whose pool is empty is still marked exhausted; the run
        # ends only at a response with tok > left (or when no query is active).
        fixed_reserve = reserve() if reserve is not None else 0
        want = K
        if max_samples:
            # AMBIGUITY: max_samples - N may be <= 0 (only reachable in two-stage's stage 2, where stage 1
            # ran without the cap); the literal formula is kept: want <= 0 draws nothing.
            want = min(want, max_samples - s.N)
        if self.unit == "samples":
            want = min(want, left)
            if reserve is not None:
                want = min(want, left - reserve())
        avail = s.pool - s.N
        if avail == 0:
            # AMBIGUITY: literal reading -- the query is marked exhausted whenever a pull finds its pool
            # empty, even if want <= 0 (e.g. a stage-2 allocation of 0 for a query whose pool stage 1 used up).
            s.exhausted = True                       # nothing drawn, nothing spent
        else:
            if avail < want:
                # AMBIGUITY (literal): counted as exhausted before drawing, even if (unit tokens) the run
                # then ends before the pool actually runs out.
                s.exhausted = True
            for _ in range(min(want, avail)):
                j = self.next_response(i)
                if self.unit == "tokens":
                    room = budget - self.tokens_used
                    if reserve is not None:
                        room = room - fixed_reserve      # the reserve is fixed when the pull starts
                    if self.tok[j] > room:
                        ended = True                 # not drawn; the run (streaming: the turn) ends
                        break
                self.observe(i, j)
        # AMBIGUITY: "after the pull" is applied even when the pull drew nothing or was cut short by the
        # token rule (the state is unchanged in the first case, so this cannot change anything there).
        if elim is not None and not s.eliminated:
            s.eliminated = self.elim_rule(i, elim)
        s.capped = bool(max_samples) and s.N >= max_samples
        return ended


# ----------------------------------------------------------------------------------------------------
# exploration rules
# ----------------------------------------------------------------------------------------------------

def _round_robin(run, order, budget, K, max_samples, elim, caps=None):
    """Rounds; in each round every active query, in order, gets one pull.  Ends when the budget is spent
    (the pull says so: returns True) or when no query is active (returns False).  caps[i], when given, is query
    i's own cap in place of max_samples (optscale's N_i)."""
    while True:
        any_active = False
        for i in order:
            if not run.q[i].active():
                continue
            any_active = True
            if run.pull(i, K, budget, max_samples if caps is None else caps[i], elim):
                return True
        if not any_active:
            return False


def _index(run, i, policy, lam, gamma, eps):
    s = run.q[i]
    if policy == "marginal-gain":
        # the expected gain of its next response: 0 once a draw reached gamma, else the mean of a Beta posterior
        # whose prior has mean p (the prediction; 1/2 without one) and strength c (prior_strength; 2 without one),
        # after N failures (an unsolved query's draws all failed): c p / (c + N)
        if s.best >= gamma:
            return 0.0
        p = run.prior[i]
        if p is None:
            p, c = 0.5, 2.0
        else:
            c = run.strength
        return c * p / (c + s.N)
    if s.N == 0:
        return math.inf
    m = s.sum / s.N
    if policy == "ucb":
        return m + lam / math.sqrt(s.N)
    if policy == "gap":
        return -(math.sqrt(s.N) * (abs(gamma - m) + eps))
    if policy == "gap-literal":
        return -((gamma - m) / math.sqrt(s.N))
    if policy == "entropy":
        H = run.L[s.N] - s.S / s.N
        return H + lam / math.sqrt(s.N)
    raise ValueError(policy)


def _index_policy(run, order, budget, K, max_samples, elim, policy, lam, gamma, eps):
    while True:
        best_i = -1
        best_v = 0.0
        for i in order:                     # increasing rank: strict '>' keeps the smaller rank on ties
            if not run.q[i].active():
                continue
            v = _index(run, i, policy, lam, gamma, eps)
            if best_i < 0 or v > best_v:
                best_i = i
                best_v = v
        if best_i < 0:
            return                          # none active
        if run.pull(best_i, K, budget, max_samples, elim):
            return                          # budget spent


# Work counters of the reference (a test oracle): how many times a rule recomputes an index, so that a test can bound
# an algorithm's work per decision by counting instead of timing.
WORK = {"side_eb_index": 0}


def _side_eb(run, order, B, K, max_samples, elim, c, nb, refresh, horizon=0):
    """side-eb (docs/semantics.md): keys are stored, as the engine's heap holds them: every query's at the start and
    at each refresh (after `refresh` pulls, or a round of the active queries if there are more), the pulled query's
    after its pull; the next pull goes to the active query with the largest stored key, ties to the smaller rank."""
    n = run.n
    a = 32.0                            # the bins' ratios' pseudo-count (expected successes)
    succ = [0.0] * (nb + 2)             # per bin; bin nb: the queries not drawn yet; nb + 1: bins 0..nb-1 together
    draws = [0.0] * (nb + 2)
    expect = [0.0] * (nb + 2)           # per failed bin: the successes the base rate expected of its draws
    sx = [0.0] * n                      # summed side signal of the query's draws
    st = [0.0] * n                      # summed tokens of the query's draws

    def bin_of(i, nd):
        if nd == 0:
            return nb
        return min(nb - 1, max(0, math.floor(sx[i] / nd * nb)))

    def base(nd):                       # the base rate after nd >= 1 failures, from the failed bins together
        return c * ((succ[nb + 1] + 1.0) / (draws[nb + 1] + 2.0)) / (c + nd)

    def rate(nd, ratio):                 # the model's chance that a draw after nd failures answers the query
        if nd == 0:
            return (succ[nb] + 1.0) / (draws[nb] + 2.0)
        return base(nd) * ratio

    def h_now():                         # --horizon 1: the draws each active query can still get on average
        act = sum(1 for t in range(n) if run.q[t].active())
        if act == 0:
            return 1
        if run.unit == "tokens":
            mbar = 1.0 if run.samples_used == 0 else run.tokens_used / run.samples_used
            x = 1024 if mbar <= 0.0 else (B - run.tokens_used) / mbar / act   # mbar 0: every draw was free
            h = 1024 if x >= 1024 else math.floor(x)
        else:
            h = (B - run.samples_used) // act
        return min(1024, max(1, h))

    def index(i, h):
        WORK["side_eb_index"] += 1     # (counted: how much work the refresh rule makes per pull, tests/test_bench.py)
        nd = run.q[i].N
        ratio = 1.0 if nd == 0 else (succ[bin_of(i, nd)] + a) / (expect[bin_of(i, nd)] + a)
        if horizon == 0:
            g = rate(nd, ratio)
        else:                            # P(a success within h draws) / E[draws used until it or h]
            num, den, surv = 0.0, 0.0, 1.0
            for k in range(h):
                p = min(1.0, rate(nd + k, ratio))
                den += surv
                num += surv * p
                surv *= 1.0 - p
            g = num / den
        if run.unit == "tokens":
            mbar = 1.0 if run.samples_used == 0 else run.tokens_used / run.samples_used
            g = g / ((st[i] + mbar) / (nd + 1) + 1.0)
        return g

    h = h_now()
    key = [index(i, h) for i in range(n)]
    pulls = 0
    while True:
        best_i = -1
        for i in order:                     # increasing rank: strict '>' keeps the smaller rank on ties
            if run.q[i].active() and (best_i < 0 or key[i] > key[best_i]):
                best_i = i
        if best_i < 0:
            return
        i = best_i
        n0 = run.q[i].N
        b = bin_of(i, n0)
        if run.pull(i, K, B, max_samples, elim):
            return
        d = run.q[i].N - n0
        if n0 > 0:
            expect[b] += d * base(n0)
        for k in range(n0, run.q[i].N):
            j = run.perm[run.off[i] + k]
            sx[i] += run.side[j]
            st[i] += run.tok[j]
        won = 1.0 if run.q[i].eliminated else 0.0   # the pull answered it: a success of the bin it was in
        draws[b] += d
        succ[b] += won
        if b < nb:
            draws[nb + 1] += d
            succ[nb + 1] += won
        pulls += 1                       # since the last refresh
        if run.q[i].active():
            key[i] = index(i, h_now())
        if pulls >= max(refresh, sum(1 for t in range(n) if run.q[t].active())):
            pulls = 0                    # every active query's index, with the budget left now, after R pulls or
            h = h_now()                  # a round of the active queries if more
            for t in range(n):
                if run.q[t].active():
                    key[t] = index(t, h)


def _two_stage(run, order, rank, B, rho, max_samples, elim):
    # stage 1: uniform (round-robin, elimination none, K = 1, no cap) with budget floor(rho * B);
    # unit tokens: the same round-robin, which stops at the first response that does not fit in floor(rho*B).
    B1 = math.floor(rho * B)
    _round_robin(run, order, B1, 1, 0, "none")
    # AMBIGUITY: stage 1 is "uniform" and uniform has no cap, so no query is capped after stage 1; the run's
    # max_samples applies only to stage 2 ("cap and exhaustion as in a pull").
    # the elimination check, once, for each query not exhausted or capped (exhausted ones are not checked)
    for i in order:
        s = run.q[i]
        s.capped = bool(max_samples) and s.N >= max_samples
        if not s.exhausted and not s.capped:
            s.eliminated = run.elim_rule(i, elim)
    U = [i for i in order if not run.q[i].exhausted and not run.q[i].capped and not run.q[i].eliminated]
    if not U:
        return
    R = B - run.used()
    # AMBIGUITY: in w_i = (sum_i + 1) / (N_i + 2), N_i is the number of responses DRAWN (not the pool size,
    # which the doc also calls N_i).
    w = {}
    for i in U:
        w[i] = (run.q[i].sum + 1) / (run.q[i].N + 2)
    W = 0.0
    for i in U:                             # summed in rank order
        W += w[i]
    if run.unit == "samples":
        x = {}
        alloc = {}
        for i in U:
            x[i] = R * w[i] / W
            alloc[i] = math.floor(x[i])
        extra = R - sum(alloc[i] for i in U)
        assert 0 <= extra <= len(U)
        by_remainder = sorted(U, key=lambda i: (-(x[i] - alloc[i]), rank[i]))
        for i in by_remainder[:extra]:
            alloc[i] += 1
        for i in U:
            # one pull of size alloc_i, no elimination check.
            # AMBIGUITY: a pull is made even when alloc_i == 0 (it draws nothing, but with an empty pool it
            # marks the query exhausted, and "left <= 0" ends the run before it).
            if alloc[i] > 0 and run.pull(i, alloc[i], B, max_samples, None):
                return
    else:
        for i in U:
            _spend_allowance(run, i, math.floor(R * w[i] / W), max_samples)
        assert run.tokens_used <= B


def _spend_allowance(run, i, allowance, max_samples):
    """Two-stage's token stage 2 for query i (uab's too).
    AMBIGUITY: the token stage 2 is read as a sequence of one-response pulls against the query's own allowance: stop
    at the cap, mark exhausted (and stop) when the pool is empty before a response failed to fit, stop at the first
    response that does not fit.  The run itself goes on."""
    s = run.q[i]
    spent = 0
    while True:
        if max_samples and s.N >= max_samples:
            break                        # at the cap it wants nothing more
        if s.pool - s.N == 0:
            if allowance - spent > 0:    # it still wanted more than the pool holds
                s.exhausted = True
            break
        j = run.next_response(i)
        if run.tok[j] > allowance - spent:
            break
        run.observe(i, j)
        spent += run.tok[j]
    s.capped = bool(max_samples) and s.N >= max_samples


def _streaming(run, order, B, K, max_samples, elim):
    n = run.n
    for p, i in enumerate(order):
        to_come = n - p - 1
        if run.unit == "samples":
            def reserve(to_come=to_come):
                return to_come
        else:
            def reserve(to_come=to_come):
                if run.samples_used == 0:
                    return 0                # before any draw
                # AMBIGUITY: the ceiling is taken exactly in integer arithmetic, not as
                # math.ceil of a floating-point quotient.
                return -((-(to_come * run.tokens_used)) // run.samples_used)
        while run.q[i].active():
            left = B - run.used()
            # AMBIGUITY: "until the budget left is no more than the reserve" is checked before every pull in
            # BOTH units (unit tokens: so a 0-token response is not drawn when left == reserve).
            if left <= reserve():
                break                       # the budget left is no more than the reserve: the turn ends
            if run.pull(i, K, B, max_samples, elim, reserve=reserve):
                break                       # unit tokens: a response did not fit in left - reserve


def optscale_target(drawn, wins, lo, cap, pct):
    """The smallest N >= 1 with (1 - wins/drawn)^N <= pct, the power taken as a product from 1.0 (docs/semantics.md),
    raised to lo and at most cap; cap when no warm-up draw succeeded or no N up to cap reaches pct."""
    if wins == 0 or drawn == 0:
        return cap
    q = (drawn - wins) / drawn
    t = 1.0
    for k in range(1, cap + 1):
        t *= q
        if t <= pct:
            return min(max(lo, k), cap)
    return cap


def _optscale(run, order, B, warmup, pct, max_samples, gamma):
    n = run.n
    # warm-up: round-robin of one response at a time up to `warmup` each (the cap), no elimination
    if _round_robin(run, order, B, 1, min(warmup, max_samples) if max_samples else warmup, "none"):
        return                              # the budget ended the run
    target = {}
    for i in range(n):
        s = run.q[i]
        s.capped = bool(max_samples) and s.N >= max_samples      # the warm-up's cap was its own: caps anew
        if s.exhausted or s.capped:
            continue
        wins = 0
        for k in range(s.N):
            if run.score[run.perm[run.off[i] + k]] >= gamma:
                wins += 1
        target[i] = optscale_target(s.N, wins, warmup, max_samples if max_samples else s.pool, pct)
        if s.N >= target[i]:
            s.capped = True                 # it holds its N_i already
    # stage 2: round-robin of one response at a time, each query up to its N_i (its cap)
    _round_robin(run, order, B, 1, 0, "none", caps=target)


def deepconf_threshold(values, pct):
    """numpy.percentile(values, 100 * (1 - pct)) by linear interpolation, in numpy's two-sided form: the sorted values
    at floor(h) and floor(h) + 1, h = (m - 1) * (1 - pct), a + (b - a) * t below t = 1/2, b - (b - a) * (1 - t) from
    it (equal neighbours: that value; an infinite upper one: inf)."""
    v = sorted(values)
    h = (len(v) - 1) * (1.0 - pct)
    lo = math.floor(h)
    t = h - lo
    a = v[lo]
    if t == 0.0:
        return a
    b = v[lo + 1]
    if a == b:
        return a
    if b == math.inf:
        return math.inf
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)


def _deepconf_online(run, order, B, warmup, pct, tau, max_samples, lows):
    """docs/semantics.md deepconf-online. lows[j] = (positions, values): response j's record lows."""
    def low(j):                               # the trace's lowest group confidence; no tokens: 0.0
        return lows[j][1][-1] if lows[j][1] else 0.0

    def spend(i, j, cost):
        run.q[i].N += 1
        run.samples_used += 1
        run.tokens_used += cost

    def whole(i, j):                          # a trace that ran to its end: score and correctness count
        s = run.q[i]
        s.sum += run.score[j]
        if run.score[j] > s.best:
            s.best = run.score[j]
            s.best_j = j
        if run.correct[j] == 1:
            s.covered = True

    def vote(i, j):                           # weight: the trace's lowest group confidence; invalid: no vote
        s = run.q[i]
        a = run.ans[j]
        if a < 0:
            return
        _tally(s, a, j, low(j))
        s.S += low(j)                         # (S holds the summed vote here)

    def consensus(i):                         # after the warm-up's votes, then after each vote
        s = run.q[i]
        if s.S > 0.0 and s.wlead_sum / s.S >= tau:
            s.eliminated = True

    def turn(i):                              # query i's next response; None: its pool is used up (exhausted);
        if run.unit == "samples" and B - run.samples_used <= 0:    # -1: no sample budget left (the run ends;
            return -1                                               # tokens: checked per trace)
        if run.q[i].N == run.q[i].pool:
            run.q[i].exhausted = True
            return None
        return run.next_response(i)

    w = min(warmup, max_samples) if max_samples else warmup
    ended = False
    # the warm-up: round-robin of whole traces, each query up to w
    while not ended:
        turns = [i for i in order if not run.q[i].exhausted and run.q[i].N < w]
        if not turns:
            break
        for i in turns:
            j = turn(i)
            if j == -1:
                ended = True
                break
            if j is None:
                continue
            if run.unit == "tokens" and run.tok[j] > B - run.tokens_used:
                ended = True
                break
            spend(i, j, run.tok[j])
            whole(i, j)
    thr = {}
    for i in range(run.n):
        s = run.q[i]
        if s.N == 0:
            continue
        drawn = [run.perm[run.off[i] + k] for k in range(s.N)]
        thr[i] = deepconf_threshold([low(j) for j in drawn], pct)
        for j in drawn:
            if low(j) >= thr[i]:
                vote(i, j)
        consensus(i)
        if max_samples and s.N >= max_samples:
            s.capped = True
    # then one trace per turn for the queries without consensus; a trace below the threshold stops early
    while not ended:
        turns = [i for i in order if run.q[i].active()]
        if not turns:
            break
        for i in turns:
            if not run.q[i].active():         # (a query's own turn cannot change another's state)
                continue
            j = turn(i)
            if j == -1:
                ended = True
                break
            if j is None:
                continue
            stopped = low(j) < thr[i]
            cost = run.tok[j]
            if stopped:
                below = [p for p, v in zip(*lows[j]) if v < thr[i]]
                if below:
                    cost = below[0] + 1
            if run.unit == "tokens" and cost > B - run.tokens_used:
                ended = True
                break
            spend(i, j, cost)
            if not stopped:
                whole(i, j)
                vote(i, j)
                consensus(i)
            if max_samples and run.q[i].N >= max_samples:
                run.q[i].capped = True


def _dsc(run, order, rank, B, K, max_samples, elim, judge):
    n = run.n
    # the ranking's first draw: round-robin of one response each
    if _round_robin(run, order, B, 1, 1, "none"):
        return
    for i in range(n):
        s = run.q[i]
        s.capped = bool(max_samples) and s.N >= max_samples
    for i in order:                         # the rule once on the first draw
        if run.q[i].active() and run.elim_rule(i, elim):
            run.q[i].eliminated = True
    E = sorted(range(n), key=lambda i: (-run.score[run.perm[run.off[i]]], rank[i]))    # easiest first
    judged = [False] * n
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        jl, jr = max(0, mid - judge // 2), min(mid + judge // 2, n)
        for t in range(jl, jr):
            if judged[t]:
                continue
            judged[t] = True
            i = E[t]
            s = run.q[i]
            if not s.active() or s.N >= K:
                continue                    # nothing to draw: its rule was checked on what it holds
            if s.N == s.pool:
                s.exhausted = True          # its pool ends before its first window is full
                continue
            if run.pull(i, K - s.N, B, max_samples, elim):     # its first window, then the rule
                return
        if all(run.q[E[t]].eliminated for t in range(jl, jr)):
            for t in range(lo, mid + 1):
                run.q[E[t]].eliminated = True  # easy: it draws nothing more
            lo = mid + 1
        else:
            hi = mid
    rest = [E[t] for t in range(n) if run.q[E[t]].active()]
    _round_robin(run, rest, B, K, max_samples, elim)


def _uab(run, order, B, tau, max_samples):
    """UAB (docs/semantics.md): phase 1 one draw per query (round-robin, no rule); phase 2 the draws left, one at a
    time, to the query with the largest p (1 - p)^c (a plain scan, ties to the lowest query index), p = exp(ln(conf)
    / tau) from its first draw's side signal conf; then each query draws its share (tokens: an allowance of the
    tokens left in proportion to its draws, drawn as two-stage's token stage 2)."""
    n = run.n
    if _round_robin(run, order, B, 1, 1, "none"):
        return                              # the budget ended phase 1
    p, room, key, c = [0.0] * n, [0] * n, [0.0] * n, [0] * n
    for i in range(n):
        s = run.q[i]
        s.capped = bool(max_samples) and s.N >= max_samples       # phase 1's cap was its own
        if s.N == 0 or s.exhausted or s.capped:
            continue
        x = run.side[run.perm[run.off[i]]]
        p[i] = math.exp(math.log(x) / tau) if x > 0.0 else 0.0
        room[i] = s.pool - s.N if not max_samples else min(s.pool - s.N, max_samples - s.N)
        key[i] = p[i]
    left = B - run.used()
    if run.unit == "samples":
        E = left
    else:
        mbar = run.tokens_used / run.samples_used if run.samples_used else 0.0
        E = math.inf if mbar <= 0.0 else min(math.floor(left / mbar), 4 * 10**18)
    total = 0
    while total < E:
        best = -1
        for i in range(n):                  # the largest marginal gain; '>' keeps the lowest index on ties
            if c[i] < room[i] and (best < 0 or key[i] > key[best]):
                best = i
        if best < 0:
            break
        c[best] += 1
        key[best] = key[best] * (1.0 - p[best])
        total += 1
    for i in range(n):
        if c[i] == 0:
            continue
        if run.unit == "samples":
            run.pull(i, c[i], B, max_samples, None)     # fits: the draws sum to what is left
            continue
        _spend_allowance(run, i, math.floor(left * c[i] / total), max_samples)  # two-stage's token stage 2


OKG_NODES = 256  # kernel.OKG_NODES


def okg_lead_prob(c):
    """pets: P(bucket 0 leads) under Dirichlet(c + 1), c sorted descending, by kernel.okg_lead_prob's Simpson rule,
    operation for operation (tests/test_pets.py holds it to closed forms)."""
    m = len(c)
    a = c[0] + 1
    fa = float(a)
    lo = max(0.0, fa - 10.0 * math.sqrt(fa) - 10.0)
    hi = fa + 10.0 * math.sqrt(fa) + 30.0
    nodes = OKG_NODES if a >= 8 else 8 * OKG_NODES  # a small leading count: a narrow density, finer steps
    h = (hi - lo) / nodes
    total = 0.0
    for k in range(nodes + 1):
        x = lo + k * h
        term = math.exp(-x)
        acc = term
        cum = [acc]
        for j in range(1, a):
            term = term * x / j
            acc += term
            cum.append(acc)
        f = term
        for t in range(1, m):
            f *= 1.0 - cum[c[t]]
        w = 1.0 if k == 0 or k == nodes else (4.0 if k % 2 == 1 else 2.0)
        total += w * f
    return total * h / 3.0


@lru_cache(maxsize=None)
def _okg_reward(c):
    c = list(c)
    base = okg_lead_prob(c)
    best = -math.inf
    for k in range(len(c)):
        d = okg_lead_prob(sorted(c[:k] + [c[k] + 1] + c[k + 1:], reverse=True)) - base
        best = max(best, d)
    return best


def okg_reward(c):
    """pets: OKG's reward (the source's OKGAllocator.select_next, exactly): max over the buckets k of h(c + e_k) -
    h(c), h = the largest argmax probability, the leading bucket's. Remembered per count vector (a function of it
    alone): _pets asks for every active query's at every step."""
    return _okg_reward(tuple(c))


def pets_counts(answers, M):
    """The M option buckets' counts (sorted descending) of a query's answers in draw order: the first M distinct
    valid answers each get one; later new ones and invalid answers count in none."""
    cnt = {}
    for a in answers:
        if a >= 0 and (a in cnt or len(cnt) < M):
            cnt[a] = cnt.get(a, 0) + 1
    return sorted(list(cnt.values()) + [0] * (M - len(cnt)), reverse=True)


OKG_MC_NODES = 64  # kernel.OKG_MC_NODES
_G = 0x9E3779B97F4A7C15


def okg_probs(c):
    """pets_mc: the whole I vector (P(bucket t leads) under Dirichlet(c + 1), c sorted descending), by
    kernel.okg_probs's Simpson rule, operation for operation."""
    m, top = len(c), c[0]
    out = [0.0] * m
    t = 0
    while t < m:
        v = c[t]
        fa = float(v + 1)
        lo = max(0.0, fa - 10.0 * math.sqrt(fa) - 10.0)
        hi = fa + 10.0 * math.sqrt(fa) + 30.0
        nodes = OKG_MC_NODES if v + 1 >= 8 else 8 * OKG_MC_NODES
        h = (hi - lo) / nodes
        total = 0.0
        for k in range(nodes + 1):
            x = lo + k * h
            term = math.exp(-x)
            acc = term
            cum = [acc]
            f = term
            for j in range(1, top + 1):
                term = term * x / j
                acc += term
                cum.append(acc)
                if j == v:
                    f = term
            for s in range(m):
                if s != t:
                    f *= 1.0 - cum[c[s]]
            w = 1.0 if k == 0 or k == nodes else (4.0 if k % 2 == 1 else 2.0)
            total += w * f
        p = total * h / 3.0
        while t < m and c[t] == v:
            out[t] = p
            t += 1
    return out


def okg_mc_h(p, mc, key):
    """pets_mc: the source's estimate of max_m I_m: mc categorical draws from p, the r-th from the uniform of
    mix64(key + (r + 1) golden), by inverse CDF; the largest count over mc (kernel.okg_mc_h)."""
    m = len(p)
    cnt = [0] * m
    for r in range(mc):
        u = (_mix64((key + (r + 1) * _G) & _M64) >> 11) * (1.0 / 9007199254740992.0)
        t, acc = 0, p[0]
        while u >= acc and t < m - 1:
            t += 1
            acc += p[t]
        cnt[t] += 1
    return max(cnt) / mc


def okg_mc_reward(c, mc, key):
    """pets_mc: the source's select_next reward: the base h estimated once, then for each of the m buckets its own
    estimate of h with that bucket one higher; the largest difference (estimate e drawn from mix64(key + (e + 1)
    golden))."""
    m = len(c)
    base = okg_mc_h(okg_probs(c), mc, _mix64((key + _G) & _M64))
    best = -math.inf
    for k in range(m):
        q = okg_probs(sorted(c[:k] + [c[k] + 1] + c[k + 1:], reverse=True))
        best = max(best, okg_mc_h(q, mc, _mix64((key + (k + 2) * _G) & _M64)) - base)
    return best


def pets_key(i, toks, scores, t):
    """pets_mc: the key of query i's noisy reward at the step after t draws in all: a hash of i, its draws' token
    counts and scores in draw order (as boinf_uniform) and t (kernel.pets_key)."""
    h = _mix64(0x3C6EF372FE94F82B ^ i)
    for tk, sc in zip(toks, scores, strict=True):
        h = _mix64(h ^ ((tk * _G + 1) & _M64))
        h = _mix64(h ^ int(sc * 4294967296.0))
    return _mix64(h ^ ((t * _G + 1) & _M64))


def _pets(run, order, B, K, max_samples, M, mc=0):
    """PETS offline (docs/semantics.md): every step, every active query's index anew (the naive form: the engine
    keeps a heap and recomputes the pulled query's only, looked up in a memo by its counts, or with mc every
    query's and rebuilds it): +inf before its first draw, else its OKG reward (mc > 0: the source's estimate, drawn
    afresh at every step); the largest, ties to the lower rank, gets a pull of K, no rule."""
    while True:
        best_i, best_v = -1, 0.0
        t = sum(run.q[i].N for i in order)
        for i in order:
            s = run.q[i]
            if not s.active():
                continue
            if s.N == 0:
                v = math.inf
            elif mc == 0:
                v = okg_reward(pets_counts(s.drawn, M))
            else:
                js = [run.perm[run.off[i] + k] for k in range(s.N)]
                v = okg_mc_reward(pets_counts(s.drawn, M), mc,
                                  pets_key(i, [run.tok[j] for j in js], [run.score[j] for j in js], t))
            if best_i < 0 or v > best_v:
                best_i, best_v = i, v
        if best_i < 0 or run.pull(best_i, K, B, max_samples, "none"):
            return



# pets-online (PETS's streaming allocation, FillintheBlank_online.py at commit 92c34a6; docs/semantics.md)
PETS_K0 = 4  # the source's K0: accepted warm-up answers, whose agreement names a query's bucket
PETS_KMIN, PETS_KMAX = 3, 32  # the probit's fit over k = 3 .. 32 (its k_min, --k-max-curve)
PETS_BMAX = 64  # the plan's cap per query without max_samples (its --max-per-question)
PETS_CLIP = 1e-12  # A(k) is clipped to [1e-12, 1 - 1e-12] before the probit (the source's np.clip)


def ndtri(p):
    """The standard normal quantile, Wichura's AS241 (PPND16, the algorithm of Python's NormalDist.inv_cdf; the
    source's scipy norm.ppf agrees to ~1e-16), written out so that kernel.ndtri can repeat it operation for
    operation."""
    q = p - 0.5
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        num = (((((((2509.0809287301226727 * r + 33430.575583588128105) * r + 67265.770927008700853) * r
                   + 45921.953931549871457) * r + 13731.693765509461125) * r + 1971.5909503065514427) * r
                + 133.14166789178437745) * r + 3.387132872796366608)
        den = (((((((5226.495278852545925 * r + 28729.085735721942674) * r + 39307.89580009271061) * r
                   + 21213.794301586595867) * r + 5394.1960214247511077) * r + 687.1870074920579083) * r
                + 42.313330701600911252) * r + 1.0)
        return q * num / den
    r = p if q <= 0.0 else 1.0 - p
    r = math.sqrt(-math.log(r))
    if r <= 5.0:
        r = r - 1.6
        num = (((((((7.7454501427834140764e-4 * r + 0.0227238449892691845833) * r + 0.24178072517745061177) * r
                   + 1.27045825245236838258) * r + 3.64784832476320460504) * r + 5.7694972214606914055) * r
                + 4.6303378461565452959) * r + 1.42343711074968357734)
        den = (((((((1.05075007164441684324e-9 * r + 5.475938084995344946e-4) * r + 0.0151986665636164571966) * r
                   + 0.14810397642748007459) * r + 0.68976733498510000455) * r + 1.6763848301838038494) * r
                + 2.05319162663775882187) * r + 1.0)
    else:
        r = r - 5.0
        num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r + 0.0012426609473880784386) * r
                   + 0.026532189526576123093) * r + 0.29656057182850489123) * r + 1.7848265399172913358) * r
                + 5.4637849111641143699) * r + 6.6579046435011037772)
        den = (((((((2.04426310338993978564e-15 * r + 1.4215117583164458887e-7) * r + 1.8463183175100546818e-5) * r
                   + 7.868691311456132591e-4) * r + 0.0148753612908506148525) * r + 0.13692988092273580531) * r
                + 0.59983220655588793769) * r + 1.0)
    x = num / den
    return -x if q < 0.0 else x


def pets_curve(counts, k_max=PETS_KMAX, mc=0, key=0):
    """A(k), k = 0 .. k_max: the chance that the majority of k draws with replacement from the answer shares
    counts / sum(counts) is the top answer, a tie among w answers counting 1 / w (the source's
    exact_prob_pick_argmax_multinom4). A(0) = 0.5 as the source's. With p the shares (top first, zeros dropped: a
    zero share is never drawn), the chance that the top wins tied with t others is q_t(k) = sum over the top's count
    c0 of k! p0^c0 / c0! D_c0[t][k - c0], where D_c0[t][s] sums prod p_i^c_i / c_i! over the others' counts c_i <= c0
    summing to s, t of them equal to c0: D_c0 is built once per c0 for every k; A(k) = sum_t q_t(k) / (1 + t).

    mc = 0: that exactly. mc = N > 0: as the source estimates it for its 10 padded options (20,000 multinomial
    draws of an unseeded generator, the mean of each draw's 1 / w or 0): the same law, drawn from q here, N
    categorical outcomes (t = 0 .. m, or a loss) by inverse CDF from hashed uniforms, the r-th for k
    mix64(mix64(key ^ (k golden + 1)) + (r + 1) golden), for k >= PETS_KMIN (the fit reads no other)."""
    c = sorted((x for x in counts if x > 0), reverse=True)
    A = [0.0] * (k_max + 1)
    A[0] = 0.5
    if not c:
        return A
    tot = sum(c)
    p = [x / tot for x in c]
    m = len(p) - 1
    q = [[0.0] * (m + 1) for _ in range(k_max + 1)]
    fact = [1.0] * (k_max + 1)
    for k in range(1, k_max + 1):
        fact[k] = fact[k - 1] * k
    for c0 in range(1, k_max + 1):
        S = k_max - c0
        # D[t][s]: t others (so far) at exactly c0, total s
        D = [[0.0] * (S + 1) for _ in range(m + 1)]
        D[0][0] = 1.0
        for o in range(1, m + 1):
            w = [p[o] ** x / fact[x] for x in range(min(c0, S) + 1)]
            N = [[0.0] * (S + 1) for _ in range(m + 1)]
            for t in range(o):
                for s in range(S + 1):
                    v = D[t][s]
                    if v == 0.0:
                        continue
                    for x in range(min(c0, S - s) + 1):
                        if x == c0:
                            N[t + 1][s + x] += v * w[x]
                        else:
                            N[t][s + x] += v * w[x]
            D = N
        lead = p[0] ** c0 / fact[c0]
        for k in range(c0, k_max + 1):
            for t in range(m + 1):
                q[k][t] += fact[k] * lead * D[t][k - c0]
    for k in range(1, k_max + 1):
        if mc > 0 and k >= PETS_KMIN:
            kk = _mix64(key ^ ((k * _G + 1) & _M64))
            n = [0] * (m + 2)
            for r in range(mc):
                u = (_mix64((kk + (r + 1) * _G) & _M64) >> 11) * (1.0 / 9007199254740992.0)
                t, acc = 0, q[k][0]
                while u >= acc and t < m + 1:
                    t += 1
                    acc += q[k][t] if t <= m else 1.0
                n[t] += 1
            for t in range(m + 1):
                A[k] += n[t] / (1 + t)
            A[k] = A[k] / mc
        else:
            for t in range(m + 1):
                A[k] += q[k][t] / (1 + t)
    return A


def pets_curve_key(i):
    """pets_curve_mc: query i's key (kernel.pets_plan): its estimates are the same in every seed's replay."""
    return _mix64(0xA0761D6478BD642F ^ i)


def pets_fit(A):
    """(a, b) of A(k) = Phi(a sqrt(k) + b), least squares in probit space over k = 3 .. 32 (the source's
    fit_2param_probit_sqrtk; its np.linalg.lstsq, written as the closed form of a line's fit)."""
    xs, ys = [], []
    for k in range(PETS_KMIN, len(A)):
        xs.append(math.sqrt(k))
        ys.append(ndtri(min(max(A[k], PETS_CLIP), 1.0 - PETS_CLIP)))
    m = len(xs)
    xm = sum(xs) / m
    ym = sum(ys) / m
    sxy, sxx = 0.0, 0.0
    for x, y in zip(xs, ys, strict=True):
        sxy += (x - xm) * (y - ym)
        sxx += (x - xm) * (x - xm)
    a = sxy / sxx
    return a, ym - a * xm


def pets_agree4(counts):
    """The chance that 4 of the pool's valid answers drawn without replacement agree (the source's
    estimate_pi_q2_via_subsample4 estimates it from 2,000 seeded draws; here exact)."""
    tot = sum(counts)
    return sum(math.comb(c, 4) for c in counts) / math.comb(tot, 4)


def pets_gain(k, a, b):
    """Phi(a sqrt(k + 1) + b) - Phi(a sqrt(k) + b) as the source's stable_marginal_gain_probit_sqrtk: through the
    log survival functions (log(erfc(x / sqrt 2) / 2), its norm.logsf), the cdf difference where one is not
    finite."""
    x1 = a * math.sqrt(k) + b
    x2 = a * math.sqrt(k + 1) + b
    e1 = 0.5 * math.erfc(x1 / math.sqrt(2.0))
    e2 = 0.5 * math.erfc(x2 / math.sqrt(2.0))
    if e1 <= 0.0 or e2 <= 0.0:
        return 0.5 * math.erfc(-x2 / math.sqrt(2.0)) - 0.5 * math.erfc(-x1 / math.sqrt(2.0))
    l1, l2 = math.log(e1), math.log(e2)
    if l1 < l2:
        l1, l2 = l2, l1
    return math.exp(l1) * -math.expm1(l2 - l1)


def pets_fits(pools, mc=0):
    """Per training query (i, its first pets_options distinct answers' draws, all its valid answers; pool order):
    (a, b) of its curve's probit fit (mc: pets_curve's), and (agree4, 1 - agree4), the chance of each bucket."""
    fits = []
    for i, capped, whole in pools:
        cnt = {}
        for x in capped:
            cnt[x] = cnt.get(x, 0) + 1
        a, b = pets_fit(pets_curve(list(cnt.values()), mc=mc, key=pets_curve_key(i)))
        full = {}
        for x in whole:
            full[x] = full.get(x, 0) + 1
        g = pets_agree4(list(full.values()))
        fits.append((a, b, g, 1.0 - g))
    return fits


def pets_plan(fits, bbar, bmax):
    """The two buckets' budgets (agreeing warm-up, the rest) from the training queries' fits (pets_fits): pi
    averaged, a and b averaged weighted by pi; then the source's solve_budget_plan_greedy_marginal_anyk: both from
    K0, one draw at a time to the bucket of the largest gain (ties to bucket 0, its heap's), while the expected
    budget sum(pi B) stays within bbar."""
    if not fits:  # no training query has K0 valid answers: the fixed baseline
        fixed = max(PETS_K0, min(bmax, int(bbar)) if bbar < math.inf else bmax)
        return [fixed, fixed]
    q = len(fits)
    m0 = sum(f[2] for f in fits) / q
    m1 = sum(f[3] for f in fits) / q
    pi = [m0 / (m0 + m1 + 1e-12), m1 / (m0 + m1 + 1e-12)]
    at, bt = [], []
    for t in range(2):
        w = sum(f[2 + t] for f in fits) + 1e-12
        at.append(sum(f[2 + t] * f[0] for f in fits) / w)
        bt.append(sum(f[2 + t] * f[1] for f in fits) / w)
    B = [PETS_K0, PETS_K0]
    used = pi[0] * B[0] + pi[1] * B[1]
    if used >= bbar:
        return B

    def gain(t):
        if B[t] + 1 > bmax:
            return -math.inf
        return pets_gain(B[t], at[t], bt[t])

    heap = []
    for t in range(2):
        g = gain(t)
        if g > 0:
            heapq.heappush(heap, (-g, t))
    eps = 1e-12
    while heap and used + eps < bbar:
        neg, t = heapq.heappop(heap)
        if used + pi[t] > bbar + eps:
            break
        if B[t] >= bmax or -neg <= 0:
            continue
        B[t] += 1
        used += pi[t]
        g = gain(t)
        if g > 0 and B[t] < bmax:
            heapq.heappush(heap, (-g, t))
    return B


def pets_accepted(drawn, M):
    """The accepted answers of a query's draws (answer ids, draw order): valid ones among its first M distinct
    valid answers (a later new answer is discarded, its draw paid: the source's map_fillin_answer_to_option)."""
    seen, out = [], []
    for a in drawn:
        if a < 0:
            continue
        if a not in seen:
            if len(seen) >= M:
                continue
            seen.append(a)
        out.append(a)
    return out


def pets_online_plan(run, order, B, M, T, bmax, mc=0):
    """pets-online's plan for one replay: the first T queries of the order train it on their whole pools
    (hindsight), those with at least K0 valid answers (the source's training needs 4); the budget per query bbar
    is B / n (tokens: over the training pools' mean tokens per response)."""
    n = run.n
    pools, ntok, nresp = [], 0, 0
    for i in order[:T]:
        js = range(run.off[i], run.off[i + 1])
        ntok += sum(run.tok[j] for j in js)
        nresp += len(js)
        whole = [run.ans[j] for j in js if run.ans[j] >= 0]
        if len(whole) >= PETS_K0:
            pools.append((i, pets_accepted(whole, M), whole))
    bbar = B / n
    if run.unit == "tokens":
        bbar = bbar / (ntok / nresp) if ntok > 0 else math.inf
    return pets_plan(pets_fits(pools, mc), bbar, bmax)


def _pets_online(run, order, B, max_samples, M, T, mc=0):
    """PETS online (docs/semantics.md): the plan, then every query in order: one draw at a time until K0
    accepted answers (discarded and invalid draws paid), its bucket (the K0 agree: 0, else 1), then draws up to
    its bucket's budget counted in draws; the run ends when the budget does."""
    if run.n == 0:
        return
    plan = pets_online_plan(run, order, B, M, T, max_samples if max_samples else PETS_BMAX, mc)
    for i in order:
        s = run.q[i]
        while s.active():
            acc = pets_accepted(s.drawn, M)
            if len(acc) < PETS_K0:
                want = 1
            else:
                target = plan[0 if all(a == acc[0] for a in acc[:PETS_K0]) else 1]
                if s.N >= target:
                    break
                want = target - s.N
            if run.pull(i, want, B, max_samples, "none"):
                return


def _oracle(run, rank, B):
    n = run.n
    items = []
    for i in range(n):
        s = run.q[i]
        k_first = -1
        for k in range(s.pool):
            if run.correct[run.perm[run.off[i] + k]] == 1:
                k_first = k
                break
        if k_first < 0:
            continue                        # never given anything
        if run.unit == "samples":
            cost = k_first + 1
        else:
            cost = 0
            for k in range(k_first + 1):
                cost += run.tok[run.perm[run.off[i] + k]]
        items.append((cost, rank[i], i, k_first))
    items.sort()
    for cost, _, i, k_first in items:
        left = B - run.used()
        if cost > left:
            break                           # the first that does not fit ends the run
        for k in range(k_first + 1):
            run.observe(i, run.perm[run.off[i] + k])
    # AMBIGUITY: the elimination rule does not apply to the oracle, so no query is "answered" (eliminated);
    # no query is exhausted either (it never draws past its first correct response).


# ----------------------------------------------------------------------------------------------------
# the entry point
# ----------------------------------------------------------------------------------------------------

def _check_inputs(off, correct, score, ans, tok, perm, rank):
    n = len(off) - 1
    if n < 0 or off[0] != 0:
        raise ValueError("off must start at 0")
    total = off[-1]
    for name, arr in (("correct", correct), ("score", score), ("ans", ans), ("tok", tok), ("perm", perm)):
        if len(arr) != total:
            raise ValueError(f"{name} has length {len(arr)}, expected {total}")
    if len(rank) != n or sorted(rank) != list(range(n)):
        raise ValueError("rank must be a permutation of 0..n-1")
    for i in range(n):
        lo, hi = off[i], off[i + 1]
        if hi < lo:
            raise ValueError("off must be non-decreasing")
        if sorted(perm[lo:hi]) != list(range(lo, hi)):
            raise ValueError(f"perm is not a permutation of query {i}'s segment")
        for j in range(lo, hi):
            if not (-1 <= ans[j] < hi - lo):
                raise ValueError(f"ans[{j}] = {ans[j]} out of range")
            if tok[j] < 0:
                raise ValueError(f"tok[{j}] < 0")
            if correct[j] not in (0, 1):
                raise ValueError(f"correct[{j}] not 0/1")


def run_reference(off, correct, score, ans, tok, perm, rank, *, policy, unit="samples", budget_total,
                  K=1, elim="threshold", gamma=1.0, lam=None, eps=0.01, max_samples=0, rho=0.5,
                  tau=0.5, m_min=3, conf=0.95, share=0.8, hmax=0.75, warmup=3, percentile=0.05,
                  prior_strength=2.0, judge=32, prior=None, bins=3, refresh=8, side=None, dirichlet_conf=0.95,
                  horizon=0, lows=None, bf=10.0, bf_mc=1000, mmc_delta=0.05, mmc_m=3, mmc_labels="drawn",
                  mmc_min_updates=2, mmc_leader_check="on",
                  lb_thre=0.95, lb_l=2, uab_tau=0.2, pets_options=16, pets_mc=0, pets_train=10,
                  pets_curve_mc=20000, on_draw=None):
    """Replay one run of `policy` on one pool and one seed (perm, rank), exactly as docs/semantics.md. lows:
    deepconf-online's record lows, per response a (positions, values) pair of lists. on_draw: called with the run
    after each decision (what it raises ends the run there and reaches the caller; it changes nothing else)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}")
    if elim not in ELIMS:
        raise ValueError(f"unknown elim {elim!r}")
    off = [int(x) for x in off]
    correct = [int(x) for x in correct]
    score = [float(x) for x in score]
    ans = [int(x) for x in ans]
    tok = [int(x) for x in tok]
    perm = [int(x) for x in perm]
    rank = [int(x) for x in rank]
    _check_inputs(off, correct, score, ans, tok, perm, rank)
    run = _Run(off, correct, score, ans, tok, perm, unit,
               (float(gamma), float(tau), int(m_min), conf, int(K), float(share), float(hmax),
                float(dirichlet_conf), float(bf), int(bf_mc), float(mmc_delta), int(mmc_m),
                float(lb_thre), int(lb_l), mmc_labels, int(mmc_min_updates), mmc_leader_check))
    run.on_draw = on_draw
    return run_policy(run, rank, policy=policy, budget_total=budget_total, K=K, elim=elim, gamma=gamma, lam=lam,
                      eps=eps, max_samples=max_samples, rho=rho, warmup=warmup, percentile=percentile,
                      prior_strength=prior_strength, judge=judge, prior=prior, bins=bins, refresh=refresh, side=side,
                      horizon=horizon, tau=tau, lows=lows, uab_tau=uab_tau, pets_options=pets_options,
                      pets_mc=pets_mc, pets_train=pets_train, pets_curve_mc=pets_curve_mc)


def run_policy(run, rank, *, policy, budget_total, K=1, elim="threshold", gamma=1.0, lam=None, eps=0.01,
               max_samples=0, rho=0.5, warmup=3, percentile=0.05, prior_strength=2.0, judge=32, prior=None, bins=3,
               refresh=8, side=None, horizon=0, tau=0.5, lows=None, uab_tau=0.2, pets_options=16,
               pets_mc=0, pets_train=10, pets_curve_mc=20000):
    """Run `policy` on a prepared run (its responses come from run.next_response) and collect the outcome.
    Shared by run_reference (responses from a permutation) and replay/live.py (responses from a source)."""
    B = int(budget_total)
    K = int(K)
    max_samples = int(max_samples) if max_samples else 0
    gamma = float(gamma)
    eps = float(eps)
    rho = float(rho)
    if lam is None:
        lam = 3.0 if policy == "entropy" else 1.0
    lam = float(lam)
    if K < 1:
        raise ValueError("K must be >= 1")
    n = run.n
    order = sorted(range(n), key=lambda i: rank[i])     # increasing rank
    correct = run.correct
    # marginal-gain's predictions: None (or NaN) where there is none
    run.prior = [None if prior is None or prior[i] is None or prior[i] != prior[i] else float(prior[i])
                 for i in range(n)]
    run.strength = float(prior_strength)
    # side-eb's side signal per response: 0.5 (no information) without one
    run.side = [0.5] * len(run.score) if side is None else [float(x) for x in side]

    if policy == "uniform":
        # forced: elim none, K = 1, no cap.
        # AMBIGUITY: "every query gets floor(B/n) ..." holds only while no pool runs out; read literally as
        # round-robin, the share of an exhausted query goes on being spent on the others in later rounds.
        _round_robin(run, order, B, 1, 0, "none")
    elif policy == "elimination":
        _round_robin(run, order, B, K, max_samples, elim)
    elif policy in INDEX_POLICIES:
        _index_policy(run, order, B, K, max_samples, elim, policy, lam, gamma, eps)
    elif policy == "two-stage":
        # AMBIGUITY: K is not used by two-stage (stage 1 is uniform, K = 1; stage 2 pulls are of size alloc_i).
        _two_stage(run, order, rank, B, rho, max_samples, elim)
    elif policy == "streaming":
        _streaming(run, order, B, K, max_samples, elim)
    elif policy == "oracle":
        _oracle(run, rank, B)                           # K, caps and elimination do not apply
    elif policy == "optscale":
        _optscale(run, order, B, int(warmup), float(percentile), max_samples, gamma)
    elif policy == "dsc":
        _dsc(run, order, rank, B, K, max_samples, elim, int(judge))
    elif policy == "deepconf-online":
        if lows is None:
            raise ValueError("deepconf-online needs lows (each response's record lows)")
        _deepconf_online(run, order, B, int(warmup), float(percentile), float(tau), max_samples,
                         [([int(p) for p in ps], [float(v) for v in vs]) for ps, vs in lows])
    elif policy == "pets":
        _pets(run, order, B, K, max_samples, int(pets_options), int(pets_mc))
    elif policy == "pets-online":
        _pets_online(run, order, B, max_samples, int(pets_options), int(pets_train), int(pets_curve_mc))
    elif policy == "uab":
        _uab(run, order, B, float(uab_tau), max_samples)
    elif policy == "side-eb":
        _side_eb(run, order, B, K, max_samples, elim, float(prior_strength), int(bins), int(refresh),
                 int(horizon))

    assert run.used() <= B or n == 0

    n_drawn, answered, covered, exhausted_q, sel_bon, sel_weighted, sel_sc = [], [], [], [], [], [], []
    for i in range(n):
        s = run.q[i]
        n_drawn.append(s.N)
        answered.append(bool(s.eliminated))
        covered.append(bool(s.covered))
        exhausted_q.append(bool(s.exhausted))
        sel_bon.append(correct[s.best_j] if s.best_j >= 0 else 0)
        sel_weighted.append(correct[s.first_j[s.wlead]] if s.wlead >= 0 else 0)
        sel_sc.append(correct[s.first_j[s.lead]] if s.lead >= 0 else 0)

    def mean(values):
        return sum(int(v) for v in values) / n if n else math.nan

    # the self-consistency rate: the drawn majority (sc's lead) is a most frequent valid answer of the whole pool
    consistent = []
    for i in range(n):
        pool_cnt = {}
        for j in range(run.off[i], run.off[i + 1]):
            if run.ans[j] >= 0:
                pool_cnt[run.ans[j]] = pool_cnt.get(run.ans[j], 0) + 1
        lead = run.q[i].lead
        consistent.append(lead >= 0 and pool_cnt[lead] == max(pool_cnt.values()))

    return {
        "coverage": mean(covered),
        "accuracy_bon": mean(sel_bon),
        "accuracy_weighted": mean(sel_weighted),
        "accuracy_sc": mean(sel_sc),
        "consistency": mean(consistent),
        "samples_used": run.samples_used,
        "tokens_used": run.tokens_used,
        "exhausted": sum(1 for e in exhausted_q if e),
        "n_drawn": n_drawn,
        "answered": answered,
        "covered": covered,
        "exhausted_q": exhausted_q,
        "sel_bon": sel_bon,
        "sel_weighted": sel_weighted,
        "sel_sc": sel_sc,
    }


# ----------------------------------------------------------------------------------------------------
# confidence-weighted selections (cisc, deepconf): read from what a run drew, after it
# ----------------------------------------------------------------------------------------------------

def _weighted_vote(votes):
    """votes: (answer, weight, j) in draw order. The answer with the largest summed weight (sums in draw order,
    from 0.0), ties to the answer whose first vote came first (a dict keeps insertion order, and max() returns
    the first maximal key: the sources' own Counter / dict ties); returns the earliest drawn response j that voted
    for it, or None when nothing votes."""
    total = {}
    first = {}
    for a, w, j in votes:
        if a not in total:
            total[a] = 0.0
            first[a] = j
        total[a] += w
    if not total:
        return None
    return first[max(total, key=lambda a: total[a])]


def select_cisc(off, correct, score, ans, perm, n_drawn, temp):
    """cisc's selected_correct per query, from docs/semantics.md: query i's drawn responses are
    perm[off[i] .. off[i] + n_drawn[i] - 1]; each valid one votes for its answer with weight
    exp((score - 1) / temp); an invalid one does not vote."""
    out = []
    for i in range(len(off) - 1):
        votes = []
        for k in range(int(n_drawn[i])):
            j = int(perm[int(off[i]) + k])
            if ans[j] >= 0:
                votes.append((int(ans[j]), math.exp((float(score[j]) - 1.0) / temp), j))
        j = _weighted_vote(votes)
        out.append(int(correct[j]) if j is not None else 0)
    return out


def select_deepconf(off, correct, score, ans, perm, n_drawn, eta):
    """deepconf's selected_correct per query, from docs/semantics.md: of the m valid drawn responses, keep those
    whose score is >= the k-th smallest of their scores (0-based, sorted ascending), k = ceil((m - 1) *
    (100 - eta) / 100) in floating point; when some kept score is > 0, they vote with weight = score."""
    out = []
    for i in range(len(off) - 1):
        drawn = [int(perm[int(off[i]) + k]) for k in range(int(n_drawn[i]))]
        valid = [j for j in drawn if ans[j] >= 0]
        j = None
        if valid:
            scores = sorted(float(score[j]) for j in valid)
            k = math.ceil((len(valid) - 1) * (100.0 - eta) / 100.0)
            thr = scores[k]
            kept = [j for j in valid if float(score[j]) >= thr]
            if any(float(score[j]) > 0.0 for j in kept):
                j = _weighted_vote([(int(ans[j]), float(score[j]), j) for j in kept])
        out.append(int(correct[j]) if j is not None else 0)
    return out
