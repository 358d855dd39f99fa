"""The published rows beside the user's (#48 §2, §3): on a hand-made table of published figures and
hand-made result records, each figure lands in the column that measures what it measures, each
protocol difference is named "theirs vs yours", "comparable" is given only when none is material,
a published list the user's copy holds in part is marked and never comparable, each split's rows
are sorted by hit@1, and the .tex cites every published row by key with a .bib of the cited
entries only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imagenet_zsl.evaluation.columns import select_columns
from imagenet_zsl.evaluation.published import PublishedTable
from imagenet_zsl.evaluation.published_compare import (
    PUBLISHED_STATUS,
    Measured,
    compare_published,
    figure_column,
)
from imagenet_zsl.evaluation.report import record_row, to_latex, to_markdown
from imagenet_zsl.splits.named import PUBLISHED_SPLITS

KS = [1, 5]
BIB = """@article{alpha2020,
  author = {Alpha, Ann and Bee, Bob},
  title  = {A},
  year   = {2020}
}

@inproceedings{beta2021,
  author = {Beta, Carl},
  title  = {B},
  year   = {2021}
}

@misc{gamma2019,
  author = {Gamma, Dan},
  title  = {C},
  year   = {2019}
}
"""
SPLITS = """id,paper,name,classes,classes_source,images_per_class,our_split,defined_in,match,why
a-2h,alpha2020,2 H,1509,§5,,hop1,configs/default.yaml,same-rule,SYNC's list is not published
a-m500,alpha2020,500 (most populated),500,§5,≈ 100,mp500,configs/default.yaml,exact,the same list
b-2hops,beta2021,2-hops,,,,dgp-2hops,packaged,exact,DGP's list
"""
HEAD = (
    "paper,source,page,origin,model,backbone,pretraining,semantic_space,split,setting,metric,"
    "averaging,k,hit_rule,label_space,value,plus_minus,unit,note\n"
)
A = 'alpha2020,Table 5,3,,ModelA,ResNet-101 (2048-d),"ImageNet-1K (ILSVRC-2012)",word2vec (500-d)'
B = "beta2021,Table 1,4,gamma2019,ModelB,ResNet-50,ImageNet-1K,GloVe"
C = "beta2021,Table 2,4,,{},ResNet-50,ImageNet-1K,GloVe"
RESULTS = HEAD + "\n".join(
    [
        f"{A},a-2h,ZSL,hit@K,per-class,1,unstated,1509,9.26,,%,",
        f"{A},a-m500,ZSL,hit@K,per-class,1,unstated,500,12.33,,%,",
        f"{B},b-2hops,ZSL,hit@K,per-image,1,strict,1549,26.6,0.3,%,",
        f"{B},b-2hops,ZSL,hit@K,per-image,5,strict,1549,50.1,,%,",
        f"{B},b-2hops,ZSL,hit@K,per-image,2,strict,1549,40.0,,%,",  # K = 2: no column here
        f"{C.format('ModelC')},b-2hops,GZSL,U,per-image,1,unstated,2549,3.0,,%,",
        f"{C.format('ModelD')},b-2hops,GZSL,AUSUC,per-image,1,unstated,2549,0.021,,fraction,",
    ]
)


@pytest.fixture
def table(tmp_path: Path) -> PublishedTable:
    (tmp_path / "references.bib").write_text(BIB)
    (tmp_path / "splits.csv").write_text(SPLITS)
    (tmp_path / "results.csv").write_text(RESULTS + "\n")
    return PublishedTable.read(tmp_path)


def _record(split: str, size: int, hits: tuple[float, float], strict: tuple[float, float], **extra) -> dict:
    """A result record as ``run`` writes one (the fields the comparison reads)."""
    coverage = extra.get("coverage")
    protocol = {
        "label_space": {"name": "split", "size": size, "text": f"split {size:,}"},
        "ks": KS,
        "images": 3 * size,
        "classes": {"in_split": size, "evaluated": size, "with_test_images": size, "count_as_miss": 0},
        "split": {"name": split, "sha256": extra.get("sha256")},
        "gzsl": {"classes": {"seen": 1000, "unseen": size}},
        "features": {"backbone": "resnet50 @ab", "simulated": False},
        "class_vectors": "glove-6b-50d (lemma_rule=mean)",
        "pretraining": {"test_classes_seen": 0, "label_sets": ["in1k"]},
        "coverage": coverage,
    }
    metrics = {"hit@1": hits[0], "hit@5": hits[1], "strict hit@1": strict[0], "strict hit@5": strict[1]}
    metrics |= {"per-class hit@1": hits[0] - 0.01, "GZSL U": 0.02, "strict GZSL U": 0.02}
    return {
        "backbone": "resnet50 @ab",
        "model": extra.get("model", "mine"),
        "split": split,
        "protocol": protocol,
        "metrics": metrics,
    }


def _compare(records: list[dict], table: PublishedTable, columns: str | None = None):
    rows = [record_row(r, None, KS, True) for r in records]
    printed = select_columns(columns, rows, KS, gzsl=True)
    return compare_published(rows, records, printed, KS, True, table)


def _published(comparison, model: str) -> dict:
    (row,) = [r for r in comparison.rows if r["model"] == model and r["status"] == PUBLISHED_STATUS]
    return row


def test_each_figure_fills_the_column_of_its_metric(table):
    by_model = {(r.model, r.metric, r.k, r.split.id): r for r in table.results}
    assert figure_column(by_model["ModelA", "hit@K", 1, "a-2h"], KS, True) == "per-class hit@1"
    assert figure_column(by_model["ModelB", "hit@K", 1, "b-2hops"], KS, True) == "strict hit@1"
    assert figure_column(by_model["ModelB", "hit@K", 5, "b-2hops"], KS, True) == "strict hit@5"
    assert figure_column(by_model["ModelB", "hit@K", 2, "b-2hops"], KS, True) is None  # no hit@2 here
    assert figure_column(by_model["ModelC", "U", 1, "b-2hops"], KS, True) == "GZSL U"
    assert figure_column(by_model["ModelC", "U", 1, "b-2hops"], KS, False) is None  # GZSL off
    assert figure_column(by_model["ModelD", "AUSUC", 1, "b-2hops"], KS, True) == "AUSUC (per image)"


def test_a_same_rule_split_names_every_difference_and_is_never_comparable(table):
    # hop1 with 12 classes; no tie at the true class (strict = tie-fair): the rule cannot matter
    mine = _record("hop1", 12, (0.5, 0.9), (0.5, 0.9))
    comparison = _compare([mine], table)
    row = _published(comparison, "ModelA")
    assert row["per-class hit@1"] == pytest.approx(0.0926) and row["hit@1"] is None
    assert row["label space"] == "2 H 1,509" and row["source"] == "alpha2020 Table 5"
    assert row["comparable"] == "no"
    assert row["differences"] == (
        "label space 1,509 vs 12; list: the same rule, not the same classes; hit rule unstated vs "
        "tie-fair (cannot matter: no tie at the true class in yours); semantic space word2vec vs "
        "glove-6b-50d"
    )  # the same pretraining (ImageNet-1K both): not named
    # a tie at the true class in one of the user's rows: the rule matters
    tied = _record("hop1", 12, (0.5, 0.9), (0.4, 0.9), model="tied")
    row = _published(_compare([mine, tied], table), "ModelA")
    assert (
        "hit rule unstated vs tie-fair;" in row["differences"] and "cannot matter" not in row["differences"]
    )


def test_an_exact_list_with_the_same_protocol_is_comparable_and_the_printed_value_kept(table):
    mine = _record("mp500", 500, (0.30, 0.6), (0.30, 0.6))
    comparison = _compare([mine], table)
    row = _published(comparison, "ModelA")
    assert row["comparable"] == "yes"
    assert row["differences"] == (
        "hit rule unstated vs tie-fair (cannot matter: no tie at the true class in yours); "
        "semantic space word2vec vs glove-6b-50d; images per class ≈ 100 vs 3.0"
    )  # named, none material
    assert "per-class hit@1" in comparison.columns  # the column the figure fills is printed
    md = to_markdown(comparison.rows, comparison.columns, "legend")
    assert "| ResNet-101 | ModelA | mp500 | 500 (most populated) 500 |" in md
    assert "| 12.33 |" in md  # as printed, not 12.33 re-rounded from a fraction
    # the user's copy lacks classes of the list: the same figure is not comparable any more
    held = {"classes": 500, "held": 480, "images": 1440, "complete": False}
    row = _published(
        _compare([_record("mp500", 500, (0.30, 0.6), (0.30, 0.6), coverage=held)], table), "ModelA"
    )
    assert (
        row["comparable"] == "no" and "your copy holds 480 of 500 classes of the list" in row["differences"]
    )


def test_an_incomplete_published_list_is_marked_and_never_comparable(table):
    """#48 §3: a published list (dgp-2hops) that the user's copy holds in part: the row's label
    space says "1,412 of 1,549", and no published row of the split is marked comparable."""
    packaged = PUBLISHED_SPLITS["dgp-2hops"].sha256
    whole = {"classes": 1549, "held": 1549, "images": 4647, "complete": True, "split_sha256": packaged}
    part = {"classes": 1549, "held": 1412, "images": 4236, "complete": False, "split_sha256": packaged}
    complete = _compare([_record("dgp-2hops", 1549, (0.3, 0.6), (0.25, 0.5), coverage=whole)], table)
    assert "strict hit@1" in complete.columns  # the published rows' column is printed
    row = _published(complete, "ModelB")  # strict figures beside the user's strict hit@K: the same rule
    assert row["strict hit@1"] == pytest.approx(0.266) and row["strict hit@5"] == pytest.approx(0.501)
    assert row["comparable"] == "yes" and row["differences"] == "semantic space GloVe vs glove-6b-50d"
    assert row["source"] == "beta2021 Table 1 (quoting gamma2019)"
    mine = [r for r in complete.rows if r["status"] == "ok"][0]
    assert mine["label space"] == "split 1,549"  # held completely: no mark

    incomplete = _compare([_record("dgp-2hops", 1549, (0.3, 0.6), (0.25, 0.5), coverage=part)], table)
    mine = [r for r in incomplete.rows if r["status"] == "ok"][0]
    assert mine["label space"] == "split 1,549 (1,412 of 1,549 held)"
    published = [r for r in incomplete.rows if r["status"] == PUBLISHED_STATUS]
    assert published and all(r["comparable"] == "no" for r in published)
    assert (
        "your copy holds 1,412 of 1,549 classes of the list"
        in _published(incomplete, "ModelB")["differences"]
    )
    # an edited copy of the packaged list is not the packaged list either
    edited = dict(whole, split_sha256="0" * 64)
    row = _published(
        _compare([_record("dgp-2hops", 1549, (0.3, 0.6), (0.25, 0.5), coverage=edited)], table), "ModelB"
    )
    assert row["comparable"] == "no" and "list: yours is not the packaged dgp-2hops" in row["differences"]


def test_gzsl_figures_the_rows_sorted_by_hit1_and_the_left_out_counted(table):
    packaged = PUBLISHED_SPLITS["dgp-2hops"].sha256
    whole = {"classes": 1549, "held": 1549, "images": 4647, "complete": True, "split_sha256": packaged}
    records = [
        _record("dgp-2hops", 1549, (0.20, 0.6), (0.20, 0.6), coverage=whole, model="low"),
        _record("dgp-2hops", 1549, (0.30, 0.6), (0.30, 0.6), coverage=whole, model="high"),
    ]
    comparison = _compare(records, table)
    row = _published(comparison, "ModelC")
    assert row["GZSL U"] == pytest.approx(0.03) and row["label space"] == "2-hops joint 2,549"
    # 1,000 seen + 1,549 unseen classes ranked together in both; per image in both; no tie
    assert row["comparable"] == "yes"
    assert row["differences"] == (
        "hit rule unstated vs tie-fair (cannot matter: no tie at the true class in yours); "
        "semantic space GloVe vs glove-6b-50d"
    )
    # the columns the published rows fill are printed: ModelB's strict hit@K, ModelD's AUSUC
    assert {"strict hit@1", "strict hit@5", "AUSUC (per image)", "backbone"} <= set(comparison.columns)
    assert _published(comparison, "ModelD")["AUSUC (per image)"] == pytest.approx(0.021)
    # sorted by hit@1; ModelB (a strict hit@1 only) and the GZSL rows after, in table order
    assert [r["model"] for r in comparison.rows] == ["high", "low", "ModelB", "ModelC", "ModelD"]
    assert any("1 published figures of these splits have no column" in n for n in comparison.notes)  # K = 2
    assert comparison.cited == ["beta2021", "gamma2019"]


def test_the_tex_cites_each_published_row_by_key(table):
    comparison = _compare([_record("hop1", 12, (0.5, 0.9), (0.5, 0.9))], table)
    tex = to_latex(comparison.rows, comparison.columns, "legend")
    (line,) = [ln for ln in tex.splitlines() if ln.startswith("ResNet-101 & ModelA")]
    assert r"\cite{alpha2020}, Table 5" in line and "9.26" in line
    assert re.search(r"& -- & .*9\.26", line)  # no hit@1: '--', the per-class figure in its column


def test_measured_reads_the_protocol_of_a_record():
    record = _record("hop1", 12, (0.5, 0.9), (0.4, 0.9))
    measured = Measured.of(record)
    assert (measured.label_space, measured.joint_space, measured.in_split) == (12, 1012, 12)
    assert measured.pretraining == "ImageNet-1K" and measured.vectors == "glove-6b-50d"
    assert measured.images_per_class == 3.0
    assert not measured.ties_cannot_matter("hit@1") and measured.ties_cannot_matter("hit@5")
    assert measured.ties_cannot_matter("GZSL U") and not measured.ties_cannot_matter("AUSUC (per image)")
