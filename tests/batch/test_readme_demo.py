"""The demo excerpt of README.md and docs/getting-started.md is produced by the demo's main job in
the suite (#45 §1): the block between the ``demo`` markers of each page is rendered from the
summary.csv of the reduced demo run (tests/batch/conftest.py: configs/demo.yaml with smaller
splits, simulation and models) by :func:`imagenet_zsl.batch.summary.demo_excerpt`, and compared.

Why the reduced run and not `make demo`'s: the full recipe costs about 2 minutes of CPU (121 s
user+sys measured, load 9 on 2 cores) on top of the suite's 6-7 minutes; the reduced one is
already run for tests/batch (a session fixture), so the check costs nothing more. Both pages say
which run the excerpt shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_zsl.batch.summary import DEMO_END, DEMO_START, demo_excerpt
from imagenet_zsl.semantics.lemma_vectors import load_class_vectors
from imagenet_zsl.splits.io import read_wnid_list

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/getting-started.md")


def page_block(page: str) -> str:
    text = (REPO / page).read_text(encoding="utf-8")
    start, end = text.index(DEMO_START) + len(DEMO_START), text.index(DEMO_END)
    return text[start:end].strip("\n") + "\n"


@pytest.mark.parametrize("page", PAGES)
def test_the_demo_excerpt_is_what_the_demo_run_prints(demo_run, page):
    expected = demo_excerpt((demo_run / "summary.csv").read_text())
    assert page_block(page) == expected, f"paste into {page} between the demo markers:\n{expected}"


def test_each_excerpt_cell_is_the_tables_hit_at_1_and_strict_hit_at_1(demo_run):
    """Each cell of the excerpt is the summary's hit@1 and strict hit@1 as the table prints them."""
    table = (demo_run / "summary.md").read_text().replace("**", "")
    header, _, *rows = demo_excerpt((demo_run / "summary.csv").read_text()).splitlines()
    splits = [h.rsplit(" (", 1) for h in header.strip("| ").split(" | ")[1:]]
    for line in rows:
        model, *cells = line.strip("| ").split(" | ")
        for (split, space), cell in zip(splits, cells, strict=True):
            if cell != "—":
                hit = cell.split(" (")[0]
                assert f"| {model} | {split} | {space.rstrip(')')} | {hit}" in table, (model, split)


def test_the_make_demo_hop1_count_the_page_gives():
    """docs/getting-started.md: make demo's hop1 is `split−vec 1,393`, 1,548 less 155 classes
    without a GloVe vector (the classes every word-vector model of the demo lacks)."""
    vectors = load_class_vectors("glove-6b-50d")
    hop1 = read_wnid_list(REPO / "splits" / "hop1.txt")
    kept = [w for w in hop1 if w in vectors]
    assert (len(hop1), len(hop1) - len(kept), len(kept)) == (1548, 155, 1393)
    assert "`split−vec 1,393`: its 1,548 classes less the 155 without a GloVe" in " ".join(
        (REPO / "docs" / "getting-started.md").read_text().split()
    )
