"""A one-minute tour of the attribute benchmarks on generated features with the real class structure.

For each dataset the real packaged ``att_splits.mat`` fixes classes, attributes and which image
index belongs to which split; ``synthetic.synthetic_images`` fills in low-dimensional features.
Every model that runs on attributes (all of GBU's: DAP, IAP, ConSE, CMT, SSE, LATEM, ALE, DeViSE,
SJE, ESZSL, SYNC, SAE, GFZSL, plus the toolkit's ridge baselines) then runs the full GBU protocol
(validation search, calibrated stacking, test) on a small grid, the SGD-trained ones for 3 epochs
of 1024-image batches, and the GBU-style table and ranking matrix are printed. The closed-form
ESZSL, SAE and GFZSL (with ``models`` given: every model with continuous class vectors) also run
with Chao et al.'s idealised "visual semantics" (class vectors = mean visual feature,
``--semantics visual``): their rows ("<model> + visual semantics") bound what better semantics could
give. Chao et al.'s "upper bound (all classes supervised)" row (``attributes upper-bound``: a
softmax classifier trained with labels of every class) shows what full supervision reaches. The
numbers describe the generated data, not the real benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.attributes.dataset import VAL_SPLITS, check_dataset_name, load_dataset, packaged_dir
from imagenet_zsl.attributes.outputs import DEMO_FORMAT, DEMO_TOOL, load_results, prepare_work, publish
from imagenet_zsl.attributes.protocol import RunConfig, run_to_directory
from imagenet_zsl.attributes.synthetic import save_res101, synthetic_images
from imagenet_zsl.attributes.table import plot_ranking, render
from imagenet_zsl.attributes.upper_bound import UpperBoundConfig, upper_bound_to_directory
from imagenet_zsl.attributes.xlsa17 import load_att_splits, read_class_lists
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import write_manifest
from imagenet_zsl.models.base import MODELS

DEFAULT_DATASETS = ("APY", "AWA2")
#: short SGD training for the demo (real runs use each model's defaults and full grid)
_SGD = {"epochs": 3, "batch_size": 1024, "lr": 0.1}
#: small grids so the demo stays fast; real runs use each model's full grid
DEMO_GRIDS: dict[str, dict[str, list[Any]]] = {
    "dap": {"reg": [1e-2, 1.0]},
    "iap": {"reg": [1e-2, 1.0]},
    "eszsl": {"gamma": [0.1, 1.0, 10.0], "lam": [0.1, 1.0, 10.0]},
    "sae": {"lam": [0.1, 1.0, 10.0, 100.0]},
    "gfzsl": {"lam_mean": [0.1, 1.0, 10.0], "lam_var": [1.0]},
    "ale": {"margin": [0.1, 1.0]},
    "devise": {"margin": [0.1, 1.0]},
    "sje": {"margin": [0.1, 1.0]},
    "latem": {"k": [2]},
    "cmt": {"hidden": [50]},
    "sse": {"gamma": [0.01, 0.1]},
    "conse": {"top": [2, 10]},
    "sync": {"sigma": [0.5, 1.0, 2.0]},
    "ridge": {"alpha": [0.1, 1.0, 10.0]},
    "ridge_s2v": {"alpha": [0.1, 1.0, 10.0]},
}
DEMO_PARAMS: dict[str, dict[str, Any]] = {
    "dap": {"max_iter": 25},
    "iap": {"max_iter": 25},
    **{m: dict(_SGD) for m in ("ale", "devise", "sje", "latem", "sse")},
    "cmt": {**_SGD, "lr": 0.05},
    "conse": {"classifier_iter": 30},
}
#: models whose "+ visual semantics" rows the default demo adds (closed form: fast); with
#: ``models`` given, every one of them with continuous class vectors gets the row
VISUAL_DEFAULT = ("eszsl", "sae", "gfzsl")


def attribute_capable(name: str) -> bool:
    """A registered model runs on attribute datasets when it reads class vectors
    (``needs_semantics``, default True), needs no class graph (``needs_graph``: xlsa17 has none)
    and learns its map from the seen images (``learns_from_images``, default True; a model that
    learns nothing, such as ``vlm_zero_shot``, needs class vectors in the image space)."""
    cls = MODELS.get(name)
    return cls.needs_semantics and not cls.needs_graph and cls.learns_from_images


def default_models() -> list[str]:
    """Every registered model that runs on attributes (:func:`attribute_capable`), sorted: GBU's
    DAP, IAP, ConSE, CMT, SSE, LATEM, ALE, DeViSE, SJE, ESZSL, SYNC, SAE, GFZSL and the toolkit's
    ridge baselines."""
    return sorted(name for name in MODELS.names() if attribute_capable(name))


def check_demo_request(
    datasets: Sequence[str], models: Sequence[str], dim: int, val_splits: Sequence[int]
) -> None:
    """Every option checked before anything is written (one-line UserInputErrors)."""
    for name in datasets:
        check_dataset_name(name)
    for model in models:
        if model not in MODELS.names():
            raise UserInputError(f"--models: {MODELS.unknown_message(model)}")
        if not attribute_capable(model):
            raise UserInputError(
                f"--models {model}: does not run on attribute datasets (it needs a class graph, uses no "
                f"class vectors or learns nothing from images); choose from {', '.join(default_models())}"
            )
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise UserInputError(f"--dim {dim}: the generated features need at least 1 dimension")
    bad = [v for v in val_splits if v not in VAL_SPLITS]
    if bad or not val_splits:
        raise UserInputError(f"--val-splits {bad or 'none'}: choose from {', '.join(map(str, VAL_SPLITS))}")


def _demo_runs(models: Sequence[str], explicit: bool, visual_semantics: bool) -> list[tuple[str, str]]:
    """(model, semantics) pairs: every model on attributes, then the "+ visual semantics" rows."""
    runs = [(model, "attributes") for model in models]
    if visual_semantics:
        runs += [
            (m, "visual")
            for m in models
            if getattr(MODELS.get(m), "semantics_kind", "") != "binary" and (explicit or m in VISUAL_DEFAULT)
        ]
    return runs


def _progress_line(label: str, results: dict[str, Any]) -> str:
    return f"{label}: ZSL {results['zsl']['top1_per_class'] * 100:.1f}  H {results['gzsl']['H'] * 100:.1f}"


def _demo_dataset(
    work: Path,
    name: str,
    runs: Sequence[tuple[str, str]],
    val_splits: Sequence[int],
    dim: int,
    upper_bound: bool,
    progress: Callable[[str], None] | None,
) -> list[str]:
    """Generate ``name``'s data and run ``runs`` on it in ``work``; returns the folders written
    (relative to ``work``)."""
    folder = packaged_dir(name)
    split = load_att_splits(folder / "att_splits.mat")
    data_path = work / "data" / name / "res101.mat"
    if not data_path.is_file():
        lists = read_class_lists(folder, split.class_names)
        save_res101(data_path, synthetic_images(split, lists, dim=dim, seed=0))
    ds = load_dataset(name, data_path.parent)
    parts = [f"data/{name}"]
    for model, semantics in runs:
        label = model if semantics == "attributes" else f"{model}+visual"
        for val_split in val_splits:
            config = RunConfig(
                dataset=name,
                model=model,
                split="ps",
                val_split=val_split,
                params=DEMO_PARAMS.get(model, {}),
                grid=DEMO_GRIDS.get(model),
                semantics=semantics,
            )
            part = f"runs/{name}/{label}/val{val_split}"
            results = run_to_directory(ds, config, work / part)
            parts.append(part)
            if progress:
                progress(_progress_line(f"{name} {label} val{val_split}", results))
    if upper_bound:
        part = f"runs/{name}/upper_bound"
        results = upper_bound_to_directory(ds, UpperBoundConfig(dataset=name), work / part)
        parts.append(part)
        if progress:
            progress(_progress_line(f"{name} upper bound", results))
    return parts


def run_demo(
    out: str | Path,
    datasets: Sequence[str] = DEFAULT_DATASETS,
    models: Sequence[str] | None = None,
    dim: int = 32,
    val_splits: Sequence[int] = (1,),
    progress: Callable[[str], None] | None = None,
    visual_semantics: bool = True,
    upper_bound: bool = True,
) -> str:
    """Generate data, run every (dataset, model, semantics, val split), write ``out`` (atomic: the
    runs are made in a work directory beside it, see :mod:`imagenet_zsl.attributes.outputs`) and
    return the tables (``visual_semantics``: also the G-attr rows of the models with continuous
    class vectors; ``upper_bound``: also the all-classes classifier's row of each dataset)."""
    explicit = bool(models)
    models = [m.lower() for m in models] if models else default_models()
    check_demo_request(datasets, models, dim, val_splits)
    datasets = [check_dataset_name(name) for name in datasets]
    identity = {"dim": dim}  # the generated features; every run's configuration names the rest
    work = prepare_work(out, tool=DEMO_TOOL, manifest_format=DEMO_FORMAT, identity=identity)
    runs = _demo_runs(models, explicit, visual_semantics)
    parts = []
    for name in datasets:
        parts += _demo_dataset(work, name, runs, val_splits, dim, upper_bound, progress)
    with publish(out, work, parts, tool=DEMO_TOOL) as tmp:
        text, tables = render(load_results([tmp / "runs"]))
        atomic_write_text(tmp / "table.md", text)
        if not tables["ranking_zsl"].empty:
            plot_ranking(tables["ranking_zsl"], tmp / "ranking_zsl.png", "ZSL top-1 ranking")
        parameters = {
            "datasets": datasets,
            "models": models,
            "dim": dim,
            "val_splits": list(val_splits),
            "visual_semantics": visual_semantics,
            "upper_bound": upper_bound,
        }
        write_manifest(
            tmp, format=DEMO_FORMAT, tool=DEMO_TOOL, parameters=parameters, fields={"study": identity}
        )
    return text
