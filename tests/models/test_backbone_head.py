"""The backbone's own classifier stored with the features (``head.npz``, issue 23 §4): the seen
classifier takes it as it is, and ConSE, trivial and the GCN models then need no seen-class image."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.checksums import sha256_bytes
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.features.shard_files import encode_head, write_manifest, write_shard
from imagenet_zsl.models import gcn
from imagenet_zsl.models.base import SeenData, create
from imagenet_zsl.models.common import softmax
from imagenet_zsl.models.persistence import load_model
from imagenet_zsl.models.seen_classifier import SeenClassifier
from imagenet_zsl.models.training import load_seen_data
from imagenet_zsl.scoring.vectors import l2_normalize
from tests.models.problems import Problem

#: a head output that is neither a node of the toy graph nor has a class vector
EXTRA = "n99999999"


def write_features(
    directory: Path,
    classes: list[str],
    features: np.ndarray,
    labels: np.ndarray,
    head: BackboneHead | None = None,
) -> Path:
    """A feature directory of ``features`` (N, D) labelled by ``labels`` (N,) indexing ``classes``,
    with ``head`` stored as ``extract`` stores it (``head.npz`` + the manifest's sha256)."""
    directory.mkdir()
    dim = int(features.shape[1])
    shards = []
    if len(labels):
        ids = [f"{classes[c]}/{i}" for i, c in enumerate(labels)]
        shards.append(write_shard(directory, "r000-s000000", features, labels, ids))
    manifest = {"classes": classes, "dim": dim, "shards": shards}
    if head is not None:
        data = encode_head(head)
        (directory / HEAD_FILE).write_bytes(data)
        manifest["head"] = {"file": HEAD_FILE, "sha256": sha256_bytes(data)}
    write_manifest(directory, manifest)
    return directory


def bayes_head(problem: Problem, extra: bool = True) -> BackboneHead:
    """The Bayes classifier of the problem's seen classes (plus ``EXTRA``), outputs in reverse
    order: logits = x · m_c / σ² - |m_c|² / 2σ²."""
    classes = list(reversed(problem.seen)) + ([EXTRA] if extra else [])
    means = np.array([problem.means[w] for w in reversed(problem.seen)])
    if extra:
        means = np.vstack([means, np.full((1, means.shape[1]), 50.0)])  # far away: never chosen
    weight = means / problem.noise**2
    bias = -0.5 * np.sum(means**2, axis=1) / problem.noise**2
    return BackboneHead(weight, bias, classes)


def no_images(problem: Problem, head: BackboneHead) -> SeenData:
    dim = len(problem.means[problem.seen[0]])
    return SeenData(np.zeros((0, dim), np.float32), np.zeros(0, np.int64), list(problem.seen), head=head)


# ----------------------------------------------------------------------------- the classifier
def test_the_stored_head_is_taken_as_it_is_and_needs_no_image():
    rng = np.random.default_rng(0)
    head = BackboneHead(rng.normal(size=(4, 5)), rng.normal(size=4), ["x", "a", "b", "c"])
    data = SeenData(np.zeros((0, 5), np.float32), np.zeros(0, np.int64), ["c", "a"], head=head)
    classifier = SeenClassifier("auto").fit(data, data.features, data.labels)
    assert classifier.kind_ == "head" and classifier.info() == {
        "classifier": "head",
        "head": "stored (head.npz)",
    }
    expected = np.vstack([head.weight.T, head.bias[None]])[:, [3, 1]]
    np.testing.assert_array_equal(classifier.weights_, expected)
    features = rng.normal(size=(3, 5)).astype(np.float32)
    by_hand = features @ head.weight[[3, 1]].T + head.bias[[3, 1]]
    np.testing.assert_allclose(classifier.logits(features), by_hand, rtol=1e-5, atol=1e-5)
    # stored logits (float16, unchecked column order) are not needed and not used
    np.testing.assert_allclose(classifier.logits(features, np.zeros((3, 4))), by_hand, rtol=1e-5, atol=1e-5)


def test_the_stored_head_wins_over_logits_and_must_read_the_features():
    rng = np.random.default_rng(1)
    head = BackboneHead(rng.normal(size=(2, 3)), rng.normal(size=2), ["a", "b"])
    features = rng.normal(size=(10, 3)).astype(np.float32)
    data = SeenData(
        features, np.arange(10) % 2, ["a", "b"], logits=np.zeros((10, 2)), logit_classes=["a", "b"], head=head
    )
    classifier = SeenClassifier("auto").fit(data, features, data.labels)
    np.testing.assert_array_equal(classifier.weights_[:3], head.weight.T)  # not the zero logits' fit
    wide = rng.normal(size=(10, 4)).astype(np.float32)
    with pytest.raises(UserInputError, match="reads 3-d features but the features have 4"):
        SeenClassifier("auto").fit(SeenData(wide, data.labels, ["a", "b"], head=head), wide, data.labels)


def test_a_head_without_some_seen_class():
    rng = np.random.default_rng(2)
    head = BackboneHead(rng.normal(size=(2, 3)), rng.normal(size=2), ["a", "b"])
    features = (rng.normal(size=(30, 3)) + 3 * np.eye(3)[np.arange(30) % 3]).astype(np.float32)
    data = SeenData(features, np.arange(30) % 3, ["a", "b", "z"], head=head)
    with pytest.raises(
        UserInputError, match=r"1 seen classes are not outputs of the backbone head \(head.npz\)"
    ):
        SeenClassifier("head").fit(data, features, data.labels)
    assert SeenClassifier("auto").fit(data, features, data.labels).kind_ == "softmax"  # from images


# ----------------------------------------------------------------------------- the models
def test_conse_with_the_stored_head_and_no_image_is_the_heads_softmax_combination():
    problem = Problem()
    head = bayes_head(problem)
    model = create("conse", top=1).fit(no_images(problem, head), problem.semantics)
    assert model.fit_info_["head"] == "stored (head.npz)"
    features, labels = problem.draw(problem.seen, images=3)
    # top 1: the unit word vector of the head's arg-max seen class
    logits = head.logits(features)[:, [head.classes.index(w) for w in problem.seen]]
    expected = l2_normalize(problem.semantics.get(problem.seen))[logits.argmax(axis=1)]
    np.testing.assert_allclose(model.embed_images(features), expected, rtol=1e-5, atol=1e-6)
    assert np.mean(logits.argmax(axis=1) == labels) > 0.9  # the head is a good classifier


def test_trivial_with_the_stored_head_and_no_image_scores_by_the_heads_posterior():
    problem = Problem()
    head = bayes_head(problem, extra=False)
    model = create("trivial").fit(no_images(problem, head), None, problem.graph)
    features, _ = problem.draw(problem.unseen, images=2)
    columns = [head.classes.index(w) for w in problem.seen]
    np.testing.assert_allclose(
        model.embed_images(features), softmax(head.logits(features)[:, columns]), rtol=1e-4, atol=1e-6
    )


def test_models_that_learn_from_images_still_need_them():
    problem = Problem()
    with pytest.raises(UserInputError, match="eszsl: no training images"):
        create("eszsl").fit(no_images(problem, bayes_head(problem)), problem.semantics)
    with pytest.raises(UserInputError, match="conse: no training images"):  # softmax: from images
        create("conse", classifier="softmax").fit(no_images(problem, bayes_head(problem)), problem.semantics)


@pytest.mark.skipif(
    "seen_classifier_data" not in inspect.getsource(gcn),
    reason="gcn.py still validates images with check_seen_data (needs seen_classifier_data)",
)
def test_sgcn_with_the_stored_head_and_no_image_regresses_the_heads_weights():
    problem = Problem()
    head = bayes_head(problem, extra=False)
    model = create("sgcn", hidden=[8], epochs=2).fit(
        no_images(problem, head), problem.semantics, problem.graph
    )
    assert model.fit_info_["head"] == "stored (head.npz)"
    assert model.class_prototypes(problem.unseen).shape == (len(problem.unseen), head.dim + 1)


# ----------------------------------------------------------------------------- train
def test_load_seen_data_takes_the_head_classes_as_seen_classes(tmp_path):
    problem = Problem()
    head = bayes_head(problem)
    features, labels = problem.draw(problem.unseen[:1], images=2)  # images of a non-head class only
    path = write_features(tmp_path / "f", problem.unseen[:1], features, labels, head)
    data = load_seen_data(path, head_classes=True)
    assert data.seen_wnids == head.classes and len(data.labels) == 0 and data.head is not None
    np.testing.assert_array_equal(data.head.weight, head.weight)
    assert FeatureDir(path).head() is not None
    # without head_classes: the classes with images, and the head comes along
    plain = load_seen_data(path)
    assert plain.seen_wnids == problem.unseen[:1] and len(plain.labels) == 2 and plain.head is not None


@pytest.fixture()
def head_only(tmp_path: Path) -> tuple[Problem, Path]:
    """A feature directory with the backbone head and images of one non-seen class only; class
    vectors of every toy class; the toy graph as an edge file."""
    problem = Problem()
    features, labels = problem.draw(problem.unseen[:1], images=3)
    write_features(tmp_path / "features", problem.unseen[:1], features, labels, bayes_head(problem))
    problem.semantics.save(tmp_path / "vectors.npz")
    edges = [(p, c) for c in problem.wnids for p in problem.graph.parents(c)]
    (tmp_path / "graph.tsv").write_text("".join(f"{p}\t{c}\n" for p, c in edges))
    return problem, tmp_path


def _train(root: Path, text: str, name: str) -> int:
    config = root / f"{name}.yaml"
    config.write_text(text.format(root=root))
    return main(
        ["train", "--config", str(config), "--features", str(root / "features"), "--out", str(root / name)]
    )


def test_train_conse_and_trivial_on_the_head_without_seen_images(head_only):
    problem, root = head_only
    assert _train(root, "model: conse\nsemantics: {root}/vectors.npz\n", "conse") == 0
    manifest = json.loads((root / "conse" / "manifest.json").read_text())
    inputs = manifest["inputs"]
    head_sha = json.loads((root / "features" / "manifest.json").read_text())["head"]["sha256"]
    assert inputs["backbone_head"] == {"file": "head.npz", "sha256": head_sha} and inputs["images"] == 0
    assert inputs["seen_classes"] == len(problem.seen)  # the head's classes less EXTRA (no vector)
    assert inputs["seen_classes_without_vector"] == [EXTRA]
    assert manifest["fit"] == {"classifier": "head", "head": "stored (head.npz)"}
    model = load_model(root / "conse")
    features, labels = problem.draw(problem.unseen, images=10)
    scores = model.embed_images(features) @ model.class_prototypes(problem.unseen).T
    assert np.mean(scores.argmax(axis=1) == labels) > 0.5  # chance: 1/3

    assert _train(root, "model: trivial\ngraph: {root}/graph.tsv\n", "trivial") == 0
    inputs = json.loads((root / "trivial" / "manifest.json").read_text())["inputs"]
    assert inputs["seen_classes"] == len(problem.seen) and inputs["seen_classes_outside_graph"] == [EXTRA]


def test_train_eszsl_and_select_on_a_head_without_seen_images_are_one_line_errors(head_only, capsys):
    _, root = head_only
    assert _train(root, "model: eszsl\nsemantics: {root}/vectors.npz\n", "eszsl") == 2
    assert "needs images of at least 2 seen classes" in capsys.readouterr().err
    text = "model: conse\nsemantics: {root}/vectors.npz\nselect: {{grid: default}}\n"
    assert _train(root, text, "conse") == 2
    err = capsys.readouterr().err.strip()
    assert "select: choosing hyper-parameters needs images of at least 2 seen classes" in err
    assert "0 of the 9 have some" in err and len(err.splitlines()) == 1


def test_select_with_the_head_validates_on_the_seen_classes_that_have_images(tmp_path):
    """conse.yaml selects `top`: with the head, the validation classes are drawn from the seen
    classes with images (here 3 of 9), and the other 6 fit through the head without images."""
    problem = Problem()
    with_images = [problem.seen[i] for i in (0, 4, 8)]
    features, labels = problem.draw(with_images, images=4)
    write_features(tmp_path / "features", with_images, features, labels, bayes_head(problem, extra=False))
    problem.semantics.save(tmp_path / "vectors.npz")
    text = (
        "model: conse\nsemantics: {root}/vectors.npz\nselect: {{grid: {{top: [1, 3]}}, val_fraction: 0.5}}\n"
    )
    assert _train(tmp_path, text, "conse") == 0
    manifest = json.loads((tmp_path / "conse" / "manifest.json").read_text())
    selection = manifest["selection"]
    # round(0.5 * 9) = 4 wanted, 3 have images: all three validate, the 6 others fit
    assert selection["val_classes"] == sorted(with_images) and selection["fit_classes"] == 6
    assert [row["top"] for row in selection["grid"]] == [1, 3]
    assert manifest["inputs"]["images"] == 12 and manifest["fit"]["head"] == "stored (head.npz)"
