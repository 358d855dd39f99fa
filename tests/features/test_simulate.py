"""Simulated features over the real WordNet graph: format, determinism, the random walk, and the
structural bias it must show (trivial baseline far above chance one hop from training, near chance
far from it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.simulate import (
    SimulationConfig,
    class_means,
    load_simulation_config,
    simulation_config_from_dict,
)
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.hierarchy.universe import candidate_wnids, load_class_graph, training_wnids
from imagenet_zsl.models.base import create
from imagenet_zsl.models.training import load_seen_data
from imagenet_zsl.scoring import hit_at_k
from imagenet_zsl.semantics.class_vectors import ClassVectors

CONFIG = """
seed: 3
dim: 16
semantics: {vectors}
logits: train
train: {{classes: [training], images_per_class: 8}}
seen_test: {{images_per_class: 2}}
test: {{classes: [near.txt, far.txt], images_per_class: 6}}
"""


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    root = tmp_path_factory.mktemp("simulate")
    graph = load_class_graph("wordnet")
    train = training_wnids()
    candidates = candidate_wnids()
    distance = graph.nearest_distance(candidates, train)
    near = sorted(w for w, d in zip(candidates, distance, strict=True) if d == 1)[:120]
    far = sorted(w for w, d in zip(candidates, distance, strict=True) if 6 <= d < np.inf)[:120]
    (root / "near.txt").write_text("\n".join(near) + "\n")
    (root / "far.txt").write_text("# far from every training class\n" + "\n".join(far) + "\n")
    wnids = train + near + far
    rng = np.random.default_rng(0)
    ClassVectors(wnids, rng.normal(size=(len(wnids), 10)), source="random").save(root / "vectors.npz")
    (root / "sim.yaml").write_text(CONFIG.format(vectors=root / "vectors.npz"))
    assert main(["simulate", str(root / "sim.yaml"), "--out", str(root / "out")]) == 0
    return root, graph, train, near, far


def test_parts_are_feature_directories_that_say_they_are_simulated(simulated):
    root, _, train, near, far = simulated
    top = json.loads((root / "out" / "manifest.json").read_text())
    assert top["simulated"] is True and "SIMULATED" in top["WARNING"]
    parts = {role: FeatureDir(root / "out" / role) for role in ("train", "seen_test", "test")}
    for part in parts.values():
        assert part.simulated and "NOT extracted from images" in part.manifest["WARNING"]
        assert part.dim == 16 and not part.verify()
        assert part.manifest["tool"] == top["tool"] == "imagenet-zsl simulate"
    assert parts["train"].classes == train and parts["train"].num_rows == 8000
    assert parts["seen_test"].classes == train and parts["seen_test"].num_rows == 2000
    assert parts["test"].classes == sorted(near + far) and parts["test"].num_rows == 6 * 240
    assert parts["train"].logit_classes == train and not parts["test"].has_logits
    seen_ids = set(parts["seen_test"].load().ids)
    assert not seen_ids & set(parts["train"].load().ids)


def test_same_config_gives_the_same_bytes(simulated, tmp_path):
    root = simulated[0]
    assert main(["simulate", str(root / "sim.yaml"), "--out", str(tmp_path / "again")]) == 0
    for path in sorted((root / "out").rglob("*")):
        if path.is_file():
            twin = tmp_path / "again" / path.relative_to(root / "out")
            assert sha256_file(path) == sha256_file(twin), path.name


def test_logits_are_the_bayes_posterior_of_a_linear_head(simulated):
    root = simulated[0]
    block = FeatureDir(root / "out" / "train").load(with_logits=True)
    assert block.logits.shape == (8000, 1000)
    assert np.mean(block.logits.argmax(axis=1) == block.labels) > 0.9
    design = np.hstack([block.features, np.ones((len(block.features), 1), np.float32)])
    fitted = np.linalg.lstsq(design, block.logits, rcond=None)[0]
    residual = np.linalg.norm(design @ fitted - block.logits) / np.linalg.norm(block.logits)
    assert residual < 1e-2  # float16 storage is the only error


def test_means_walk_down_the_dag():
    # a → b, a → c, {b, c} → d: with no step d's mean is exactly the average of its parents'
    graph = ClassGraph.from_edges([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    vectors = ClassVectors(["a"], np.zeros((1, 3)))
    config = SimulationConfig(dim=5, step=0.0, root_scale=2.0, semantic_weight=0.0)
    means = class_means(graph, vectors, config, np.random.default_rng(0))
    index = graph.index
    np.testing.assert_allclose(means[index["b"]], means[index["a"]])
    np.testing.assert_allclose(means[index["d"]], (means[index["b"]] + means[index["c"]]) / 2)
    # on a random tree a child's squared distance to its parent is dim · step² on average
    rng = np.random.default_rng(1)
    edges = [(f"v{rng.integers(0, i)}", f"v{i}") for i in range(1, 600)]
    tree = ClassGraph.from_edges(edges)
    config = SimulationConfig(dim=20, step=0.5, root_scale=1.0, semantic_weight=0.0)
    means = class_means(tree, ClassVectors(["v0"], np.zeros((1, 2))), config, rng)
    gaps = [np.sum((means[tree.index[c]] - means[tree.index[p]]) ** 2) for p, c in edges]
    assert np.mean(gaps) == pytest.approx(20 * 0.25, rel=0.1)


def test_trivial_baseline_shows_the_structural_bias(simulated):
    root, graph, _, near, far = simulated
    model = create("trivial").fit(load_seen_data(root / "out" / "train"), None, graph)
    assert model.fit_info_["classifier"] == "head"
    test = FeatureDir(root / "out" / "test")
    block = test.load()
    hits = {}
    for name, classes in (("near", near), ("far", far)):
        position = {w: i for i, w in enumerate(classes)}
        labels = np.array([position.get(w, -1) for w in test.classes])[block.labels]
        rows = labels >= 0
        scores = model.embed_images(block.features[rows]) @ model.class_prototypes(classes).T
        order = np.argsort(-scores, axis=1, kind="stable")[:, :6]
        hits[name] = hit_at_k(order, labels[rows], (1, 5), topk_scores=np.take_along_axis(scores, order, 1))
    chance = 1 / 120
    assert hits["near"][1] > 15 * chance and hits["near"][5] > 0.3
    assert hits["far"][1] < 3 * chance


def test_config_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(UserInputError, match="unknown key 'nosie'.*did you mean 'noise'"):
        simulation_config_from_dict({"nosie": 1.0})
    with pytest.raises(UserInputError, match="logits = 'some'"):
        simulation_config_from_dict({"logits": "some"})
    assert simulation_config_from_dict({"logits": False}).logits == "none"
    with pytest.raises(UserInputError, match="dim = 'lots'"):
        simulation_config_from_dict({"dim": "lots"})
    with pytest.raises(UserInputError, match="images_per_class = -1"):
        simulation_config_from_dict({"test": {"images_per_class": -1}})
    (tmp_path / "sim.yaml").write_text("test: {classes: [splits/nothing-here.txt]}\nsemantics: x.npz\n")
    config = load_simulation_config(tmp_path / "sim.yaml")
    assert config.test.images_per_class == 10
    code = main(["simulate", str(tmp_path / "sim.yaml"), "--out", str(tmp_path / "out")])
    assert code == 2 and not (tmp_path / "out").exists()
    assert "nothing-here.txt: class list not found" in capsys.readouterr().err
