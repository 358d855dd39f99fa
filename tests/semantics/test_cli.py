"""`imagenet-zsl labels vectors|sense` end to end (tiny vector files written here, real WordNet)."""

from __future__ import annotations

import numpy as np

from imagenet_zsl.cli import main
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.vector_files import load_class_vector_file

GLOVE = "cairn 1 0 0\nterrier 0 1 0\ndog 0 0 1\nstone 1 1 0\n"


def _config(tmp_path, vectors: str) -> str:
    (tmp_path / "tiny.txt").write_text(vectors)
    config = tmp_path / "labels.yaml"
    config.write_text("vectors: {source: tiny.txt, format: glove}\n")  # relative to the config's folder
    return str(config)


def test_vectors_npz_and_parquet(tmp_path, capsys):
    config = _config(tmp_path, GLOVE)
    assert main(["labels", "vectors", config, "--out", str(tmp_path / "cv.npz")]) == 0
    out = capsys.readouterr().out
    vectors = ClassVectors.load(tmp_path / "cv.npz")
    assert len(vectors) + len(vectors.missing) == 21_842
    assert f"coverage: {len(vectors)} of the 21,841 ImageNet-21K (fall11) classes have vectors" in out
    # cairn (n07273802) = cairn; cairn terrier = unit(unit(cairn) + unit(mean(cairn, terrier)))
    np.testing.assert_allclose(vectors.get(["n07273802"])[0], [1, 0, 0], atol=1e-6)
    expected = np.array([1 + np.sqrt(0.5), np.sqrt(0.5), 0])
    np.testing.assert_allclose(vectors.get(["n02096177"])[0], expected / np.linalg.norm(expected), atol=1e-6)
    assert "n01440764" in vectors.missing  # tench: no word of it in this vocabulary

    assert main(["labels", "vectors", config, "--out", str(tmp_path / "cv.parquet")]) == 0
    same = load_class_vector_file(tmp_path / "cv.parquet")
    assert same.wnids == vectors.wnids and same.missing == vectors.missing
    np.testing.assert_array_equal(same.matrix, vectors.matrix)


def test_bad_vector_file_fails_cleanly(tmp_path, capsys):
    config = _config(tmp_path, "cairn 1 0 0\nterrier 0 1\n")
    out = tmp_path / "cv.npz"
    assert main(["labels", "vectors", config, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "tiny.txt:2: expected a word and 3 numbers, found 2" in err
    assert err.count("\n") == 1
    assert not out.exists() and not list(tmp_path.glob(".cv.npz*"))


def test_sense_marks_the_primary_meaning(capsys):
    assert main(["labels", "sense", "cairn", "--config", "configs/labels.yaml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    memorial = next(line for line in lines if "n07273802" in line)
    terrier = next(line for line in lines if "n02096177" in line)
    assert memorial.lstrip().startswith("*") and not terrier.lstrip().startswith("*")
    assert "1,377" in terrier  # fall11 images of the ImageNet class
    assert lines[-1].startswith("primary meaning: n07273802 cairn.n.01 (an ImageNet class)")


def test_sense_all_lists_the_senses_that_are_no_imagenet_class(capsys):
    """``--all`` (the options' ``all_senses``) adds the noun senses without an ImageNet class."""
    argv = ["labels", "sense", "crane", "--config", "configs/labels.yaml"]
    assert main(argv) == 0
    classes_only = capsys.readouterr().out
    assert main([*argv, "--all"]) == 0
    every_sense = capsys.readouterr().out
    assert "n10914447" not in classes_only and "n10914447       -" in every_sense  # Stephen Crane
    assert "n02012849" in classes_only and len(every_sense.splitlines()) == len(classes_only.splitlines()) + 3


def test_sense_of_an_unknown_word(capsys):
    assert main(["labels", "sense", "qwzxv"]) == 2
    assert "not a WordNet 3.0 noun" in capsys.readouterr().err
