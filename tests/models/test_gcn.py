"""GCNZ, SGCN and DGP: propagation matrices by hand, shapes, gradients, transfer on a hierarchy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import create
from imagenet_zsl.models.gcn import _build_network, _torch_sparse, ancestor_hops, normalized_adjacency
from tests.models.problems import Problem, accuracy
from tests.toy import TOY_EDGES

FAST = {"epochs": 300, "lr": 0.003, "dropout": 0.0, "weight_decay": 0.0, "classifier": "softmax"}


def test_normalised_adjacency_by_hand():
    graph = ClassGraph.from_edges([("p", "a"), ("p", "b")])  # star: p has degree 2 (+1 self loop)
    row = normalized_adjacency(graph.adjacency, "row").toarray()
    p, a, b = (graph.index[w] for w in "pab")
    assert row[p, p] == pytest.approx(1 / 3) and row[p, a] == pytest.approx(1 / 3)
    assert row[a, a] == pytest.approx(1 / 2) and row[a, p] == pytest.approx(1 / 2) and row[a, b] == 0
    sym = normalized_adjacency(graph.adjacency, "sym").toarray()
    assert sym[p, a] == pytest.approx(1 / np.sqrt(3 * 2)) and sym[a, a] == pytest.approx(1 / 2)
    np.testing.assert_allclose(sym, sym.T)


def test_ancestor_hops_group_ancestors_by_shortest_upward_distance():
    graph = ClassGraph.from_edges(TOY_EDGES)
    hops = ancestor_hops(graph)

    def at(k: int, node: str) -> set[str]:
        return {graph.wnids[j] for j in hops[k - 1][graph.index[node]].indices}

    assert at(1, "m") == {"a2", "b1"}
    assert at(2, "m") == {"A", "B"}
    assert at(3, "m") == {"root"}
    assert at(1, "a31") == {"a3"} and at(3, "a31") == {"root"}
    assert len(hops) == 3
    merged = ancestor_hops(graph, max_hops=2)
    assert len(merged) == 2
    assert {graph.wnids[j] for j in merged[1][graph.index["m"]].indices} == {"A", "B", "root"}


@pytest.mark.parametrize("attention", [False, True])
def test_every_parameter_receives_a_gradient(attention):
    graph = ClassGraph.from_edges(TOY_EDGES)
    groups = [[_torch_sparse(normalized_adjacency(graph.adjacency, "row"), "cpu")]]
    if attention:
        groups = [
            [
                _torch_sparse(normalized_adjacency(graph.adjacency, "row"), "cpu"),
                _torch_sparse(np.eye(len(graph)), "cpu"),
            ]
        ]
    torch.manual_seed(0)
    network = _build_network([5, 7, 3], groups * 2, attention, dropout=0.0, negative_slope=0.2)
    output = network(torch.randn(len(graph), 5))
    assert output.shape == (len(graph), 3)
    np.testing.assert_allclose(output.norm(dim=1).detach().numpy(), 1.0, rtol=1e-5)
    output[:4, 0].sum().backward()
    for name, parameter in network.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize("name,hidden", [("sgcn", [32]), ("dgp", [32]), ("gcnz", [32, 32, 16, 16, 16])])
def test_gcn_models_transfer_on_a_simulated_hierarchy(name, hidden):
    problem = Problem(groups=6, leaves=5)  # 6 unseen classes, one per group: chance 1/6
    data = problem.seen_data()
    model = create(name, hidden=hidden, **FAST).fit(data, problem.semantics, problem.graph)
    prototypes = model.class_prototypes(problem.unseen + problem.seen)
    assert prototypes.shape == (len(problem.leaves), data.features.shape[1] + 1)
    np.testing.assert_allclose(np.linalg.norm(prototypes, axis=1), 1.0, rtol=1e-5)
    assert model.embed_images(data.features[:3]).shape == (3, data.features.shape[1] + 1)
    assert model.fit_info_["loss_last_epoch"] < 0.5 * model.fit_info_["loss_first_epoch"]
    features, labels = problem.draw(problem.unseen)
    assert accuracy(model, features, labels, problem.unseen) > 2 / 6
    if name == "dgp":
        for weights in model.fit_info_["attention"]:
            assert sum(weights) == pytest.approx(1.0, abs=1e-3)


def test_gcn_is_deterministic_for_a_seed_and_rejects_unknown_classes(problem):
    data = problem.seen_data()
    params = {"hidden": [8], "epochs": 5, "dropout": 0.5, "classifier": "softmax", "seed": 3}
    first = create("sgcn", **params).fit(data, problem.semantics, problem.graph)
    second = create("sgcn", **params).fit(data, problem.semantics, problem.graph)
    np.testing.assert_array_equal(first.node_outputs_, second.node_outputs_)
    other = create("sgcn", **{**params, "seed": 4}).fit(data, problem.semantics, problem.graph)
    assert not np.array_equal(first.node_outputs_, other.node_outputs_)
    with pytest.raises(UserInputError, match="not nodes"):
        first.class_prototypes(["nowhere"])
    with pytest.raises(UserInputError, match="class graph"):
        create("sgcn", **params).fit(data, problem.semantics, None)


def test_receptive_rows_by_hand_and_restricted_forward_is_exact():
    """Training on the seen classes' receptive field: a path a-b-c-d-e with target e needs, for two
    row-normalised layers, rows {d, e} from layer 1 and inputs {c, d, e}; the restricted network
    gives the full network's outputs at the targets (same parameters)."""
    from imagenet_zsl.models.gcn import receptive_rows

    graph = ClassGraph.from_edges([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")])
    a = normalized_adjacency(graph.adjacency, "row")
    target = np.array([graph.index["e"]])
    rows = receptive_rows([[a], [a]], target)
    assert [{graph.wnids[i] for i in r} for r in rows] == [{"c", "d", "e"}, {"d", "e"}, {"e"}]
    torch.manual_seed(0)
    full = [[_torch_sparse(a, "cpu")]] * 2
    network = _build_network([3, 4, 2], full, False, dropout=0.0, negative_slope=0.2)
    x = torch.randn(len(graph), 3)
    restricted = [[_torch_sparse(a[rows[i + 1]][:, rows[i]], "cpu")] for i in range(2)]
    with torch.no_grad():
        np.testing.assert_allclose(
            network(x[torch.from_numpy(rows[0])], restricted).numpy(), network(x)[target].numpy(), atol=1e-6
        )


def test_gcnz_defaults_match_the_reference():
    """Wang et al.'s zero-shot-gcn as run: 350 epochs, no bias, the mask-mean-scaled summed loss, no dropout
    (its placeholder is never fed); dropout, when set, before the last two of the six layers only.
    SGCN keeps dropout everywhere, biases and the mean loss (as options for GCNZ)."""
    gcnz, sgcn = create("gcnz"), create("sgcn")
    assert (gcnz.params["dropout_layers"], gcnz.params["bias"], gcnz.params["loss"]) == (
        2,
        False,
        "mask_mean",
    )
    assert gcnz.params["dropout"] == 0.0 and sgcn.params["dropout"] == 0.5
    # train_gcn.py's epochs flag; the shipped config says the same
    assert gcnz.params["epochs"] == 350 and sgcn.params["epochs"] == 3000
    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs/models/gcnz.yaml").read_text())
    assert config["model"] == "gcnz" and config["params"]["epochs"] == 350
    assert (sgcn.params["dropout_layers"], sgcn.params["bias"], sgcn.params["loss"]) == ("all", True, "mean")
    graph = ClassGraph.from_edges(TOY_EDGES)
    ops = [[_torch_sparse(normalized_adjacency(graph.adjacency, "sym"), "cpu")]] * 6
    network = _build_network([5, 8, 8, 8, 8, 8, 3], ops, False, 0.5, 0.2, bias=False, dropout_layers=2)
    assert [layer.rate for layer in network.layers] == [0.0, 0.0, 0.0, 0.0, 0.5, 0.5]
    assert all(layer.linear.bias is None for layer in network.layers)
    with pytest.raises(UserInputError):
        create("gcnz", dropout_layers=-1)
    with pytest.raises(UserInputError):
        create("gcnz", loss="max")


def test_loss_scales_by_hand():
    """GCNZ's mask_mse_loss: the 0/1 mask over N = 40 nodes with 10 seen has mean 1/4; divided by it
    the seen rows are scaled by 4 and squared inside the L2 loss: 16 times the plain sum."""
    from imagenet_zsl.models.gcn import loss_scale

    assert loss_scale("mask_mean", 40, 10) == 16.0
    assert loss_scale("sum", 40, 10) == 1.0
    assert loss_scale("mean", 40, 10) == pytest.approx(0.1)


def test_gcn_losses_differ_by_their_factor_only(problem):
    """Same seed, same initial network: the first epoch's loss (before any step) of ``mask_mean``
    is (N/N_seen)² times that of ``sum`` and ``mean`` is 1/N_seen times it; N = 16 graph nodes
    (root, 3 groups, 12 leaves), 9 seen."""
    data = problem.seen_data()
    params = {"hidden": [8, 8], "epochs": 1, "classifier": "softmax", "seed": 2}
    first = {
        loss: create("gcnz", loss=loss, **params).fit(data, problem.semantics, problem.graph).fit_info_
        for loss in ("sum", "mask_mean", "mean")
    }
    assert len(problem.graph) == 16 and len(problem.seen) == 9
    base = first["sum"]["loss_first_epoch"]
    assert first["mask_mean"]["loss_first_epoch"] == pytest.approx((16 / 9) ** 2 * base, rel=1e-5)
    assert first["mean"]["loss_first_epoch"] == pytest.approx(base / 9, rel=1e-5)
    assert first["mask_mean"]["loss_scale"] == pytest.approx((16 / 9) ** 2)


def test_gcn_reads_its_loss_once_and_records_the_same_history(problem, monkeypatch):
    from imagenet_zsl.models import gcn
    from tests.models.test_common import check_losses_read_once

    data = problem.seen_data()

    def fit(epochs: int) -> dict:
        params = {"hidden": [8], "epochs": epochs, "classifier": "softmax", "seed": 3}
        return create("dgp", **params).fit(data, problem.semantics, problem.graph).fit_info_

    check_losses_read_once(monkeypatch, gcn, fit)
