import numpy as np
import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.search import TopKSearcher, topk_inner_product
from imagenet_zsl.scoring import topk_from_scores

#: the numpy/BLAS path, and the torch path the GPU takes, run on the CPU
BACKENDS = [False, True]


@pytest.fixture(params=BACKENDS, ids=["numpy", "torch"])
def torch_kernel(request):
    return request.param


def brute_force(queries, prototypes, k):
    """Full score matrix, stable sort: descending score, ties by ascending class index."""
    scores = queries.astype(np.float64) @ prototypes.T.astype(np.float64)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


@pytest.mark.parametrize("seed", range(6))
def test_topk_equals_brute_force_with_many_ties(seed, torch_kernel):
    # small integer vectors: scores are exact in float32 and ties are everywhere
    rng = np.random.default_rng(seed)
    n, c, e = int(rng.integers(1, 200)), int(rng.integers(2, 80)), int(rng.integers(1, 5))
    queries = rng.integers(-2, 3, (n, e)).astype(np.float32)
    prototypes = rng.integers(-2, 3, (c, e)).astype(np.float32)
    k = int(rng.integers(1, min(c, 25) + 1))
    scores, ids = topk_inner_product(
        queries, prototypes, k, block_rows=33, device="cpu", torch_kernel=torch_kernel
    )
    ref_scores, ref_ids = brute_force(queries, prototypes, k)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(scores, ref_scores.astype(np.float32))


def test_random_real_data_matches_brute_force(torch_kernel):
    rng = np.random.default_rng(7)
    queries = rng.standard_normal((300, 64), dtype=np.float32)
    prototypes = rng.standard_normal((500, 64), dtype=np.float32)
    scores, ids = topk_inner_product(
        queries, prototypes, 21, block_rows=128, device="cpu", torch_kernel=torch_kernel
    )
    ref_scores, ref_ids = brute_force(queries, prototypes, 21)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-4)


def test_tie_order_and_boundary_keep_smallest_ids(torch_kernel):
    queries = np.ones((25, 2), np.float32)
    prototypes = np.ones((8, 2), np.float32)  # eight classes, all tied
    prototypes[5] = 2.0  # one clear winner
    scores, ids = topk_inner_product(queries, prototypes, 3, device="cpu", torch_kernel=torch_kernel)
    assert ids.tolist() == [[5, 0, 1]] * 25
    assert scores.tolist() == [[4.0, 2.0, 2.0]] * 25


def test_k_larger_than_classes_is_padded(torch_kernel):
    queries = np.array([[1.0, 0.0]], np.float32)
    prototypes = np.array([[0.0, 1.0], [2.0, 0.0]], np.float32)
    scores, ids = topk_inner_product(queries, prototypes, 4, device="cpu", torch_kernel=torch_kernel)
    assert ids.tolist() == [[1, 0, -1, -1]]
    assert scores[0, :2].tolist() == [2.0, 0.0] and np.isneginf(scores[0, 2:]).all()
    s2, i2 = topk_from_scores(queries @ prototypes.T, 4)
    np.testing.assert_array_equal(i2, ids)
    np.testing.assert_array_equal(s2, scores)


def test_bad_input_is_reported_clearly():
    prototypes = np.eye(3, dtype=np.float32)
    with pytest.raises(UserInputError, match="query dimension 4 differs from prototype dimension 3"):
        topk_inner_product(np.zeros((2, 4), np.float32), prototypes, 1)
    bad = np.zeros((3, 3), np.float32)
    bad[2, 1] = np.nan
    with pytest.raises(UserInputError, match="NaN or Inf.*row 2"):
        topk_inner_product(bad, prototypes, 1)
    with pytest.raises(UserInputError, match="prototypes"):
        TopKSearcher(np.full((2, 3), np.inf, np.float32), 1)
    with pytest.raises(UserInputError, match="empty"):
        TopKSearcher(np.zeros((0, 3), np.float32), 1)


def test_identical_prototypes_always_tie_whatever_their_column(torch_kernel):
    """Identical rows at different positions are scored once: their scores are bit-equal and the
    tie ranks count them as one tie group (BLAS may round equal rows differently by column)."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((40, 37)).astype(np.float32)
    prototypes = base[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9] * 4]  # 40 classes, each row 4 times
    queries = rng.standard_normal((64, 37)).astype(np.float32)
    searcher = TopKSearcher(prototypes, 5, device="cpu", torch_kernel=torch_kernel)
    assert searcher.duplicate_classes == 30
    labels = rng.integers(0, 40, 64)
    scores, ids, ranks = searcher.search_ranked(queries, labels)
    # class c and c + 10, c + 20, c + 30 share a row: 3 others tied, strictly above = 4 * (better rows)
    row_scores = queries @ base[:10].T
    for i, label in enumerate(labels):
        better = np.sum(row_scores[i] > row_scores[i, label % 10])
        assert (ranks.above[i], ranks.tied[i]) == (4 * better, 3)
    # the top-5 of every query: the 4 classes of its best row (ascending ids), then the next row's first
    best = np.argsort(-row_scores, axis=1, kind="stable")
    assert ids[:, :4].tolist() == [[b, b + 10, b + 20, b + 30] for b in best[:, 0]]
    assert (scores[:, :4] == scores[:, :1]).all()
    assert ids[:, 4].tolist() == best[:, 1].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_search_ranked_equals_full_score_ranks(seed, torch_kernel):
    from imagenet_zsl.scoring import true_ranks

    rng = np.random.default_rng(seed)
    queries = rng.integers(-2, 3, (150, 3)).astype(np.float32)
    prototypes = rng.integers(-1, 2, (30, 3)).astype(np.float32)
    labels = rng.integers(0, 30, 150)
    scores, ids, ranks = TopKSearcher(prototypes, 4, device="cpu", torch_kernel=torch_kernel).search_ranked(
        queries, labels
    )
    ref = true_ranks(labels, scores=queries @ prototypes.T)
    np.testing.assert_array_equal(ranks.above, ref.above)
    np.testing.assert_array_equal(ranks.tied, ref.tied)
    ref_scores, ref_ids = brute_force(queries, prototypes, 4)
    np.testing.assert_array_equal(ids, ref_ids)
    # a label of -1 (true class outside this label space) gets no rank
    _, _, none = TopKSearcher(prototypes, 4, device="cpu", torch_kernel=torch_kernel).search_ranked(
        queries[:2], np.array([-1, 0])
    )
    assert none.above[0] == 30 and none.tied[0] == 0


def test_scores_that_overflow_are_an_error(torch_kernel):
    prototypes = np.full((2, 4), 1e30, np.float32)
    with pytest.raises(UserInputError, match="overflow to inf"):
        topk_inner_product(
            np.full((1, 4), 1e30, np.float32), prototypes, 1, device="cpu", torch_kernel=torch_kernel
        )
    with pytest.raises(UserInputError, match="block-rows"):
        topk_inner_product(np.ones((1, 4), np.float32), prototypes, 1, block_rows=0)


@pytest.mark.parametrize("seed", range(3))
def test_the_device_path_gives_the_numpy_paths_lists_and_ranks_across_tiles(seed, monkeypatch):
    """The torch path (the GPU's) on the CPU, with tiles of a few rows: top-k lists and tie ranks
    identical to the numpy path's, on integer data (exact scores, ties everywhere; duplicate
    prototypes; labels outside the space)."""
    from imagenet_zsl.evaluation import torch_search

    rng = np.random.default_rng(seed)
    queries = rng.integers(-2, 3, (97, 4)).astype(np.float32)
    prototypes = rng.integers(-1, 2, (40, 4)).astype(np.float32)
    prototypes[30:] = prototypes[:10]
    labels = rng.integers(-1, 40, 97)
    expected = TopKSearcher(prototypes, 6, device="cpu").search_ranked(queries, labels)
    monkeypatch.setattr(torch_search, "DEVICE_TILE_ELEMENTS", 7 * 40)  # 7 rows per tile
    got = TopKSearcher(prototypes, 6, device="cpu", torch_kernel=True).search_ranked(queries, labels)
    for a, b in zip(got[:2], expected[:2], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[2].above, expected[2].above)
    np.testing.assert_array_equal(got[2].tied, expected[2].tied)


def test_the_device_path_restores_the_callers_matmul_precision():
    """It switches TF32 off for its own products (exact fp32) and puts the setting back."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        TopKSearcher(np.eye(3, dtype=np.float32), 2, device="cpu", torch_kernel=True).search(
            np.ones((2, 3), np.float32)
        )
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)


def test_the_prototype_digest_is_computed_once_per_searcher(monkeypatch):
    """The search cache keys every shard with it; hashing 21,842 x 2,048 floats costs ~0.2 s."""
    import hashlib

    from imagenet_zsl.evaluation import search

    prototypes = np.arange(6, dtype=np.float32).reshape(3, 2)
    calls = []
    real = search.prototypes_digest
    monkeypatch.setattr(search, "prototypes_digest", lambda m: calls.append(m.shape) or real(m))
    searcher = TopKSearcher(prototypes, 2)
    assert calls == []  # not hashed unless a cache key asks for it
    expected = hashlib.sha256(prototypes.tobytes()).hexdigest()
    assert searcher.digest == expected and searcher.digest == expected
    assert calls == [(3, 2)]


def _bench_search_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "bench_search.py"
    spec = importlib.util.spec_from_file_location("tools_bench_search_evaluate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_evaluate_ratios_are_medians_per_size(tmp_path, monkeypatch):
    """tools/bench_search.py --mode evaluate, its processes faked: the command as the docs show it
    (no flag but its inputs and --out) and the old flags' extra line, interleaved with the floor;
    per size, the ratio of the medians of the repeats (CPU and peak memory); per class count
    measured at two image counts, the fixed cost and cost per image of the line through them."""
    import json
    from pathlib import Path

    module = _bench_search_module()
    cpu = {  # (script, images) -> CPU seconds of the three repeats (medians 4, 6, 10, 16)
        ("floor", 40): [10.0, 11.0, 9.0],
        ("floor", 10): [4.5, 4.0, 3.0],
        ("evaluate", 40): [13.0, 16.0, 20.0],
        ("evaluate", 10): [6.0, 5.0, 7.0],
        ("bench_flags", 40): [11.0, 12.0, 10.0],
        ("bench_flags", 10): [4.0, 5.0, 4.5],
    }
    seen, argvs = [], {}

    def fake(script, args, timing):
        flags = "--no-plots" in args
        who = "floor" if script == module.FLOOR_SCRIPT else "bench_flags" if flags else "evaluate"
        features = args[0] if who == "floor" else args[args.index("--features") + 1]
        images = sum(len(np.load(f)) for f in Path(features).glob("*.labels.npy"))
        seen.append((who, images))
        argvs[who] = args
        value = cpu[who, images][sum(1 for s in seen if s == (who, images)) - 1]
        return {"wall": value / 2, "cpu": value, "peak_mb": 100.0 if who == "floor" else 110.0}

    monkeypatch.setattr(module, "fresh_process", fake)
    monkeypatch.setattr(module, "_check_same_hits", lambda run_dir, floor: None)
    argv = ["--mode", "evaluate", "--sizes", "10x6,40x6", "--dim", "4", "--repeats", "3"]
    assert module.main([*argv, "--json", str(tmp_path / "r.json")]) == 0
    per_size = [("floor", 10), ("evaluate", 10), ("bench_flags", 10)] * 3
    assert seen == per_size + [(who, 40) for who, _ in per_size]
    typed = argvs["evaluate"][1:]  # after the timing file: exactly the documented command
    assert typed[0] == "evaluate" and [a for a in typed if a.startswith("--")] == [
        "--features",
        "--split",
        "--prototypes",
        "--out",
    ]
    assert argvs["bench_flags"][-len(module.BENCH_FLAGS) :] == list(module.BENCH_FLAGS)
    assert argvs["floor"][-1] == "1,2,5,10,20" and argvs["floor"][2] == "21"  # K, and the top-21
    result = json.loads((tmp_path / "r.json").read_text())["evaluate"]
    small, large = result["sizes"]
    assert (small["floor"]["cpu"], small["evaluate"]["cpu"]) == (4.0, 6.0)
    assert (large["floor"]["cpu"], large["evaluate"]["cpu"]) == (10.0, 16.0)
    assert (small["cpu_ratio"], large["cpu_ratio"]) == (1.5, 1.6)
    assert large["memory_ratio"] == pytest.approx(1.1)
    assert result["worst_cpu_ratio"] == 1.6
    assert (small["bench_flags_cpu_ratio"], large["bench_flags_cpu_ratio"]) == (4.5 / 4, 1.1)
    assert result["worst_bench_flags_cpu_ratio"] == 1.125
    (line,) = result["lines"]  # floor: 6 s over 30 images from 4 s; evaluate: 10 s from 6 s
    assert line["floor"]["cpu_per_image"] == pytest.approx(0.2)
    assert line["floor"]["fixed_cpu"] == pytest.approx(2.0)
    assert line["evaluate"]["fixed_cpu"] == pytest.approx(6.0 - 10 * 10 / 30)
    assert line["per_image_ratio"] == pytest.approx(10 / 6)
    assert line["fixed_over_floor"] == pytest.approx(6.0 - 10 * 10 / 30 - 2.0)


def test_the_bench_names_the_cpu_and_the_blas_kernels(monkeypatch):
    """Ratios to the BLAS floor depend on the CPU and on OpenBLAS's kernel family (SkylakeX on an
    AVX-512 Xeon, Haswell's on an AMD EPYC without AVX-512): the bench's header and JSON name both."""
    import threadpoolctl

    module = _bench_search_module()
    blas = [{"user_api": "blas", "architecture": "Haswell"}, {"user_api": "openmp"}]
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: blas)
    name = module.cpu_name()
    assert name.endswith("; BLAS kernels Haswell") and len(name) > len("; BLAS kernels Haswell")
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [])
    assert "BLAS" not in module.cpu_name()


def test_the_bench_floor_computes_what_evaluate_reports_in_a_fresh_process(tmp_path):
    """The floor script (np.load of the float16 shards, float32 tiles, BLAS, argpartition, exact
    tie counts, tie-fair hit@K), numpy only, over every shard of a directory of real wnids: its
    counts and its flat and per-class hit@K are the brute force's, with ties planted."""
    module = _bench_search_module()
    paths = module.write_bench_inputs(tmp_path, 25, 4, 3, seed=0)
    assert all(w.startswith("n") and len(w) == 9 for w in paths["split"].read_text().split())
    with np.load(paths["prototypes"]) as data:
        matrix, wnids = data["matrix"].copy(), data["wnids"].copy()
    matrix[2] = matrix[1]  # two identical prototypes: their images tie
    np.savez(paths["prototypes"], matrix=matrix, wnids=wnids)
    timing = tmp_path / "t.json"
    args = [str(paths["features"]), str(paths["prototypes"]), "3", str(timing), "1,2"]
    result = module.fresh_process(module.FLOOR_SCRIPT, args, timing)
    assert result["rows"] == 25
    assert 0 < result["imports"] < result["wall"] and result["work"] > 0 and result["cpu"] > 0
    assert result["peak_mb"] > 10
    files = sorted(paths["features"].glob("*.features.npy"))
    features = np.vstack([np.load(f).astype(np.float32) for f in files])
    labels = np.concatenate([np.load(str(f).replace(".features.npy", ".labels.npy")) for f in files])
    scores = features @ matrix.T
    true = scores[np.arange(25), labels][:, None]
    above, tied = (scores > true).sum(axis=1), (scores == true).sum(axis=1) - 1
    assert result["hits"] == int((above == 0).sum()) and tied.max() == 1
    for k in (1, 2):
        hit = np.clip((k - above) / (tied + 1), 0, 1)  # expected hit@k under random tie-breaking
        assert result["flat"][str(k)] == pytest.approx(hit.mean())
        per_class = [hit[labels == c].mean() for c in np.unique(labels)]
        assert result["per_class"][str(k)] == pytest.approx(np.mean(per_class))


def test_evaluate_as_typed_loads_no_scipy_pandas_matplotlib_nor_wordnet(tmp_path):
    """Issue 46: ``evaluate`` as the docs show it (the WordNet graph's breakdown and hP@K, label
    frequencies, class properties, plots) on real wnids, caches warm, imports none of scipy (the
    graph's queries are numpy), pandas (the Spearman ρ), matplotlib (the figures are SVG), nltk
    or wordfreq (the graph and the label frequencies are cached), nor torch; and writes them all."""
    import json
    import subprocess
    import sys

    from imagenet_zsl.hierarchy.universe import load_class_graph
    from imagenet_zsl.semantics.frequency import universe_label_frequencies

    load_class_graph(), universe_label_frequencies()  # the caches a first run fills
    paths = _bench_search_module().write_bench_inputs(tmp_path, 40, 6, 4, seed=0)
    argv = [
        *("evaluate", "--features", str(paths["features"]), "--split", str(paths["split"])),
        *("--prototypes", str(paths["prototypes"]), "--out", str(tmp_path / "run")),
    ]
    code = (
        "import json, sys\n"
        "from imagenet_zsl.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    code, modules = json.loads(done.stdout.strip().splitlines()[-1])
    heavy = ("scipy", "pandas", "pyarrow", "matplotlib", "nltk", "wordfreq", "torch")
    assert code == 0 and [m for m in modules if m.split(".")[0] in heavy] == []
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert (
        metrics["hierarchy"]["counts"]["not_in_graph"] == 0
        and metrics["hierarchical_precision"]["images"] == 40
    )
    assert "population" in metrics["class_properties"]["spearman_hit1"]  # populations vary: a ρ
    table = (run / "per_class.csv").read_text().splitlines()
    assert len(table) == 7 and all(cell for cell in table[1].split(",")[-4:])  # every property known
    assert (run / "hit_at_k.svg").is_file() and (run / "error_breakdown.svg").is_file()


def test_the_device_is_resolved_once_with_one_line_errors():
    from imagenet_zsl.devices import cuda_available

    assert TopKSearcher(np.eye(2, dtype=np.float32), 1, device="cpu").device.type == "cpu"
    with pytest.raises(UserInputError, match="--device 'gpu0': use cuda, cuda:N, cpu or auto"):
        TopKSearcher(np.eye(2, dtype=np.float32), 1, device="gpu0")
    if not cuda_available():
        with pytest.raises(UserInputError, match="--device cuda: no CUDA GPU is visible"):
            TopKSearcher(np.eye(2, dtype=np.float32), 1, device="cuda")
        assert TopKSearcher(np.eye(2, dtype=np.float32), 1).device.type == "cpu"  # auto


def test_unique_rows_groups_equal_rows_and_passes_distinct_ones_through():
    """Distinct rows come back as the same matrix with no groups (the hash pre-pass proves it);
    duplicate rows, -0.0 equal to 0.0, are grouped in first-occurrence order."""
    from imagenet_zsl.evaluation.search_index import unique_rows

    distinct = np.arange(12, dtype=np.float32).reshape(4, 3)
    same, group = unique_rows(distinct)
    assert same is distinct and group is None
    rows = np.array([[1, 2], [0, 0], [1, 2], [-0.0, 0.0], [3, 4]], dtype=np.float32)
    unique, group = unique_rows(rows)
    np.testing.assert_array_equal(unique, [[1, 2], [0, 0], [3, 4]])
    np.testing.assert_array_equal(group, [0, 1, 0, 1, 2])


def test_the_cpu_search_imports_no_torch():
    """Issue 38: the numpy path (device "cpu" by name) selects its top-k with numpy, not
    ``torch.topk``, and resolves no torch device: a fresh interpreter never imports torch."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import numpy as np\n"
        "from imagenet_zsl.evaluation.search import TopKSearcher\n"
        "rng = np.random.default_rng(0)\n"
        "p = rng.standard_normal((700, 8)).astype(np.float32)\n"
        "q = rng.standard_normal((300, 8)).astype(np.float32)\n"
        "s = TopKSearcher(p, 5, device='cpu')\n"
        "scores, ids, ranks = s.search_ranked(q, np.zeros(300, np.int64))\n"
        "full = q @ p.T\n"
        "assert np.allclose(np.sort(full, axis=1)[:, ::-1][:, :5], scores, rtol=1e-5, atol=1e-5)\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]


def test_evaluate_of_a_prototype_file_imports_only_what_it_uses(tmp_path):
    """Issue 38 §2: ``evaluate --prototypes --graph none --no-plots`` on the CPU costs about the
    floor's start-up: a fresh interpreter runs it without importing scipy (no graph is built),
    pydantic or PyYAML (no config or model), the models, torch, matplotlib or pandas."""
    import json
    import subprocess
    import sys

    paths = _bench_search_module().write_bench_inputs(tmp_path, 40, 6, 4, seed=0)
    argv = [
        *("evaluate", "--features", str(paths["features"]), "--split", str(paths["split"])),
        *("--prototypes", str(paths["prototypes"]), "--k", "1", "2", "--graph", "none"),
        *("--no-label-frequency", "--device", "cpu", "--no-plots", "--out", str(tmp_path / "run")),
    ]
    code = (
        "import json, sys\n"
        "from imagenet_zsl.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    code, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0 and (tmp_path / "run" / "metrics.json").is_file()
    heavy = ("scipy", "pydantic", "yaml", "torch", "matplotlib", "pandas")
    assert [m for m in modules if m.split(".")[0] in heavy] == []
    # the command line lists the models' commands and names (cli, catalog), never a model module
    models = {m for m in modules if m.startswith("imagenet_zsl.models.")}
    assert models <= {"imagenet_zsl.models.cli", "imagenet_zsl.models.catalog"}
