"""CMT and SSE: their parts by hand, and transfer on a generated problem."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.models.embedding import project_simplex, simplex_mixture
from imagenet_zsl.models.registry import create
from tests.models.problems import accuracy


def test_simplex_projection_by_hand():
    # (0.5, 0.5) is on the simplex; (2, 0) projects to (1, 0); (1, 1, -1) to (0.5, 0.5, 0)
    np.testing.assert_allclose(project_simplex(np.array([[0.5, 0.5], [2.0, 0.0]])), [[0.5, 0.5], [1, 0]])
    np.testing.assert_allclose(project_simplex(np.array([[1.0, 1.0, -1.0]])), [[0.5, 0.5, 0.0]])


def test_sse_mixture_recovers_known_proportions():
    """A class whose vector is 0.3 s_0 + 0.7 s_1 of linearly independent seen vectors has exactly
    those proportions (γ = 0); a seen class is its own one-hot mixture."""
    basis = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) + 0.2
    targets = np.vstack([0.3 * basis[0] + 0.7 * basis[1], basis[2]])
    np.testing.assert_allclose(simplex_mixture(targets, basis, 0.0), [[0.3, 0.7, 0], [0, 0, 1]], atol=1e-6)


def test_cmt_ranks_by_euclidean_distance_to_the_class_vector(problem):
    model = create("cmt", epochs=5).fit(problem.seen_data(), problem.semantics)
    features, _ = problem.draw(problem.unseen, images=3)
    scores = model.embed_images(features) @ model.class_prototypes(problem.unseen).T
    vectors = problem.semantics.get(problem.unseen)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    distance = ((model.project(features)[:, None, :] - vectors[None]) ** 2).sum(axis=2)
    # score = -|f(x) - s_c|²/2 + |f(x)|²/2: the differences between classes match exactly
    np.testing.assert_allclose(scores - scores[:, :1], -(distance - distance[:, :1]) / 2, atol=1e-4)


@pytest.mark.parametrize(("name", "floor"), [("cmt", 0.6), ("sse", 0.6)])
def test_embedding_models_transfer(problem, name, floor):
    model = create(name).fit(problem.seen_data(), problem.semantics)
    assert model.fit_info_["loss_last_epoch"] < model.fit_info_["loss_first_epoch"]
    features, labels = problem.draw(problem.unseen)
    assert accuracy(model, features, labels, problem.unseen) >= floor  # chance: 1/3
