"""The optimal mentored distribution of every row, as a batched tensor program (SPEC C1-C5).

The same optimum as the numba walk (``core.walk``), computed without a loop over rows or
tokens, on whatever device the tensors live:

1. **Index.** One ``torch.sort`` per row of the key -rho (low side, rho < 1), 1 (neutral and
   truncated tokens) and rho (finite high side) lays out the low side by ratio descending and
   the high side by ratio ascending: in both, the tokens a growing moved mass m releases come
   first. Masked prefix sums give each side's released mass and released p f~(rho), suffix
   sums its clipped mass, all float64.
2. **Breakpoints.** With its first j tokens released, a side's moved mass at its j-th
   breakpoint is m_j = released_j + clipped_j |1 - rho_j|, non-decreasing in j; between
   breakpoints its threshold moves linearly in m. D(m), convex and non-decreasing, is
   evaluated at a breakpoint of one side by locating m among the other side's
   (``torch.searchsorted``), and each side's last breakpoint within the budget is found by a
   batched binary search (about log2 n steps on (B,) tensors).
3. **Segment.** Between the last breakpoint within the budget and the first beyond it, both
   thresholds are linear in the moved mass delta, and D(delta) = eps is solved by safeguarded
   Newton steps vectorised over rows: each step evaluates a Newton step from the right end, a
   secant from the bracket and the midpoint, and keeps the tightest bracket (convexity puts the
   first two on either side of the root); tv and pearson start from sympy's closed form.

The per-divergence functions are the generated ``_tgen`` (or a user generator's own module),
printed from the same forms as the numba kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

#: Iteration cap of the segment solve; each step at least halves every bracket still open.
MAX_STEPS = 200
#: A bracket narrower than this, relative to its right end, is solved (as in ``core.walk``).
RELATIVE_WIDTH = 4e-16


@dataclass(frozen=True)
class Generator:
    """One divergence's tensor functions: f~, f~', the conjugate, the closed-form segment root
    and the constants of SPEC section 2, bound to its kind and parameter."""

    module: object
    kind: int
    param: float

    def f(self, t):
        return self.module.f_tilde(self.kind, self.param, t)

    def fp(self, t):
        return self.module.f_tilde_prime(self.kind, self.param, t)

    def weighted(self, weight, t):
        """weight * f~(t), finite wherever the product is (``core.terms``); 0 where weight is 0."""
        value = weight * self.f(t)
        overflow = ~torch.isfinite(value) & (t > 1.0) & torch.isfinite(t)
        if bool(overflow.any()):
            value = torch.where(overflow, (weight * t) * self.module.f_tilde_star(self.kind, self.param, 1.0 / t), value)
        return torch.where(weight > 0.0, value, 0.0)

    def root(self, e, p_low, da, p_high, db):
        return self.module.segment_root(self.kind, self.param, e, p_low, da, p_high, db)

    @property
    def slope_at_inf(self) -> float:
        return float(self.module.f_tilde_prime_at_inf(self.kind, self.param))

    @property
    def prime_at_one(self) -> float:
        return float(self.module.f_prime_at_one(self.kind, self.param))


@dataclass
class Index:
    """The sorted ratio index of a batch, as extended breakpoint arrays of shape (B, n + 1).

    Entry j of a side is its state with its first j sorted tokens released: ``m`` the moved
    mass there, ``threshold`` the clip threshold (1 at j = 0), ``clipped`` the p mass still
    clipped and ``released_cost`` the sum of p f~(rho) over the released tokens. ``cap_*`` are
    the sides' capacities, ``q0`` the drafter mass where p = 0, ``base`` = sum min(p, q);
    ``finite_high`` (B, n) marks, in row order, the high-side tokens (q > p, q/p finite).
    """

    low_m: torch.Tensor
    low_threshold: torch.Tensor
    low_clipped: torch.Tensor
    low_cost: torch.Tensor
    high_m: torch.Tensor
    high_threshold: torch.Tensor
    high_clipped: torch.Tensor
    high_cost: torch.Tensor
    cap_low: torch.Tensor
    cap_high: torch.Tensor
    q0: torch.Tensor
    base: torch.Tensor
    finite_high: torch.Tensor


def _prefix(x):
    """(B, n) -> (B, n + 1): 0 then the running sums."""
    return torch.cat([torch.zeros_like(x[:, :1]), torch.cumsum(x, -1)], -1)


def _suffix(x):
    """(B, n) -> (B, n + 1): the sums from each position to the end, then 0 (summed from the end,
    so that a tail of tiny masses keeps its relative precision)."""
    return torch.cat([torch.flip(torch.cumsum(torch.flip(x, (-1,)), -1), (-1,)), torch.zeros_like(x[:, :1])], -1)


def build_index(P, Q, gen: Generator) -> Index:
    """The index of float64 rows P, Q of shape (B, n)."""
    rho = Q / P  # p = 0 < q, and q/p overflowing, give inf: the truncated set, kept only as q0
    low = Q < P
    high = (Q > P) & (rho < math.inf)
    finite_high = high
    q0 = torch.where((Q > P) & ~high, Q, 0.0).sum(-1)
    key = torch.where(low, -rho, torch.where(high, rho, 1.0))
    order = torch.sort(key, -1).indices
    p = P.gather(-1, order)
    t = rho.gather(-1, order)
    low, high = low.gather(-1, order), high.gather(-1, order)

    p_low = torch.where(low, p, 0.0)
    # Past the low side the threshold stays at the smallest low ratio (nothing is clipped there).
    s = torch.cummin(torch.where(low, t, math.inf), -1).values
    s = torch.where(s < math.inf, s, 1.0)
    released_low = _prefix(p_low * (1.0 - s))
    clipped_low = _suffix(p_low)
    low_m = released_low[:, :-1] + clipped_low[:, :-1] * (1.0 - s)

    p_high = torch.where(high, p, 0.0)
    b = torch.where(high, t, 1.0)
    released_high = _prefix(p_high * (b - 1.0))
    clipped_high = _suffix(p_high)
    high_m = released_high[:, :-1] + clipped_high[:, :-1] * (b - 1.0)

    cost = gen.weighted(p, torch.where(low | high, t, 1.0))  # p f~(rho) of every token with a finite ratio
    one = torch.ones_like(P[:, :1])
    zero = torch.zeros_like(one)
    # Rounding can make consecutive breakpoints decrease by an ulp; the search needs them sorted.
    return Index(
        low_m=torch.cummax(torch.cat([zero, low_m], -1), -1).values,
        low_threshold=torch.cat([one, s], -1),
        low_clipped=clipped_low,
        low_cost=_prefix(torch.where(low, cost, 0.0)),
        high_m=torch.cummax(torch.cat([zero, high_m], -1), -1).values,
        high_threshold=torch.cat([one, b], -1),
        high_clipped=clipped_high,
        high_cost=_prefix(torch.where(high, cost, 0.0)),
        cap_low=released_low[:, -1],
        cap_high=released_high[:, -1],
        q0=q0,
        base=torch.minimum(P, Q).sum(-1),
        finite_high=finite_high,
    )


@dataclass
class Segment:
    """Both sides' state at a moved mass m0, linear in delta = m - m0 up to the next breakpoint.

    Shapes (B,) or (B, c). With delta: a = a0 - delta / c_low (not below ``a_min``), b = b0 +
    delta / c_high (not above ``b_max``) while high tokens are clipped, else the truncated set
    fills: fill = fill0 + delta at the marginal cost f~'(inf).
    """

    a0: torch.Tensor
    a_min: torch.Tensor
    c_low: torch.Tensor
    cost_low: torch.Tensor
    b0: torch.Tensor
    b_max: torch.Tensor
    c_high: torch.Tensor
    cost_high: torch.Tensor
    fill0: torch.Tensor

    def each(self, fn) -> "Segment":
        """The segment with ``fn`` applied to every field (a reshape, an index)."""
        return Segment(**{field.name: fn(getattr(self, field.name)) for field in fields(self)})

    def at(self, delta, gen: Generator, fpinf: float):
        """(D, dD/ddelta, a, b, fill) at ``delta``."""
        a = torch.maximum(self.a0 - delta / torch.where(self.c_low > 0, self.c_low, 1.0), self.a_min)
        a = torch.where(self.c_low > 0, a, self.a0)
        clipped_high = self.c_high > 0
        b = torch.minimum(self.b0 + delta / torch.where(clipped_high, self.c_high, 1.0), self.b_max)
        b = torch.where(clipped_high, b, self.b0)
        fill = torch.where(clipped_high, self.fill0, self.fill0 + delta)
        fill_cost = torch.where(fill > 0, fpinf * fill, 0.0)
        value = self.cost_low + gen.weighted(self.c_low, a) + self.cost_high
        value = value + torch.where(clipped_high, gen.weighted(self.c_high, b), fill_cost)
        slope = torch.where(clipped_high, gen.fp(b), fpinf) - gen.fp(a)
        return value, slope, a, b, fill


def _take(x, j):
    return x.gather(-1, j)


def segment_at(index: Index, m) -> Segment:
    """The state of every row at moved masses ``m`` (shape (B, c), each <= the row's m_max)."""
    n = index.low_m.shape[-1] - 1
    j = (torch.searchsorted(index.low_m, m, right=True) - 1).clamp(0, n)
    c_low = _take(index.low_clipped, j)
    s = _take(index.low_threshold, j)
    a0 = torch.where(c_low > 0, s - (m - _take(index.low_m, j)) / torch.where(c_low > 0, c_low, 1.0), s)
    a_min = _take(index.low_threshold, (j + 1).clamp(max=n))
    k = (torch.searchsorted(index.high_m, m, right=True) - 1).clamp(0, n)
    c_high = _take(index.high_clipped, k)
    t = _take(index.high_threshold, k)
    b0 = torch.where(c_high > 0, t + (m - _take(index.high_m, k)) / torch.where(c_high > 0, c_high, 1.0), t)
    b_max = _take(index.high_threshold, (k + 1).clamp(max=n))
    fill0 = torch.clamp(m - index.cap_high[:, None], min=0.0)
    return Segment(a0=torch.maximum(a0, a_min), a_min=a_min, c_low=c_low, cost_low=_take(index.low_cost, j),
                   b0=torch.minimum(b0, b_max), b_max=b_max, c_high=c_high, cost_high=_take(index.high_cost, k),
                   fill0=fill0)


def _value(index: Index, m, gen: Generator, fpinf: float):
    """D at moved masses ``m`` (B, c)."""
    return segment_at(index, m).at(torch.zeros_like(m), gen, fpinf)[0]


def _last_within(breakpoints, index: Index, m_max, eps, gen: Generator, fpinf: float):
    """Per row and side, the largest breakpoint (capped at m_max) with D within eps and the
    smallest beyond it (inf where none is), by one binary search over both sides at once
    (D is non-decreasing along each side's breakpoints, ``breakpoints`` (B, 2, n + 1))."""
    rows, sides, size = breakpoints.shape
    lo = torch.zeros(rows, sides, 1, dtype=torch.long, device=breakpoints.device)  # entry 0: m = 0, D = 0
    hi = torch.full_like(lo, size)  # one past the end: nothing beyond found yet
    for _ in range(max(1, math.ceil(math.log2(size + 1)))):
        mid = (lo + hi) // 2
        open_ = hi - lo > 1
        m = torch.minimum(_take(breakpoints, mid.clamp(max=size - 1))[..., 0], m_max)
        within = (_value(index, m, gen, fpinf) <= eps)[..., None]
        lo = torch.where(open_ & within, mid, lo)
        hi = torch.where(open_ & ~within, mid, hi)
    found = torch.minimum(_take(breakpoints, lo)[..., 0], m_max).amax(-1, keepdim=True)
    beyond = torch.where(hi < size, _take(breakpoints, hi.clamp(max=size - 1)), math.inf)[..., 0]
    return found, torch.minimum(beyond.amin(-1, keepdim=True), m_max)


def _solve_segment(seg: Segment, length, eps, gen: Generator, fpinf: float):
    """The largest delta in [0, length] with D(delta) <= eps, to machine precision, for every
    row at once (requires D(0) <= eps < D(length)); the feasible end is returned.

    D is convex, so a tangent's zero lies right of the root (from either end of the bracket)
    and the secant's zero left of it; each step evaluates those three, the arithmetic and the
    geometric midpoint and, at the first step, sympy's closed-form root, and keeps the tightest
    bracket: the width halves, and so does the ratio of the ends, at every step.
    """
    wide = seg.each(lambda x: x[..., None])
    ends = torch.stack([torch.zeros_like(length), length], -1)
    value, slope, *_ = wide.at(ends, gen, fpinf)
    lo, hi = ends.unbind(-1)
    g_lo, g_hi = (value - eps[..., None]).unbind(-1)
    s_lo, s_hi = slope.unbind(-1)
    clipped_high = seg.c_high > 0
    closed_form = gen.root(eps - seg.cost_low - seg.cost_high, seg.c_low, 1.0 - seg.a0,
                           torch.where(clipped_high, seg.c_high, 1.0), seg.b0 - 1.0)
    for step in range(MAX_STEPS):
        open_ = (g_lo < 0) & (hi - lo > RELATIVE_WIDTH * hi)
        if not bool(open_.any()):
            break
        candidates = [_tangent_zero(hi, g_hi, s_hi), _tangent_zero(lo, g_lo, s_lo), lo + 0.5 * (hi - lo),
                      torch.where(torch.isfinite(g_hi), lo + (hi - lo) * (g_lo / (g_lo - g_hi)), math.nan),
                      # the geometric midpoint (from 2^-52 hi): roots orders of magnitude below the
                      # bracket's end, where D overflows and neither tangent nor secant is usable
                      torch.where(lo > 0, torch.sqrt(lo * hi), hi * 2.0**-52)]
        if step == 0:
            candidates.append(torch.where(clipped_high, closed_form, math.nan))
        x = torch.stack(candidates, -1)
        inside = (x > lo[..., None]) & (x < hi[..., None]) & open_[..., None]
        x = torch.where(inside, x, lo[..., None])
        value, slope, *_ = wide.at(x, gen, fpinf)
        g = value - eps[..., None]
        lo, g_lo, s_lo = _pick(inside & (g <= 0), x, g, slope, lo, g_lo, s_lo, largest=True)
        hi, g_hi, s_hi = _pick(inside & (g > 0), x, g, slope, hi, g_hi, s_hi, largest=False)
    return lo


def _tangent_zero(x, g, slope):
    usable = torch.isfinite(g) & torch.isfinite(slope) & (slope > 0)
    return torch.where(usable, x - g / torch.where(usable, slope, 1.0), math.nan)


def _pick(mask, x, g, slope, end, g_end, s_end, largest: bool):
    """The bracket end moved to the candidate of ``mask`` nearest the root, with its g and slope."""
    score = torch.where(mask, x if largest else -x, -math.inf)
    best = score.argmax(-1, keepdim=True)
    move = _take(mask, best).squeeze(-1)
    return (torch.where(move, _take(x, best).squeeze(-1), end), torch.where(move, _take(g, best).squeeze(-1), g_end),
            torch.where(move, _take(slope, best).squeeze(-1), s_end))


def solve_rows(P, Q, eps, gen: Generator, dtype=torch.float64):
    """The optimum of every row of float64 P, Q (B, n) at budgets eps (B,): (r, fields), fields
    of shape (B, 7) in the order of ``core.mentor.FIELDS``; r float64, to be returned in ``dtype``."""
    index = build_index(P, Q, gen)
    fpinf = gen.slope_at_inf
    fill_cap = index.q0 if fpinf < math.inf else torch.zeros_like(index.q0)
    m_max = torch.minimum(index.cap_low, index.cap_high + fill_cap)[:, None]
    e = eps[:, None]
    found, beyond = _last_within(torch.stack([index.low_m, index.high_m], 1), index, m_max, e, gen, fpinf)
    binding = _value(index, m_max, gen, fpinf) > e
    m0 = torch.where(binding, found, m_max)
    length = torch.where(binding, beyond - m0, 0.0)
    seg = segment_at(index, m0).each(lambda x: x[:, 0])
    binding, m0, length = binding[:, 0], m0[:, 0], length[:, 0]
    delta = _solve_segment(seg, length, eps, gen, fpinf)
    value, _, a, b, fill = seg.at(delta, gen, fpinf)
    m = m0 + delta

    low_slope = gen.fp(a)
    high_slope = torch.where(seg.c_high > 0, gen.fp(b), fpinf)
    lam = torch.where(binding, 1.0 / (high_slope - low_slope), 0.0)
    fp1 = gen.prime_at_one
    mu = torch.where(lam != 0, -(low_slope + fp1) * lam, 0.0)
    zero_budget = eps == 0
    lam = torch.where(zero_budget, math.inf, lam)
    mu = torch.where(zero_budget, 0.0 if fp1 == 0 else -math.copysign(math.inf, fp1), mu)

    share = torch.where(index.q0 > 0, fill / torch.where(index.q0 > 0, index.q0, 1.0), 0.0)
    # As the numba construction: a lifted token's r never underflows to 0 in the returned dtype
    # (f~(0) may be infinite); its smallest subnormal is at most p_i.
    info = torch.finfo(dtype)
    floor = torch.where(a > 0, info.smallest_normal * info.eps, 0.0)[:, None]
    R = torch.where(Q < P, torch.maximum(torch.maximum(Q, a[:, None] * P), floor),
                    torch.where(index.finite_high, torch.minimum(Q, b[:, None] * P),
                                torch.where(Q > P, share[:, None] * Q, P)))
    fields = torch.stack([index.base + m, m, a, torch.where(fill > 0, math.inf, b), lam, mu, value], -1)
    return R, fields


def divergence_rows(R, P, gen: Generator):
    """D_f(r || p) of float64 rows (B, n); p = 0 < r terms cost r f~'(inf)."""
    ratio = R / P
    finite = (P > 0) & (ratio < math.inf)
    inside = gen.weighted(torch.where(finite, P, 0.0), torch.where(finite, ratio, 1.0))
    outside = torch.where(~finite & (R > 0), R * gen.slope_at_inf, 0.0)
    return (inside + outside).sum(-1)
