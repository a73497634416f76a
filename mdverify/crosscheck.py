"""The two exact solvers against each other on random rows: ``mdverify crosscheck``.

``method="select"`` decides most of its pivots from bounds on terms it has not summed and
screens long rows by a sample; ``method="sorted"`` walks the sorted index. Both are exact, so
on any valid row they must agree (acceptance within 1e-12, 1e-6 for float32 rows, as
``tests/test_select.py`` holds them) and return rows within the budget, free of nan; so must
``md.frontier`` at the budget, and ``md.verify`` must output a token where r > 0 (``check``).
Each case is drawn from its own seed, so that a disagreement is reproduced by ``case(seed)``
alone.

The rows mix what decoders produce with what stresses the arithmetic: LLM-like, Zipf-ranked,
unrelated and tied rows of 3 to 131072 tokens; truncated targets and drafters; masses divided
by up to 1e290 on either side; p far below q (ratios up to about 1e300); near-identical
pairs; float32. Budgets run from 1e-6 to 10 and sit at and around D_f(q || p); a fifth of the
cases are prices. A row the API refuses (a ratio that overflows float64) counts as refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mdverify.divergences import Divergence
from mdverify.workloads.synthetic import llm_rows, truncate_top_k, truncate_top_p

LENGTHS = (3, 17, 300, 1500, 2048, 2049, 3000, 5000, 16384, 40000, 131072)
DIVERGENCES = ("kl", "reverse_kl", "hellinger", "jensen_shannon", "tv", "pearson", "neyman", "triangular",
               "jeffreys")
ALPHAS = (-1.5, -0.5, 0.3, 0.5, 1.5, 2.5, 4.0)
#: Budgets as multiples of D_f(q || p): at it, an ulp either side, and inside.
DRAFTER_FRACTIONS = (1 - 1e-9, 1.0, 1 + 1e-9, 0.999, 1.001, 0.5)


@dataclass(frozen=True)
class Case:
    seed: int
    p: np.ndarray
    q: np.ndarray
    divergence: Divergence
    eps: float | None
    price: float | None

    def describe(self) -> str:
        limit = f"eps = {self.eps:.6g}" if self.price is None else f"price = {self.price:.6g}"
        return f"seed {self.seed}: n = {self.p.size}, {self.p.dtype}, {self.divergence.name}, {limit}"


def _normalised(x: np.ndarray) -> np.ndarray:
    return x / x.sum()


def _pair(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A target and a drafter row of n tokens in float64, of one of the families above."""
    family = rng.integers(0, 5)
    if family == 0:
        P, Q = llm_rows(n, 1, seed=int(rng.integers(1 << 30)))
        return P[0], Q[0]
    if family == 1:  # Zipf-ranked logits, the drafter's noisy
        z = -np.log(np.arange(1, n + 1)) * rng.uniform(0.5, 2) + rng.standard_normal(n) * 0.1
    else:
        z = rng.standard_normal(n) * rng.uniform(0.5, 6)
    w = z + rng.standard_normal(n) * rng.choice([1e-6, 0.01, 0.3, 1.0, 3.0])
    if family == 2:  # unrelated
        w = rng.standard_normal(n) * 3
    if family == 3:  # few distinct logits: ties in ratio
        w = np.round(z * 2) / 2
    return _normalised(np.exp(z - z.max())), _normalised(np.exp(w - w.max()))


def _shrunk(rng, x: np.ndarray, low: float, high: float, like=None) -> np.ndarray:
    """x with a random share of its entries replaced by ``like``'s (x's own where None) divided
    by 10^U(low, high), renormalised."""
    x = x.copy()
    chosen = rng.random(x.size) < rng.uniform(0, 0.4)
    source = x if like is None else like
    x[chosen] = source[chosen] * 10.0 ** -rng.uniform(low, high) * rng.uniform(0.5, 2.0, chosen.sum())
    with np.errstate(invalid="ignore"):
        return _normalised(x)


def case(seed: int) -> Case:
    """The case of ``seed``: a row pair, a divergence and a budget or a price."""
    import mdverify as md

    rng = np.random.default_rng(seed)
    p, q = _pair(rng, int(rng.choice(LENGTHS)))
    if rng.random() < 0.3:
        p = truncate_top_p(p[None], rng.uniform(0.5, 0.999))[0]
    if rng.random() < 0.3:
        q = truncate_top_k(q[None], int(rng.integers(1, p.size + 1)))[0]
    if rng.random() < 0.15:
        p = _shrunk(rng, p, 10, 290)
    if rng.random() < 0.15:
        q = _shrunk(rng, q, 10, 290)
    if rng.random() < 0.15:  # p far below q: huge ratios, where f~ overflows before p f~
        shrunk = _shrunk(rng, p, 30, 300, like=q)
        p = shrunk if np.isfinite(shrunk).all() else p  # nan where it left no mass
    if rng.random() < 0.1:
        q = p.copy()
    elif rng.random() < 0.1:
        q = _normalised(p * np.exp(rng.standard_normal(p.size) * 1e-4))
    if rng.random() < 0.3:  # float32, renormalised in float64 and rounded again
        p, q = (_normalised(x.astype(np.float32).astype(np.float64)).astype(np.float32) for x in (p, q))
    if rng.random() < 0.15:
        divergence = md.alpha(float(rng.choice(ALPHAS)))
    else:
        divergence = md.divergence(str(rng.choice(DIVERGENCES)))
    if rng.random() < 0.2:
        return Case(seed, p, q, divergence, None, float(10.0 ** rng.uniform(-3, 3)))
    try:
        drafter = float(divergence.value(q.astype(np.float64), p.astype(np.float64)))
    except ValueError:  # rows the API refuses: ``check`` counts them
        drafter = np.inf
    if rng.random() < 0.6 or not np.isfinite(drafter):
        eps = float(10.0 ** rng.uniform(-6, 1))
    else:
        eps = drafter * float(rng.choice(DRAFTER_FRACTIONS))
    return Case(seed, p, q, divergence, eps, None)


def disagreements(select, sorted_, eps: float | None, tolerance: float) -> list[str]:
    """What is wrong with a pair of results of one case (``md.MentorResult`` of one row), by
    method: acceptances apart by more than ``tolerance``, a row invalid or over the budget,
    a nan field."""
    from mdverify.core.mentor import FIELDS  # the kernels' fields (numba is loaded: results exist)

    problems = []
    if not abs(float(select.acceptance) - float(sorted_.acceptance)) <= tolerance:
        problems.append(f"acceptance {float(select.acceptance)!r} (select) against {float(sorted_.acceptance)!r} (sorted)")
    for method, res in (("select", select), ("sorted", sorted_)):
        if not (np.isfinite(res.r).all() and (res.r >= 0).all()):
            problems.append(f"{method}: r has a negative or non-finite entry")
        if eps is not None and not float(res.divergence_value) <= eps * (1 + 1e-9) + 1e-300:
            problems.append(f"{method}: D = {float(res.divergence_value)!r} over eps = {eps!r}")
        problems += [f"{method}: {name} is nan" for name in FIELDS if np.isnan(getattr(res, name))]
    return problems


#: Rows up to this long are also solved through ``md.frontier`` (its trace holds every breakpoint).
FRONTIER_MAX_N = 5000


def check(c: Case) -> list[str] | None:
    """The disagreements of one case; None where the API refuses its rows (a ValueError).

    Besides the two methods, with a budget, against the float64 optimum (of float32 rows'
    values, where their own r is rounded): ``md.frontier``'s acceptance there (rows up to
    FRONTIER_MAX_N tokens), and ``md.verify`` of one token drawn from q (by the case's seed),
    whose output must lie where r > 0 (an accepted draft has r > 0; a replacement is drawn
    where r > q)."""
    import mdverify as md

    limit = {"eps": c.eps} if c.price is None else {"price": c.price}
    tolerance = 1e-12 if c.p.dtype == np.float64 else 1e-6
    try:
        select = md.mentor(c.p, c.q, divergence=c.divergence, method="select", **limit)
        sorted_ = md.mentor(c.p, c.q, divergence=c.divergence, method="sorted", **limit)
    except ValueError:
        return None
    problems = disagreements(select, sorted_, c.eps, tolerance)
    if c.eps is None:
        return problems
    # The float64 optimum: float32 rows' r is rounded (and pulled back within the budget),
    # which costs up to a few 1e-6 of acceptance and may round a tiny r to 0.
    p, q = c.p.astype(np.float64), c.q.astype(np.float64)
    exact = sorted_ if c.p.dtype == np.float64 else md.mentor(p, q, c.eps, c.divergence, method="sorted")
    if c.p.size <= FRONTIER_MAX_N:
        walked = float(md.frontier(c.p, c.q, c.divergence).acceptance_at(c.eps))
        if not abs(walked - float(exact.acceptance)) <= 1e-12:
            problems.append(f"acceptance {walked!r} (frontier) against {float(exact.acceptance)!r} (sorted, float64)")
    drafted = np.random.default_rng(c.seed).choice(q.size, p=q / q.sum())
    out, _ = md.verify(np.stack([c.p, c.p])[None], c.q[None, None], [[drafted]], c.eps, c.divergence, seed=c.seed)
    if not exact.r[out[0, 0]] > 0:
        problems.append(f"verify gave token {out[0, 0]}, where r = 0")
    return problems


def run(first_seed: int = 0, cases: int | None = None, minutes: float | None = None, bar=None) -> dict:
    """Check the cases of seeds first_seed, first_seed + 1, ... until ``cases`` are done or
    ``minutes`` have passed (whichever is given; both: the first reached). Returns the counts
    and each failing case's description and problems."""
    if cases is None and minutes is None:
        raise ValueError("give cases, minutes or both")
    deadline = time.monotonic() + 60.0 * minutes if minutes is not None else np.inf
    checked = refused = 0
    failures = []
    seed = first_seed
    while (cases is None or checked + refused < cases) and time.monotonic() < deadline:
        c = case(seed)
        problems = check(c)
        if problems is None:
            refused += 1
        else:
            checked += 1
            if problems:
                failures.append({"case": c.describe(), "problems": problems})
        seed += 1
        if bar is not None:
            bar.update()
    return {"first_seed": first_seed, "checked": checked, "refused": refused, "failures": failures}
