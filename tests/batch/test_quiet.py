"""What ``imagenet-zsl run`` prints (issue 47 §1), run as a user runs it, in a fresh process: the
demo-size run prints a progress bar, the warnings (each once) and the table, at most 15 lines
besides the table (today's log was 53 for it, about 190 for ``make demo``); ``-v`` prints the log
as before (every stage's line and the INFO records)."""

from __future__ import annotations

import logging
import subprocess
import sys

from imagenet_zsl.cli import main


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    """``imagenet-zsl ARGS`` in a fresh process; its output as bytes decoded (text mode would turn
    a progress bar's carriage returns into line breaks)."""
    argv = [sys.executable, "-m", "imagenet_zsl.cli", *map(str, args)]
    done = subprocess.run(argv, capture_output=True, check=False, timeout=600)
    return subprocess.CompletedProcess(argv, done.returncode, done.stdout.decode(), done.stderr.decode())


def _lines(text: str) -> list[str]:
    """The lines a terminal shows: a progress bar redrawn with carriage returns is one line."""
    return [line for line in text.split("\n") if line.strip()]


def test_the_demo_size_run_prints_a_bar_the_warnings_and_the_table(demo_inputs, tmp_path):
    out = tmp_path / "run"
    done = _cli("run", demo_inputs.recipe, "--out", out)
    assert done.returncode == 0, done.stderr
    printed = _lines(done.stdout) + _lines(done.stderr)
    table = _lines((out / "summary.md").read_text())
    assert "\n".join(table) in "\n".join(_lines(done.stdout))  # the table, whole
    others = [line for line in printed if line not in table]
    assert len(others) <= 15, "\n".join(others)
    assert "10/10" in done.stderr  # one bar over the ten cells
    # the run's own warning stays; a log warning repeated (the simulated-features one, per model)
    # comes once, and the count of those left out is said
    assert any(line.startswith("warning: missing_semantics: drop: 20 classes") for line in others)
    assert sum("holds SIMULATED features" in line for line in others) == 1
    assert any("repeated warnings not shown; -v shows the whole log" in line for line in others)
    assert "10 cells: 0 already done, 10 to evaluate" in done.stdout  # what is left, in one line
    for chatter in ("trained in", "calibration copy fitted", "INFO ", "files written:"):
        assert chatter not in done.stdout + done.stderr


def test_verbose_prints_the_log(demo_inputs, tmp_path, capsys, caplog):
    """In this process (pytest holds the log records): ``-v`` emits the stages' lines and the INFO
    records; without it neither (the package's level is WARNING for the run, then restored)."""
    eszsl = demo_inputs.data["models"]["eszsl"]  # its select block logs each grid point (INFO)
    recipe = demo_inputs.write_recipe("verbose.yaml", models={"eszsl": eszsl}, splits=["hop1"], gzsl=False)
    caplog.set_level(logging.INFO, logger="imagenet_zsl")
    grid_point = "eszsl {'gamma': 1.0, 'lam': 0.1}: val top-1"
    assert main(["run", str(recipe), "--out", str(tmp_path / "verbose"), "-v", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "model eszsl: trained in" in printed
    assert "1 cells: 0 already done, 1 to evaluate" in printed
    assert "files written:" in printed and str((tmp_path / "verbose" / "summary.md").resolve()) in printed
    assert any(r.levelno == logging.INFO and grid_point in r.getMessage() for r in caplog.records)
    caplog.clear()
    assert main(["run", str(recipe), "--out", str(tmp_path / "quiet"), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "model eszsl: trained in" not in printed and "files written:" not in printed
    assert not [r for r in caplog.records if r.levelno < logging.WARNING]
    assert logging.getLogger("imagenet_zsl").level == logging.INFO  # restored after the run
