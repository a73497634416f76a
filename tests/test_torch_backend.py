"""mdverify.torch_backend: the same optima and the same chains as the numba core, run here on
the CPU with ``backend="torch"`` (the code path of every other device)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import chisquare

import mdverify as md
from mdverify.workloads.instances import edge_rows, families
from mdverify.workloads.synthetic import llm_rows

torch = pytest.importorskip("torch")
from mdverify import torch_adapter as mdt  # noqa: E402
from mdverify import torch_backend  # noqa: E402
from mdverify.torch_backend import _tgen  # noqa: E402

BUDGETS = [0.0, 1e-4, 0.01, 0.1, 1.0, 10.0, np.inf]
FAMILIES = families(300, 3, seed=11)
EDGES = edge_rows()


def both(p, q, eps, divergence):
    """(numba result, torch backend result as numpy) for one batch."""
    ref = md.mentor(p, q, eps, divergence)
    res = mdt.mentor(torch.from_numpy(p), torch.from_numpy(q), eps, divergence, backend="torch")
    return ref, {name: value.numpy() for name, value in vars(res).items() if value is not None}


def at_every_budget(p, q):
    """The rows repeated once per budget of BUDGETS, and the budget of each copy."""
    p, q = np.atleast_2d(p), np.atleast_2d(q)
    return np.tile(p, (len(BUDGETS), 1)), np.tile(q, (len(BUDGETS), 1)), np.repeat(BUDGETS, p.shape[0])


@pytest.mark.parametrize("label", [label for label, _, _ in FAMILIES])
def test_every_family_divergence_and_budget_matches_the_numba_core(label, entry):
    _, p, q = next(row for row in FAMILIES if row[0] == label)
    tolerance = 1e-5 if p.dtype == np.float32 else 1e-12
    p, q, eps = at_every_budget(p, q)
    ref, res = both(p, q, eps, entry)
    assert res["r"].dtype == p.dtype
    np.testing.assert_allclose(res["acceptance"], ref.acceptance, rtol=0, atol=tolerance)
    np.testing.assert_allclose(res["r"], ref.r, rtol=0, atol=tolerance)
    assert (res["divergence_value"] <= eps * (1 + 1e-12) + 1e-15).all()
    binding = (ref.lam > 1e-6) & (ref.lam < 1e6) & np.isfinite(eps) & (eps > 0)
    np.testing.assert_allclose(res["lam"][binding], ref.lam[binding], rtol=1e-6)


@pytest.mark.parametrize("label, p, q", EDGES, ids=[row[0] for row in EDGES])
def test_edge_rows_match_the_numba_core(label, p, q, entry):
    ref, res = both(*at_every_budget(p, q), entry)
    np.testing.assert_allclose(res["acceptance"], ref.acceptance, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res["r"], ref.r, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res["r"].sum(-1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype, p, q", [(np.float64, [1, 7.04e-111, 1.60e-179], [9.49e-240, 1, 0]),
                                         (np.float32, [1, 1e-36, 1e-40], [1e-10, 1, 0])])
def test_a_lifted_token_never_underflows_to_zero(dtype, p, q):
    # r = a p underflows in the returned dtype, and f~(0) = inf for jeffreys
    p, q = np.array(p, dtype), np.array(q, dtype)
    _, res = both(p / p.sum(), q / q.sum(), 1000.0, "jeffreys")
    assert res["r"][2] > 0 and res["acceptance"] > 1 - 1e-6 and np.isfinite(res["divergence_value"])


def test_a_user_generator_runs_on_its_own_generated_torch_module():
    entry = md.divergence("(t-1)*log(t)")  # admitted once per process: other tests use it too
    assert entry.torch_generated is not None and entry.torch_generated != entry.generated
    p, q = llm_rows(400, 4, seed=5)
    ref, res = both(*at_every_budget(p, q), entry)
    np.testing.assert_allclose(res["acceptance"], ref.acceptance, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res["r"], ref.r, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", range(len(_tgen.KINDS)))
def test_generated_tensor_functions_agree_with_the_kernels(kind):
    """f~ and f~' of ``_tgen`` against ``_fgen`` at ratios from 0 to the float maximum, both
    evaluated from the same forms (masked and unmasked evaluation alike)."""
    from mdverify.core import _fgen

    t = np.concatenate([[0.0, 1e-300, 1e-30, 0.3, 0.95, 0.9999999, 1.0, 1.0000001, 1.05, 2.0, 1e30, 1e300],
                        np.geomspace(1e-12, 1e12, 5000)])
    for param in ((0.3, -1.0, 2.5) if _tgen.KINDS[kind] == "alpha" else (0.0,)):
        for name in ("f_tilde", "f_tilde_prime"):
            kernel = getattr(_fgen, name)
            expected = np.array([kernel(kind, param, x) for x in t])
            for x in (t, t[:100]):  # above and below MASKED_FROM
                got = getattr(_tgen, name)(kind, param, torch.from_numpy(x)).numpy()
                want = expected[: x.size]
                np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300, equal_nan=True,
                                           err_msg=f"{_tgen.KINDS[kind]} {name} a={param}")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("divergence", ["kl", "tv", "hellinger", "reverse_kl"])
def test_verify_emits_the_tokens_of_md_verify(dtype, divergence):
    rows, k, n = 16, 4, 400
    p, q = llm_rows(n, rows * (k + 1), seed=8, dtype=dtype)
    target, draft = p.reshape(rows, k + 1, n), q.reshape(rows, k + 1, n)[:, :k].copy()
    rng = np.random.default_rng(2)
    weights = draft.astype(np.float64)
    ids = np.array([[rng.choice(n, p=weights[b, j] / weights[b, j].sum()) for j in range(k)] for b in range(rows)])
    ids[0, 2:] = -1
    ids[1, 0:] = -1
    uniforms = rng.random((rows, k + 1, 2))
    for eps in (0.0, 0.05, np.linspace(0, 1, rows), np.inf):
        ref_out, ref_accepted = md.verify(target, draft, ids, eps, divergence, uniforms=uniforms)
        out, accepted = mdt.verify(torch.from_numpy(target), torch.from_numpy(draft), torch.from_numpy(ids), eps,
                                   divergence, uniforms=uniforms, backend="torch")
        np.testing.assert_array_equal(out.numpy(), ref_out)
        np.testing.assert_array_equal(accepted.numpy(), ref_accepted)


def test_verified_tokens_follow_r():
    """Chi-square at a fixed seed: the first emitted token of many copies of one chain is
    distributed as r_0, and not as p_0 (power)."""
    draws, n, eps = 20000, 10, 0.2
    p, q = llm_rows(n, 2, seed=4)
    r = md.mentor(p[0], q[0], eps, "kl").r
    rng = np.random.default_rng(9)
    target = np.broadcast_to(p, (draws, 2, n))
    draft = np.broadcast_to(q[:1], (draws, 1, n))
    ids = rng.choice(n, size=(draws, 1), p=q[0])
    out, _ = torch_backend.verify(torch.from_numpy(target.copy()), torch.from_numpy(draft.copy()),
                                  torch.from_numpy(ids), eps, "kl", seed=10)
    counts = np.bincount(out[:, 0].numpy(), minlength=n)
    assert chisquare(counts, r * draws).pvalue > 1e-3
    assert chisquare(counts, p[0] * draws).pvalue < 1e-6


def _row(draw_, n):
    weights = draw_(st.lists(st.sampled_from([0.0, 1e-300, 1e-30, 1e-6, 0.01, 0.3, 1.0, 2.0]), min_size=n, max_size=n))
    weights[draw_(st.integers(0, n - 1))] = 1.0
    return np.array(weights) / np.sum(weights)


@st.composite
def pairs(draw_):
    n = draw_(st.integers(1, 12))
    return _row(draw_, n), _row(draw_, n)


@given(pairs(), st.sampled_from([0.0, 1e-9, 1e-3, 0.05, 0.7, 5.0, np.inf]),
       st.sampled_from(["tv", "kl", "reverse_kl", "pearson", "hellinger", "jensen_shannon"]))
def test_fuzz_the_torch_backend_against_the_numba_core(pair, eps, divergence):
    p, q = pair
    ref, res = both(p, q, eps, divergence)
    assert np.isfinite(res["acceptance"]) and np.isfinite(res["r"]).all()
    np.testing.assert_allclose(res["acceptance"], ref.acceptance, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res["r"], ref.r, rtol=0, atol=1e-12)


@pytest.mark.parametrize("change, message", [
    (lambda p, q: (p * torch.tensor([[1.0], [1.1]], dtype=p.dtype), q), r"p row 1 sums to 1\.1"),
    (lambda p, q: (p, torch.where(q == q.max(), -q, q)), "q row 0 has a negative entry"),
    (lambda p, q: (p.clone().fill_(float("nan")), q), "p row 0 has a non-finite entry"),
    (lambda p, q: (p[:, :5] / p[:, :5].sum(-1, keepdim=True), q), "must have the same shape"),
    (lambda p, q: (p.half(), q), "float32 or float64"),
])
def test_bad_input_is_refused_by_name(change, message):
    p, q = (torch.from_numpy(x) for x in llm_rows(50, 2, seed=1))
    with pytest.raises(ValueError, match=message):
        torch_backend.mentor(*change(p, q), 0.1)
    with pytest.raises(ValueError, match="eps row 1 is -1.0"):
        torch_backend.mentor(p, q, torch.tensor([0.1, -1.0]))


def test_auto_chooses_numba_on_the_cpu_and_torch_elsewhere():
    assert mdt.backend_for("auto", torch.zeros(2)) == "numba"
    assert mdt.backend_for("auto", torch.zeros(2, device="meta")) == "torch"
    assert mdt.backend_for("torch", torch.zeros(2)) == "torch"
    with pytest.raises(ValueError, match="unknown backend"):
        mdt.backend_for("cuda")
