"""lbayes' posterior computed directly (a test oracle): the kernel's computation before it shared the recursions
(replay/kernel.py lbayes_posterior), kept here as the twin that tests/test_lbayes.py compares it with exactly."""
import math

import numpy as np
from numba import njit

from ttc.replay.kernel import lbayes_log_s


def _posterior_each(p, n, n1, n2, n3, uniq, L):
    """The source's posterior that the leading answer drawn is the mode (L2_posterior_tilde, L3_posterior_tilde,
    L4_posterior_tilde of LLM_known_prior_final.ipynb): n valid draws, the largest counts n1, n2, n3 and uniq
    distinct answers drawn; L = 2 keeps the head count only, L = 3 also the runner-up's (back to L = 2 below two
    distinct answers), L = 4 also the third's (back to L = 3 below three). The largest hypothesis's share of their
    sum, clipped to [0, 1]. The direct computation, one recursion per hypothesis (K; L = 3: K^2; 4: K^3), that
    kernel.lbayes_posterior replaced: its naive twin, which tests/test_lbayes.py compares with it exactly (compiled
    by numba as the kernel is, so that the same operations give the same floats)."""
    K = p.shape[0]
    if n == 0:
        return 0.0
    terms = np.empty(K)
    work = np.empty((4, K + 1, n + 1))  # the recursion's scratch, shared by its K (L = 3: K^2; 4: K^3) runs
    if L == 2 or uniq < 2:
        for i in range(K):
            ls = lbayes_log_s(p, i, -1, -1, n - n1, n1, 1, work)
            terms[i] = n1 * math.log(p[i]) + ls if p[i] > 0 and ls != -math.inf else -math.inf
    else:
        four = L == 4 and uniq >= 3
        # tie weight: the heads at the last head count (L = 3: 2 if n1 == n2; L = 4: the source's
        # head_counts.count(v_d))
        if four:
            cp = 1 + (n2 == n3) + (n1 == n3)
        else:
            cp = 2 if n1 == n2 else 1
        tj = np.empty(K * K)
        for i in range(K):
            terms[i] = -math.inf
            if p[i] <= 0:
                continue
            nt = 0
            for j in range(K):
                if i == j or p[j] <= 0:
                    continue
                if not four:
                    ls = lbayes_log_s(p, i, j, -1, n - n1 - n2, n2, cp, work)
                    if ls != -math.inf:
                        tj[nt] = n1 * math.log(p[i]) + n2 * math.log(p[j]) + ls
                        nt += 1
                    continue
                for k in range(K):
                    if k == i or k == j or p[k] <= 0:
                        continue
                    ls = lbayes_log_s(p, i, j, k, n - n1 - n2 - n3, n3, cp, work)
                    if ls != -math.inf:
                        tj[nt] = n1 * math.log(p[i]) + n2 * math.log(p[j]) + n3 * math.log(p[k]) + ls
                        nt += 1
            if nt > 0:
                mx = tj[0]
                for u in range(1, nt):
                    mx = max(mx, tj[u])
                e = 0.0
                for u in range(nt):
                    e += math.exp(tj[u] - mx)
                terms[i] = mx + math.log(e)
    mx = terms[0]
    for i in range(1, K):
        mx = max(mx, terms[i])
    if mx == -math.inf:
        return 0.0
    d = 0.0
    for i in range(K):
        d += math.exp(terms[i] - mx)
    return max(0.0, min(1.0, math.exp(mx - (mx + math.log(d)))))


lbayes_posterior_each = njit(_posterior_each)
