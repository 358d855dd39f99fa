"""ConSE against a hand-computed case, and transfer on a generated problem."""

from __future__ import annotations

import numpy as np

from imagenet_zsl.models.base import SeenData, create
from imagenet_zsl.models.conse import convex_combination
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.models.problems import accuracy


def test_convex_combination_by_hand():
    posterior = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # image 0, T=2: (0.5·[1,0] + 0.3·[0,1]) / 0.8 = [0.625, 0.375]
    # image 1, T=2: 0.8·[1,1] + 0.1·[1,0] (tie between classes 0 and 1: the lower index wins) / 0.9
    np.testing.assert_allclose(
        convex_combination(posterior, vectors, 2), [[0.625, 0.375], [0.9 / 0.9, 0.8 / 0.9]], rtol=1e-6
    )
    # T=1 is the top class's vector; T >= S uses all classes
    np.testing.assert_allclose(convex_combination(posterior, vectors, 1), [[1, 0], [1, 1]])
    np.testing.assert_allclose(convex_combination(posterior, vectors, 9)[0], [0.7, 0.5], rtol=1e-6)


def test_conse_uses_the_backbone_head_posterior_and_cosine_ranking():
    """Seen classes s0, s1, s2 with word vectors; the head's logits give p = softmax(logits)."""
    seen = ["s0", "s1", "s2"]
    semantics = ClassVectors(
        seen + ["u0", "u1"],
        np.array(
            [
                [2.0, 0.0, 0.0],
                [0.0, 3.0, 0.0],
                [0.0, 0.0, 1.0],  # seen (normalised to unit inside)
                [1.0, 1.0, 0.0],
                [0.0, 0.2, 5.0],  # unseen
            ]
        ),
    )
    rng = np.random.default_rng(0)
    features = rng.normal(size=(30, 4)).astype(np.float32)
    head = rng.normal(size=(4, 3))
    logits = features @ head  # a linear head over exactly these classes
    data = SeenData(features, np.arange(30) % 3, seen, logits=logits, logit_classes=seen)
    model = create("conse", top=2).fit(data, semantics)
    image_logits = np.array([[np.log(6.0), np.log(3.0), np.log(1.0)]], dtype=np.float32)
    embedded = model.embed_images(np.zeros((1, 4), np.float32), image_logits)
    # p = [0.6, 0.3, 0.1]; top 2 → (0.6·e0 + 0.3·e1) / 0.9
    np.testing.assert_allclose(embedded, [[2 / 3, 1 / 3, 0.0]], rtol=1e-5)
    prototypes = model.class_prototypes(["u0", "u1"])
    np.testing.assert_allclose(np.linalg.norm(prototypes, axis=1), 1.0, rtol=1e-6)
    scores = embedded @ prototypes.T
    expected = np.array([(2 / 3 + 1 / 3) / np.sqrt(2), (0.2 / 3) / np.sqrt(0.04 + 25)])
    np.testing.assert_allclose(scores[0], expected, rtol=1e-5)
    assert model.fit_info_["classifier"] == "head"


def test_conse_transfers_with_a_trained_softmax_classifier(problem):
    model = create("conse", top=3, classifier="softmax").fit(problem.seen_data(), problem.semantics)
    assert model.fit_info_["classifier"] == "softmax"
    features, labels = problem.draw(problem.unseen)
    assert accuracy(model, features, labels, problem.unseen) >= 0.6  # chance: 1/3
