"""``imagenet-zsl predict`` (issue 23 §5): photos are embedded exactly as ``extract`` embeds them,
ranked against the label space by the model, refused on another backbone's weights, and every
user mistake is one ``error:`` line."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation import predict as predict_module
from imagenet_zsl.evaluation.model_source import ModelDirectory
from imagenet_zsl.evaluation.predict import embed_photos, recorded_decode
from imagenet_zsl.features.extract import ExtractConfig, load_backbone, run_extraction
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.finetune import _recorded_preprocessing
from imagenet_zsl.features.identity import feature_identity
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.features.transforms import Preprocessing
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.images.decode import decode_rgb
from imagenet_zsl.splits.io import read_wnid_list

CLASSES = {"n01440764": 3, "n01443537": 2}
#: a label space file: 30 hop-1 classes (a few have no GloVe vector and are left out)
SPACE = 30


def _extract_and_train(root, size=(96, 72), jpeg_draft=False):
    """tiny-test (random weights, seed 0) features of a small JPEG store of photos about ``size``
    (``extract --jpeg-draft`` when ``jpeg_draft``), and ConSE on their head."""
    store = make_store(root / "store", "tree", CLASSES, size=size)
    classes = root / "classes.txt"
    classes.write_text("".join(f"{w}\n" for w in CLASSES))
    config = ExtractConfig(
        store=str(store.root),
        classes_file=str(classes),
        backbone="tiny-test",
        out=str(root / "features"),
        weights="random",
        batch_size=4,
        workers=0,
        device="cpu",
        resize=64,
        crop=56,
        jpeg_draft=jpeg_draft,
        progress=False,
    )
    run_extraction(config)
    yaml = root / "conse.yaml"
    yaml.write_text("model: conse\nparams: {top: 5, classifier: head}\nsemantics: glove-6b-50d\n")
    model = root / "model"
    argv = ["train", "--config", str(yaml), "--features", str(root / "features"), "--out", str(model)]
    assert main(argv) == 0
    space = root / "space.txt"
    space.write_text("".join(f"{w}\n" for w in read_wnid_list("splits/hop1.txt")[:SPACE]))
    return {"root": root, "store": store, "model": model, "space": space, "features": root / "features"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Exact features (JPEGs decoded at full size, the default) and ConSE on their head."""
    return _extract_and_train(tmp_path_factory.mktemp("predict"))


@pytest.fixture(scope="module")
def drafted(tmp_path_factory):
    """``extract --jpeg-draft`` features of photos large enough to be drafted (shorter side
    180-300 px, at least twice --resize 64: decoded at 1/2 or 1/4 scale), and ConSE on them."""
    return _extract_and_train(tmp_path_factory.mktemp("predict-draft"), size=(320, 240), jpeg_draft=True)


def _argv(trained, *photos, extra=()):
    base = ["predict", *map(str, photos), "--model", str(trained["model"]), "--backbone", "tiny-test"]
    return [*base, "--weights", "random", "--resize", "64", "--crop", "56", *extra]


def _rows(text: str) -> list[tuple[str, str, float]]:
    """(photo, wnid, score) of each printed row."""
    rows, photo = [], None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            photo = line[:-1]
        match = re.match(r"^\s+\d+\. (n\d{8})  .*?([+-]\d+\.\d{4})  ", line)
        if match:
            rows.append((photo, match.group(1), float(match.group(2))))
    return rows


def _by_hand(model, features, ids, photos, space_file, k):
    """(kept classes, expected (photo, wnid, score) rows): the extracted (fp16) features of the
    same images, the model's embedding and prototypes, dot product, top ``k`` of the label-space
    classes that have a prototype."""
    source = ModelDirectory(model)
    block = FeatureDir(features).load(with_logits=False)
    rows = [list(block.ids).index(i) for i in ids]
    queries = source.encode(block.features[rows])
    kept = []
    for wnid in sorted(read_wnid_list(space_file)):
        try:
            source.prototypes([wnid])
            kept.append(wnid)
        except UserInputError:
            pass
    scores = queries @ source.prototypes(kept).T
    expected = []
    for photo, row in zip(photos, scores, strict=True):
        for j in np.argsort(-row, kind="stable")[:k]:
            expected.append((str(photo), kept[j], round(float(row[j]), 4)))
    return kept, expected


def _assert_rows(got, expected):
    assert [(p, w) for p, w, _ in got] == [(p, w) for p, w, _ in expected]
    np.testing.assert_allclose([s for *_, s in got], [s for *_, s in expected], atol=1.5e-4)


def test_predict_ranks_photos_exactly_as_their_extracted_features(trained, capsys):
    store = trained["store"]
    ids = sorted(store.good_ids)[:3]
    photos = [store.root / image_id for image_id in ids]
    capsys.readouterr()
    assert main(_argv(trained, *photos, extra=["--label-space", str(trained["space"]), "-k", "4"])) == 0
    out = capsys.readouterr().out
    kept, expected = _by_hand(trained["model"], trained["features"], ids, photos, trained["space"], 4)
    assert 0 < len(kept) < SPACE  # a few hop-1 classes have no GloVe vector: left out, and said so
    assert f"label space {trained['space']}: {len(kept)} classes" in out
    assert f"{SPACE - len(kept)} more left out, without a prototype" in out
    got = _rows(out)
    _assert_rows(got, expected)
    # each row names the first lemma and the WordNet gloss of its class
    nouns = load_wordnet_nouns()
    first = got[0][1]
    lemma = nouns.lemmas[nouns.index[first]][0].replace("_", " ")
    assert re.search(
        rf"{first}  {re.escape(lemma)} .* {re.escape(nouns.definitions[nouns.index[first]])}", out
    )


def test_label_space_all_leaves_out_the_models_seen_classes(trained, capsys):
    photo = trained["store"].root / sorted(trained["store"].good_ids)[0]
    capsys.readouterr()
    assert main(_argv(trained, photo, extra=["-k", "3"])) == 0
    out = capsys.readouterr().out
    seen = set(ModelDirectory(trained["model"]).seen_wnids() or [])
    wnids = [w for _, w, _ in _rows(out)]
    assert len(wnids) == 3 and not set(wnids) & seen
    # the backbone has its ImageNet-1K head: the 1,000 ILSVRC-2012 classes are excluded as in
    # evaluate and run (splits.label_space.training_classes), not only the model's 2 classes
    pattern = r"label space all: ([\d,]+) classes \(1,000 training classes excluded: .*; ([\d,]+) more"
    found = re.search(pattern, out)
    assert found and sum(int(g.replace(",", "")) for g in found.groups()) == 20_842


def test_a_model_fitted_on_other_weights_is_refused_unless_allowed(trained, capsys):
    photo = trained["store"].root / sorted(trained["store"].good_ids)[0]
    capsys.readouterr()
    argv = _argv(trained, photo, extra=["--seed", "1", "--label-space", str(trained["space"])])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: feature mismatch: model ") and "weights_tensors" in err
    assert "--allow-feature-mismatch" in err and "\n" not in err
    assert main([*argv, "--allow-feature-mismatch"]) == 0
    assert "WARNING: feature mismatch allowed (weights_tensors differ)" in capsys.readouterr().out


def test_user_mistakes_are_one_error_line(trained, tmp_path, capsys):
    photo = trained["store"].root / sorted(trained["store"].good_ids)[0]
    text = tmp_path / "notes.jpg"
    text.write_text("<html>not an image</html>")
    cases = [
        (_argv(trained, tmp_path / "missing.jpg"), f"error: {tmp_path / 'missing.jpg'}: photo not found"),
        (_argv(trained, text), f"error: {text}: cannot read the image"),
        (
            _argv(trained, photo, extra=["--label-space", "nosuch"]),
            "error: --label-space: label space 'nosuch' is neither 'split', 'all' nor an existing",
        ),
        (
            _argv(trained, photo, extra=["--label-space", "split"]),
            "error: --label-space split needs --split FILE",
        ),
        (
            _argv(trained, photo, extra=["--device", "gpu9"]),
            "error: --device 'gpu9': use cuda, cuda:N, cpu or auto",
        ),
        (
            ["predict", str(photo), "--model", str(tmp_path / "nomodel"), "--backbone", "tiny-test"],
            f"error: {tmp_path / 'nomodel'}: model directory not found",
        ),
    ]
    for argv, expected in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith(expected) and "\n" not in err, (argv, err)


def test_predict_as_the_readme_shows_it(trained, capsys):
    """The README's form: photos, --model, --backbone, --weights and -k, default label space (all)."""
    photo = trained["store"].root / sorted(trained["store"].good_ids)[0]
    model = str(trained["model"])
    extra = ["--weights", "random", "--resize", "64", "--crop", "56", "-k", "3"]
    assert main(["predict", str(photo), "--model", model, "--backbone", "tiny-test", *extra]) == 0
    out = capsys.readouterr().out
    assert len(_rows(out)) == 3 and f"{photo}:" in out


def test_split_names_resolve_as_in_evaluate_and_run(trained, capsys):
    """`--split` takes a published list or a committed name, as evaluate and run do (the review
    found 'dgp-2hops' refused as not a regular file); every prediction is one of its classes."""
    photo = trained["store"].root / sorted(trained["store"].good_ids)[0]
    for split in ("dgp-2hops", "hop1"):
        capsys.readouterr()
        assert main(_argv(trained, photo, extra=["--label-space", "split", "--split", split, "-k", "3"])) == 0
        wnids = [w for _, w, _ in _rows(capsys.readouterr().out)]
        listed = set(
            read_wnid_list(
                "imagenet_zsl/data/published_splits/dgp-2hops.txt" if split[0] == "d" else "splits/hop1.txt"
            )
        )
        assert len(wnids) == 3 and set(wnids) <= listed


def _decode_spy(monkeypatch):
    """The ``min_side`` of every photo ``predict`` decodes (None: full size, N: drafted to ≥ N)."""
    calls = []

    def spy(data, min_side=None):
        calls.append(min_side)
        return decode_rgb(data, min_side)

    monkeypatch.setattr(predict_module, "decode_rgb", spy)
    return calls


def test_a_model_on_drafted_features_predicts_with_the_draft_decoder(drafted, monkeypatch, capsys):
    """Features recorded with ``jpeg_draft: true`` (issue 45 §1's opt-in): predict decodes the
    photos as they were decoded for the model (drafted), with no flag, and does not refuse it."""
    store = drafted["store"]
    ids = sorted(store.good_ids)[:3]
    photos = [store.root / image_id for image_id in ids]
    calls = _decode_spy(monkeypatch)
    capsys.readouterr()
    assert main(_argv(drafted, *photos, extra=["--label-space", str(drafted["space"]), "-k", "4"])) == 0
    out = capsys.readouterr().out
    assert calls == [64, 64, 64] and "WARNING" not in out
    _, expected = _by_hand(drafted["model"], drafted["features"], ids, photos, drafted["space"], 4)
    _assert_rows(_rows(out), expected)
    # the draft matters for these photos: drafted, their features are the stored ones to the bit;
    # at full size they are others (by > 1e-3, 30 fp16 ulps at these features' size < 0.125)
    cfg = ExtractConfig("", "", "tiny-test", "", weights="random", resize=64, crop=56)
    net, _, _, pre = load_backbone(cfg)
    stored = FeatureDir(drafted["features"]).load(with_logits=False)
    stored = stored.features[[list(stored.ids).index(i) for i in ids]]
    assert not pre.jpeg_draft and stored.max() < 0.125
    np.testing.assert_array_equal(embed_photos(net, replace(pre, jpeg_draft=True), photos)[0], stored)
    assert np.abs(embed_photos(net, pre, photos)[0] - stored).max() > 1e-3


def test_a_model_on_exact_features_predicts_with_the_exact_decoder(trained, monkeypatch, capsys):
    photo = trained["store"].root / sorted(trained["store"].good_ids)[0]
    calls = _decode_spy(monkeypatch)
    assert main(_argv(trained, photo, extra=["--label-space", str(trained["space"]), "-k", "2"])) == 0
    assert calls == [None] and "WARNING" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "pre",
    [
        Preprocessing(),
        Preprocessing(64, 56, jpeg_draft=True),
        Preprocessing(288, 256, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), interpolation="bicubic", ten_crop=True),
    ],
)
def test_a_recorded_preprocessing_reads_back_as_itself(pre):
    assert Preprocessing.from_record(pre.describe()) == pre
    assert Preprocessing.from_record(json.loads(json.dumps(pre.describe()))) == pre  # as a manifest holds it


def test_a_record_without_jpeg_draft_is_the_exact_decode_for_predict_and_finetune():
    """Records written before the draft decoder existed have no ``jpeg_draft`` and decoded JPEGs at
    full size (every record since states the key: ``true`` while drafting was the default). predict
    finds such a model's preprocessing and decodes exactly; finetune reads the record the same way."""
    exact = Preprocessing(64, 56)
    legacy = {k: v for k, v in exact.describe().items() if k != "jpeg_draft"}
    weights = {"source": "file", "path": "w.pth", "sha256": "ab" * 32}
    provenance = {"dim": 8, "backbone": {"name": "tiny-test", "dim": 8, "weights": weights}}
    cases = [(legacy, False), (exact.describe(), False), (replace(exact, jpeg_draft=True).describe(), True)]
    for record, draft in cases:
        recorded = feature_identity({**provenance, "preprocessing": record})
        for given in (exact, replace(exact, jpeg_draft=True)):  # whatever load_backbone gave
            pre, identity = recorded_decode(
                given, {**provenance, "preprocessing": given.describe()}, recorded
            )
            assert pre == replace(exact, jpeg_draft=draft) and identity == recorded
        assert _recorded_preprocessing({"preprocessing": record}) == replace(exact, jpeg_draft=draft)
    # another geometry matches no record: the exact pipeline, whose identity is then refused
    other = feature_identity({**provenance, "preprocessing": Preprocessing(72, 56).describe()})
    pre, identity = recorded_decode(exact, {**provenance, "preprocessing": exact.describe()}, other)
    assert pre == exact and identity["preprocessing"] != other["preprocessing"]
    # ten crops recorded: finetune still trains on one centre crop
    tens = replace(exact, ten_crop=True).describe()
    assert _recorded_preprocessing({"preprocessing": tens}) == exact
