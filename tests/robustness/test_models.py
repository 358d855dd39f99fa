"""Bad inputs of ``train`` and ``labels visual-prototypes``: exit 2, one ``error:`` line naming the
culprit, no traceback, nothing written, inputs byte-identical."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_zsl.features.shards import write_manifest, write_shard
from tests.models.problems import Problem
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
