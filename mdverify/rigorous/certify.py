"""``md.certify``: feasibility and optimality of a mentored row, proved in ball arithmetic.

For the problem exactly as the float arrays define it (p, q, eps and r are read as the
exact rationals their doubles are), a certificate gives rigorous enclosures, rounded
outward to doubles:

- the mass sum r (``math.fsum`` is correctly rounded, so the exact sum lies within one ulp)
  and the acceptance A(r) = sum min(r_i, q_i), likewise;
- D_f(r || p), summed term by term over balls (python-flint's arb at 128 bits) with the
  generator printed from its sympy derivation (``rigorous.balls``);
- an upper bound on the optimum, by weak duality. For lam >= 0, mu and any w in [0, 1]^n,

  .. math:: \\mathrm{OPT} \\le \\lambda\\varepsilon + \\mu + \\sum_i \\big[(1 - w_i) q_i
            + p_i \\sup_{t \\ge 0} (y_i t - \\lambda f(t))\\big], \\quad y_i = w_i - \\mu,

  because min(r, q) = min over w of w r + (1 - w) q and a sup of a min is at most the min
  of the sups. Each w_i is chosen so that the sup sits at the result's own ratio r_i / p_i,
  and each sup is bounded rigorously by the tangent at the left end of a bracket
  [t1, t2] around it on which the concave function's slope is proved to change sign
  (``_sup_bound``). Tokens with p_i = 0 < q_i add (1 - w) q_i under the constraint
  w - mu <= lam f'(inf) (nothing when f'(inf) = inf).

Where a bound cannot be proved (a bracket that no guess makes certain, an f whose ball
evaluation fails, mu < 0 with lam = 0), the certificate says so in ``notes`` and gives inf,
never a float guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mdverify.divergences import Divergence
from mdverify.divergences import divergence as lookup
from mdverify.rigorous.balls import ball_generator, flint, lower, precision, upper
from mdverify.validate import as_budgets, as_pair

#: Half-width of the bracket around each sup, relative to the guessed maximiser.
BRACKET = 2.0 ** -40


@dataclass(frozen=True)
class Certificate:
    """Rigorous statements about mentored rows, one entry per row (shape (...) of the batch).

    Attributes
    ----------
    feasible : ndarray of bool
        Proved: r >= 0, |sum r - 1| <= mass_tolerance and D_f(r || p) <= eps.
    divergence, acceptance, mass : ndarray of float64, shape (..., 2)
        Rigorous (lower, upper) enclosures of D_f(r || p), A(r) and sum r.
    optimum_upper : ndarray of float64
        A rigorous upper bound on the optimal acceptance of P(f, eps) (inf where none is proved).
    gap_upper : ndarray of float64
        optimum_upper minus the lower end of the acceptance: A(r) is proved within this of the optimum.
    notes : tuple of str
        Per row (flattened), why a statement is not proved, or "".
    """

    feasible: np.ndarray
    divergence: np.ndarray
    acceptance: np.ndarray
    mass: np.ndarray
    optimum_upper: np.ndarray
    gap_upper: np.ndarray
    notes: tuple


def _fsum_enclosure(values: np.ndarray) -> tuple[float, float]:
    """(lower, upper) doubles around the exact sum of doubles (fsum is correctly rounded)."""
    total = math.fsum(values.tolist())
    return math.nextafter(total, -math.inf), math.nextafter(total, math.inf)


def _multipliers(result, lam, mu, batch_shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from mdverify.api import MentorResult

    if isinstance(result, MentorResult):
        if lam is not None or mu is not None:
            raise ValueError("give lam and mu only with a bare r; a MentorResult carries its own")
        r, lam, mu = result.r, result.lam, result.mu
    else:
        if lam is None or mu is None:
            raise ValueError("certify needs the multipliers: pass the MentorResult of md.mentor, or r with lam= and mu=")
        r = result
    out = []
    for name, value in (("lam", lam), ("mu", mu)):
        try:
            arr = np.broadcast_to(np.asarray(value, np.float64), batch_shape).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number or an array of the batch shape {batch_shape}, got {value!r}") from None
        out.append(arr)
    lam_flat, mu_flat = out
    if np.isnan(lam_flat).any() or (lam_flat < 0).any():
        row = int(np.argmax(np.isnan(lam_flat) | (lam_flat < 0)))
        raise ValueError(f"lam of row {row} is {lam_flat[row]!r}; it must be >= 0 (inf at eps = 0)")
    bad_mu = np.isnan(mu_flat) | (np.isinf(mu_flat) & np.isfinite(lam_flat))
    if bad_mu.any():
        row = int(np.argmax(bad_mu))
        raise ValueError(f"mu of row {row} is {mu_flat[row]!r}; it must be finite where lam is")
    return r, lam_flat, mu_flat


def mass_tolerances(P: np.ndarray, dtype) -> np.ndarray:
    """The default distance of sum r from 1 allowed per row: p's own distance from 1 plus
    n + 4 unit roundoffs of r's dtype (rounding n entries, and the sums' own enclosures)."""
    unit = float(np.finfo(dtype).eps) / 2 if np.dtype(dtype).kind == "f" else 0.0
    distance = np.array([abs(math.fsum(row.tolist()) - 1.0) for row in P])
    return distance * (1 + 2.0 ** -50) + (P.shape[1] + 4) * max(unit, 2.0 ** -53)


def certify(p, q, result, eps, divergence: str | Divergence = "kl", *, lam=None, mu=None,
            mass_tolerance: float | None = None, dual_r=None) -> Certificate:
    """Prove a mentored result feasible and within a stated gap of the optimum.

    Parameters
    ----------
    p, q : array_like, shape (..., n)
        The rows the result was solved for.
    result : MentorResult or array_like of shape (..., n)
        What ``md.mentor`` returned, or an r with explicit ``lam`` and ``mu``.
    eps : float or array_like broadcastable to (...)
        The budgets.
    divergence : str or Divergence
    lam, mu : float or array_like, optional
        The multipliers of a bare r (lam >= 0, inf meaning eps = 0).
    mass_tolerance : float, optional
        How far sum r may be from 1 and still count as in the simplex; by default, per row,
        p's own distance from 1 plus n unit roundoffs of r's dtype (``mass_tolerances``).
    dual_r : array_like of shape (..., n), optional
        Where the dual bound is taken: each token's multiplier y = lam f'(r_i / p_i) is chosen
        at this r's ratio rather than the result's. Any r >= 0 gives a valid bound; the
        optimum's, at which lam and mu are its multipliers, a tight one. ``md.mentor(certified=True)``
        passes the float64 optimum, which a row it pulled back towards p no longer is.

    Returns
    -------
    Certificate

    Examples
    --------
    >>> import mdverify as md
    >>> p, q = [0.6, 0.3, 0.1], [0.2, 0.3, 0.5]
    >>> res = md.mentor(p, q, 0.05, "kl")
    >>> cert = md.certify(p, q, res, 0.05, "kl")
    >>> bool(cert.feasible), bool(cert.gap_upper < 1e-12)
    (True, True)
    """
    entry = lookup(divergence)
    p, q = as_pair(p, q)
    batch_shape, n = p.shape[:-1], p.shape[-1]
    r, lam, mu = _multipliers(result, lam, mu, batch_shape)
    try:
        r = np.asarray(r)
    except Exception as exc:  # noqa: BLE001 - anything that is not an array
        raise ValueError(f"r is not an array: {exc}") from None
    if r.shape != p.shape:
        raise ValueError(f"r has shape {r.shape}, but p has {p.shape}")
    if r.dtype.kind not in "fiu":
        raise ValueError(f"r must hold real numbers, got dtype {r.dtype}")
    budgets = as_budgets(eps, batch_shape).reshape(-1)
    P = p.reshape(-1, n).astype(np.float64)
    Q = q.reshape(-1, n).astype(np.float64)
    R = r.reshape(-1, n).astype(np.float64)  # float32 and integer values are exact in float64
    dual = R if dual_r is None else np.asarray(dual_r, np.float64)
    if dual.shape != R.shape and dual.shape != r.shape:
        raise ValueError(f"dual_r has shape {dual.shape}, but p has {p.shape}")
    dual = dual.reshape(-1, n)
    rows = P.shape[0]
    if mass_tolerance is None:
        tolerances = mass_tolerances(P, r.dtype)
    elif isinstance(mass_tolerance, (int, float)) and np.isfinite(mass_tolerance) and mass_tolerance >= 0:
        tolerances = np.full(rows, float(mass_tolerance))
    else:
        raise ValueError(f"mass_tolerance must be a finite number >= 0 or None, got {mass_tolerance!r}")
    fields = {name: np.empty((rows, 2)) for name in ("divergence", "acceptance", "mass")}
    feasible = np.zeros(rows, bool)
    optimum, notes = np.empty(rows), []
    try:
        generator = ball_generator(entry)
    except ValueError as exc:  # an f the ball library cannot evaluate: nothing about D is proved
        generator, unprovable = None, f"nothing about D_f is proved for {entry.name}: {exc}"
    with precision():
        for i in range(rows):
            note = []
            fields["mass"][i] = _fsum_enclosure(R[i])
            fields["acceptance"][i] = _fsum_enclosure(np.minimum(R[i], Q[i]))
            if generator is None:
                fields["divergence"][i] = (-math.inf, math.inf)
                optimum[i] = _fsum_enclosure(Q[i])[1]
                notes.append(unprovable)
                continue
            finite = np.isfinite(R[i]).all()
            nonnegative = finite and (R[i] >= 0).all()
            if not nonnegative:
                note.append("r has a negative or non-finite entry")
                fields["divergence"][i] = (math.nan, math.nan)
            else:
                fields["divergence"][i] = _divergence(generator, P[i], R[i])
            in_simplex = fields["mass"][i, 0] >= 1 - tolerances[i] and fields["mass"][i, 1] <= 1 + tolerances[i]
            if nonnegative and not in_simplex:
                note.append(f"sum r is not proved within {tolerances[i]:.3g} of 1")
            feasible[i] = nonnegative and in_simplex and fields["divergence"][i, 1] <= budgets[i]
            if nonnegative and not fields["divergence"][i, 1] <= budgets[i]:
                note.append(f"D_f(r || p) <= eps is not proved (upper bound {fields['divergence'][i, 1]!r})")
            at = dual[i] if dual_r is not None and np.isfinite(dual[i]).all() and (dual[i] >= 0).all() else R[i]
            bound, why = _optimum_upper(entry, generator, P[i], Q[i], at if nonnegative else None, budgets[i],
                                        lam[i], mu[i])
            optimum[i] = min(bound, _fsum_enclosure(Q[i])[1])  # also A(r) <= sum q for every r
            if why:
                note.append(why)
            notes.append("; ".join(note))
    gap = np.array([_minus_up(optimum[i], fields["acceptance"][i, 0]) for i in range(rows)])
    shape = lambda x: x.reshape(batch_shape + x.shape[1:])[()]  # noqa: E731 - a scalar for one row
    return Certificate(feasible=shape(feasible), divergence=shape(fields["divergence"]),
                       acceptance=shape(fields["acceptance"]), mass=shape(fields["mass"]),
                       optimum_upper=shape(optimum), gap_upper=shape(gap), notes=tuple(notes))


def proved_within(entry: Divergence, P: np.ndarray, budgets: np.ndarray, dtype):
    """``within(i, row)``: True when ``row`` is proved feasible for row i of P at budgets[i]
    (r >= 0, mass within the default tolerance for ``dtype``, D_f(r || p) <= eps); for
    ``md.mentor(certified=True)``."""
    try:
        generator = ball_generator(entry)
    except ValueError as exc:
        raise ValueError(f"certified=True cannot prove rows for {entry.name}: {exc}") from None
    tolerances = mass_tolerances(P.astype(np.float64), dtype)

    def within(i: int, row: np.ndarray) -> bool:
        r = row.astype(np.float64)
        if not (np.isfinite(r).all() and (r >= 0).all()):
            return False
        low, high = _fsum_enclosure(r)
        if low < 1 - tolerances[i] or high > 1 + tolerances[i]:
            return False
        with precision():
            return _divergence(generator, P[i].astype(np.float64), r)[1] <= budgets[i]

    return within


def _minus_up(x: float, y: float) -> float:
    """x - y rounded up (inf stays inf)."""
    if math.isinf(x):
        return x
    with precision():
        arb = flint().arb
        return upper(arb(x) - arb(y))


def _divergence(generator, p: np.ndarray, r: np.ndarray) -> tuple[float, float]:
    """(lower, upper) around D_f(r || p) = sum p_i f(r_i / p_i), with the limits of SPEC section 1."""
    arb = flint().arb
    total = arb(0)
    moved = np.flatnonzero(r != p)  # a term with r_i = p_i is p_i f(1) = 0 exactly
    for i in moved.tolist():
        pi, ri = float(p[i]), float(r[i])
        if pi == 0.0:  # r_i > 0 = p_i: worth r_i f'(inf)
            if generator.f_prime_at_inf is None:
                return math.inf, math.inf
            total += arb(ri) * generator.f_prime_at_inf
        elif ri == 0.0:
            if generator.f_at_zero is None:
                return math.inf, math.inf
            total += arb(pi) * generator.f_at_zero
        else:
            total += arb(pi) * generator.f(arb(ri) / arb(pi))
    return lower(total), upper(total)


#: Relative raises of mu tried when the dual is not bounded at the result's own multipliers.
NEARBY_MU = (2.0 ** -50, 2.0 ** -44, 2.0 ** -38, 2.0 ** -30)


def _optimum_upper(entry, generator, p, q, r, eps: float, lam: float, mu: float) -> tuple[float, str]:
    """(a rigorous upper bound on the optimum, "" or why none is proved).

    At the result's (lam, mu) first; where rounding of mu left the dual unbounded (a token
    clipped at a ratio near f'(inf), say), at mu raised by a few relative steps, each of
    which is a valid pair of multipliers too.
    """
    bound, why = _dual_bound(entry, generator, p, q, r, eps, lam, mu)
    if math.isinf(bound) and math.isfinite(lam) and lam > 0 and r is not None:
        for step in NEARBY_MU:
            nearby, _ = _dual_bound(entry, generator, p, q, r, eps, lam, mu + step * max(1.0, abs(mu)))
            if math.isfinite(nearby):
                return nearby, ""
    return bound, why


def _dual_bound(entry, generator, p, q, r, eps: float, lam: float, mu: float) -> tuple[float, str]:
    """A rigorous upper bound on g(lam, mu) (the optimum's bound at these multipliers), or inf and why."""
    arb = flint().arb
    if math.isinf(lam):
        # eps = 0 read as the limit lam -> inf: the only feasible point is r = p where
        # D_f(r || p) = 0 forces it, that is where f is strictly convex at 1.
        if eps == 0 and (entry.name == "tv" or entry.f_second_at_one > 0):
            return _fsum_enclosure(np.minimum(p, q))[1], ""
        return math.inf, "lam = inf proves nothing unless eps = 0 and f is strictly convex at 1"
    if r is None:
        return math.inf, "no multiplier bound without a valid r"
    lam_b, mu_b = arb(lam), arb(mu)
    if math.isinf(eps) and lam > 0:
        return math.inf, "lam > 0 with an infinite budget bounds nothing"
    total = (lam_b * arb(eps) if lam > 0 else arb(0)) + mu_b
    positive = p > 0
    if lam == 0.0:
        # The limit lam -> 0+ of g(lam, mu) with w = min(mu, 1): lam f*(y / lam) -> 0 for y <= 0
        # (f is bounded below where f'(inf) = inf), so g -> mu + (1 - mu)_+ times the mass of q
        # on the tokens that can receive mass (p > 0, and p = 0 where f'(inf) < inf). Every
        # g(lam, mu) bounds the optimum, so their limit does too.
        if mu < 0:
            return math.inf, "lam = 0 with mu < 0 bounds nothing"
        reachable = q[positive] if generator.f_prime_at_inf is None else q
        return upper(total + max(arb(1) - mu_b, arb(0)) * arb(_fsum_enclosure(reachable)[1])), ""
    tv = entry.name == "tv"
    for i in np.flatnonzero(positive).tolist():
        pi, qi, ri = float(p[i]), float(q[i]), float(r[i])
        if tv:
            term = _tv_term(pi, qi, lam_b, mu_b)
        else:
            term = _token_term(generator, pi, qi, ri, lam_b, mu_b)
        if term is None:
            return math.inf, f"the dual bound of token {i} could not be proved"
        total += term
    stray = np.flatnonzero(~positive & (q > 0))
    if stray.size:
        if generator.f_prime_at_inf is not None:
            c = mu_b + lam_b * generator.f_prime_at_inf  # sup_r min(r, q) - c r = q (1 - c)_+ for c >= 0
            if not c >= 0:
                return math.inf, "tokens with p = 0 < q make the dual unbounded at these multipliers"
            total += arb(_fsum_enclosure(q[stray])[1]) * max(arb(1) - c, arb(0))
        # f'(inf) = inf: such tokens can receive nothing, and contribute sup_r = 0.
    return upper(total), ""


def _choose_y(y_guess, mu):
    """y = w - mu as an exact point with w in [0, 1] proved, nearest to ``y_guess``.

    Choosing y rather than w keeps tiny values exact: with mu = 1 and y = -1e-297, w would
    round to 1 (where the dual is unbounded), while (1 - mu) - y is exact in balls.
    """
    arb = flint().arb
    low, high = (-mu).upper(), (arb(1) - mu).lower()  # exact points inside [-mu, 1 - mu]
    if low > high:
        return None
    y = y_guess.mid()
    return low if y < low else (high if y > high else y)


def _tv_term(p: float, q: float, lam, mu):
    """(1 - w) q + p lam f*(y / lam) for tv, with f*(s) = max(s, -1/2) on s <= 1/2, at a good y = w - mu."""
    arb = flint().arb
    half = lam / 2
    y = _choose_y(half if q > p else (-half if q < p else arb(0)), mu)
    if y is None or not y <= half:  # the conjugate's domain, with certainty
        return None
    return (arb(1) - mu - y) * arb(q) + arb(p) * max(y, -half)


#: Where the sup of a token with a huge ratio cannot be bracketed at the working precision
#: (y = lam f'(r / p) within 1e-149 of lam f'(inf), say), it is retried at this precision,
#: at its ratio and then at a ratio capped at CAPPED_RATIO (any y gives a valid bound).
RETRY_PRECISION, CAPPED_RATIO = 1100, 2.0 ** 100


def _token_term(generator, p: float, q: float, r: float, lam_b, mu_b):
    """(1 - w) q + p sup_t [y t - lam f(t)] with y = w - mu, rigorously bounded above; None if no bracket is proved.

    y is chosen so that the sup sits at the result's ratio r / p (y = lam f'(r / p)), or
    near t = 0 when r = 0.
    """
    arb = flint().arb
    if r > 0:
        ratio = arb(r) / arb(p)
        term = _bracketed_term(generator, q, p, ratio.mid(), lam_b, mu_b)
        if term is not None:
            return term
        with precision(RETRY_PRECISION):
            for guess in (ratio.mid(), min(ratio.mid(), arb(CAPPED_RATIO))):
                term = _bracketed_term(generator, q, p, guess, lam_b, mu_b)
                if term is not None:
                    return term
    y = _choose_y(-mu_b, mu_b)  # w = 0: the sup at (or next to) t = 0
    bound = None if y is None else _sup_near_zero(generator, y, lam_b)
    return None if bound is None else (arb(1) - mu_b - y) * arb(q) + arb(p) * bound


def _bracketed_term(generator, q: float, p: float, guess, lam_b, mu_b):
    """The token's bound with y = lam f'(guess) (kept inside w in [0, 1]), the sup bracketed
    around ``guess`` or, where clipping y moved it, around the root of lam f'(t) = y."""
    arb = flint().arb
    y = _choose_y(lam_b * generator.f_prime(guess), mu_b)
    if y is None:
        return None
    bound = _sup_bound(generator, y, lam_b, guess)
    if bound is None:
        root = _slope_root(generator, y, lam_b)
        bound = None if root is None else _sup_bound(generator, y, lam_b, root)
    return None if bound is None else (arb(1) - mu_b - y) * arb(q) + arb(p) * bound


def _slope_root(generator, y, lam, steps: int = 120):
    """A point near the t > 0 where lam f'(t) = y, by bisection on log2 t in [-1000, 1000]; None if outside."""
    arb = flint().arb
    low, high = -1000.0, 1000.0
    if not y - lam * generator.f_prime(arb(2.0) ** low) > 0 or not y - lam * generator.f_prime(arb(2.0) ** high) < 0:
        return None
    for _ in range(steps):
        middle = (low + high) / 2
        if y - lam * generator.f_prime(arb(2.0) ** middle) > 0:
            low = middle
        else:
            high = middle
    return (arb(2.0) ** ((low + high) / 2)).mid()


def _sup_bound(generator, y, lam, guess):
    """An upper bound on sup_{t >= 0} psi(t), psi = y t - lam f(t) concave, from a bracket around ``guess``.

    If psi'(t1) >= 0 >= psi'(t2) are proved, the sup lies in [t1, t2] and is at most
    psi(t1) + psi'(t1) (t2 - t1) (the tangent at t1). None if the signs are not proved.
    """
    arb = flint().arb
    for width in (BRACKET, BRACKET * 2.0 ** 16, BRACKET * 2.0 ** 32):
        t1, t2 = guess * arb(1 - width), guess * arb(1 + width)
        slope1, slope2 = y - lam * generator.f_prime(t1), y - lam * generator.f_prime(t2)
        if slope1 >= 0 and slope2 <= 0:
            return y * t1 - lam * generator.f(t1) + slope1 * (t2 - t1)
    return None


def _sup_near_zero(generator, y, lam):
    """sup_{t >= 0} psi(t) when it is at (or next to) t = 0: psi'(t2) <= 0 proved at a tiny t2."""
    arb = flint().arb
    t2 = arb(2.0 ** -200)
    slope2 = y - lam * generator.f_prime(t2)
    if not slope2 <= 0:
        return None
    return y * t2 - lam * generator.f(t2) - slope2 * t2
