"""Timings of the torch backend beside the floor of its design, the peer and a softmax.

``python -m mdverify.bench.torch_backend --device cuda --rows 40 320 1280 --out gpu.json``
is the prepared device run of the torch backend's issue: for each batch of B (k + 1) rows of
n = 131072 float32 probabilities on one device, in one process, each the best of a few
synchronised repeats:

- ``torch backend``: ``mdverify.torch_backend.mentor`` of the rows (kl, eps 0.05), float64
  accumulation, validation included;
- ``torch.sort``: one sort of the rows' ratios, the floor of a sorted-index design;
- ``peer``: the peer algorithm (``bench.peer``) as a batched torch program on the same device:
  a sort of the ratios, then bisection steps on alpha (at most 10), each a full pass;
- ``softmax``: one softmax over logits of the same shape, what the decoder does anyway;
- ``numba`` (CPU only): ``md.mentor`` of the same rows with the numba kernels.

Ratios in the output divide the torch backend's time by each baseline's, measured side by
side. Run on the CPU (the default), it gives the CPU comparison the report shows.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
from tqdm import tqdm

from mdverify.bench.environment import stamp

N = 131072
EPS = 0.05
DIVERGENCE = "kl"


def _timed(fn, synchronize, repeat: int = 3) -> float:
    fn()
    synchronize()
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def peer(P, Q, eps: float, max_steps: int = 10, tolerance: float = 0.1):
    """The peer's search (``bench.peer.peer_sampler``) for every row at once: alpha per row,
    stopping once every row's sum p log(p / min(p / alpha, q)) is within ``tolerance`` of eps."""
    import torch

    torch.sort(P / Q, -1)  # the peer sorts the ratios first; kept for a faithful cost
    rows = P.shape[0]
    lo, hi = torch.zeros(rows, 1, device=P.device, dtype=P.dtype), torch.ones(rows, 1, device=P.device, dtype=P.dtype)
    open_ = torch.ones(rows, 1, dtype=torch.bool, device=P.device)
    alpha = hi.clone()
    for _ in range(max_steps):
        alpha = torch.where(open_, 0.5 * (lo + hi), alpha)
        s = torch.minimum(P / alpha, Q)
        value = torch.where(P > 0, P * torch.log(P / s), 0.0).sum(-1, keepdim=True)
        open_ = open_ & ((value - eps).abs() > tolerance * eps)
        if not bool(open_.any()):
            break
        hi = torch.where(open_ & (value > eps), alpha, hi)
        lo = torch.where(open_ & (value <= eps), alpha, lo)
    return alpha


def measure(device: str = "cpu", rows_list=(40,), n: int = N, seed: int = 0) -> dict:
    """Seconds and ratios for each batch size of ``rows_list`` on ``device`` (see the module)."""
    import torch

    import mdverify as md
    from mdverify import torch_backend
    from mdverify.workloads import llm_rows

    dev = torch.device(device)
    synchronize = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    results = []
    for rows in tqdm(rows_list, desc=f"torch backend on {device}", unit="batch", leave=False):
        p, q = llm_rows(n, rows, seed=seed, dtype=np.float32)
        P, Q = torch.from_numpy(p).to(dev), torch.from_numpy(q).to(dev)
        logits = torch.log(P.clamp(min=1e-30))
        calls = {
            "torch backend": lambda: torch_backend.mentor(P, Q, EPS, DIVERGENCE),
            "torch.sort": lambda: torch.sort(Q / P, -1),
            "peer": lambda: peer(P, Q, EPS),
            "softmax": lambda: torch.softmax(logits, -1),
        }
        if dev.type == "cpu":
            calls["numba"] = lambda: md.mentor(p, q, EPS, DIVERGENCE)
        seconds = {name: _timed(fn, synchronize) for name, fn in calls.items()}
        results.append({"rows": rows, "n": n, "seconds": seconds,
                        "ratios": {name: seconds["torch backend"] / value for name, value in seconds.items()
                                   if name != "torch backend"}})
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    return {"device": f"{dev} ({name})", "dtype": "float32", "divergence": DIVERGENCE, "eps": EPS,
            "torch": torch.__version__, "results": results, **stamp()}


def markdown(result: dict) -> str:
    """A table of one ``measure`` result."""
    names = list(result["results"][0]["seconds"])
    baselines = [name for name in names if name != "torch backend"]
    lines = [f"Device: {result['device']}; torch {result['torch']}; {result['machine']}; {result['date']}, "
             f"commit {result['commit']}. Rows of n = {result['results'][0]['n']} float32, "
             f"{result['divergence']} at eps {result['eps']}; best of 3 synchronised repeats.", "",
             "| rows B (k + 1) | " + " | ".join(f"{name} (ms)" for name in names) + " | "
             + " | ".join(f"backend / {name}" for name in baselines) + " |",
             "|" + "---|" * (1 + len(names) + len(baselines))]
    for entry in result["results"]:
        lines.append(f"| {entry['rows']} | " + " | ".join(f"{1e3 * entry['seconds'][name]:.1f}" for name in names)
                     + " | " + " | ".join(f"{entry['ratios'][name]:.2f}x" for name in baselines) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, nargs="+", default=[40])
    parser.add_argument("--out", default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    result = measure(args.device, args.rows)
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
