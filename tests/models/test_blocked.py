"""Training at ImageNet scale (issue 27): the seen features are a row source read block by block
(ShardRows over memory-mapped shards), the closed forms accumulate sufficient statistics, and the
full-batch L-BFGS trainers sum loss and gradient over blocks. Blocked fits must equal in-memory
fits up to float rounding, whatever the block size."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from imagenet_zsl.features.feature_dir import FeatureDir, ShardRows
from imagenet_zsl.features.shard_files import write_manifest, write_shard
from imagenet_zsl.models import common, embedding, generative
from imagenet_zsl.models.base import SeenData, create, read_rows
from imagenet_zsl.models.common import (
    LabelRows,
    blocked_loss,
    column_moments,
    fit_linear_lbfgs,
    tensor_blocks,
)
from imagenet_zsl.models.selection import score_images
from imagenet_zsl.models.training import load_seen_data
from tests.models.problems import Problem

CLASSES = [f"n{i:08d}" for i in range(5)]


def _feature_dir(tmp_path, sizes=(7, 11, 5), dim=6, seed=0, logits=False):
    """A feature directory of len(sizes) shards; returns (path, all features float16-exact float32,
    labels, logits or None) in row order."""
    rng = np.random.default_rng(seed)
    records, feats, labs, logs = [], [], [], []
    for index, rows in enumerate(sizes):
        x = rng.normal(size=(rows, dim)).astype(np.float16).astype(np.float32)
        y = rng.integers(0, len(CLASSES), rows)
        z = rng.normal(size=(rows, len(CLASSES))).astype(np.float16).astype(np.float32) if logits else None
        records.append(
            write_shard(tmp_path, f"r000-s{index:06d}", x, y, [f"{index}/{i}" for i in range(rows)], z)
        )
        feats.append(x)
        labs.append(y)
        logs.append(z)
    manifest = {"classes": CLASSES, "dim": dim, "shards": records}
    if logits:
        manifest["logits"] = {"classes": CLASSES}
    write_manifest(tmp_path, manifest)
    return tmp_path, np.concatenate(feats), np.concatenate(labs), np.concatenate(logs) if logits else None


def test_shard_rows_read_the_selected_rows_as_float32(tmp_path):
    path, x, y, z = _feature_dir(tmp_path, logits=True)
    wanted = CLASSES[1:4]
    rows, labels, logits = FeatureDir(path).mapped(wanted, with_logits=True)
    keep = np.isin(y, [1, 2, 3])
    expected, expected_logits = x[keep], z[keep]
    assert isinstance(rows, ShardRows) and rows.shape == expected.shape and len(rows) == keep.sum()
    np.testing.assert_array_equal(labels, y[keep])
    np.testing.assert_array_equal(rows[:], expected)
    np.testing.assert_array_equal(rows[3:12], expected[3:12])  # across a shard boundary
    np.testing.assert_array_equal(rows[::3], expected[::3])
    order = np.array([9, 0, 4, 4, 1, len(rows) - 1])  # any order, repeats
    np.testing.assert_array_equal(rows[order], expected[order])
    mask = np.arange(len(rows)) % 2 == 0
    np.testing.assert_array_equal(rows[mask], expected[mask])
    assert rows[order].dtype == np.float32 and rows[0:0].shape == (0, 6)
    subset = rows.take(np.flatnonzero(mask))
    np.testing.assert_array_equal(np.asarray(subset), expected[mask])
    np.testing.assert_array_equal(subset[[2, 0]], expected[mask][[2, 0]])
    np.testing.assert_array_equal(logits.columns(np.array([4, 0]))[:], expected_logits[:, [4, 0]])
    with pytest.raises(ValueError, match="increasing"):
        rows.take(np.array([3, 1]))
    with pytest.raises(IndexError):
        rows[np.array([len(rows)])]


def test_load_seen_data_reads_no_feature_and_trains_as_in_memory(tmp_path):
    path, x, y, _ = _feature_dir(tmp_path, sizes=(40, 30, 50), dim=8)
    data = load_seen_data(path)
    assert isinstance(data.features, ShardRows)
    memory = SeenData(x, y, list(CLASSES))
    np.testing.assert_array_equal(data.labels, y)
    blocks = list(data.blocks(rows=17))
    assert [len(b[1]) for b in blocks] == [17] * 7 + [1]
    np.testing.assert_array_equal(np.concatenate([b[0] for b in blocks]), x)
    rng = np.random.default_rng(1)
    from imagenet_zsl.semantics.class_vectors import ClassVectors

    vectors = ClassVectors(CLASSES, rng.normal(size=(5, 4)), source="test")
    for name, params in [("eszsl", {}), ("sync", {"max_iter": 20}), ("dap", {}), ("devise", {"epochs": 2})]:
        mapped = create(name, **params).fit(data, vectors)
        plain = create(name, **params).fit(memory, vectors)
        np.testing.assert_array_equal(mapped.scores(x, CLASSES), plain.scores(x, CLASSES))
    model = create("eszsl").fit(memory, vectors)  # score_images reads a row source in any order
    rows = np.array([5, 100, 2, 0])
    np.testing.assert_array_equal(
        score_images(model, data.features, CLASSES, rows), model.scores(x[rows], CLASSES)
    )


@pytest.mark.parametrize("block", [1, 7, 50, 10_000])
@pytest.mark.parametrize(
    "name, params",
    [
        ("eszsl", {"gamma": 0.5, "lam": 2.0}),
        ("sae", {"lam": 3.0}),
        ("ridge", {"alpha": 2.0}),
        ("ridge_s2v", {"alpha": 2.0}),
        ("gfzsl", {}),
        ("sse", {"epochs": 1}),
    ],
)
def test_closed_forms_from_blocked_statistics_equal_the_in_memory_fit(monkeypatch, name, params, block):
    problem = Problem(seed=4, dim=10, images=30)
    memory = problem.seen_data()
    reference = create(name, **params).fit(memory, problem.semantics, problem.graph)
    for module in (common, generative, embedding):
        monkeypatch.setattr(module, "BLOCK_ROWS", block)
    float16 = SeenData(memory.features.astype(np.float16), memory.labels, memory.seen_wnids)
    blocked = create(name, **params).fit(memory, problem.semantics, problem.graph)
    images, _ = problem.draw(problem.leaves, 3)
    np.testing.assert_allclose(
        blocked.scores(images, problem.leaves), reference.scores(images, problem.leaves), rtol=1e-6, atol=1e-6
    )
    create(name, **params).fit(float16, problem.semantics, problem.graph)  # float16 rows: no copy needed


@pytest.mark.parametrize("block", [1, 13, 64])
def test_column_moments_in_blocks_equal_numpy(block):
    x = np.random.default_rng(2).normal(3.0, 2.0, size=(100, 7)).astype(np.float32)
    mean, std = column_moments(x, block_rows=block)
    np.testing.assert_allclose(mean, x.astype(np.float64).mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(std, x.astype(np.float64).std(axis=0), rtol=1e-6)
    whole_mean, whole_std = column_moments(x, block_rows=100)  # one block: numpy's own, bit for bit
    np.testing.assert_array_equal(whole_mean, x.mean(axis=0))
    np.testing.assert_array_equal(whole_std, x.std(axis=0))


@pytest.mark.parametrize("loss", ["ce", "bce"])
def test_blocked_loss_and_gradient_equal_the_full_batch(loss):
    """Σ_b (n_b/N)·mean_b + penalty and its gradient, block by block, equal the full-batch ones
    (hand-checked reduction: cross-entropy and BCE are means over images)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 50)
    targets = labels if loss == "ce" else LabelRows(np.eye(3), labels)
    weight = torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float32, requires_grad=True)

    def term(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        logits = xb @ weight
        if loss == "bce":
            return torch.nn.functional.binary_cross_entropy_with_logits(logits, yb) * 3
        return torch.nn.functional.cross_entropy(logits, yb)

    values, grads = [], []
    for block in (50, 7, 1):
        weight.grad = None
        blocks = tensor_blocks(x, targets, lambda b: 2 * b, torch.device("cpu"), block_rows=block)
        values.append(float(blocked_loss(blocks, 50, term, lambda: 0.5 * (weight**2).sum())))
        grads.append(weight.grad.numpy().copy())
    np.testing.assert_allclose(values[1:], [values[0]] * 2, rtol=1e-6)
    for grad in grads[1:]:
        np.testing.assert_allclose(grad, grads[0], rtol=1e-5, atol=1e-7)


def test_lbfgs_in_blocks_reaches_the_full_batch_solution(monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(90, 5)).astype(np.float32)
    labels = rng.integers(0, 3, 90)
    settings = common.LBFGSSettings(reg=0.1, max_iter=200)
    whole = fit_linear_lbfgs(x, labels, settings, "ce", 3)
    monkeypatch.setattr(common, "LBFGS_BLOCK_ROWS", 16)
    blocked = fit_linear_lbfgs(x, labels, settings, "ce", 3)
    for a, b in zip(blocked, whole, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_blocked_fit_never_holds_a_float32_copy_of_the_features(tmp_path, monkeypatch):
    """ESZSL on 12,000 x 128 stored features with 250-row blocks: every read of the row source
    is at most one block (never the whole float32 matrix), and the numpy peak stays below a
    quarter of a float32 copy (6.1 MB).

    The read sizes are the deterministic check; the peak is measured in a fresh process, because
    tracemalloc also counts what other threads of this test process allocate meanwhile."""
    dim = 128
    path, _, y, _ = _feature_dir(tmp_path, sizes=(4000, 4000, 4000), dim=dim)
    data = load_seen_data(path)
    from imagenet_zsl.semantics.class_vectors import ClassVectors

    vectors = ClassVectors(CLASSES, np.random.default_rng(0).normal(size=(5, 4)), source="test")
    monkeypatch.setattr(common, "BLOCK_ROWS", 250)
    reads: list[int] = []
    read = ShardRows.__getitem__

    def counting(self, key):  # noqa: ANN001, ANN202 - the wrapped method's own signature
        block = read(self, key)
        reads.append(len(block))
        return block

    monkeypatch.setattr(ShardRows, "__getitem__", counting)
    monkeypatch.setattr(ShardRows, "__array__", lambda *a, **k: pytest.fail("whole matrix read"))
    create("eszsl").fit(data, vectors)
    assert reads and max(reads) <= 250
    assert read_rows(data.features, slice(0, 2)).dtype == np.float32

    script = (
        "import sys, tracemalloc, numpy as np\n"
        "from imagenet_zsl.models import common\n"
        "from imagenet_zsl.models.base import create\n"
        "from imagenet_zsl.models.training import load_seen_data\n"
        "from imagenet_zsl.semantics.class_vectors import ClassVectors\n"
        f"classes = {CLASSES!r}\n"
        "data = load_seen_data(sys.argv[1])\n"
        "vectors = ClassVectors(classes, np.random.default_rng(0).normal(size=(5, 4)), source='test')\n"
        "common.BLOCK_ROWS = 250\n"
        "model = create('eszsl')  # imports the model modules before tracing\n"
        "tracemalloc.start()\n"
        "model.fit(data, vectors)\n"
        "print(tracemalloc.get_traced_memory()[1])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    peak = int(done.stdout.split()[-1])
    assert peak < len(y) * dim * 4 / 4, peak  # about 0.85 MB
