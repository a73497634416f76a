"""Build reports/REPORT.md: every number in it is computed by the run that writes it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import mdverify as md
from mdverify.report import neural, sections
from mdverify.report.torch_backend import torch_backend_section
from mdverify.bench.environment import stamp

SCALING_TITLE = "Complexity scaling"
SECTIONS = (
    ("Optimality", sections.optimality),
    (SCALING_TITLE, sections.scaling),
    ("Acceptance-versus-budget frontiers", sections.frontiers),
    ("Beating the target", sections.beating_the_target),
    ("TV geometry", sections.tv_geometry),
    ("The reverse_kl truncation caveat", sections.truncation),
    ("Budgets by price", sections.prices),
    ("Decoders: one step of mdverify.hf.generate", sections.decoders),
    ("The torch backend: the same optimum on any device", torch_backend_section),
    ("A neural pair: faster, and better than the target?", neural.neural_pair),
    ("The divergence table, derived by sympy", sections.divergence_table),
)


def build_report(out_dir: str | Path = "reports", quick: bool = False) -> Path:
    """Run every section's measurements and write ``out_dir/REPORT.md`` plus PNG plots."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    info = stamp()  # before the run rewrites the committed plots, so the commit reads clean
    md.mentor([0.5, 0.5], [0.25, 0.75], 0.1)  # compile (or load) the kernels outside the timings
    bodies = []
    with tqdm(SECTIONS, desc="report", unit="section") as bar:
        for number, (title, section) in enumerate(bar, start=1):
            bar.set_postfix_str(title[:40])
            bodies.append(f"## {number}. {title}\n\n{section(out_dir, quick=quick, rng=np.random.default_rng(number))}")
    header = [
        "# mdverify verification report",
        "",
        f"Machine: {info['machine']}  ",
        f"Date: {info['date']}  ",
        f"Commit: {info['commit']}  ",
        f"Mode: {'quick' if quick else 'full'}; run time {time.perf_counter() - start:.0f} s",
        "",
        "Every figure below was measured by the run that wrote this file (`mdverify report"
        + (" --quick" if quick else "") + "`).",
        "",
    ]
    path = out_dir / "REPORT.md"
    path.write_text("\n".join(header) + "\n" + "\n\n".join(bodies) + "\n")
    return path


def replace_section(report: Path, title: str, body: str) -> None:
    """Rewrite the body of the numbered section ``title`` of an existing report in place."""
    text = report.read_text()
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("## ") and line.endswith(title)), None)
    if start is None:
        raise ValueError(f"{report} has no section {title!r}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    lines[start + 1:end] = ["", body, ""]
    report.write_text("\n".join(lines))
