"""``imagenet-zsl validate`` (issue 47 §3): the verdict's rule by hand, the packaged published
figures against their sources, a FAR BELOW run end to end, and the one-line errors. The run on
the real EfficientNet-Lite0 weights and photos is in tests/test_real_weights.py."""

from __future__ import annotations

import json
import os
from fractions import Fraction
from math import comb

import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.data import ilsvrc2012_wnids
from imagenet_zsl.features import validate
from imagenet_zsl.features.backbones import BACKBONES, create_backbone, get_spec
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.manifests import read_manifest_verified

WNIDS = sorted(ilsvrc2012_wnids())[:5]


def _brute_cdf(hits: int, n: int, p: Fraction) -> Fraction:
    return sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(hits + 1))


def _published(top1: float | None) -> validate.Published:
    return validate.Published("k", top1, None, "test", "test")


@pytest.mark.parametrize("hits", [0, 29, 32, 33, 38, 60])
def test_the_verdict_is_a_one_sided_binomial_test_at_the_stated_level(hits):
    """60 images, published 76%: FAR BELOW exactly when P(X <= hits) < 0.001 for X ~ B(60, 0.74)."""
    n, published = 60, 76.0
    exact = _brute_cdf(hits, n, Fraction(74, 100))
    line, p = validate.verdict(hits, n, _published(published))
    assert p == pytest.approx(float(exact), rel=1e-9)
    assert line.startswith("FAR BELOW") == (exact < Fraction(1, 1000))
    assert line.startswith(("FAR BELOW", "consistent"))


def test_the_threshold_by_hand():
    """The largest FAR BELOW count for 60 images at 74%: 32 (P = 4.5e-4); 33 is not (1.1e-3)."""
    assert _brute_cdf(32, 60, Fraction(74, 100)) < Fraction(1, 1000) < _brute_cdf(33, 60, Fraction(74, 100))
    assert validate.verdict(32, 60, _published(76.0))[0].startswith("FAR BELOW")
    assert validate.verdict(33, 60, _published(76.0))[0].startswith("consistent")


def test_no_verdict_without_a_published_figure_or_with_too_few_images():
    assert validate.verdict(0, 1000, None) == (
        "none: no published top-1 of these weights to compare with",
        None,
    )
    assert validate.verdict(0, 1000, _published(None))[1] is None
    line, p = validate.verdict(0, validate.MIN_IMAGES - 1, _published(76.0))
    assert p is None and line == "none: 49 images are too few (a verdict needs 50 or more)"


def test_the_interval_is_clopper_pearson():
    low, high = validate.exact_interval(1, 2)  # [1 - sqrt(0.975), sqrt(0.975)] by hand
    assert low == pytest.approx(100 * (1 - 0.975**0.5)) and high == pytest.approx(100 * 0.975**0.5)
    assert validate.exact_interval(0, 10)[0] == 0.0 and validate.exact_interval(10, 10)[1] == 100.0


def test_packaged_torchvision_figures_are_the_weights_own():
    """Every registered torchvision backbone's packaged figure is its weights' own metadata."""
    import torchvision.models as tvm

    table = validate.read_published()
    registered = [get_spec(name) for name, _ in BACKBONES.items()]
    torchvision = [spec for spec in registered if spec.library == "torchvision"]
    assert len(torchvision) == 4
    for spec in torchvision:
        metrics = tvm.get_model_weights(spec.arch)[spec.weights_tag].meta["_metrics"]["ImageNet-1K"]
        entry = validate.published_for(spec.name, {"source": "torch-hub-cache"}, table)
        assert (entry.top1, entry.top5) == (metrics["acc@1"], metrics["acc@5"]), spec.name
        assert "pytorch.org/vision" in entry.source
    lite0 = validate.published_for(
        "timm:tf_efficientnet_lite0",
        {"source": "hf-cache", "repo": "timm/tf_efficientnet_lite0.in1k@main"},
        table,
    )
    assert (lite0.top1, lite0.top5) == (74.846, 92.180) and "results-imagenet.csv" in lite0.source
    # the tensors' digest comes first, whatever name or file brought them; unknown: none
    by_tensors = {
        "source": "file",
        "tensors_sha256": "6743f0e4e8919af03a281ff934ce4d244dd103075bb1143011be3c44575439cf",
    }
    assert validate.published_for("timm:tf_efficientnet_lite0", by_tensors, table).top1 is None
    assert validate.published_for("resnet50", {"source": "file", "tensors_sha256": "00"}, table) is None
    assert validate.published_for("tiny-test", {"source": "random"}, table) is None


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """60 generated images of 5 ImageNet-1K classes (3 of them broken files) and 3 of another class."""
    root = tmp_path_factory.mktemp("validate")
    return make_store(root / "store", "tree", {**{w: 12 for w in WNIDS}, "n09818022": 3}, size=(80, 64))


def _argv(*extra: str) -> list[str]:
    base = ["--backbone", "tiny-test", "--weights", "random", "--resize", "64", "--crop", "56"]
    return [*base, "--device", "cpu", "--workers", "0", "--no-progress", *extra]


def test_far_below_end_to_end_exits_1_and_writes_its_record(store, tmp_path, monkeypatch, capsys):
    """Random weights against a (pretend) published 76%: FAR BELOW, exit status 1; the record and
    its manifest are written; images of other classes are left out and counted."""
    digest = create_backbone("tiny-test", "random")[1].tensors_sha256
    table = {f"tensors:{digest}": validate.Published(f"tensors:{digest}", 76.0, 93.0, "test", "a test")}
    monkeypatch.setattr(validate, "read_published", lambda path=None: table)
    out = tmp_path / "check"
    code = main(["validate", "--store", str(store.root), "--out", str(out), *_argv()])
    printed = capsys.readouterr().out
    assert code == 1, printed
    # the generated store holds 3 broken files (truncated, empty, HTML): counted, not scored
    assert "images: 57 of ImageNet-1K classes (3 of other classes left out, 3 undecodable)" in printed
    assert "backbone: tiny-test (RANDOM weights) @" in printed and "verdict: FAR BELOW" in printed
    record = json.loads((out / "validate.json").read_text())
    assert record["images"] == 57 and record["published"]["top1"] == 76.0
    assert record["verdict"].startswith("FAR BELOW") and record["p_value"] < validate.ALPHA
    manifest = read_manifest_verified(out, validate.FORMAT)
    assert manifest["tool"] == validate.TOOL and manifest["parameters"]["backbone"] == "tiny-test"


def _one_error(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_image_list_mistakes_are_one_line(tmp_path, capsys):
    (tmp_path / "a.png").write_bytes(b"x")
    listing = tmp_path / "list.tsv"
    cases = {
        "a.png\tn09818022\n": "list.tsv:1: n09818022 is not an ImageNet-1K (ILSVRC-2012) class",
        "a.png n01440764\n": "list.tsv:1: expected 'path<TAB>wnid'",
        "# photos\nmissing.png\tn01440764\n": "missing.png: image of line 2 not found",
        "a.png\tn01440764\na.png\tn01443537\n": "list.tsv:2: a.png is listed twice (line 1)",
        "# nothing\n": "lists no image",
    }
    for text, message in cases.items():
        listing.write_text(text)
        assert message in _one_error(capsys, ["validate", "--images", str(listing), *_argv()])
    os.mkfifo(tmp_path / "pipe.png")
    listing.write_text("pipe.png\tn01440764\n")
    assert "pipe.png: the image of line 1 is a FIFO" in _one_error(
        capsys, ["validate", "--images", str(listing), *_argv()]
    )
    assert "--store DIR or --images FILE" in _one_error(capsys, ["validate", *_argv()])


def test_a_backbone_without_an_imagenet_1k_head_is_refused(store, capsys):
    argv = ["validate", "--store", str(store.root), "--backbone", "timm:vit_tiny_patch16_224.augreg_in21k"]
    line = _one_error(
        capsys, [*argv, "--weights", "random", "--device", "cpu", "--workers", "0", "--no-progress"]
    )
    assert "has no ImageNet-1K classifier" in line
