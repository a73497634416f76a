"""``md.mentor`` and ``md.verify`` on PyTorch tensors: the numba kernels on the CPU, the torch
backend elsewhere.

PyTorch is optional (``pip install "mdverify[torch]"``, which the test extra includes); this
module imports it only when called. ``backend`` chooses the implementation:

- ``"auto"`` (default): the numba kernels for CPU tensors, ``mdverify.torch_backend`` for
  tensors on any other device (no copy to the CPU, results on that device);
- ``"numba"``: the numba kernels (CPU tensors only: a silent device transfer would hide a copy
  in a decoder's hot loop);
- ``"torch"``: the torch backend on any device, the CPU included.

On the numba path, float32 and float64 tensors are read in place (contiguous ones without any
copy). A float16 or bfloat16 distribution cannot sum to 1 much better than its 8 or 11 bits
allow, so its rows are checked against ``HALF_SUM_TOLERANCE`` and then divided by their
float64 sums into float32 (the dtype of the r that comes back). Results come back as tensors
that share memory with the arrays the kernels wrote.

Examples
--------
>>> import torch                                           # doctest: +SKIP
>>> from mdverify import torch_adapter as mdt              # doctest: +SKIP
>>> res = mdt.mentor(torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.2, 0.5, 0.3]), 0.1, "tv")  # doctest: +SKIP
>>> res.acceptance                                         # doctest: +SKIP
tensor(0.6000)
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from mdverify.api import MentorResult
from mdverify.api import mentor as _mentor
from mdverify.verification import verify as _verify

INSTALL_HINT = 'pip install "mdverify[torch]"'
#: How far a half-precision row's sum may stray from 1: a few units of the type's rounding
#: (2^-8 for bfloat16, 2^-11 for float16), which every entry carries relative to its size.
HALF_SUM_TOLERANCE = {"bfloat16": 2.0**-6, "float16": 2.0**-9}


def require_torch():
    """torch, or an ImportError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise ImportError(f"mdverify's PyTorch and transformers entry points need them: {INSTALL_HINT}") from None
    return torch


def _array(x, label: str, distribution: bool = False):
    """A numpy view of a CPU tensor; half-precision distributions renormalised into float32."""
    torch = require_torch()
    if not isinstance(x, torch.Tensor):
        return x
    if x.device.type != "cpu":
        raise ValueError(f"{label} is on {x.device}; mdverify's kernels run on the CPU, move it with .cpu()")
    x = x.detach()
    if x.dtype in (torch.float16, torch.bfloat16):
        tolerance = HALF_SUM_TOLERANCE[str(x.dtype).removeprefix("torch.")]
        x = x.to(torch.float64)
        if distribution:
            sums = x.sum(-1, keepdim=True)
            off = (sums - 1).abs() > tolerance
            if bool(off.any()):
                row = tuple(int(i) for i in off.nonzero()[0][:-1])
                where = f" row {row[0] if len(row) == 1 else row}" if row else ""
                raise ValueError(f"{label}{where} sums to {float(sums[off][0]):.6g}, not 1 (tolerance {tolerance:g} "
                                 "for the rounding of a half-precision distribution)")
            x = x / sums  # nan and negative entries pass through to md's own checks
        x = x.to(torch.float32)
    return x.numpy()


def _tensor(x):
    torch = require_torch()
    return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else torch.tensor(x)


BACKENDS = ("auto", "numba", "torch")


def backend_for(backend: str, *tensors) -> str:
    """"numba" or "torch": ``backend`` resolved for the devices of ``tensors`` (see the module)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends are: {', '.join(BACKENDS)}")
    torch = require_torch()
    off_cpu = any(isinstance(x, torch.Tensor) and x.device.type != "cpu" for x in tensors)
    if backend == "auto":
        return "torch" if off_cpu else "numba"
    return backend


def mentor(p, q, eps, divergence="kl", method: str = "auto", backend: str = "auto") -> MentorResult:
    """``md.mentor`` for tensors: the same arguments and fields, each field a tensor.

    ``method`` chooses the numba solver and is ignored by the torch backend (one algorithm).
    """
    if backend_for(backend, p, q) == "torch":
        from mdverify import torch_backend

        return torch_backend.mentor(p, q, eps, divergence)
    res = _mentor(_array(p, "p", True), _array(q, "q", True), _array(eps, "eps"), divergence, method)
    return MentorResult(**{f.name: _tensor(getattr(res, f.name)) for f in fields(res) if f.name != "certificate"})


def verify(target_probs, draft_probs, draft_token_ids, eps, divergence="kl", seed=None, uniforms=None,
           method: str = "auto", backend: str = "auto"):
    """``md.verify`` for tensors: (output_token_ids, num_accepted) as int64 tensors, on the
    inputs' device."""
    if backend_for(backend, target_probs, draft_probs) == "torch":
        from mdverify import torch_backend

        return torch_backend.verify(target_probs, draft_probs, draft_token_ids, eps, divergence, seed, uniforms)
    out, accepted = _verify(
        _array(target_probs, "target_probs", True), _array(draft_probs, "draft_probs", True),
        _array(draft_token_ids, "draft_token_ids"), _array(eps, "eps"), divergence, seed,
        _array(uniforms, "uniforms"), method,
    )
    return _tensor(out), _tensor(accepted)
