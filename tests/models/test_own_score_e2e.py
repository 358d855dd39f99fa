"""``evaluate`` on a saved LATEM model directory ranks by the max over its K maps (issue 33 §4),
end to end through the command; needs evaluation/run/inputs.py to build its searchers with
``source.searcher(classes, m, device)``."""

from __future__ import annotations

import json

import numpy as np

from imagenet_zsl.cli import main
from imagenet_zsl.models.base import create
from imagenet_zsl.models.persistence import save_model
from imagenet_zsl.semantics.class_vectors import ClassVectors
from tests.evaluation.evaluation_fixtures import write_feature_dir
from tests.models.problems import Problem


def test_evaluate_ranks_latem_by_the_max_over_its_maps(tmp_path):
    problem = Problem()
    rename = {w: f"n{i:08d}" for i, w in enumerate(problem.semantics.wnids)}  # wnid-shaped names
    data = problem.seen_data()
    data.seen_wnids = [rename[w] for w in data.seen_wnids]
    semantics = ClassVectors([rename[w] for w in problem.semantics.wnids], problem.semantics.matrix)
    model = create("latem", epochs=3, k=3).fit(data, semantics)
    saved = save_model(model, tmp_path / "latem")
    features, labels = problem.draw(problem.unseen, images=8)
    features = features.astype(np.float16).astype(np.float32)  # as the shards store them
    wnids = [rename[w] for w in problem.unseen]
    write_feature_dir(tmp_path / "features", labels, features, shard_rows=5, classes=wnids)
    (tmp_path / "split.txt").write_text("\n".join(wnids) + "\n")
    argv = ["evaluate", "--features", str(tmp_path / "features"), "--split", str(tmp_path / "split.txt")]
    argv += ["--model", str(saved), "--k", "1", "2", "--graph", "none", "--no-label-frequency"]
    assert main([*argv, "--device", "cpu", "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out" / "topk"
    classes = json.loads((out / "classes.json").read_text())
    ids = np.load(out / "test.unseen.ids.npy")
    rows = np.load(out / "test.rows.npy")
    order = [wnids.index(w) for w in classes["unseen"]] if isinstance(classes, dict) else None
    exact = model.scores(features[rows], wnids)
    if order is not None:
        exact = exact[:, order]
    best = exact.max(axis=1)
    np.testing.assert_allclose(exact[np.arange(len(rows)), ids[:, 0]], best, rtol=1e-5, atol=1e-6)
