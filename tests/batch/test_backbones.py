"""Several backbones in one ``run`` (#34 §2): one table with a row per (backbone, model, split),
every model trained once per backbone on that backbone's features, the same test images."""

from __future__ import annotations

import csv
import json

import yaml

from imagenet_zsl.batch.runner import run
from imagenet_zsl.splits.io import read_wnid_list
from tests.batch.test_label_spaces import _subset_features


def _two_backbones(demo_inputs, name: str, features: dict) -> object:
    models = {m: {**demo_inputs.data["models"][m], "splits": ["hop1"]} for m in ("trivial", "eszsl")}
    return demo_inputs.write_recipe(
        name, features=features, models=models, splits=["hop1"], plots=False, graph="none", gzsl=False
    )


def test_two_feature_sets_give_one_table_with_every_model_trained_once_per_backbone(demo_inputs, tmp_path):
    # two SIMULATED "backbones": the same images, other class means (another seed)
    sim = yaml.safe_load((demo_inputs.root / "sim.yaml").read_text())
    (demo_inputs.root / "sim_seed1.yaml").write_text(yaml.safe_dump({**sim, "seed": 1}))
    features = {
        "resnet": {"simulate": str(demo_inputs.root / "sim.yaml")},
        "vit": {"simulate": str(demo_inputs.root / "sim_seed1.yaml")},
    }
    recipe = _two_backbones(demo_inputs, "two_backbones.yaml", features)
    out = tmp_path / "run"
    result = run(recipe, out, progress=False, echo=lambda _: None)
    assert result.failed == []
    assert result.trained == ["resnet/trivial", "resnet/eszsl", "vit/trivial", "vit/eszsl"]
    assert sorted(result.evaluated) == sorted(
        f"{b}/{m}__hop1" for b in ("resnet", "vit") for m in ("trivial", "eszsl")
    )
    for backbone in ("resnet", "vit"):
        # each backbone is a run of its own, its models fitted on its features only
        own = out / "backbones" / backbone
        key = json.loads((own / "models" / "eszsl.key.json").read_text())
        assert key["model"] == "eszsl" and (own / "models" / "eszsl" / "manifest.json").is_file()
        assert (own / "summary.csv").is_file() and (own / "features" / "train").is_dir()
    # one table: a row per (backbone, model, split); the rows of a backbone name its features
    with (out / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4
    identities = {row["backbone"] for row in rows}
    assert len(identities) == 2  # the two simulations differ (their seeds)
    manifest = json.loads((out / "manifest.json").read_text())
    cells = [(c["backbone"], c["model"], c["split"], c["run"]) for c in manifest["cells"]]
    assert cells == [
        (b, m, "hop1", f"backbones/{b}/cells/{m}__hop1")
        for b in ("resnet", "vit")
        for m in ("trivial", "eszsl")
    ]
    assert "resnet, vit; each model trained once per backbone" in (out / "summary.md").read_text()
    # resumed: nothing is trained or evaluated again
    again = run(recipe, out, progress=False, echo=lambda _: None)
    assert again.trained == [] and again.evaluated == [] and len(again.skipped) == 4


def test_backbones_holding_other_test_images_are_refused(demo_inputs, demo_run, tmp_path, cli_error):
    features = demo_run / "features"
    hop1 = read_wnid_list(demo_inputs.root / "hop1.txt")
    fewer = _subset_features(features / "test", tmp_path / "test_fewer", hop1[:5])
    one = {
        "train": str(features / "train"),
        "test": str(features / "test"),
        "seen": str(features / "seen_test"),
    }
    recipe = _two_backbones(demo_inputs, "uneven.yaml", {"a": one, "b": {**one, "test": str(fewer)}})
    cli_error(
        ["run", str(recipe), "--out", str(tmp_path / "out")],
        ["the test images of split 'hop1' differ between backbones 'a' and 'b'", "features.b.test"],
    )


def test_a_run_over_several_backbones_leads_with_the_backbone(demo_inputs, tmp_path):
    """The summary's first column is the backbone (its recipe name and identity) when the rows have
    several (one is said in the legend); the plot and the 'n.s. vs' column name a row by backbone
    and model, since a model appears once per backbone."""
    from imagenet_zsl.batch.summary import _row_name, _series, render_summary

    records = [{"backbone": name, "model": "eszsl"} for name in ("resnet", "vit")]
    assert [_row_name(r) for r in records] == ["resnet/eszsl", "vit/eszsl"]
    rows = [
        {
            "backbone": f"{r['backbone']}: SIMULATED @aa (MISMATCH ALLOWED: model fitted on x)",
            "model": "eszsl",
        }
        | {"split": "hop1", "hit@1": 0.5, "status": "ok", "_series": _row_name(r)}
        for r in records
    ]
    assert [_series(r) for r in rows] == ["resnet/eszsl", "vit/eszsl"]
    assert _series({"model": "eszsl", "split": "hop1", "backbone": "SIMULATED @aa"}) == "eszsl"
    assert render_summary(rows)[0].startswith("| backbone | model | split | label space | hit@1 [95% CI] |")
    single = render_summary(rows[:1])[0]
    assert single.startswith("| model | split | label space | hit@1 [95% CI] |")
    assert "backbone (every row): resnet: SIMULATED @aa (MISMATCH ALLOWED: model fitted on x)" in single


def test_the_python_api_and_report_read_a_run_over_several_backbones(demo_inputs, tmp_path):
    """zsl.hit_at_k_table(OUT) finds the cells under backbones/NAME/cells (one row per backbone,
    model and split), and `report` merges them: every run is consistent within itself."""
    import imagenet_zsl as zsl
    from imagenet_zsl.cli import main

    sim = yaml.safe_load((demo_inputs.root / "sim.yaml").read_text())
    (demo_inputs.root / "sim_seed2.yaml").write_text(yaml.safe_dump({**sim, "seed": 2}))
    features = {
        "a": {"simulate": str(demo_inputs.root / "sim.yaml")},
        "b": {"simulate": str(demo_inputs.root / "sim_seed2.yaml")},
    }
    out = tmp_path / "run"
    assert (
        run(
            _two_backbones(demo_inputs, "api.yaml", features), out, progress=False, echo=lambda _: None
        ).failed
        == []
    )
    table = zsl.hit_at_k_table(out)
    assert len(table) == 4 and table["backbone"].nunique() == 2
    cells = sorted(str(p) for p in out.glob("backbones/*/cells/*") if p.is_dir())
    assert main(["report", *cells, "--out", str(tmp_path / "t.md")]) == 0
