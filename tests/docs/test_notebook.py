"""The example notebook (docs/tutorials/notebook.ipynb) runs, is committed without outputs, and is
the very code its docs page shows; every other Python snippet of the docs runs too.

The notebook is executed with nbclient on the venv's own kernel, in a temporary directory: it writes
SIMULATED features, trains ESZSL and trivial, evaluates them on the committed ``benchmark`` split and
shows the hit@K table, whose numbers must be those of the run directories' ``metrics.json``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
NOTEBOOK = DOCS / "tutorials" / "notebook.ipynb"
NOTEBOOK_PAGE = DOCS / "tutorials" / "notebook.md"


def python_blocks(page: Path) -> list[str]:
    """The ```python code blocks of a Markdown page, in order."""
    return [block.rstrip("\n") for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]


def _notebook():
    import nbformat

    return nbformat.read(NOTEBOOK, as_version=4)


def test_notebook_is_committed_without_outputs():
    for cell in _notebook().cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_the_page_shows_the_notebook_code_in_under_15_lines():
    code = [cell.source.rstrip("\n") for cell in _notebook().cells if cell.cell_type == "code"]
    assert python_blocks(NOTEBOOK_PAGE) == code
    lines = [line for cell in code for line in cell.splitlines() if line.strip()]
    assert len(lines) < 15


def test_the_notebook_runs_and_shows_the_runs_numbers(tmp_path):
    from nbclient import NotebookClient

    notebook = _notebook()
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    table = notebook.cells[-1].outputs[0]["data"]["text/plain"]
    rows = {line.split()[1]: line.split()[2:] for line in table.splitlines()[1:]}
    assert set(rows) == {"eszsl", "trivial"}
    for model, (split, hit1, hit5, strict1) in rows.items():
        metrics = json.loads((tmp_path / "runs" / model / "metrics.json").read_text())
        assert split == "benchmark" and metrics["zsl"]["classes"] == 500
        flat = metrics["zsl"]["flat"]
        assert float(hit1) == pytest.approx(flat["1"], abs=1e-6)
        assert float(hit5) == pytest.approx(flat["5"], abs=1e-6)
        assert float(strict1) == pytest.approx(metrics["zsl"]["flat_strict"]["1"], abs=1e-6)
        assert float(strict1) <= float(hit1) <= float(hit5)
    assert float(rows["trivial"][3]) == 0.0  # its tied prototypes: nothing under the strict rule


def _snippet_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if p != NOTEBOOK_PAGE and python_blocks(p))


def test_docs_have_python_snippets_besides_the_notebook():
    assert _snippet_pages(), "the docs show no Python snippet outside the notebook page"


@pytest.mark.parametrize("page", _snippet_pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_python_snippet_of_the_docs_runs(page, tmp_path):
    """A page's snippets run in order in one fresh interpreter, in an empty directory."""
    code = "\n\n".join(python_blocks(page))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{page}: {done.stderr[-3000:]}"
