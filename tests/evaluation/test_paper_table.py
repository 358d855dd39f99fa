"""Tables a paper can print (#47 §2, #45 §2): the paper table by default (at most 12 columns),
``--columns`` for the rest, one column order for ``report`` and ``run``, a LaTeX fragment that
compiles, the label space named with its size, strict GZSL and the validation H beside the test H."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.batch.summary import render_summary, summary_tables
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.columns import PAPER_MAX, all_columns, label_space_text, select_columns
from imagenet_zsl.evaluation.report import report_rows, table_columns, table_note, tex_escape, to_latex
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import CLASSES, DIM
from tests.evaluation.test_report import run_cli

KS = [1, 2, 5, 10, 20, 50]


def _rows(*backbones: str) -> list[dict]:
    return [{"backbone": b, "model": "eszsl", "split": "hop1"} for b in backbones]


def test_the_paper_table_has_at_most_12_columns():
    widest = select_columns(None, _rows("resnet50 @aa", "vit @bb"), KS, gzsl=True)
    assert widest == [
        "backbone",
        "model",
        "split",
        "label space",
        "hit@1 [95% CI]",
        "hit@2",
        "hit@5",
        "hit@10",
        "hit@20",
        "GZSL U",
        "GZSL S",
        "GZSL H",
    ]
    assert len(widest) == PAPER_MAX == 12  # hit@50 (not a paper K) is in the CSV only
    # one backbone: said in the legend, not a column; without GZSL no U/S/H
    one = select_columns(None, _rows("vit @bb", "vit @bb"), KS, gzsl=False)
    assert one == ["model", "split", "label space", "hit@1 [95% CI]", "hit@2", "hit@5", "hit@10", "hit@20"]
    assert len(all_columns(KS, gzsl=True)) > 40  # the CSV keeps every column


def test_columns_by_name_or_group_in_the_one_order_and_a_typo_is_one_line():
    rows = _rows("vit @bb")
    picked = select_columns("validation H, STRICT HIT@1", rows, [1, 5], gzsl=True)
    assert picked == ["model", "split", "strict hit@1", "validation H"]  # the table's order, not the flag's
    strict = select_columns("paper,strict", rows, [1, 5], gzsl=True)
    assert strict == [
        "model",
        "split",
        "label space",
        "hit@1 [95% CI]",
        "hit@5",
        "strict hit@1",
        "strict hit@5",
        "GZSL U",
        "GZSL S",
        "GZSL H",
        "strict GZSL U",
        "strict GZSL S",
        "strict GZSL H",
    ]
    assert select_columns("all", rows, [1, 5], gzsl=True) == all_columns([1, 5], gzsl=True)
    with pytest.raises(UserInputError, match=r"no column 'strict hit1'.*did you mean 'strict hit@1'"):
        select_columns("strict hit1", rows, [1, 5], gzsl=True)


def test_the_label_space_is_named_with_its_size():
    # #45 §2: with a word-vector model, All is 20,842 less the 1,917 classes without a GloVe vector
    assert label_space_text("all", 18925, 20842) == "All−vec 18,925"
    assert label_space_text("all", 20842, 20842) == "All 20,842"  # missing_semantics: keep
    assert label_space_text("split", 1548, 1548) == "split 1,548"
    assert label_space_text("split", 1393, 1548) == "split−vec 1,393"
    assert label_space_text("my_classes", 500) == "my_classes 500"


def _gzsl_bench(bench: dict, tmp_path: Path) -> Path:
    """The bench's prototypes, with unseen class 5's also pointing at seen class 9: each of the 3
    seen images of class 9 ties its true class with class 5 (tie-fair 1/2, strict 0)."""
    matrix = np.eye(DIM, dtype=np.float32)
    matrix[5, 9] = 1.0
    ClassVectors(CLASSES, matrix).save(tmp_path / "tied.npz")
    run_cli(bench, tmp_path / "run", tmp_path / "tied.npz", "--gzsl", "--seen-features", str(bench["seen"]))
    return tmp_path / "run"


def test_strict_gzsl_columns_by_hand(bench, tmp_path):
    """U: 17 of 18 test images (image 0 looks like class 1), no tie. S: the 3 images of seen class 8
    are right; the 3 of class 9 tie with unseen class 5: 1/2 each tie-fair, 0 strict."""
    run = _gzsl_bench(bench, tmp_path)
    (row,), _ = report_rows([run])
    u, s, s_strict = 17 / 18, (3 + 3 / 2) / 6, 3 / 6
    assert (row["GZSL U"], row["GZSL S"]) == (pytest.approx(u), pytest.approx(s))
    assert row["GZSL H"] == pytest.approx(2 * u * s / (u + s))  # 0.8361
    assert (row["strict GZSL U"], row["strict GZSL S"]) == (pytest.approx(u), pytest.approx(s_strict))
    assert row["strict GZSL H"] == pytest.approx(2 * u * s_strict / (u + s_strict))  # 0.6538
    assert row["strict GZSL S (per class)"] == pytest.approx((1 + 0) / 2)
    printed = main(["report", str(run), "--columns", "paper,strict", "--out", str(tmp_path / "t.md")])
    assert printed == 0
    md = (tmp_path / "t.md").read_text()
    assert "| GZSL U | GZSL S | GZSL H | strict GZSL U | strict GZSL S | strict GZSL H |" in md
    assert "| 94.44 | 75.00 | 83.61 | 94.44 | 50.00 | 65.38 |" in md


def test_validation_h_beside_the_calibrated_h_and_the_legend_says_why(tmp_path):
    cell = tmp_path / "cells" / "a__hop1"
    cell.mkdir(parents=True)
    point = {"seen": 0.8, "unseen": 0.2, "H": 0.32, "ausuc": 0.1}
    calibration = {
        "k": 1,
        "validation_H": 0.3,
        "test": {"flat": {"1": {"H": 0.17}}, "per_class": {"1": {"H": 0.2}}},
    }
    metrics = {
        "zsl": {"flat": {"1": 0.5}},
        "gzsl": {"flat": {"1": point}, "per_class": {"1": point}, "calibration": calibration},
    }
    (cell / "metrics.json").write_text(json.dumps(metrics))
    record = {"model": "a", "split": "hop1", "run": "cells/a__hop1", "status": "ok", "error": None}
    record["classes"] = {"in_split": 4, "evaluated": 4}
    rows, _, _ = summary_tables(tmp_path, [record], [1], gzsl=True)
    assert (rows[0]["calibrated H"], rows[0]["validation H"]) == (0.17, 0.3)
    md, csv, _ = render_summary(rows, (), "calibrated H,validation H")
    assert "| model | split | calibrated H | validation H |" in md and "| a | hop1 | 17.00 | 30.00 |" in md
    assert "a transferred γ can give a lower H than direct stacking" in md
    assert "calibrated H,validation H," in csv.splitlines()[0]


def _same_cell_as_a_run(run_dir: Path, tmp_path: Path) -> tuple[Path, dict]:
    """``run_dir`` (an evaluate run) as the one cell of a ``run`` directory, and its record."""
    out = tmp_path / "batch"
    shutil.copytree(run_dir, out / "cells" / "tied__split")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    record = {"model": "tied", "split": "split", "run": "cells/tied__split", "status": "ok", "error": None}
    record["classes"] = {"in_split": 6, "evaluated": 6}
    record["provenance"] = {"backbone": "unknown", "class_vectors": metrics["provenance"]["class_vectors"]}
    return out, record


@pytest.mark.parametrize("columns", [None, "all", "strict hit@2,validation H"])
def test_report_and_run_give_the_same_columns_in_the_same_order(bench, tmp_path, columns):
    run_dir = _gzsl_bench(bench, tmp_path)
    out, record = _same_cell_as_a_run(run_dir, tmp_path)
    run_md, run_csv, run_tex = render_summary(
        summary_tables(out, [record], [1, 2], gzsl=True)[0], (), columns
    )
    argv = ["report", str(run_dir), "--out", str(tmp_path / "t.md")]
    assert main([*argv, *(["--columns", columns] if columns else [])]) == 0
    report_md = (tmp_path / "t.md").read_text().split("\n", 1)[1]  # after report's first-line mark
    assert report_md.splitlines()[0] == run_md.splitlines()[0]  # the same header
    assert (tmp_path / "t.csv").read_text() == run_csv  # every column, the same values
    assert (
        run_tex.split(r"\begin{tabular}")[1] == (tmp_path / "t.tex").read_text().split(r"\begin{tabular}")[1]
    )


def _latex_available() -> str | None:
    """Why the LaTeX check cannot run here (None: it can)."""
    if shutil.which("pdflatex") is None:
        return "pdflatex is not installed (e.g. apt-get install texlive-latex-base texlive-latex-recommended)"
    found = subprocess.run(["kpsewhich", "booktabs.sty"], capture_output=True, text=True, check=False)
    if not found.stdout.strip():
        return "booktabs.sty is not installed (texlive-latex-recommended)"
    return None


def test_tex_escape_by_hand():
    assert (
        tex_escape("a_b & 50% #1 $x {y} ~^")
        == r"a\_b \& 50\% \#1 \$x \{y\} \textasciitilde{}\textasciicircum{}"
    )
    assert tex_escape("All−vec 18,925 – γ ≈ 1, é") == r"All$-$vec 18,925 -- $\gamma$ $\approx$ 1, e"
    assert tex_escape("a <b> | c") == r"a \textless{}b\textgreater{} \textbar{} c"


def test_the_tex_fragment_compiles_with_pdflatex(tmp_path):
    why = _latex_available()
    if why:
        pytest.skip(why)
    rows = []
    for i, backbone in enumerate(("vit_b_16 @ff00 [bf16, decode torchvision]", "resnet50 @aa11 <x>|y")):
        row = dict.fromkeys(all_columns([1, 2, 5, 10, 20], gzsl=True))
        row |= {"backbone": backbone, "model": f"my_model&#%$~^{{{i}}}", "split": "hop_1"}
        row |= {"label space": "All−vec 18,925", "class vectors": "glove é γ", "status": "ok"}
        row |= {f"hit@{k}": 0.1 * (i + 1) for k in (1, 2, 5, 10, 20)}
        row |= {"hit@1 95% CI": "[9.10, 11.30]", "GZSL U": 0.2, "GZSL S": 0.8, "GZSL H": 0.32}
        rows.append(row)
    rows.append({**rows[0], "model": "failed_one", "status": "failed: boom"})
    printed, every = table_columns(rows, None)
    note = table_note(rows, printed, every)
    tex = to_latex(rows, printed, note)
    (tmp_path / "table.tex").write_text(tex)
    caption = re.search(r"^% caption note: (.*)$", tex, flags=re.M).group(1)  # caption-ready, escaped
    (tmp_path / "paper.tex").write_text(
        "\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage[margin=1cm,paperwidth=40cm]{geometry}\n"
        "\\begin{document}\n\\begin{table}\n\\input{table.tex}\n\\caption{" + caption + "}\n\\end{table}\n"
        "\\end{document}\n"
    )
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "paper.pdf").stat().st_size > 1000
    assert len(printed) <= PAPER_MAX
