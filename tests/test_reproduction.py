"""The "Reproducing the papers" table of docs/reproducing.md equals the freshly computed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_zsl.analysis import reproduction
from imagenet_zsl.analysis.reproduction import (
    population_rows,
    population_split_rows,
    render_reproduction,
)
from imagenet_zsl.data import fall11_counts
from imagenet_zsl.hierarchy.universe import candidate_wnids, universe_wnids

README = Path(__file__).resolve().parents[1] / "docs" / "reproducing.md"
START, END = "<!-- reproduction:start -->", "<!-- reproduction:end -->"


def test_readme_reproduction_table_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert START in text and END in text, f"docs/reproducing.md has lost its {START} … {END} block"
    block = text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert block == render_reproduction(), "regenerate: python -m imagenet_zsl.analysis.reproduction"


def _block() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(START, 1)[1].split(END, 1)[0]


@pytest.mark.parametrize(
    "published",
    [
        # each checked by hand against the paper texts in ../shared/papers/
        "1,589 (Hascoet §2.1)",  # "the set of 1589 test classes directly connected"
        "1,509 (Chao et al. §5.1; GBU §5.2)",
        "7,678 (Chao et al. §5.1; GBU §5.2)",
        "20,842 (Chao et al. Table 2)",  # 20,345 is their subset with word vectors (§5.1)
        "0.55 (Hascoet §5.3, their 1-hop)",
        "≈ 1,756 / 1,624 / 1,335 (GBU §5.2)",
        "≈ 1 / 3 / 51 (GBU §5.2)",
        "≈ 631 (GBU §5.2)",
        "6.1% (Hascoet Fig. 5)",
        "21.1% (Hascoet Fig. 5)",
        "about half (Hascoet §4.2.2)",
        "33.7% (Hascoet §4.2.1)",
    ],
)
def test_published_values_carry_their_source(published: str) -> None:
    assert published in _block()


def test_no_misattributed_value() -> None:
    block = _block()
    assert "20,345 (GBU)" not in block and "Frome" not in block  # Chao et al.'s; a DGP list size


def test_population_rows_against_hand_counts() -> None:
    """GBU §5.2's images-per-class rows and Hascoet Fig. 5's shares, recomputed by hand here."""
    counts, candidates = fall11_counts(), candidate_wnids()
    ranked = sorted((c for c in (counts.get(w, 0) for w in candidates) if c > 0), reverse=True)
    top = [sum(ranked[:n]) / n for n in (500, 1000, 5000)]
    rows = {r.quantity: r.ours for r in population_split_rows(candidates, counts)}
    assert rows["images per class, M500 / M1K / M5K"] == " / ".join(f"{x:,.1f}" for x in top)
    assert rows["images per class, M500 / M1K / M5K"] == "1,756.2 / 1,624.8 / 1,335.2"
    assert rows["images per class, L500 / L1K / L5K"] == "1.5 / 2.9 / 45.0"
    assert rows["images per class, All"] == f"{sum(ranked) / len(ranked):,.1f} ({len(ranked):,} classes)"
    shares = {r.quantity: r.ours for r in population_rows(universe_wnids(), counts)}
    assert shares["classes with < 10 images"].endswith("(5.80%)")
    assert shares["classes with < 100 images"].endswith("(19.99%)")


def test_out_is_written_atomically_and_never_over_another_file(tmp_path, monkeypatch, capsys) -> None:
    table = reproduction.render_reproduction([])  # the header only: cheap, same format
    monkeypatch.setattr(reproduction, "render_reproduction", lambda: table)
    out = tmp_path / "table.md"
    assert reproduction.main(["--out", str(out)]) == 0 and out.read_text() == table
    assert reproduction.main(["--out", str(out)]) == 0  # its own table: replaced
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    assert reproduction.main(["--out", str(notes)]) == 2
    assert notes.read_text() == "my notes\n"
    assert capsys.readouterr().err.startswith(f"error: --out {notes} exists and is not a reproduction table")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md", "table.md"]  # no temp left


def test_shared_label_row_counts_any_lemma_as_hascoet() -> None:
    """§4.2.2 'share at least one word label with other visual classes': ice hockey and field
    hockey share 'hockey' (neither's first lemma), the tench shares nothing: 2 of 3 classes."""
    rows = {r.quantity: r for r in reproduction.label_rows(["n00463543", "n00467995", "n01440764"])}
    row = rows["label shared with another ImageNet class"]
    assert row.ours == "66.7%" and row.reason.startswith("the first lemma alone gives 0.0%")
    assert "does not state" not in row.reason


def test_the_literature_counts_of_dgp_and_the_all_rule_are_stated() -> None:
    """#45 §2: DGP's own list sizes sit beside Hascoet's and Chao et al.'s, counted from the packaged
    lists; "all" is 21,841 fall11 synsets less the 999 ILSVRC-2012 classes among them (teddy bear is
    not a fall11 synset), not "minus 1,000"."""
    block = _block()
    assert "1,549 (DGP's list, `dgp-2hops`)" in block and "7,860 (DGP's list, `dgp-3hops`)" in block
    assert "minus the 1,000" not in block
    universe, counts = universe_wnids(), fall11_counts()
    fall11_training = [w for w in universe if w in counts and w not in candidate_wnids()]
    assert (len(counts), len(fall11_training), "n04399382" in counts) == (21841, 999, False)
    assert "21,841 fall11 synsets minus the 999 ILSVRC-2012 classes" in block
