"""Speed on every row, not one: the solvers against numpy's sort of the same row, across families.

A speed claim has to hold on the rows a user brings. Each family below is one kind of row a
decoder produces; each (family, divergence, budget) case times, side by side on the same
row, the sort-free solver ("select"), the sorted walk ("sorted") and ``md.mentor`` as a user
calls it (default method, validation and result included), and divides each by the time
``np.sort`` takes on the row's ratios q/p, timed on the same row in the same round. Budgets
run from 1e-4 to 10 and include D_f(q || p), where r = q is first reached (acceptance 1), and
shares of it just below (NEAR_DRAFTER).

Per family the index build (``core.index.build_index``, which ``RatioIndex`` and "sorted"
use) is set against ``np.argsort`` of the ratios, and the peer algorithm (``bench.peer``)
against "select" at its own budget.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

import mdverify as md
from mdverify.bench.peer import peer_sampler
from mdverify.bench.run import _Solver, seconds
from mdverify.core import mentor as kernels
from mdverify.core.index import build_index
from mdverify.workloads.synthetic import _softmax, llm_rows, truncate_top_k, truncate_top_p

DIVERGENCES = ("kl", "reverse_kl", "hellinger", "jensen_shannon", "tv")
BUDGETS = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0)
#: Budgets as shares of D(q || p), where it is finite, beside D(q || p) itself: just below it r = q
#: just fails, and the sample, whose estimate of D(q || p) errs by about that much, misjudges it.
NEAR_DRAFTER = (0.95, 0.99)
#: The divergences of the float32 cases: the same rows rounded to float32, as decoders hold them.
FLOAT32_DIVERGENCES = ("kl",)
PEER_BUDGET = 0.05


def _zipf(n: int, rng, slope: float = 1.4) -> np.ndarray:
    """Zipf-ranked logits with small noise, ranks in random token order."""
    return -slope * np.log1p(rng.permutation(n)) + 0.1 * rng.standard_normal(n)


def _pair(n, rng, temperature=1.0, noise=1.0, slope=1.4):
    z = _zipf(n, rng, slope)
    return _softmax(z / temperature), _softmax((z + noise * rng.standard_normal(n)) / temperature)


def _ngram_rows(n, rng):
    """A held-out context of the n-gram target and drafter (their own vocabulary, not n)."""
    from mdverify.workloads.decoding import held_out_rows

    P, Q, _ = held_out_rows(limit=200)
    i = int(rng.integers(len(P)))
    return P[i], Q[i]


@lru_cache(maxsize=1)
def _neural_positions() -> tuple[np.ndarray, np.ndarray]:
    from mdverify.workloads.neural import held_out_tokens, load_pair
    from mdverify.workloads.neural_decoding import teacher_forced_rows

    _, target, drafter = load_pair()
    (P, Q), _ = teacher_forced_rows([target, drafter], held_out_tokens(), positions=254)
    return P, Q


def _neural_rows(n, rng):
    """A held-out position of the neural pair, teacher-forced (its vocabulary of 4096, not n);
    ImportError without PyTorch."""
    P, Q = _neural_positions()
    i = int(rng.integers(len(P)))
    return P[i], Q[i]


#: name -> rows(n, rng): (p, q) of length n (the n-gram and neural rows have their vocabulary's length).
FAMILIES = {
    "LLM-like, T = 0.7": lambda n, rng: _pair(n, rng, temperature=0.7),
    "LLM-like, T = 1.5": lambda n, rng: _pair(n, rng, temperature=1.5),
    "Zipf, weak drafter noise": lambda n, rng: _pair(n, rng, noise=0.2, slope=1.1),
    "Zipf, strong drafter noise": lambda n, rng: _pair(n, rng, noise=3.0, slope=1.8),
    "top-p target (0.9)": lambda n, rng: (lambda p, q: (truncate_top_p(p, 0.9), q))(*_pair(n, rng)),
    "top-k drafter (k = 50)": lambda n, rng: (lambda p, q: (p, truncate_top_k(q, 50)))(*_pair(n, rng)),
    "unrelated drafter": lambda n, rng: (_softmax(_zipf(n, rng)), _softmax(_zipf(n, rng))),
    "near-identical pair": lambda n, rng: (lambda p: (p, _softmax(np.log(p) + 1e-3 * rng.standard_normal(n))))(
        _softmax(_zipf(n, rng))),
    "n-gram models (CPython text)": _ngram_rows,
    "neural pair (held-out text)": _neural_rows,
    "reference row (llm_rows seed 1)": lambda n, rng: tuple(x[0] for x in llm_rows(n, 1, seed=1)),
}


@dataclass(frozen=True)
class Case:
    family: str
    divergence: str
    eps: float
    label: str  # the budget as the table shows it ("D(q||p)" where r = q is first reached)
    n: int
    select: float  # each / the np.sort of the row's ratios, timed beside it
    sorted: float
    mentor: float
    sort_ms: float
    dtype: str

    @property
    def name(self) -> str:
        suffix = ", float32" if self.dtype == "float32" else ""
        return f"{self.family}, {self.divergence}, eps = {self.label}{suffix}"


@dataclass(frozen=True)
class FamilyTiming:
    family: str
    n: int
    index_build_over_argsort: float
    peer_over_select: float


def _cases_of(family: str, p, q, divergences, budgets) -> list[Case]:
    P, Q = p[None], q[None]

    def sort():
        with np.errstate(divide="ignore", invalid="ignore"):  # q/p is inf (p = 0 < q) or nan (both 0)
            return np.sort(q / p)

    cases = []
    for name in divergences:
        entry = md.divergence(name)
        drafter_budget = float(entry.value(q, p))
        labelled = [(eps, f"{eps:g}") for eps in budgets]
        if np.isfinite(drafter_budget):
            labelled += [(share * drafter_budget, f"{share:g} D(q||p)") for share in NEAR_DRAFTER]
            labelled.append((drafter_budget, "D(q||p)"))
        for eps, label in labelled:
            solver = _Solver(P, Q, eps, name)
            sort_s = seconds(sort, repeat=3)
            times = {"select": seconds(lambda: solver(kernels.SELECT), repeat=3),
                     "sorted": seconds(lambda: solver(kernels.SORTED), repeat=3),
                     "mentor": seconds(lambda: md.mentor(p, q, eps, entry), repeat=3)}
            sort_s = min(sort_s, seconds(sort, repeat=3))
            cases.append(Case(family, name, float(eps), label, p.size, times["select"] / sort_s,
                              times["sorted"] / sort_s, times["mentor"] / sort_s, sort_s * 1e3, p.dtype.name))
    return cases


def _family_timing(family: str, p, q) -> FamilyTiming:
    ratios = q / np.where(p > 0, p, 1.0)
    build = seconds(lambda: build_index(p, q), repeat=3) / seconds(lambda: np.argsort(ratios), repeat=3)
    solver = _Solver(p[None], q[None], PEER_BUDGET, "reverse_kl")  # the peer's measure is KL(p || r)
    peer = seconds(lambda: peer_sampler(p, q, PEER_BUDGET), min_time=0.05, repeat=3)
    return FamilyTiming(family, p.size, build, peer / seconds(lambda: solver(kernels.SELECT), repeat=3))


def python_overhead(n: int, divergence: str = "kl", eps: float = 0.05, dtype=np.float64) -> dict:
    """Time of one ``md.mentor`` call on one row beyond its kernel's (validation, workspace,
    result; in float32 also D of the rounded row, and the pull-back where rounding took it over
    the budget, which ``pulled_back`` says)."""
    P, Q = llm_rows(n, 1, seed=1, dtype=dtype)
    solver = _Solver(P, Q, eps, divergence)
    kernel = call = np.inf
    # Alternating, so that a slow spell of the machine costs both alike; the difference of two
    # minima of sub-millisecond calls needs many rounds to settle (50 take about 50 ms).
    for _ in range(50):
        kernel = min(kernel, seconds(lambda: solver(kernels.SELECT), repeat=1))
        call = min(call, seconds(lambda: md.mentor(P[0], Q[0], eps, divergence), repeat=1))
    pulled_back = bool(md.divergence(divergence).value(solver.R[0], P[0]) > eps)
    return {"n": n, "dtype": np.dtype(dtype).name, "kernel_ms": kernel * 1e3, "call_ms": call * 1e3,
            "overhead_ms": (call - kernel) * 1e3, "pulled_back": pulled_back}


def run(n: int, quick: bool = False, bar=None) -> dict:
    """Every case of every family at vocabulary size ``n``."""
    divergences = ("kl",) if quick else DIVERGENCES
    budgets = (0.1,) if quick else BUDGETS
    cases, families = [], []
    for k, (family, rows) in enumerate(FAMILIES.items()):
        try:
            p, q = (np.ascontiguousarray(x, dtype=np.float64) for x in rows(n, np.random.default_rng(1000 + k)))
        except ImportError:  # the neural pair needs the torch extra
            continue
        cases += _cases_of(family, p, q, divergences, budgets)
        # The same rows as a decoder holds them in float32 (its sort: of float32 ratios), kl alone.
        cases += _cases_of(family, p.astype(np.float32), q.astype(np.float32), FLOAT32_DIVERGENCES, budgets)
        families.append(_family_timing(family, p, q))
        if bar is not None:
            bar.update()
    return {"n": n, "cases": [asdict(c) | {"name": c.name} for c in cases],
            "families": [asdict(f) for f in families], "overhead": python_overhead(n),
            "overhead_float32": python_overhead(n, dtype=np.float32)}


def _in_dtype(cases: list[dict], dtype: str = "float64") -> list[dict]:
    """The cases whose rows are of ``dtype``."""
    return [c for c in cases if c["dtype"] == dtype]


def summary(result: dict, size: int | None = None, dtype: str = "float64") -> dict:
    """Per method: median and worst ratio to the sort, and the worst case's name; over the cases
    of ``dtype``, and of length ``size`` only, where given."""
    cases = [c for c in _in_dtype(result["cases"], dtype) if size is None or c["n"] == size]
    out = {}
    for method in ("select", "sorted", "mentor"):
        ratios = np.array([c[method] for c in cases])
        worst = int(np.argmax(ratios))
        out[method] = {"median": float(np.median(ratios)), "worst": float(ratios[worst]), "worst_case": cases[worst]["name"],
                       "share_within_half": float(np.mean(ratios <= 0.5)), "cases": len(cases)}
    return out


METHOD_LABELS = {"select": "select (kernel)", "sorted": "sorted (kernel)", "mentor": "md.mentor (default method, one call)"}


def plot(result: dict, path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    methods = list(METHOD_LABELS)
    cases = _in_dtype(result["cases"])
    data = [[c[m] for c in cases] for m in methods]
    ax.boxplot(data, whis=(0, 100), widths=0.5)
    rng = np.random.default_rng(0)
    for i, values in enumerate(data, start=1):
        ax.scatter(i + 0.12 * rng.standard_normal(len(values)), values, s=6, alpha=0.4)
    ax.set_xticks(range(1, len(methods) + 1), [METHOD_LABELS[m] for m in methods], fontsize=8)
    ax.axhline(0.5, color="k", ls="--", lw=1, label="goal: 0.5x the sort")
    ax.axhline(1.0, color="gray", ls=":", lw=1, label="the sort")
    ax.set_yscale("log")
    ax.set_ylabel("time / np.sort of the row's ratios")
    ax.set_title(f"{len(cases)} float64 cases: {len(FAMILIES)} row families, budgets, divergences (n = {result['n']})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(result: dict, plot_name: str) -> str:
    s = summary(result)
    wide = _in_dtype(result["cases"])
    lines = [f"Every solver against `np.sort` of the same row's ratios, side by side, over {len(wide)} float64 "
             f"cases: {len(FAMILIES)} row families, divergences {', '.join(sorted({c['divergence'] for c in wide}))}, "
             f"budgets {', '.join(sorted({c['label'] for c in result['cases']}, key=lambda x: ('D' in x, x)))} "
             f"(D(q||p): where r = q is first reached, and shares of it just below), n = {result['n']} (the n-gram "
             f"rows: their vocabulary); and the same rows rounded to float32, as a decoder holds them, for "
             f"{', '.join(FLOAT32_DIVERGENCES)} (each against the sort of its float32 ratios; the plot shows the "
             "float64 cases).", "",
             f"![ratio to the sort across row families]({plot_name})", "",
             "| method | cases | median / sort | worst / sort | cases within 0.5x | worst case |",
             "|---|---|---|---|---|---|"]
    at_n = summary(result, result["n"])
    narrow = summary(result, result["n"], "float32")
    for method, label in METHOD_LABELS.items():
        for scope, m in (("all", s[method]), (f"n = {result['n']}", at_n[method]),
                         (f"float32, n = {result['n']}", narrow[method])):
            lines.append(f"| {label} | {scope} ({m['cases']}) | {m['median']:.2f} | {m['worst']:.2f} "
                         f"| {100 * m['share_within_half']:.0f}% | {m['worst_case']} |")
    sort_at_n = np.median([c["sort_ms"] for c in wide if c["n"] == result["n"]])
    narrow_sort = np.median([c["sort_ms"] for c in _in_dtype(result["cases"], "float32") if c["n"] == result["n"]])
    lines += ["", f"The sort itself, the unit of every ratio: {sort_at_n:.2f} ms at n = {result['n']} (median over "
              "the cases). Its speed depends several-fold on the SIMD kernels numpy dispatches to (named with the "
              "machine), so set a ratio beside that time when comparing machines. The float32 rows' sort: "
              f"{narrow_sort:.2f} ms."]
    small = sorted({(c["family"], c["n"]) for c in wide if c["n"] != result["n"]})
    if small:
        sort_ms = np.median([c["sort_ms"] for c in wide if c["n"] != result["n"]])
        lines += ["", f"The n = {result['n']} lines leave out the rows of "
                  + ", ".join(f"{family} (n = {n})" for family, n in small)
                  + f": their sort takes {sort_ms * 1e3:.0f} us (median), against "
                  f"{result['overhead']['overhead_ms'] * 1e3:.0f} us for the Python part of one `md.mentor` call "
                  "(below)."]
    reference = [c for c in wide if c["family"].startswith("reference") and c["divergence"] == "kl"]
    if reference:
        lines += ["", "The reference row (kl), one line of the table rather than its headline: "
                  + ", ".join(f"eps {c['label']}: select {c['select']:.2f}x" for c in reference) + "."]
    lines += ["", "Per family: the index build against `np.argsort` of the ratios, and the peer (reverse_kl, "
              f"eps = {PEER_BUDGET}) against select:", "", "| family | n | index build / argsort | peer / select |",
              "|---|---|---|---|"]
    lines += [f"| {f['family']} | {f['n']} | {f['index_build_over_argsort']:.2f} | {f['peer_over_select']:.1f} |"
              for f in result["families"]]
    o = result["overhead"]
    lines += ["", f"One `md.mentor` call on one row of n = {o['n']} (kl, eps = 0.05): {o['call_ms']:.3f} ms, of which "
              f"the kernel {o['kernel_ms']:.3f} ms and Python (validation, workspace, result) {o['overhead_ms']:.3f} ms."]
    o = result["overhead_float32"]
    lines += ["", f"The same row in float32: {o['call_ms']:.3f} ms, of which the kernel {o['kernel_ms']:.3f} ms and "
              f"{o['overhead_ms']:.3f} ms besides. That includes D_f of the rounded r in float64, which "
              "`divergence_value` reports and the budget is checked against, "
              + ("and, as rounding took this row over its budget, the pull-back towards p with D of the pulled row."
                 if o["pulled_back"] else "once (rounding kept this row within its budget: no pull-back).")]
    return "\n".join(lines)
