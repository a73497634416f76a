"""Inputs of the torch backend, checked where they live: one fused pass on the device, and the
numpy checks of ``mdverify.validate`` (which name the row and the problem) only when it fails."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from mdverify.divergences import Divergence
from mdverify.torch_backend.solve import Generator
from mdverify.validate import SUM_TOLERANCE, as_distributions, check_ratios

DTYPES = (torch.float32, torch.float64)


def generator(entry: Divergence) -> Generator:
    """The tensor functions of ``entry``: ``_tgen`` for registered divergences, else the user
    generator's own generated module."""
    if entry.generated is None:
        from mdverify.torch_backend import _tgen

        return Generator(_tgen, entry.kind, entry.param)
    if entry.torch_generated is None:
        raise ValueError(f"the divergence {entry.name!r} has no generated torch functions; admit it again with "
                         "md.divergence(text)")
    return Generator(_user_module(entry.torch_generated), entry.kind, entry.param)


@lru_cache(maxsize=None)
def _user_module(path: str):
    from mdverify.core.generated import load

    return load(path)


def distributions(x, label: str) -> torch.Tensor:
    """``x`` as a float32 or float64 tensor of shape (..., n) whose rows are distributions."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(as_distributions(x, label))
    if x.dtype not in DTYPES:
        raise ValueError(f"{label} has dtype {x.dtype}; the torch backend takes float32 or float64 "
                         "(convert with .float(), or use backend='numba' on the CPU, which renormalises half precision)")
    if x.ndim == 0 or x.shape[-1] == 0:
        as_distributions(x.detach().cpu().numpy(), label)  # names the shape problem
    x = x.detach()
    rows = x.reshape(-1, x.shape[-1])
    tolerance = SUM_TOLERANCE[np.dtype(str(x.dtype).removeprefix("torch."))]
    sums = rows.sum(-1, dtype=torch.float64)
    if not bool(((rows.amin(-1) >= 0) & ((sums - 1.0).abs() <= tolerance)).all()):
        as_distributions(x.cpu().numpy(), label)  # raises, naming the row
        raise ValueError(f"{label} is not a batch of distributions")  # unreachable unless the checks disagree
    return x


def pair(p, q, labels: tuple[str, str] = ("p", "q")) -> tuple[torch.Tensor, torch.Tensor]:
    """Two checked distributions of one shape, dtype and device, whose ratios q/p never overflow."""
    p, q = distributions(p, labels[0]), distributions(q, labels[1])
    if p.shape != q.shape:
        raise ValueError(f"{labels[0]} and {labels[1]} must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    if p.device != q.device:
        raise ValueError(f"{labels[0]} is on {p.device} and {labels[1]} on {q.device}; put both on one device")
    dtype = torch.promote_types(p.dtype, q.dtype)
    p, q = p.to(dtype), q.to(dtype)
    ratios(p, q, labels)
    return p, q


def ratios(p: torch.Tensor, q: torch.Tensor, labels: tuple[str, str]) -> None:
    """Refuse tokens whose ratio q/p overflows although p > 0 (``validate.check_ratios``)."""
    tiny = (p > 0) & (p < np.finfo(np.float64).tiny)
    if bool((tiny & torch.isinf(q.double() / p.double())).any()):
        check_ratios(p.cpu().numpy(), q.cpu().numpy(), labels)


def host(x):
    """A tensor argument as numpy on the CPU (budgets, ids and uniforms are small), else as given."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def on(device, array: np.ndarray, dtype=torch.float64) -> torch.Tensor:
    """A small host array (budgets, ids, uniforms) copied onto ``device``."""
    return torch.tensor(array, dtype=dtype, device=device)

