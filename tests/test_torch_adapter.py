"""The PyTorch adapter: optional, CPU-only, and the same numbers as the numpy API."""

import sys

import numpy as np
import pytest

import mdverify as md
from mdverify.workloads import llm_rows


def test_without_torch_the_adapter_says_how_to_install_it(monkeypatch):
    from mdverify import torch_adapter

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "mdverify\[torch\]"'):
        torch_adapter.mentor(np.array([0.5, 0.5]), np.array([0.2, 0.8]), 0.1)


def test_default_install_does_not_need_torch():
    import subprocess

    code = "import sys, mdverify, mdverify.torch_adapter; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_tensors_give_the_numpy_results():
    torch = pytest.importorskip("torch")
    from mdverify import torch_adapter as mdt

    p, q = llm_rows(700, 4, seed=41, truncate="both")
    for dtype in (torch.float64, torch.float32):
        P, Q = torch.from_numpy(p).to(dtype), torch.from_numpy(q).to(dtype)
        res = mdt.mentor(P, Q, torch.tensor([0.0, 0.01, 0.1, 1.0], dtype=torch.float64), "kl")
        ref = md.mentor(P.numpy(), Q.numpy(), [0.0, 0.01, 0.1, 1.0], "kl")
        assert res.r.dtype == dtype and isinstance(res.acceptance, torch.Tensor)
        np.testing.assert_array_equal(res.r.numpy(), ref.r)
        np.testing.assert_array_equal(res.acceptance.numpy(), ref.acceptance)
    half = mdt.mentor(torch.from_numpy(p).to(torch.bfloat16), torch.from_numpy(q).to(torch.bfloat16), 0.1)
    assert half.r.dtype == torch.float32
    one = mdt.mentor(torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64), torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64), 0.1, "tv")
    assert one.acceptance.item() == pytest.approx(0.6, abs=1e-12)


def test_tensor_verify_matches_numpy_and_refuses_other_devices():
    torch = pytest.importorskip("torch")
    from mdverify import torch_adapter as mdt

    p, q = llm_rows(300, 6, seed=42)
    target, draft = p.reshape(2, 3, -1), q[:4].reshape(2, 2, -1)
    tokens = np.array([[3, 7], [1, -1]])
    out, accepted = mdt.verify(torch.from_numpy(target), torch.from_numpy(draft), torch.from_numpy(tokens), 0.05, seed=5)
    ref_out, ref_accepted = md.verify(target, draft, tokens, 0.05, seed=5)
    np.testing.assert_array_equal(out.numpy(), ref_out)
    np.testing.assert_array_equal(accepted.numpy(), ref_accepted)
    with pytest.raises(ValueError, match="move it with .cpu"):
        mdt.mentor(torch.empty(3, device="meta"), torch.empty(3, device="meta"), 0.1, backend="numba")
    with pytest.raises(ValueError, match="unknown backend 'jax'"):
        mdt.mentor(torch.from_numpy(p[0]), torch.from_numpy(q[0]), 0.1, backend="jax")


def test_half_precision_rows_are_checked_then_renormalised():
    torch = pytest.importorskip("torch")
    from mdverify import torch_adapter as mdt

    q = torch.tensor([[0.2, 0.5, 0.3], [0.2, 0.5, 0.3]], dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"p row 1 sums to 0\.9"):
        mdt.mentor(torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.3, 0.1]], dtype=torch.bfloat16), q, 0.1)
    p = torch.tensor([[0.7, 0.2, 0.1]], dtype=torch.float16)
    res = mdt.mentor(p, q[:1].to(torch.float16), 0.1, "tv")
    rows = p.double() / p.double().sum(-1, keepdim=True)
    ref = md.mentor(rows.float().numpy(), (q[:1].double() / q[:1].double().sum()).float().numpy(), 0.1, "tv")
    np.testing.assert_array_equal(res.r.numpy(), ref.r)
