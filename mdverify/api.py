"""The public entry points: ``mentor``, ``RatioIndex``, ``frontier`` and divergence values."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace

import numba
import numpy as np

from mdverify.core import mentor as kernels
from mdverify.core.index import build_index
from mdverify.core.walk import D, M, STATE_SIZE
from mdverify.divergences import Divergence
from mdverify.divergences import divergence as lookup
from mdverify.core.checks import rows_valid
from mdverify.validate import SUM_TOLERANCE, as_budgets, as_pair, as_prices, check_ratios

METHODS = ("auto", "sorted", "select")
#: Row length from which "auto" uses the sort-free solver (measured by ``benchmarks/``).
AUTO_SELECT_MIN_N = 512


@dataclass(frozen=True)
class MentorResult:
    """The optimal mentored distribution and its certificate quantities.

    Attributes
    ----------
    r : ndarray, shape (..., n)
        The mentored distribution, in the input's dtype.
    acceptance : ndarray, shape (...)
        :math:`A(r) = \\sum_i \\min(r_i, q_i) = 1 - TV(p, q) + m`.
    moved_mass : ndarray, shape (...)
        :math:`m = \\sum_i (r_i - p_i)_+`.
    a, b : ndarray, shape (...)
        Clip thresholds, :math:`r_i = \\min(\\max(q_i, a p_i), b p_i)`; b is inf once
        tokens with :math:`p_i = 0` receive mass.
    lam, mu : ndarray, shape (...)
        Dual variables of the budget and of normalisation (SPEC C3); lam is 0 when the
        budget does not bind and inf at eps = 0.
    divergence_value : ndarray, shape (...)
        :math:`D_f(r \\| p) \\le \\varepsilon`, of r as returned: float32 rows are
        evaluated after rounding, and a row that rounding took over the budget is pulled
        back towards p until it is within it (its acceptance and moved mass are then those
        of the returned row; a, b, lam and mu stay those of the float64 optimum).
    certificate : Certificate or None
        With ``certified=True``: the rigorous certificate of the returned rows
        (``md.certify``), whose ``feasible`` holds for every row.
    """

    r: np.ndarray
    acceptance: np.ndarray
    moved_mass: np.ndarray
    a: np.ndarray
    b: np.ndarray
    lam: np.ndarray
    mu: np.ndarray
    divergence_value: np.ndarray
    certificate: "Certificate | None" = None  # noqa: F821 - mdverify.rigorous.certify, loaded on demand


def _result(r: np.ndarray, fields: np.ndarray, batch_shape: tuple[int, ...]) -> MentorResult:
    if not batch_shape:  # one row: numpy scalars
        return MentorResult(r, *fields[0])
    return MentorResult(r, *(fields[:, j].reshape(batch_shape) for j in range(len(kernels.FIELDS))))


_local = threading.local()


def _workspace(solver: int, rows: int, n: int) -> np.ndarray:
    """A (chunks, 4, width) float64 workspace for ``mentor_rows`` and ``verify_rows``.

    One chunk of rows per thread, for either solver; only the sort-free one uses the space
    (width n), and that workspace is kept per Python thread: at n = 131072 the page faults of
    a fresh one cost as much as a solve.
    """
    chunks = 1 if rows == 1 else max(1, min(rows, numba.get_num_threads()))
    if solver != kernels.SELECT:
        return np.empty((chunks, 4, 0))
    work = getattr(_local, "work", None)
    if work is None or work.shape[0] < chunks or work.shape[2] < n:
        work = np.empty((chunks, 4, n))
        _local.work = work
    return work[:chunks]  # C-contiguous; the kernels accept rows wider than n


def _solver(method: str, n: int) -> int:
    """The kernel code for ``method``; "auto" takes the sort-free solver from AUTO_SELECT_MIN_N."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid methods are: {', '.join(METHODS)}")
    if method == "sorted" or (method == "auto" and n < AUTO_SELECT_MIN_N):
        return kernels.SORTED
    return kernels.SELECT


def mentor(p, q, eps=None, divergence: str | Divergence = "kl", method: str = "auto", *, price=None,
           certified: bool = False) -> MentorResult:
    """The optimal mentored distribution for every row.

    Solves, row by row,

    .. math:: \\max_r \\sum_i \\min(r_i, q_i) \\quad \\text{s.t.} \\quad r \\in \\Delta_n,\\;
              D_f(r \\| p) \\le \\varepsilon

    exactly, in parallel over rows.

    Parameters
    ----------
    p, q : array_like, shape (..., n)
        Target and drafter distributions (float32 or float64; accumulation is float64).
    eps : float or array_like broadcastable to (...)
        Budgets, >= 0; inf means no budget.
    divergence : str or Divergence
        A registry name (see ``md.divergences.names()``), ``md.alpha(a)``, or a generator
        expression in t such as ``"(t-1)*log(t)"`` (see :func:`md.divergence`).
    method : {"auto", "sorted", "select"}
        The solver. "sorted" walks the C5 index (O(n log n) per row); "select" finds the same
        optimum without sorting, by partitioning around ratio pivots (expected O(n));
        "auto" takes "select" from n = AUTO_SELECT_MIN_N on, where it is measured faster.
    price : float or array_like broadcastable to (...), optional
        Instead of ``eps`` (exactly one of the two): a price nu > 0 per row (inf allowed), and
        each row maximises :math:`A(r) - \\nu D_f(r \\| p)`, the point of its frontier with
        slope dA/deps = nu (SPEC section 10). ``lam`` is then nu where r stops between p and
        its limit, and ``divergence_value`` the budget that price buys. Both methods solve
        prices: "select" decides each pivot by the slope f~'(b) - f~'(a) against 1 / nu
        (long rows screened as for eps), "sorted" walks the index to that slope.
    certified : bool
        Return only rows proved feasible in ball arithmetic (``md.certify``; needs
        python-flint and sympy): a row whose rigorous bound on D_f(r || p) exceeds eps is
        pulled back towards p by the smallest step of a geometric sequence (from 2^-50
        relative, 8 times each) that the bound accepts; ``res.certificate`` then holds the
        proved gaps. Only with ``eps``.

    Returns
    -------
    MentorResult

    Examples
    --------
    >>> import mdverify as md
    >>> res = md.mentor([0.7, 0.2, 0.1], [0.2, 0.5, 0.3], eps=0.1, divergence="tv")
    >>> round(float(res.acceptance), 12), round(float(res.moved_mass), 12)
    (0.6, 0.1)
    """
    entry = lookup(divergence)
    checked_by_kernel = _as_given(p, q)  # row by row as it solves (``core.mentor.CHECKED``)
    if not checked_by_kernel:
        p, q = _checked_pair(p, q)
    batch_shape = p.shape[:-1]
    n = p.shape[-1]
    if (eps is None) == (price is None):
        raise ValueError("give exactly one of eps (a budget per row) and price (a price per row)")
    if certified and price is not None:
        raise ValueError("certified=True proves a budget: give eps, not price")
    P = np.ascontiguousarray(p.reshape(-1, n))
    Q = np.ascontiguousarray(q.reshape(-1, n))
    R = np.empty_like(P)
    fields = np.empty((P.shape[0], len(kernels.FIELDS)), np.float64)
    solver = _solver(method, n)
    if price is None:
        budgets = as_budgets(eps, batch_shape)
        solve, limits = entry.kernels.mentor_rows, budgets
    else:
        solve, limits = entry.kernels.price_rows, as_prices(price, batch_shape)
    check = kernels.CHECKED if checked_by_kernel else 0
    solve(P, Q, limits, entry.kind, entry.param, solver | check, R, fields, _workspace(solver, P.shape[0], n))
    if checked_by_kernel:
        _solve_refused(solve, P, Q, limits, entry, solver, R, fields, p, q)
    if price is not None:
        budgets = fields[:, kernels.FIELDS.index("divergence_value")].copy()  # what each price bought
    budgets = np.asarray(budgets, np.float64).reshape(-1)
    if R.dtype != np.float64:
        _keep_budget_after_rounding(entry, P, Q, R, fields, budgets)
    if not certified:
        return _result(R.reshape(p.shape), fields, batch_shape)
    from mdverify.rigorous.certify import certify, proved_within

    values = fields[:, kernels.FIELDS.index("divergence_value")]  # a view: pulled rows update it
    optimum = R.copy()  # where the dual bound is taken: lam and mu are the multipliers of this r
    proved = proved_within(entry, P, budgets, R.dtype)
    _pull_back(entry, P, Q, R, fields, budgets, values, np.flatnonzero(np.isfinite(budgets)),
               lambda i, row, value: proved(i, row), first_step=2.0 ** -50)
    lam, mu = (fields[:, kernels.FIELDS.index(name)].reshape(batch_shape) for name in ("lam", "mu"))
    certificate = certify(P.reshape(p.shape), Q.reshape(p.shape), R.reshape(p.shape), budgets.reshape(batch_shape),
                          entry, lam=lam, mu=mu, dual_r=optimum.reshape(p.shape))
    return replace(_result(R.reshape(p.shape), fields, batch_shape), certificate=certificate)


def _as_given(p, q) -> bool:
    """Whether p and q are arrays of one float dtype and shape, which a fused pass can check
    and the kernels can take as they are."""
    return (isinstance(p, np.ndarray) and isinstance(q, np.ndarray) and p.dtype in SUM_TOLERANCE
            and p.dtype == q.dtype and p.shape == q.shape and p.ndim >= 1 and p.size > 0)


def _checked_pair(p, q) -> tuple[np.ndarray, np.ndarray]:
    """p and q validated: arrays ``_as_given`` that one fused pass finds valid are taken as they
    are; anything else goes through ``as_pair`` and ``check_ratios``, which convert what they
    can and name what is wrong."""
    if _as_given(p, q):
        n = p.shape[-1]
        if rows_valid(p.reshape(-1, n), q.reshape(-1, n), SUM_TOLERANCE[p.dtype]):
            return p, q
    p, q = as_pair(p, q)
    check_ratios(p, q)
    return p, q


def _solve_refused(solve, P, Q, limits, entry: Divergence, solver: int, R, fields, p, q) -> None:
    """After a checked solve (``core.mentor.CHECKED``), the rows its check refused, whose fields
    are nan: the checks that name what is wrong raise; a row they accept after all (a p below
    the smallest normal float whose ratio with q does not overflow) is solved unchecked."""
    if not math.isnan(fields[:, 0].sum()):  # acceptances are finite: nan only where refused
        return
    refused = np.flatnonzero(np.isnan(fields[:, 0]))
    _checked_pair(p, q)  # raises, naming the row and the problem, unless every row is valid
    rows_r, rows_fields = R[refused], fields[refused]
    solve(P[refused], Q[refused], limits[refused], entry.kind, entry.param, solver, rows_r, rows_fields,
          _workspace(solver, refused.size, P.shape[1]))
    R[refused], fields[refused] = rows_r, rows_fields


def _keep_budget_after_rounding(entry: Divergence, P, Q, R, fields, budgets) -> None:
    """Make float32 rows keep the budget as returned, not only before rounding: the kernels
    round r towards p (``core.mentor.construct``), which takes no term of D_f(r || p) up, but
    D of the rounded row, summed in float64 as ``divergence_value`` reports it, may still
    come out an ulp over a binding budget; such rows are pulled back (``_pull_back``, from a
    step of 1e-7), and ``divergence_value`` describes the returned float32 rows."""
    values = np.empty(R.shape[0])
    entry.kernels.divergence_rows(R, P, entry.kind, entry.param, values)
    _pull_back(entry, P, Q, R, fields, budgets, values, np.flatnonzero(values > budgets),
               lambda i, row, value: value <= budgets[i], first_step=ROUNDING_FIRST_STEP)
    fields[:, kernels.FIELDS.index("divergence_value")] = values


def _row_divergence(entry: Divergence, r: np.ndarray, p: np.ndarray) -> float:
    """D_f(r || p) of one row, summed as ``Divergence.value`` sums it, without its checks
    (the row is one the solver returned, or one between that and p)."""
    out = np.empty(1)
    entry.kernels.divergence_rows(r[None], p[None], entry.kind, entry.param, out)
    return float(out[0])


#: Each step back towards p is this many times the last (``_pull_back``); the first step of
#: a float32 row that rounding took over its budget.
STEP_GROWTH = 8.0
ROUNDING_FIRST_STEP = 1e-7


def _pull_back(entry: Divergence, P, Q, R, fields, budgets, values, rows, within, first_step: float) -> None:
    """Pull rows that ``within(i, row, value)`` rejects back towards p until it accepts them.

    Used where float32 rounding took D_f(r || p) a little over a binding budget (``within``
    compares ``value``, D evaluated in float64 after rounding, with the budget) and for
    ``certified=True`` (``within`` proves it in ball arithmetic). ``values`` holds each row's D
    as returned. A row moves along the segment to p, r(theta) = p + theta (r - p) with
    theta = min(1, eps / D)(1 - step), which convexity puts within the budget before
    rounding, for steps growing geometrically from ``first_step`` until the rounded row is
    accepted (theta = 0 gives p itself, D = 0); a step whose rounded row is the one last tried
    is not tried again (where p and r differ by little, small steps round back to r itself).
    A pulled row's ``acceptance``,
    ``moved_mass`` and ``values`` (its divergence) become those of the returned row; a, b,
    lam and mu stay those of the float64 optimum.
    """
    for i in rows:
        if within(i, R[i], values[i]):
            continue
        candidate, tried = np.empty_like(R[i]), R[i]
        scale = min(1.0, budgets[i] / values[i]) if values[i] > 0 else 1.0
        step = first_step
        while step < 1.0:
            kernels.toward(P[i], R[i], scale * (1.0 - step), candidate)
            if not np.array_equal(candidate, tried):
                value = _row_divergence(entry, candidate, P[i])
                if within(i, candidate, value):
                    break
                tried = candidate.copy()
            step *= STEP_GROWTH
        else:
            candidate[:] = P[i]
            value = _row_divergence(entry, candidate, P[i])
        R[i] = candidate
        values[i] = value
        acceptance, moved = kernels.acceptance_and_moved(candidate, P[i], Q[i])
        fields[i, kernels.FIELDS.index("acceptance")] = acceptance
        fields[i, kernels.FIELDS.index("moved_mass")] = moved


@dataclass(frozen=True)
class Frontier:
    """The acceptance-versus-budget frontier of one row and one divergence.

    ``eps`` and ``acceptance`` are the breakpoints (where a token enters or leaves a clip);
    between them the frontier is the concave curve the index solves exactly, which
    :meth:`acceptance_at` evaluates in O(log n) per budget. Unpacks as ``eps, acceptance``.
    """

    eps: np.ndarray
    acceptance: np.ndarray
    _index: "RatioIndex"
    _divergence: Divergence
    _trace: np.ndarray

    def __iter__(self):
        return iter((self.eps, self.acceptance))

    def acceptance_at(self, eps) -> np.ndarray:
        """Optimal acceptance at each budget, shape of ``eps``."""
        budgets = as_budgets(eps, np.shape(eps))
        values = np.array([self._index._resume(self._divergence, self._trace, e)[0][M] for e in budgets])
        return (self._index.base + values).reshape(np.shape(eps))


class RatioIndex:
    """The divergence-independent sorted ratio index of one row (SPEC C5).

    Built once in O(n log n); every divergence and budget is then answered from it:
    :meth:`query` in O(n) (O(log n) plus building r once the frontier of that divergence
    has been computed), :meth:`frontier` in O(n).

    Examples
    --------
    >>> import mdverify as md
    >>> index = md.RatioIndex([0.7, 0.2, 0.1], [0.2, 0.5, 0.3])
    >>> eps, acceptance = index.frontier("tv")
    >>> [round(float(x), 12) for x in acceptance]
    [0.5, 0.95, 1.0]
    """

    def __init__(self, p, q):
        p, q = as_pair(p, q)
        check_ratios(p, q)
        if p.ndim != 1:
            raise ValueError(f"RatioIndex takes one row (shape (n,)), got shape {p.shape}; use md.mentor for batches")
        self.p, self.q = p, q
        self._arrays = build_index(p, q)
        self.base = float(self._arrays[7])
        self._traces: dict[Divergence, np.ndarray] = {}
        self._slopes: dict[Divergence, np.ndarray] = {}

    @property
    def tv(self) -> float:
        """TV(p, q) = 1 - sum_i min(p_i, q_i)."""
        return 1.0 - self.base

    def _trace(self, entry: Divergence) -> np.ndarray:
        if entry not in self._traces:
            self._traces[entry] = entry.kernels.frontier_trace(*self._arrays[:7], entry.kind, entry.param)
        return self._traces[entry]

    def _resume(self, entry: Divergence, trace: np.ndarray, eps: float) -> tuple[np.ndarray, bool, int]:
        """The walk's final state at ``eps``, resumed from the last breakpoint below it.

        Returns (state, binding, steps); ``steps`` counts the walk iterations after the resume.
        """
        row = max(int(np.searchsorted(trace[:, D], eps, side="right")) - 1, 0)
        state = trace[row].copy()
        binding, _, steps = entry.kernels.walk(*self._arrays[:7], entry.kind, entry.param, eps, state, np.empty((0, STATE_SIZE)))
        return state, binding, steps

    def budget_at_price(self, divergence: str | Divergence, price: float) -> float:
        """The budget D_f(r || p) of this row's frontier point of slope ``price`` (``md.mentor(price=)``).

        From the cached frontier: the last breakpoint whose slope dD/dm is at most 1 / price is
        found by bisection and the walk resumed there, so a query costs O(log n) plus one segment.
        """
        entry = lookup(divergence)
        trace = self._trace(entry)
        if entry not in self._slopes:
            self._slopes[entry] = entry.kernels.trace_slopes(trace, entry.kind, entry.param)
        row = max(int(np.searchsorted(self._slopes[entry], 1.0 / price, side="right")) - 1, 0)
        state = trace[row].copy()
        entry.kernels.walk_to_price(*self._arrays[:7], entry.kind, entry.param, price, state)
        return float(state[D])

    def frontier(self, divergence: str | Divergence = "kl") -> Frontier:
        """Breakpoints (eps_k, acceptance_k) of the frontier, with finite eps_k."""
        entry = lookup(divergence)
        trace = self._trace(entry)
        finite = np.isfinite(trace[:, D])
        return Frontier(
            eps=trace[finite, D].copy(),
            acceptance=self.base + trace[finite, M],
            _index=self,
            _divergence=entry,
            _trace=trace,
        )

    def query(self, divergence: str | Divergence, eps: float) -> MentorResult:
        """The same fields as :func:`mentor`, for this row."""
        entry = lookup(divergence)
        budget = float(as_budgets(eps, ())[0])
        state, binding, _ = self._resume(entry, self._trace(entry), budget)
        r = np.empty_like(self.p)
        fields = np.empty((1, len(kernels.FIELDS)), np.float64)
        entry.kernels.finish(self._arrays[6], self.base, entry.kind, entry.param, budget, state, binding, self.p, self.q, r, fields[0])
        if r.dtype != np.float64:
            _keep_budget_after_rounding(entry, self.p[None], self.q[None], r[None], fields, np.array([budget]))
        return _result(r, fields, ())


def frontier(p, q, divergence: str | Divergence = "kl") -> Frontier:
    """Shorthand for ``RatioIndex(p, q).frontier(divergence)``."""
    return RatioIndex(p, q).frontier(divergence)
