"""Where and when a measurement was made: machine, date, commit."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

import numpy as np


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        )
        # The report's own outputs do not make the code dirty.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(exclude,top)reports"],
                               capture_output=True, text=True, cwd=Path(__file__).resolve().parent).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, {numpy_build()}")


def numpy_build() -> str:
    """numpy's version and the widest SIMD extension its kernels dispatch to here. The sort every
    speed ratio is taken against is one of those kernels, and its speed depends on the extension
    several-fold: an AMD EPYC (Zen 4) sorted 131072 float64 in 5.3 ms with AVX512_ICL and in
    1.0 ms with X86_V3 (``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"``), numpy 2.4.6."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # the layout of numpy's internals before 2.0
        return f"numpy {np.__version__}"
    found = [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]
    return f"numpy {np.__version__} ({found[-1] if found else 'baseline'} kernels)"


def stamp() -> dict[str, str]:
    return {
        "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
    }
