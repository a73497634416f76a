"""``md.mentor`` and ``md.verify`` on PyTorch CPU tensors, zero-copy through numpy.

PyTorch is optional and never installed by mdverify (a CUDA build is several GB); this
module imports it only when called. Tensors must live on the CPU: the kernels are numba
CPU code, and a silent device transfer would hide a copy in a decoder's hot loop.
float32 and float64 tensors are read in place (contiguous ones without any copy); float16
and bfloat16 are upcast to float32 once, since numpy cannot read bfloat16. Results come back
as tensors that share memory with the arrays the kernels wrote.

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

INSTALL_HINT = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError(f"mdverify.torch_adapter needs PyTorch, which mdverify does not install; for the CPU build: {INSTALL_HINT}") from None
    return torch


def _array(x, label: str):
    """A numpy view of a CPU tensor (float16/bfloat16 upcast to float32); other inputs as they are."""
    torch = _torch()
    if not isinstance(x, torch.Tensor):
        return x
    if x.device.type != "cpu":
        raise ValueError(f"{label} is on {x.device}; mdverify's kernels run on the CPU, move it with .cpu()")
    x = x.detach()
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.to(torch.float32)
    return x.numpy()


def _tensor(x):
    torch = _torch()
    return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else torch.tensor(x)


def mentor(p, q, eps, divergence="kl", method: str = "auto") -> MentorResult:
    """``md.mentor`` for tensors: the same arguments and fields, each field a tensor."""
    res = _mentor(_array(p, "p"), _array(q, "q"), _array(eps, "eps"), divergence, method)
    return MentorResult(**{f.name: _tensor(getattr(res, f.name)) for f in fields(res)})


def verify(target_probs, draft_probs, draft_token_ids, eps, divergence="kl", seed=None, uniforms=None,
           method: str = "auto"):
    """``md.verify`` for tensors: (output_token_ids, num_accepted) as int64 tensors."""
    out, accepted = _verify(
        _array(target_probs, "target_probs"), _array(draft_probs, "draft_probs"),
        _array(draft_token_ids, "draft_token_ids"), _array(eps, "eps"), divergence, seed,
        _array(uniforms, "uniforms"), method,
    )
    return _tensor(out), _tensor(accepted)
