"""`attributes demo`: every model that runs on attributes is in the GBU table, on a small grid."""

from __future__ import annotations

from imagenet_zsl.attributes import protocol
from imagenet_zsl.attributes.demo import DEMO_GRIDS, DEMO_PARAMS, attribute_capable, default_models, run_demo
from imagenet_zsl.attributes.outputs import DEMO_FORMAT, work_dir
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.models.base import MODELS

#: GBU's 13 inductive methods (Table 3), by registry name
GBU_MODELS = {
    "dap",
    "iap",
    "conse",
    "cmt",
    "sse",
    "latem",
    "ale",
    "devise",
    "sje",
    "eszsl",
    "sync",
    "sae",
    "gfzsl",
}


def test_default_models_are_every_attribute_capable_model():
    models = default_models()
    assert GBU_MODELS <= set(models)
    for name, cls in MODELS.items():
        runs = getattr(cls, "needs_semantics", True) and not getattr(cls, "needs_graph", False)
        runs = runs and getattr(cls, "learns_from_images", True)
        assert (name in models) == bool(runs) == attribute_capable(name)
    assert not {"gcnz", "sgcn", "dgp", "trivial", "hascoet_trivial"} & set(models)


def test_every_demo_model_has_a_small_grid_of_known_parameters():
    """A renamed hyper-parameter would make the demo fail at run time: catch it here."""
    for name in default_models():
        cls = MODELS.get(name)
        assert name in DEMO_GRIDS, name
        grid = DEMO_GRIDS[name]
        assert set(grid) | set(DEMO_PARAMS.get(name, {})) <= set(cls.defaults), name
        points = 1
        for values in grid.values():
            points *= len(values)
        assert points <= 9, name


def test_demo_table_lists_the_models(tmp_path):
    text = run_demo(
        tmp_path / "demo",
        datasets=["APY"],
        models=["eszsl", "sje"],
        dim=4,
        visual_semantics=False,
        upper_bound=False,
    )
    zsl = text.split("### ZSL")[1].split("###")[0]
    rows = [line.split("|")[1].strip() for line in zsl.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["eszsl", "sje"]  # rows[0]: the header
    assert (tmp_path / "demo" / "runs" / "APY" / "sje" / "val1" / "results.json").is_file()
    manifest = read_manifest_verified(tmp_path / "demo", DEMO_FORMAT)
    assert manifest["parameters"]["models"] == ["eszsl", "sje"] and manifest["study"] == {"dim": 4}
    assert {"table.md", "data/APY/res101.mat", "runs/APY/eszsl/val1/results.json"} <= {
        r["path"] for r in manifest["files"]
    }
    assert not work_dir(tmp_path / "demo").exists()


def test_demo_rerun_reuses_its_runs_only_for_the_same_data(tmp_path, monkeypatch):
    """Re-running the demo on its own output recomputes nothing; another --dim (other generated
    features, which no run configuration names) recomputes everything."""
    calls = []
    real = protocol.run_protocol
    monkeypatch.setattr(protocol, "run_protocol", lambda *a, **k: calls.append(1) or real(*a, **k))
    demo = dict(datasets=["APY"], models=["eszsl"], visual_semantics=False, upper_bound=False)
    first = run_demo(tmp_path / "demo", dim=4, **demo)
    assert run_demo(tmp_path / "demo", dim=4, **demo) == first and len(calls) == 1
    run_demo(tmp_path / "demo", dim=3, **demo)
    assert len(calls) == 2
    assert read_manifest_verified(tmp_path / "demo", DEMO_FORMAT)["study"] == {"dim": 3}
