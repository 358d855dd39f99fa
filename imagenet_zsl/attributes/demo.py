"""A one-minute tour of the attribute benchmarks on generated features with the real class structure.

For each dataset the real packaged ``att_splits.mat`` fixes classes, attributes and which image
index belongs to which split; ``synthetic.synthetic_images`` fills in low-dimensional features.
Every model then runs the full GBU protocol (validation search, calibrated stacking, test) and
the GBU-style table and ranking matrix are printed. Every model with continuous class vectors
also runs with Chao et al.'s idealised "visual semantics" (class vectors = mean visual feature,
``--semantics visual``): its rows ("<model> + visual semantics") bound what better semantics could
give. Chao et al.'s "upper bound (all classes supervised)" row (``attributes upper-bound``: a
softmax classifier trained with labels of every class) shows what full supervision reaches. The
numbers describe the generated data, not the real benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from imagenet_zsl.attributes.dataset import load_dataset, packaged_dir
from imagenet_zsl.attributes.protocol import RunConfig, load_results, run_to_directory
from imagenet_zsl.attributes.synthetic import save_res101, synthetic_images
from imagenet_zsl.attributes.table import plot_ranking, render
from imagenet_zsl.attributes.upper_bound import UpperBoundConfig, upper_bound_to_directory
from imagenet_zsl.attributes.xlsa17 import load_att_splits, read_class_lists
from imagenet_zsl.io import atomic_write_text
from imagenet_zsl.models.base import MODELS

DEFAULT_DATASETS = ("APY", "AWA2")
#: small grids so the demo stays fast; real runs use each model's full grid
DEMO_GRIDS: dict[str, dict[str, list[Any]]] = {
    "dap": {"reg": [1e-2, 1.0]},
    "iap": {"reg": [1e-2, 1.0]},
    "eszsl": {"gamma": [0.1, 1.0, 10.0], "lam": [0.1, 1.0, 10.0]},
    "sae": {"lam": [0.1, 1.0, 10.0, 100.0]},
    "gfzsl": {"lam_mean": [0.1, 1.0, 10.0], "lam_var": [1.0]},
}
DEMO_PARAMS: dict[str, dict[str, Any]] = {"dap": {"max_iter": 25}, "iap": {"max_iter": 25}}
PREFERRED_MODELS = ("dap", "iap", "eszsl", "sae", "gfzsl")


def default_models() -> list[str]:
    """DAP, IAP and, once the shared registry has them, ESZSL, SAE and GFZSL (closed-form, fast);
    the SGD-trained models (DeViSE, ALE, SJE, LATEM, CMT, SSE) run with ``--models``."""
    return [m for m in PREFERRED_MODELS if m in MODELS]


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
    """Generate data, run every (dataset, model, semantics, val split), write and return the tables
    (``visual_semantics``: also the G-attr rows of the models with continuous class vectors;
    ``upper_bound``: also the all-classes classifier's row of each dataset)."""
    out = Path(out)
    models = list(models or default_models())
    for name in datasets:
        folder = packaged_dir(name)
        split = load_att_splits(folder / "att_splits.mat")
        lists = read_class_lists(folder, split.class_names)
        data_path = out / "data" / name / "res101.mat"
        if not data_path.is_file():
            save_res101(data_path, synthetic_images(split, lists, dim=dim, seed=0))
        ds = load_dataset(name, data_path.parent)
        runs = [(model, "attributes") for model in models]
        if visual_semantics:
            runs += [
                (m, "visual") for m in models if getattr(MODELS.get(m), "semantics_kind", "") != "binary"
            ]
        for model, semantics in runs:
            folder = model if semantics == "attributes" else f"{model}+visual"
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
                results = run_to_directory(ds, config, out / "runs" / name / folder / f"val{val_split}")
                if progress:
                    progress(
                        f"{name} {folder} val{val_split}: ZSL "
                        f"{results['zsl']['top1_per_class'] * 100:.1f}  H "
                        f"{results['gzsl']['H'] * 100:.1f}"
                    )
        if upper_bound:
            results = upper_bound_to_directory(
                ds, UpperBoundConfig(dataset=name), out / "runs" / name / "upper_bound"
            )
            if progress:
                progress(
                    f"{name} upper bound: ZSL {results['zsl']['top1_per_class'] * 100:.1f}  H "
                    f"{results['gzsl']['H'] * 100:.1f}"
                )
    text, tables = render(load_results([out / "runs"]))
    atomic_write_text(out / "table.md", text)
    if not tables["ranking_zsl"].empty:
        plot_ranking(tables["ranking_zsl"], out / "ranking_zsl.png", "ZSL top-1 ranking")
    return text
