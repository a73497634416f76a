"""One function per report section: measure, plot, and return the section's Markdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import mdverify as md
from mdverify.oracle.bruteforce import solve
from mdverify.oracle.certificate import certify
from mdverify.workloads import divergence_suite, llm_rows

BUDGETS = (1e-4, 1e-3, 1e-2, 0.1, 0.5, 2.0)


def _style(i: int) -> dict:
    """Distinct colours for up to 20 curves; the alpha family dashed."""
    import matplotlib.pyplot as plt

    return {"color": plt.cm.tab20(i % 20), "ls": "--" if i >= len(md.names()) else "-"}


def _save(fig, ax, path: Path, xlabel: str, ylabel: str, title: str) -> None:
    import matplotlib.pyplot as plt

    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def optimality(out_dir: Path, quick: bool, rng) -> str:
    n, rows = (200, 3) if quick else (1000, 8)
    n_cert = 10_000 if quick else 1_000_000
    cases = [("LLM-like", None), ("top-k target", "top_k"), ("both truncated", "both")]
    table = []
    for entry in divergence_suite():
        worst, count = 0.0, 0
        for _, truncate in cases:
            p, q = llm_rows(n, rows, seed=int(rng.integers(1 << 31)), truncate=truncate)
            for eps in BUDGETS:
                res = md.mentor(p, q, eps, entry)
                for i in range(rows):
                    worst = max(worst, abs(solve(p[i], q[i], eps, entry).acceptance - res.acceptance[i]))
                    count += 1
        cert_p, cert_q = llm_rows(n_cert, 1, seed=int(rng.integers(1 << 31)))
        res = md.mentor(cert_p, cert_q, 0.05, entry)
        cert = certify(cert_p[0], cert_q[0], res.r[0], 0.05, float(res.lam[0]), float(res.mu[0]), entry)
        table.append([entry.name, str(count), f"{worst:.1e}", f"{cert.relative_gap:.1e}"])
    return (
        f"`md.mentor` (sorted ratio index) against the brute-force reference (nested bisection on the moved "
        f"mass and the clip thresholds, divergence evaluated independently with numpy from sympy), on n = {n} "
        f"rows: LLM-like, top-k-truncated target, and both truncated; budgets {', '.join(map(str, BUDGETS))}. "
        f"The last column is the dual certificate (SPEC C3), g(lam*, mu*) / A(r*) - 1, which is >= 0 up to rounding and proves "
        f"optimality without a solver, on one LLM-like row of n = {n_cert} at eps = 0.05.\n\n"
        + _table(["divergence", "instances", "worst acceptance gap (absolute)", f"certificate gap, n = {n_cert}"], table)
    )


def scaling(out_dir: Path, quick: bool, rng) -> str:
    """Complexity scaling and the side-by-side ratios of SPEC section 8 (``mdverify.bench``)."""
    from mdverify.bench.run import run

    _, text = run(out_dir, quick=quick)
    return text


def frontiers(out_dir: Path, quick: bool, rng) -> str:
    import matplotlib.pyplot as plt

    p, q = llm_rows(2000, 1, seed=int(rng.integers(1 << 31)))
    index = md.RatioIndex(p[0], q[0])
    grid = np.geomspace(1e-4, 10, 300)
    fig, ax = plt.subplots(figsize=(8, 5))
    rows = []
    for i, entry in enumerate(divergence_suite()):
        front = index.frontier(entry)
        ax.plot(grid, front.acceptance_at(grid), label=entry.name, **_style(i))
        rows.append([entry.name, str(front.eps.size), f"{front.acceptance_at(0.01):.4f}", f"{front.acceptance_at(0.1):.4f}"])
    ax.axhline(index.base, color="k", ls=":", lw=1, label="lossless (eps = 0)")
    _save(fig, ax, out_dir / "frontiers.png", "budget eps = D_f(r || p)", "acceptance probability A(r*)",
          f"Optimal acceptance vs budget, one LLM-like row (n = {p.shape[1]}, TV = {index.tv:.3f})")
    return (
        "One index per row answers every divergence; each curve is the exact optimum "
        "(`RatioIndex.frontier(f).acceptance_at(eps)`).\n\n![frontiers](frontiers.png)\n\n"
        + _table(["divergence", "breakpoints", "A at eps = 0.01", "A at eps = 0.1"], rows)
    )


def truncation(out_dir: Path, quick: bool, rng) -> str:
    import matplotlib.pyplot as plt

    n, rows = (500, 8) if quick else (4000, 32)
    p, q = llm_rows(n, rows, seed=int(rng.integers(1 << 31)), truncate="top_k")
    excluded = p == 0
    budgets = np.geomspace(1e-3, 3, 25)
    fig, ax = plt.subplots(figsize=(8, 5))
    table = []
    for i, entry in enumerate(divergence_suite()):
        leaked = np.array([np.mean((md.mentor(p, q, eps, entry).r * excluded).sum(-1)) for eps in budgets])
        if leaked.max() > 0:
            ax.plot(budgets, leaked, label=entry.name, **_style(i))
        table.append([entry.name, f"{entry.f_prime_at_inf:g}", f"{leaked[np.searchsorted(budgets, 0.01)]:.4f}",
                      f"{leaked[np.searchsorted(budgets, 0.1)]:.4f}", f"{leaked[-1]:.4f}"])
    _save(fig, ax, out_dir / "truncation.png", "budget eps", "mean output mass on tokens the target excluded",
          f"Top-k-truncated targets (k = n/10, n = {n}, {rows} rows)")
    return (
        "Users filter targets with top-k or top-p. Under a divergence with finite f'(inf) the mentored "
        "distribution can put mass on tokens the target excluded (p = 0), once every kept token the drafter "
        "over-proposes is saturated. With reverse_kl (KL(target || output), the 2023 formulation) f'(inf) = 0: "
        "the excluded tokens themselves cost nothing, so the output can leave the target's support at the "
        "price of the mass taken from the kept tokens alone. Divergences with f'(inf) = inf (kl, pearson, "
        "jeffreys, alpha > 1) never put mass there. Mean leaked mass over the rows:\n\n"
        "![truncation](truncation.png)\n\n"
        + _table(["divergence", "f'(inf)", "leaked mass, eps 0.01", "eps 0.1", f"eps {budgets[-1]:g}"], table)
    )


def divergence_table(out_dir: Path, quick: bool, rng) -> str:
    import sympy as sp

    rows = []
    for entry in [md.divergence(name) for name in md.names()]:
        d = entry.derived
        second = "-" if d.f_second_at_one is None else sp.sstr(d.f_second_at_one)
        rows.append([entry.name, f"`{sp.sstr(d.f)}`", sp.sstr(d.f_at_zero), sp.sstr(d.f_prime_at_inf), second])
    from mdverify.divergences.alpha_family import EXPRESSION
    from mdverify.symbolic.derive import derive, parse_generator

    d = derive(parse_generator(EXPRESSION))
    rows.append(["alpha(a)", f"`{sp.sstr(d.f)}`", sp.sstr(d.f_at_zero), sp.sstr(d.f_prime_at_inf), sp.sstr(d.f_second_at_one)])
    return (
        "Each limit below is computed by sympy from the generator in this run.\n\n"
        + _table(["name", "f(t)", "f(0)", "f'(inf)", "f''(1)"], rows)
    )
