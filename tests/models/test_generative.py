"""GFZSL: Gaussian log-likelihood as a dot product, and its regressions, against hand computations."""

from __future__ import annotations

import numpy as np
from scipy.stats import multivariate_normal

from imagenet_zsl.models.base import SeenData, create
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.models.problems import accuracy


def _two_class_data():
    # class a: images (0,0),(2,0) → mean (1,0), variance (1,0 floored); class b: (0,2),(0,4)
    features = np.array([[0, 0], [2, 0], [0, 2], [0, 4]], np.float32)
    labels = np.array([0, 0, 1, 1])
    semantics = ClassVectors(["a", "b", "u"], np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]))
    return SeenData(features, labels, ["a", "b"]), semantics


def test_gfzsl_regresses_means_exactly_at_zero_regularisation():
    data, semantics = _two_class_data()
    model = create("gfzsl", lam_mean=0.0, lam_var=0.0, features="none", semantic_norm="none")
    model.fit(data, semantics)
    mu, var = model.gaussians(["a", "b", "u"])
    np.testing.assert_allclose(mu[:2], [[1, 0], [0, 3]], atol=1e-9)
    np.testing.assert_allclose(var[0, 0], 1.0, atol=1e-9)  # class a, dimension 0: ((0-1)² + (2-1)²) / 2
    # u = (a + b) / 2 and the regression is affine: its mean is the average, its log-variance too
    np.testing.assert_allclose(mu[2], [0.5, 1.5], atol=1e-9)
    np.testing.assert_allclose(np.log(var[2]), np.log(var[:2]).mean(axis=0), atol=1e-9)


def test_gfzsl_scores_are_gaussian_log_likelihoods():
    data, semantics = _two_class_data()
    model = create("gfzsl", lam_mean=0.1, lam_var=0.1, features="none", semantic_norm="none")
    model.fit(data, semantics)
    x = np.array([[0.5, 1.0], [1.0, 3.0]], np.float32)
    scores = model.embed_images(x) @ model.class_prototypes(["a", "b", "u"]).T
    mu, var = model.gaussians(["a", "b", "u"])
    expected = np.array(
        [[multivariate_normal(mu[c], np.diag(var[c])).logpdf(row) for c in range(3)] for row in x]
    )
    constant = np.log(2 * np.pi)  # the dot product drops -D/2 log 2π, the same for every class
    np.testing.assert_allclose(scores, expected + constant, rtol=1e-4, atol=1e-3)


def test_gfzsl_transfers(problem):
    model = create("gfzsl").fit(problem.seen_data(), problem.semantics)
    features, labels = problem.draw(problem.unseen)
    assert accuracy(model, features, labels, problem.unseen) >= 0.6  # chance: 1/3
