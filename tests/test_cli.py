"""The command line: solve (npy, npz, text; clear errors) and report --quick."""

import numpy as np
import pytest

import mdverify as md
from mdverify.cli import main

P = np.array([0.7, 0.2, 0.1])
Q = np.array([0.2, 0.5, 0.3])


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".txt"])
def test_solve_reads_files_and_writes_r(tmp_path, capsys, suffix):
    def save(name, x):
        path = tmp_path / f"{name}{suffix}"
        {".npy": np.save, ".npz": np.savez, ".txt": np.savetxt}[suffix](path, x)
        return str(path)

    out = tmp_path / "r.npy"
    assert main(["solve", "--target", save("p", P), "--draft", save("q", Q), "--eps", "0.1", "--divergence", "hellinger", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    expected = md.mentor(P, Q, 0.1, "hellinger")
    assert f"acceptance: {expected.acceptance}" in printed
    np.testing.assert_array_equal(np.load(out), expected.r)


def test_solve_alpha_family(tmp_path, capsys):
    np.save(tmp_path / "p.npy", P)
    np.save(tmp_path / "q.npy", Q)
    main(["solve", "--target", str(tmp_path / "p.npy"), "--draft", str(tmp_path / "q.npy"), "--eps", "0.1", "--divergence", "alpha(0.3)"])
    assert f"acceptance: {md.mentor(P, Q, 0.1, md.alpha(0.3)).acceptance}" in capsys.readouterr().out


def fails(capsys, argv, message):
    """A user error: one line on stderr naming the problem, exit status 2, no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mdverify: ") and message in err, err


def test_solve_errors_are_clear(tmp_path, capsys):
    p_file, bad = tmp_path / "p.npy", tmp_path / "bad.npy"
    np.save(p_file, P)
    np.save(bad, np.array([0.5, 0.6, -0.1]))
    solve = ["solve", "--target", str(p_file), "--draft", str(p_file), "--eps", "0.1"]
    fails(capsys, ["solve", "--target", str(tmp_path / "missing.npy"), "--draft", "x.npy", "--eps", "0.1"],
          "does not exist")
    fails(capsys, ["solve", "--target", str(p_file), "--draft", str(bad), "--eps", "0.1"], "q has a negative entry")
    fails(capsys, solve + ["--divergence", "nope"], "unknown divergence")
    fails(capsys, solve + ["--divergence", "alpha(0.25"], "was never closed")
    fails(capsys, solve + ["--divergence", "alpha(0.05)"], "|a - 0| >= 0.12")
    fails(capsys, solve + ["--out", "/nonexistent/r.npy"], "the folder /nonexistent does not exist")
    fails(capsys, solve + ["--out", str(tmp_path)], "is a folder")
    fails(capsys, solve + ["--out", "."], "is a folder")


def test_solve_names_the_file_it_writes(tmp_path, capsys):
    np.save(tmp_path / "p.npy", P)
    np.save(tmp_path / "q.npy", Q)
    assert main(["solve", "--target", str(tmp_path / "p.npy"), "--draft", str(tmp_path / "q.npy"), "--eps", "0.1",
                 "--divergence", "alpha(0.25)", "--out", str(tmp_path / "r")]) == 0
    assert f"written to {tmp_path / 'r.npy'}" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(tmp_path / "r.npy"), md.mentor(P, Q, 0.1, md.alpha(0.25)).r)


def test_report_checks_its_folder_before_computing(tmp_path, capsys, monkeypatch):
    import mdverify.report
    from mdverify import cli

    monkeypatch.setattr(mdverify.report, "build_report", lambda *a, **k: pytest.fail("computed before checking"))
    (tmp_path / "file").write_text("")
    fails(capsys, ["bench", "--out", str(tmp_path / "file" / "sub")], "cannot create the folder")
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)  # a read-only folder, even for root
    fails(capsys, ["report", "--quick", "--out", str(tmp_path)], "the folder cannot be written")


def test_quick_runs_write_beside_the_committed_report(monkeypatch, tmp_path, capsys):
    import mdverify.report
    from mdverify.cli import QUICK_OUT

    written = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(mdverify.report, "build_report", lambda out, quick: written.append((str(out), quick)) or out / "R.md")
    assert main(["report", "--quick"]) == 0
    assert written == [(QUICK_OUT, True)]
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"wrote {QUICK_OUT}/R.md"


def test_report_quick_writes_sections_and_plots(tmp_path):
    from mdverify.report import build_report

    path = build_report(tmp_path, quick=True)
    text = path.read_text()
    assert text.count("\n## ") == 11
    assert "Commit:" in text and "Machine:" in text
    assert "select / numpy sort" in text and "floor / numpy sort" in text
    assert "The same row in float32" in text and "| float32, n = " in text  # the float32 call and rows
    assert (tmp_path / "bench.json").exists()
    assert "verification us/position" in text  # the decoders section ran, with torch installed
    assert "proved gap" in text and "Held out:" in text  # the certificates and the neural pair ran
    assert "largest dA, float64" in text and "No GPU figures" in text  # the torch backend's section
    for png in ("frontiers.png", "truncation.png", "scaling.png", "beating.png", "tv_geometry.png", "ngram.png",
                "rules.png", "small_budgets.png", "decoding_step.png", "prices.png", "neural_speed.png",
                "neural_quality.png", "neural_rules.png", "neural_loss.png"):
        assert (tmp_path / png).stat().st_size > 10_000


def test_bench_rewrites_only_its_section(tmp_path):
    from mdverify.report.build import SCALING_TITLE, replace_section

    report = tmp_path / "REPORT.md"
    report.write_text(f"# r\n\n## 1. A\n\none\n\n## 2. {SCALING_TITLE}\n\nold\n\n## 3. B\n\nthree\n")
    replace_section(report, SCALING_TITLE, "new")
    text = report.read_text()
    assert "old" not in text and "new" in text and "one" in text and "three" in text
    with pytest.raises(ValueError, match="no section"):
        replace_section(report, "Missing", "x")


def test_compile_refuses_no_processes(capsys):
    fails(capsys, ["compile", "--jobs", "0"], "--jobs must be at least 1")


def test_after_compile_every_entry_point_loads_its_kernels_from_the_cache():
    """``mdverify compile`` leaves nothing for a fresh process to compile: each entry point,
    for each dtype, finds every kernel it calls in numba's cache."""
    import subprocess
    import sys

    from mdverify.precompile import DTYPES, ENTRY_POINTS

    done = subprocess.run([sys.executable, "-m", "mdverify.cli", "compile", "--jobs", "2"], capture_output=True,
                          text=True, check=True).stdout
    assert all(f"{name:<28} {dtype:<8}" in done for name, _ in ENTRY_POINTS for dtype in DTYPES), done
    code = (
        "import numpy as np\n"
        "from mdverify.core import jit\n"
        "from mdverify.precompile import DTYPES, ENTRY_POINTS\n"
        "for _, run in ENTRY_POINTS:\n"
        "    for dtype in DTYPES:\n"
        "        run(np.dtype(dtype))\n"
        "print(sum(sum(d.stats.cache_misses.values()) for d, _ in jit.KERNELS),\n"
        "      sum(sum(d.stats.cache_hits.values()) for d, _ in jit.KERNELS))\n"
    )
    misses, hits = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout.split())
    assert misses == 0 and hits > 20, (misses, hits)
