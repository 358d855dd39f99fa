"""Bad inputs of ``train`` and ``labels visual-prototypes``: exit 2, one ``error:`` line naming the
culprit, no traceback, nothing written, inputs byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.features.shard_files import write_manifest, write_shard
from tests.models.problems import Problem
from tests.models.test_backbone_head import bayes_head, write_features
from tests.models.test_dgp_finetune import dgp_setup  # noqa: F401 - its module-scoped fixture

GOOD = "model: eszsl\nparams: {features: standard}\nsemantics: {vectors}\n"

#: (config text, culprit named in the error)
BAD_CONFIGS = {
    "unknown-key": ("model: eszsl\nparms: {}\n", "parms"),
    "unknown-model": ("model: eszs\n", "eszs"),
    "unknown-param": ("model: eszsl\nparams: {gama: 1.0}\n", "gama"),
    "bad-param-value": ("model: eszsl\nparams: {gamma: -3}\n", "gamma"),
    "select-typo": ("model: eszsl\nselect: {gird: default}\n", "gird"),
    "select-range": ("model: eszsl\nselect: {val_fraction: 1.5}\n", "val_fraction"),
    "select-mode": ("model: eszsl\nselect: {mode: gzls}\n", "mode"),
    "bad-yaml": ("model: [eszsl\n", "bad.yaml"),
    "not-a-mapping": ("- eszsl\n", "bad.yaml"),
    "model-missing": ("params: {}\n", "model"),
    "params-not-mapping": ("model: eszsl\nparams: 3\n", "params"),
    # typed hyper-parameters: a number as a string, a bool, NaN, a device typo, a grid value
    "param-number-string": ("model: eszsl\nparams: {gamma: '1.0'}\n", "params.gamma = '1.0'"),
    "param-bool": ("model: eszsl\nparams: {gamma: true}\n", "params.gamma = True"),
    "param-nan": ("model: eszsl\nparams: {gamma: .nan}\n", "params.gamma = nan"),
    "param-int-string": ("model: cmt\nparams: {epochs: '5'}\n", "params.epochs = '5'"),
    "param-device": ("model: cmt\nparams: {device: 'cuda:99x'}\n", "params.device = 'cuda:99x'"),
    "grid-value": ("model: eszsl\nselect: {grid: {gamma: [0.1, '1.0']}}\n", "select.grid.gamma = '1.0'"),
    "grid-unknown": ("model: eszsl\nselect: {grid: {gama: [0.1]}}\n", "select.grid.gama"),
    "grid-word": ("model: eszsl\nselect: {grid: best}\n", "select.grid = 'best'"),
}


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    problem = Problem()
    features, labels = problem.draw(problem.seen, images=5)
    feature_dir = tmp_path / "features"
    feature_dir.mkdir()
    ids = [f"{problem.seen[c]}/{i}" for i, c in enumerate(labels)]
    shards = [write_shard(feature_dir, "r000-s000000", features, labels, ids)]
    write_manifest(feature_dir, {"classes": problem.seen, "dim": features.shape[1], "shards": shards})
    problem.semantics.save(tmp_path / "vectors.npz")
    (tmp_path / "good.yaml").write_text(GOOD.replace("{vectors}", str(tmp_path / "vectors.npz")))
    return tmp_path


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_train_bad_config(cli_error, ws, case):
    text, culprit = BAD_CONFIGS[case]
    config = ws / "bad.yaml"
    config.write_text(text)
    out = ws / "model"
    cli_error(
        ["train", "--config", config, "--features", ws / "features", "--out", out],
        culprit,
        inputs=[config, ws / "features"],
        not_created=[out],
    )


@pytest.mark.parametrize(
    ("argv_tail", "culprit"),
    [
        (["--set", "gamma"], "--set"),
        (["--set", "gama=1"], "gama"),
        (["--set", "gamma=-1"], "gamma"),
        (["--set", "gamma='1.0'"], "--set: gamma = '1.0'"),
        (["--set", "gamma=true"], "--set: gamma = True"),
        (["--set", "gamma=.nan"], "--set: gamma = nan"),
        (["--set", "gamma=[1"], "--set 'gamma=[1'"),
    ],
)
def test_train_bad_override(cli_error, ws, argv_tail, culprit):
    out = ws / "model"
    cli_error(
        ["train", "--config", ws / "good.yaml", "--features", ws / "features", "--out", out, *argv_tail],
        culprit,
        inputs=[ws / "good.yaml", ws / "features"],
        not_created=[out],
    )


@pytest.mark.parametrize(
    ("entry", "culprit"),
    [
        ("{model: cmt, params: {epochs: '5'}}", "run.yaml: models.m.params.epochs = '5'"),
        ("{model: cmt, params: {device: 'cuda:99x'}}", "run.yaml: models.m.params.device = 'cuda:99x'"),
        ("{model: eszsl, params: {gamma: true}}", "run.yaml: models.m.params.gamma = True"),
        ("{model: eszsl, select: {grid: {lam: [1, .inf]}}}", "run.yaml: models.m.select.grid.lam = inf"),
    ],
)
def test_run_checks_model_hyperparameters_before_any_work(cli_error, ws, entry, culprit):
    split = ws / "split.txt"
    split.write_text("n00007846\n")
    recipe = ws / "run.yaml"
    recipe.write_text(
        f"features: {{train: {ws / 'features'}, test: {ws / 'features'}}}\nsplits: [{split}]\n"
        f"semantics: {ws / 'vectors.npz'}\nmodels:\n  m: {entry}\n"
    )
    cli_error(
        ["run", recipe, "--out", ws / "run"],
        culprit,
        inputs=[recipe, ws / "features"],
        not_created=[ws / "run"],
    )


@pytest.mark.parametrize("where", ["features", "features/sub", "config-dir", "not-ours", "a-file"])
def test_train_refuses_an_out_that_would_destroy_data(cli_error, ws, where):
    if where == "config-dir":
        out = ws  # holds the config and the features
    elif where == "not-ours":
        out = ws / "mine"
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    elif where == "a-file":
        out = ws / "vectors.npz"
    else:
        out = ws / where
    cli_error(
        ["train", "--config", ws / "good.yaml", "--features", ws / "features", "--out", out],
        "--out",
        inputs=[ws],
        not_created=[out],
    )


def test_train_missing_features(cli_error, ws):
    cli_error(
        ["train", "--config", ws / "good.yaml", "--features", ws / "nowhere", "--out", ws / "m"],
        "nowhere",
        inputs=[ws / "good.yaml"],
        not_created=[ws / "m"],
    )


def test_train_missing_config(cli_error, ws):
    cli_error(
        ["train", "--config", ws / "absent.yaml", "--features", ws / "features", "--out", ws / "m"],
        "absent.yaml",
        inputs=[ws / "features"],
        not_created=[ws / "m"],
    )


@pytest.mark.parametrize("case", ["missing-features", "out-inside-features", "not-npz", "out-is-dir"])
def test_visual_prototypes_bad_input(cli_error, ws, case):
    features, out = ws / "features", ws / "proto.npz"
    culprit = str(out)
    if case == "missing-features":
        features, culprit = ws / "nowhere", "nowhere"
    elif case == "out-inside-features":
        out = ws / "features" / "proto.npz"
        culprit = str(out)
    elif case == "not-npz":
        out = ws / "proto.txt"
        culprit = str(out)
    else:
        out = ws / "adir.npz"
        out.mkdir()
        culprit = str(out)
    cli_error(
        ["labels", "visual-prototypes", "--features", features, "--out", out],
        culprit,
        inputs=[ws / "features"],
        not_created=[out],
    )


#: finetune-dgp: (argv change, culprit); "{...}" are paths of the test_dgp_finetune setup
FINETUNE_DGP_CASES = {
    "not-a-graph-model": ({"model": "{root}/ridge"}, "ridge"),
    "missing-model": ({"model": "{root}/nosuch"}, "nosuch"),
    "missing-store": ({"--images": "{root}/nostore"}, "--images"),
    "zero-epochs": ({"--finetune-epochs": "0"}, "--finetune-epochs"),
    "negative-lr": ({"--finetune-lr": "-1"}, "--finetune-lr"),
    "out-is-the-model": ({"--out": "{root}/dgp"}, "dgp"),
}


@pytest.mark.parametrize("case", sorted(FINETUNE_DGP_CASES))
def test_finetune_dgp_bad_input(cli_error, request, tmp_path, case):
    setup = request.getfixturevalue("dgp_setup")
    change, culprit = FINETUNE_DGP_CASES[case]
    root = setup["root"]
    args = {
        "model": str(setup["model"]),
        "--features": str(setup["features"]),
        "--images": str(setup["store"]),
        "--out": str(tmp_path / "out"),
    }
    args.update({k: v.format(root=root) for k, v in change.items()})
    argv = ["finetune-dgp", args.pop("model")] + [x for kv in args.items() for x in kv]
    cli_error(
        argv,
        culprit,
        inputs=[setup["model"], setup["features"], setup["store"]],
        not_created=[tmp_path / "out"],
    )


# ----------------------------------------------------------------------------- issue 26, issue 23


def test_set_wins_over_the_select_grid_and_says_so(ws, capsys, caplog):
    """Issue 26: `--set gamma=1.0` with a config whose grid also varies gamma used to save the
    grid's choice silently. Now --set wins: gamma leaves the grid, a warning says so, and the
    manifest records it."""
    config = ws / "select.yaml"
    config.write_text(
        GOOD.replace("{vectors}", str(ws / "vectors.npz"))
        + "select: {grid: {gamma: [0.001, 100.0], lam: [0.1, 1.0]}, val_fraction: 0.25}\n"
    )
    argv = [
        "train",
        "--config",
        config,
        "--features",
        ws / "features",
        "--out",
        ws / "m",
        "--set",
        "gamma=1.0",
    ]
    assert main([str(a) for a in argv]) == 0
    assert "--set wins over the select grid: gamma=1.0 fixed, not searched" in capsys.readouterr().out
    assert "--set gamma=1.0 wins over the select grid" in caplog.text
    manifest = json.loads((ws / "m" / "manifest.json").read_text())
    assert manifest["params"]["gamma"] == 1.0
    assert manifest["selection"]["fixed_by_set"] == {"gamma": 1.0}
    assert {tuple(sorted(row)) for row in manifest["selection"]["grid"]} == {("lam", "score")}
    assert manifest["params"]["lam"] in (0.1, 1.0)


def _features(
    root: Path, name: str, labels: np.ndarray, classes: list[str], dim: int = 12, logits=None
) -> Path:
    directory = root / name
    directory.mkdir()
    rng = np.random.default_rng(0)
    features = rng.normal(size=(len(labels), dim)).astype(np.float32)
    ids = [f"{classes[c]}/{i}" for i, c in enumerate(labels)]
    shards = [write_shard(directory, "r000-s000000", features, labels, ids, logits)] if len(labels) else []
    manifest = {"classes": classes, "dim": dim, "shards": shards}
    if logits is not None:
        manifest["logits"] = {"classes": classes}
    write_manifest(directory, manifest)
    return directory


def test_train_on_images_of_one_class_is_a_one_line_error(cli_error, ws):
    """Issue 26: `train` accepted features whose labels all name one class."""
    classes = Problem().seen[:3]  # classes with a vector: only the labels are wrong
    features = _features(ws, "one-class", np.zeros(6, np.int64), classes)
    out = ws / "m"
    cli_error(
        ["train", "--config", ws / "good.yaml", "--features", features, "--out", out],
        [str(features), classes[0], "at least 2 seen classes"],
        inputs=[features],
        not_created=[out],
    )


def test_train_without_any_seen_image_is_a_one_line_error(cli_error, ws):
    features = _features(ws, "empty", np.zeros(0, np.int64), ["n00000001", "n00000002"])
    cli_error(
        ["train", "--config", ws / "good.yaml", "--features", features, "--out", ws / "m"],
        [str(features), "no image of a seen class"],
        inputs=[features],
        not_created=[ws / "m"],
    )


def test_an_under_determined_head_fit_is_a_one_line_error(cli_error, ws):
    """Issue 23 §4: 9 images with logits for 12 + 1 unknowns per class were accepted."""
    problem = Problem()
    labels = np.arange(len(problem.seen))
    logits = np.random.default_rng(1).normal(size=(len(labels), len(problem.seen))).astype(np.float32)
    features = _features(ws, "few", labels, problem.seen, logits=logits)
    config = ws / "conse.yaml"
    config.write_text(f"model: conse\nparams: {{classifier: head}}\nsemantics: {ws / 'vectors.npz'}\n")
    cli_error(
        ["train", "--config", config, "--features", features, "--out", ws / "m"],
        ["at least 13 images", "got 9", "head.npz"],
        inputs=[features, config],
        not_created=[ws / "m"],
    )


def test_vision_language_features_and_vectors_of_different_sizes(cli_error, ws):
    config = ws / "vlm.yaml"
    config.write_text(
        f"model: vlm_zero_shot\nsemantics: {ws / 'vectors.npz'}\n"
    )  # 6-d vectors, 12-d features
    cli_error(
        ["train", "--config", config, "--features", ws / "features", "--out", ws / "m"],
        ["vlm_zero_shot", "12 dimensions", "have 6"],
        inputs=[ws / "features", config],
        not_created=[ws / "m"],
    )


def test_train_refuses_a_backbone_head_changed_after_extraction(cli_error, tmp_path):
    problem = Problem()
    features, labels = problem.draw(problem.seen[:2], images=2)
    directory = write_features(tmp_path / "f", problem.seen[:2], features, labels, bayes_head(problem))
    head = directory / "head.npz"
    head.write_bytes(head.read_bytes()[:-8] + b"tampered")
    problem.semantics.save(tmp_path / "v.npz")
    config = tmp_path / "conse.yaml"
    config.write_text(f"model: conse\nsemantics: {tmp_path / 'v.npz'}\n")
    cli_error(
        ["train", "--config", config, "--features", directory, "--out", tmp_path / "m"],
        [str(head), "sha256"],
        inputs=[directory],
        not_created=[tmp_path / "m"],
    )


MODEL_MANIFEST_DAMAGE = {
    "files-not-a-list": lambda m: m.__setitem__("files", "weights.npz"),
    "files-entry-a-string": lambda m: m.__setitem__("files", ["weights.npz"]),
    "sha256-a-number": lambda m: m["files"][0].__setitem__("sha256", 5),
    "no-model-name": lambda m: m.pop("model"),
}


@pytest.mark.parametrize("damage", sorted(MODEL_MANIFEST_DAMAGE))
def test_a_damaged_model_manifest_is_one_line(cli_error, ws, damage):
    """Issue 26: a manifest whose sha256 or file list has the wrong type gave an internal error."""
    assert (
        main(
            [
                "train",
                "--config",
                str(ws / "good.yaml"),
                "--features",
                str(ws / "features"),
                "--out",
                str(ws / "m"),
            ]
        )
        == 0
    )
    path = ws / "m" / "manifest.json"
    manifest = json.loads(path.read_text())
    MODEL_MANIFEST_DAMAGE[damage](manifest)
    path.write_text(json.dumps(manifest))
    split = ws / "split.txt"
    split.write_text("n00007846\n")
    out = ws / "run"
    argv = ["evaluate", "--features", ws / "features", "--split", split, "--model", ws / "m", "--out", out]
    cli_error(argv, culprit="manifest.json", inputs=[ws / "m"], not_created=[out])
