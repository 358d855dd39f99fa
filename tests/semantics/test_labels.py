"""Label tables on real classes and the `labels build` outputs."""

from __future__ import annotations

import pandas as pd
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.config import load_label_config
from imagenet_zsl.semantics.labels import LEMMA_COLUMNS, build_label_tables
from imagenet_zsl.semantics.report import LABELS_FORMAT
from tests.semantics.cases import CLASSES


@pytest.fixture(scope="module")
def tables(sense_model):
    return build_label_tables(load_label_config(None), list(CLASSES), model=sense_model)


def test_class_rows_and_reasons(tables):
    classes = tables.classes.set_index("wnid")
    assert list(classes.index) == list(CLASSES)
    assert classes["exclusion_reasons"].to_dict() == CLASSES
    assert classes["kept"].to_dict() == {w: not r for w, r in CLASSES.items()}
    assert classes.loc["n02096177", "label"] == "cairn"  # the first lemma is the label
    assert classes.loc["n02096177", "is_training"] and not classes.loc["n07273802", "is_training"]
    # sharing is counted against all ImageNet classes: the two cairns share their label
    assert classes.loc["n02096177", "shares_label_with"] == "n07273802"
    assert classes.loc["n07273802", "n_classes_same_label"] == 1
    assert classes.loc["n02096177", "primary_sense"] == "n07273802"
    assert classes.loc["n02084071", "n_noun_senses"] == 7  # dog: 7 noun senses in WordNet 3.0
    # ... and is a lemma of one other ImageNet class: the andiron ("andiron, firedog, dog, dog-iron")
    assert classes.loc["n02084071", "shares_label_with"] == "n02710044"
    assert classes.loc["n02084071", "n_classes_same_label"] == 0


def test_lemma_rows(tables):
    lemmas = tables.lemmas
    assert list(lemmas.columns[: len(LEMMA_COLUMNS)]) == list(LEMMA_COLUMNS)
    terrier = lemmas[lemmas["wnid"] == "n02096177"].set_index("lemma")
    assert list(terrier.index) == ["cairn", "cairn_terrier"]
    assert terrier.loc["cairn", "n_noun_senses"] == 2
    assert terrier.loc["cairn", "n_imagenet_classes_sharing"] == 1
    assert not terrier.loc["cairn", "is_primary"]
    # the compound names only the terrier: monosemous, primary with confidence 1
    assert terrier.loc["cairn_terrier", "is_primary"]
    assert terrier.loc["cairn_terrier", "primary_confidence"] == 1
    assert terrier.loc["cairn_terrier", "vector_from"] == "words"
    assert terrier.loc["cairn", "zipf_frequency"] > tables.rare_zipf


def test_labels_build_cli_writes_everything_deterministically(tmp_path, sense_model):
    classes = tmp_path / "classes.txt"
    classes.write_text("\n".join(CLASSES) + "\n")
    outputs = []
    for name in ("a", "b"):
        out = tmp_path / name
        argv = ["labels", "build", "configs/labels.yaml", "--out", str(out), "--classes", str(classes)]
        assert main(argv) == 0
        outputs.append(out)
    files = sorted(p.name for p in outputs[0].iterdir())
    assert files == [
        "class_vectors.npz",
        "classes.csv",
        "exclusion_reasons.png",
        "label_frequency.png",
        "lemmas.csv",
        "manifest.json",
        "report.md",
    ]
    for name in files:
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name
    manifest = read_manifest_verified(outputs[0], LABELS_FORMAT)
    assert manifest["tool"] == "imagenet-zsl labels build"
    assert manifest["summary"]["classes"] == len(CLASSES)
    assert manifest["summary"]["reasons"]["secondary_meaning"] == 2
    assert {o["path"] for o in manifest["files"]} == set(files) - {"manifest.json"}
    assert manifest["inputs"]["classes"]["name"] == "classes.txt"
    report = (outputs[0] / "report.md").read_text()
    assert "label shared with another WordNet concept" in report and "rare label" in report
    frame = pd.read_csv(outputs[0] / "classes.csv", keep_default_na=False)
    assert frame.set_index("wnid")["exclusion_reasons"].to_dict() == CLASSES
    vectors = ClassVectors.load(outputs[0] / "class_vectors.npz")
    assert vectors.missing == ["n00006024"] and sorted(vectors.wnids) == sorted(set(CLASSES) - {"n00006024"})


def test_bad_config_writes_nothing(tmp_path, capsys):
    config = tmp_path / "labels.yaml"
    config.write_text("vectors: glove-6b-50d\nfrequency: {min_cont: 50}\n")
    out = tmp_path / "out"
    assert main(["labels", "build", str(config), "--out", str(out)]) == 2
    assert "unknown key 'min_cont' (" in capsys.readouterr().err
    assert not out.exists()
