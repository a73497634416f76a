"""Report section: the torch backend, its agreement with the numba core and its speed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import mdverify as md
from mdverify.report.sections import _table
from mdverify.workloads import divergence_suite
from mdverify.workloads.instances import families

#: The device run's JSON (``python -m mdverify.bench.torch_backend --device cuda ... --out``),
#: committed beside the report when a GPU was lent; the section shows it when present.
GPU_RESULT = "torch_gpu.json"
GPU_COMMAND = "python -m mdverify.bench.torch_backend --device cuda --rows 40 320 1280 --out reports/torch_gpu.json"
BUDGETS = (0.0, 1e-3, 0.1, 1.0, 10.0, np.inf)


def agreement(n: int, rows: int, seed: int) -> list[list[str]]:
    """Per divergence, the largest differences in acceptance and r between the torch backend
    (on the CPU) and the numba core, over the families of ``workloads.instances`` and BUDGETS."""
    import torch

    from mdverify import torch_backend

    batches = families(n, rows, seed)
    out = []
    for entry in divergence_suite():
        worst = {"float64": [0.0, 0.0], "float32": [0.0, 0.0]}
        for _, p, q in batches:  # every budget at once: the rows repeated, one budget per copy
            p, q = np.tile(p, (len(BUDGETS), 1)), np.tile(q, (len(BUDGETS), 1))
            eps = np.repeat(BUDGETS, rows)
            ref = md.mentor(p, q, eps, entry)
            res = torch_backend.mentor(torch.from_numpy(p), torch.from_numpy(q), eps, entry)
            cell = worst["float32" if p.dtype == np.float32 else "float64"]
            cell[0] = max(cell[0], float(np.abs(res.acceptance.numpy() - ref.acceptance).max()))
            cell[1] = max(cell[1], float(np.abs(res.r.numpy().astype(np.float64) - ref.r).max()))
        out.append([entry.name] + [f"{value:.1e}" for key in ("float64", "float32") for value in worst[key]])
    return out


def torch_backend_section(out_dir: Path, quick: bool, rng) -> str:
    try:
        import torch  # noqa: F401
    except ImportError:
        return 'Not measured: this run had no PyTorch (`pip install "mdverify[torch]"`).'
    from mdverify.bench.torch_backend import markdown, measure

    n, rows = (500, 2) if quick else (2000, 4)
    table = agreement(n, rows, seed=int(rng.integers(1 << 31)))
    cpu = measure("cpu", (8,) if quick else (8, 40))
    gpu_path = Path(out_dir) / GPU_RESULT
    if gpu_path.exists():
        gpu = ("On a GPU (the committed result of the prepared device run, `" + GPU_COMMAND + "`):\n\n"
               + markdown(json.loads(gpu_path.read_text())))
    else:
        gpu = ("**No GPU figures.** No GPU was lent to the runs that produced this report, so the backend was "
               "never timed on one; the prepared run is `" + GPU_COMMAND + "` (B (k + 1) in {40, 320, 1280} rows "
               "of n = 131072 float32: the backend, `torch.sort` of the same rows, the peer in torch and one "
               "softmax), and its JSON, committed as `reports/" + GPU_RESULT + "`, is shown here when present.")
    return (
        "`mdverify.torch_backend` solves the same problem as batched tensor programs on any device: one "
        "`torch.sort` per row builds the C5 index, prefix sums give the frontier, a batched binary search over the "
        "breakpoints finds the budget's segment and vectorised safeguarded Newton steps solve it; the per-divergence "
        "tensor functions are printed from the same sympy forms as the numba kernels (`torch_backend/_tgen.py`, "
        "drift-checked). `torch_adapter` and `mdverify.hf` use it for tensors off the CPU.\n\n"
        f"Agreement with the numba core, run here on the CPU (`backend=\"torch\"`): the largest absolute differences "
        "in acceptance (dA) and in any entry of r (dr) over the "
        f"8 row families of `workloads.instances` ({rows} rows of n = {n} each; float32 is one of them) and eps in "
        f"{{{', '.join(f'{b:g}' for b in BUDGETS)}}}. float32 r is compared as returned (both pull rows that "
        "rounding took over the budget back towards p).\n\n"
        + _table(["divergence", "largest dA, float64", "largest dr, float64", "largest dA, float32", "largest dr, float32"],
                 table)
        + "\n\nSpeed on this machine's CPU (where the numba core is the faster path; `auto` keeps CPU tensors "
        "on it):\n\n" + markdown(cpu) + "\n\n" + gpu
    )
