"""The ``mdverify`` command line: ``report``, ``bench``, ``solve``, ``crosscheck`` and ``compile``.

A user error (a missing file, a bad row, an unwritable output) prints one line and exits
with status 2, before any long computation; it never ends in a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

#: Where ``report --quick`` and ``bench --quick`` write unless told: beside the committed full
#: report, never over it (ignored by git).
QUICK_OUT = "reports/quick"


class UsageError(Exception):
    """A mistake in the command's arguments or files, reported in one line."""


def _load(path: str, label: str) -> np.ndarray:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{label} file {path} does not exist")
    try:
        if file.suffix == ".npy":
            return np.load(file, allow_pickle=False)
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as archive:
                if len(archive.files) != 1:
                    raise UsageError(f"{label} file {path} must hold exactly one array, has {archive.files}")
                return archive[archive.files[0]]
        return np.loadtxt(file, ndmin=1)
    except (ValueError, OSError) as exc:
        raise UsageError(f"cannot read {label} file {path}: {exc}") from None


def _output_file(path: str) -> Path:
    """Where ``solve --out`` writes: a .npy file in an existing, writable folder."""
    file = Path(path)
    if file.is_dir() or path.endswith(os.sep) or file.name in ("", ".", ".."):
        raise UsageError(f"--out {path} is a folder; name a file such as {Path(path) / 'r.npy'}")
    if file.suffix != ".npy":
        file = file.with_name(file.name + ".npy")  # what np.save would write, said up front
    folder = file.parent
    if not folder.is_dir():
        raise UsageError(f"--out {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (file.exists() and not os.access(file, os.W_OK)):
        raise UsageError(f"--out {path}: {file} cannot be written")
    return file


def _output_folder(path: str) -> Path:
    """A folder that exists (created if need be) and can be written, checked before any work."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot create the folder ({exc.strerror})") from None
    if not os.access(folder, os.W_OK):
        raise UsageError(f"--out {path}: the folder cannot be written")
    return folder


def _solve(args) -> int:
    import mdverify as md

    p = _load(args.target, "target")
    q = _load(args.draft, "draft")
    out = _output_file(args.out) if args.out else None
    try:
        res = md.mentor(p, q, args.eps, md.divergence(args.divergence))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    np.set_printoptions(precision=12)
    for field in ("acceptance", "moved_mass", "a", "b", "lam", "mu", "divergence_value"):
        print(f"{field:>16}: {getattr(res, field)}")
    if out is not None:
        np.save(out, res.r)
        print(f"{'r':>16}: written to {out}")
    else:
        print(f"{'r':>16}: {res.r}")
    return 0


def _report(args) -> int:
    from mdverify.report import build_report

    folder = _output_folder(args.out or (QUICK_OUT if args.quick else "reports"))
    path = build_report(folder, quick=args.quick)
    print(f"wrote {path}")
    return 0


def _bench(args) -> int:
    from mdverify.bench.run import run
    from mdverify.report.build import SCALING_TITLE, replace_section

    folder = _output_folder(args.out or (QUICK_OUT if args.quick else "reports"))
    _, text = run(folder, quick=args.quick)
    report = folder / "REPORT.md"
    if report.exists():
        replace_section(report, SCALING_TITLE, text)
        print(f"rewrote the scaling section of {report}")
    print(f"wrote {folder / 'bench.md'}, bench.json and scaling.png")
    return 0


def _crosscheck(args) -> int:
    from tqdm import tqdm

    from mdverify.crosscheck import run

    if args.cases is None and args.minutes is None:
        args.cases = 1000
    if (args.cases is not None and args.cases < 1) or (args.minutes is not None and not args.minutes > 0):
        raise UsageError("--cases must be at least 1 and --minutes above 0")
    with tqdm(total=args.cases, unit="case", desc="select against sorted") as bar:
        result = run(args.seed, args.cases, args.minutes, bar)
    for failure in result["failures"]:
        print(f"{failure['case']}: " + "; ".join(failure["problems"]))
    print(f"{result['checked']} cases checked from seed {args.seed}, {len(result['failures'])} failing; "
          f"{result['refused']} refused by the API's checks")
    return 1 if result["failures"] else 0


def _compile(args) -> int:
    from mdverify.precompile import compile_kernels

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    for name, dtype, seconds in compile_kernels(args.jobs):
        print(f"{name:<28} {dtype:<8} {seconds:7.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mdverify", description="Mentored decoding: solve, verify, report.")
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", help="run the verification measurements and write REPORT.md with plots")
    report.add_argument("--quick", action="store_true",
                        help="smaller instances (about 2.5 minutes on 2 cores, once the kernels are compiled)")
    report.add_argument("--out", help=f"output folder (default: reports, or {QUICK_OUT} with --quick)")
    report.set_defaults(run=_report)

    bench = commands.add_parser("bench", help="run the benchmarks; rewrite the report's scaling section")
    bench.add_argument("--quick", action="store_true", help="n up to 2^17 and small batches (under a minute)")
    bench.add_argument("--out", help=f"output folder (default: reports, or {QUICK_OUT} with --quick)")
    bench.set_defaults(run=_bench)

    solve = commands.add_parser("solve", help="the optimal mentored distribution of target/draft rows")
    solve.add_argument("--target", required=True, help="target probabilities p (.npy, .npz or text), shape (..., n)")
    solve.add_argument("--draft", required=True, help="drafter probabilities q, same shape")
    solve.add_argument("--eps", required=True, type=float, help="budget, >= 0 (inf for none)")
    solve.add_argument("--divergence", default="kl",
                       help="registry name, alpha(a), or a generator in t such as '(t-1)*log(t)' (default: kl)")
    solve.add_argument("--out", help="write r here (.npy) instead of printing it")
    solve.set_defaults(run=_solve)

    crosscheck = commands.add_parser("crosscheck", help="method select against method sorted (and md.frontier, "
                                     "md.verify) on random rows; exit status 1 if they disagree anywhere")
    crosscheck.add_argument("--cases", type=int, help="cases to draw (default: 1000, unless --minutes is given)")
    crosscheck.add_argument("--minutes", type=float, help="stop after this long")
    crosscheck.add_argument("--seed", type=int, default=0, help="the first case's seed; case k has seed + k")
    crosscheck.set_defaults(run=_crosscheck)

    compile_ = commands.add_parser("compile", help="compile every kernel now, in parallel, into numba's cache on disk")
    compile_.add_argument("--jobs", type=int, help="processes at a time (default: every core)")
    compile_.set_defaults(run=_compile)

    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except UsageError as exc:
        print(f"mdverify: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
