"""The ``mdverify`` command line: ``report``, ``bench`` and ``solve``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _load(path: str, label: str) -> np.ndarray:
    file = Path(path)
    if not file.exists():
        raise SystemExit(f"mdverify: {label} file {path} does not exist")
    try:
        if file.suffix == ".npy":
            return np.load(file, allow_pickle=False)
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as archive:
                if len(archive.files) != 1:
                    raise SystemExit(f"mdverify: {label} file {path} must hold exactly one array, has {archive.files}")
                return archive[archive.files[0]]
        return np.loadtxt(file, ndmin=1)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"mdverify: cannot read {label} file {path}: {exc}") from None


def _solve(args) -> int:
    import mdverify as md

    p = _load(args.target, "target")
    q = _load(args.draft, "draft")
    try:
        entry = md.alpha(float(args.divergence[6:-1])) if args.divergence.startswith("alpha(") else args.divergence
        res = md.mentor(p, q, args.eps, entry)
    except ValueError as exc:
        raise SystemExit(f"mdverify: {exc}") from None
    np.set_printoptions(precision=12)
    for field in ("acceptance", "moved_mass", "a", "b", "lam", "mu", "divergence_value"):
        print(f"{field:>16}: {getattr(res, field)}")
    if args.out:
        np.save(args.out, res.r)
        print(f"{'r':>16}: written to {args.out}")
    else:
        print(f"{'r':>16}: {res.r}")
    return 0


def _report(args) -> int:
    from mdverify.report import build_report

    path = build_report(args.out, quick=args.quick)
    print(f"wrote {path}")
    return 0


def _bench(args) -> int:
    from mdverify.bench.run import run
    from mdverify.report.build import SCALING_TITLE, replace_section

    _, text = run(args.out, quick=args.quick)
    print(f"wrote {Path(args.out) / 'bench.md'}, bench.json and scaling.png")
    report = Path(args.out) / "REPORT.md"
    if report.exists():
        replace_section(report, SCALING_TITLE, text)
        print(f"rewrote the scaling section of {report}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mdverify", description="Mentored decoding: solve, verify, report.")
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", help="run the verification measurements and write REPORT.md with plots")
    report.add_argument("--quick", action="store_true", help="smaller instances (a few minutes on 2 cores)")
    report.add_argument("--out", default="reports", help="output folder (default: reports)")
    report.set_defaults(run=_report)

    bench = commands.add_parser("bench", help="run the benchmarks; rewrite the report's scaling section")
    bench.add_argument("--quick", action="store_true", help="n up to 2^17 and small batches (under a minute)")
    bench.add_argument("--out", default="reports", help="output folder (default: reports)")
    bench.set_defaults(run=_bench)

    solve = commands.add_parser("solve", help="the optimal mentored distribution of target/draft rows")
    solve.add_argument("--target", required=True, help="target probabilities p (.npy, .npz or text), shape (..., n)")
    solve.add_argument("--draft", required=True, help="drafter probabilities q, same shape")
    solve.add_argument("--eps", required=True, type=float, help="budget, >= 0")
    solve.add_argument("--divergence", default="kl",
                       help="registry name, alpha(a), or a generator in t such as '(t-1)*log(t)' (default: kl)")
    solve.add_argument("--out", help="write r here (.npy) instead of printing it")
    solve.set_defaults(run=_solve)

    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
