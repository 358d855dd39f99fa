"""The public Python API: the notebook path split → features → model → hit@K table.

Each function is a thin call into the code the matching ``imagenet-zsl`` command runs (the same
checks, the same files, the same numbers); nothing here is a second implementation. Every name in
``__all__`` is stable: ``tests/test_public_api.py`` pins their signatures, and a change needs a
line in CHANGELOG.md. Everything else in the package is internal.

Example, as in docs/tutorials/notebook.ipynb (SIMULATED features: the numbers show the pipeline,
not real ImageNet performance):

```python
import imagenet_zsl as zsl

split = zsl.load_split("benchmark")                  # 500 sorted wnids of splits/benchmark.txt
features = zsl.simulate_features("sim.yaml", "sim")  # or directories written by `extract`
model = zsl.train("eszsl", features / "train", "models/eszsl")
run = zsl.evaluate(model, features / "test", "benchmark", "runs/eszsl")
table = zsl.hit_at_k_table([run])                    # pandas DataFrame, hit@K as fractions
```

Importing this module imports the stages it calls into; ``import imagenet_zsl`` imports it only
when a public name is first used (PEP 562), so the command line never pays for it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.batch.runner import run
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.evaluation.report import aggregate_runs
from imagenet_zsl.evaluation.run import EvaluationConfig
from imagenet_zsl.evaluation.run import evaluate as run_evaluation
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.simulate import load_simulation_config, simulate, simulation_config_from_dict
from imagenet_zsl.models.base import ZSLModel
from imagenet_zsl.models.persistence import load_model as load
from imagenet_zsl.models.training import TrainConfig, load_train_config
from imagenet_zsl.models.training import train as train_model
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.named import resolve_split

if TYPE_CHECKING:
    import pandas as pd


__all__ = [
    "UserInputError",
    "evaluate",
    "hit_at_k_table",
    "load_features",
    "load_model",
    "load_split",
    "run_batch",
    "simulate_features",
    "train",
]

#: where committed split names (``hop1``, ``benchmark``...) are looked up, as in a ``run`` recipe
SPLITS_DIR = Path("splits")
#: the committed splits of a source checkout, for a notebook started outside the repository root
_CHECKOUT_SPLITS = Path(__file__).resolve().parents[1] / "splits"


def split_file(split: str | Path, splits_dir: str | Path = "splits") -> Path:
    """The wnid file of a split, resolved as a ``run`` recipe resolves it: a path to a file, a
    published list (``dgp-2hops``, ``dgp-3hops``, ``dgp-all``) or a committed name
    (``splits_dir/NAME.txt``; with the default ``splits_dir``, else the checkout's ``splits/``)."""
    try:
        return resolve_split(split, splits_dir, "split")
    except UserInputError:
        if Path(splits_dir) != SPLITS_DIR or not (_CHECKOUT_SPLITS / f"{split}.txt").is_file():
            raise
        return resolve_split(split, _CHECKOUT_SPLITS, "split")


def load_split(split: str | Path, splits_dir: str | Path = "splits") -> list[str]:
    """The classes of a split, sorted wnids (``'n01234567'``), from a committed name (``hop1``,
    looked up in ``splits_dir``) or a wnid list file (one wnid a line, ``#`` comments)."""
    return read_wnid_list(split_file(split, splits_dir))


def simulate_features(config: str | Path | Mapping[str, Any], out: str | Path) -> Path:
    """SIMULATED features (``imagenet-zsl simulate``): ``out/train``, ``out/seen_test`` and
    ``out/test`` feature directories from a simulation YAML file or the same keys as a dict.
    Relative class-list paths of a dict config are read from the working directory."""
    if isinstance(config, Mapping):
        return simulate(simulation_config_from_dict(dict(config)), out, base_dir=Path.cwd())
    return simulate(load_simulation_config(config), out, base_dir=Path(config).parent)


def load_features(directory: str | Path) -> FeatureDir:
    """A feature directory (written by ``extract`` or ``simulate``), its manifest verified.

    ``.classes`` are its wnids, ``.dim`` the feature dimension D; ``.identity`` the backbone,
    weights and preprocessing the features came from."""
    return FeatureDir(directory)


def train(
    model: str | Path,
    features: str | Path,
    out: str | Path,
    params: Mapping[str, Any] | None = None,
    semantics: str = "glove-6b-50d",
    graph: str = "wordnet",
    select: Mapping[str, Any] | None = None,
) -> Path:
    """Fit a model on the seen classes of ``features`` and save it to ``out`` (``imagenet-zsl
    train``); returns ``out``.

    ``model``: a registry name (``imagenet-zsl models`` lists them with their hyper-parameters)
    or a model config YAML (configs/models/*.yaml), whose ``semantics``, ``graph`` and ``select``
    then apply; ``params`` override hyper-parameters like ``train --set``. ``semantics``: a named
    vector set or a class-vector ``.npz``; ``graph``: ``wordnet``, ``imagenet`` or an edge file."""
    path = Path(model)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise UserInputError(f"model config {path} not found")
        config, config_path = load_train_config(path), path
    else:
        fields = {"model": str(model), "semantics": semantics, "graph": graph}
        config = TrainConfig(**fields, select=None if select is None else dict(select))
        config_path = None
    return train_model(config, features, out, config_path=config_path, overrides=dict(params or {}))


def load_model(directory: str | Path) -> ZSLModel:
    """The fitted model saved in ``directory`` by `train` or ``run``, every file verified.

    ``model.scores(x, wnids)``: (N, D) features → (N, C) float32 scores against any classes."""
    return load(directory)


#: the arguments of :func:`evaluate` that are not keyword options
_EVALUATE_FIXED = ("model", "features", "split", "out")


def evaluate(
    model: str | Path, features: str | Path, split: str | Path, out: str | Path, **options: Any
) -> Path:
    """Evaluate a saved model on the test images of ``features`` (``imagenet-zsl evaluate``) and
    write the run directory ``out``; returns ``out``.

    ``split``: a committed name or a wnid file. The keyword options are the other fields of
    `imagenet_zsl.evaluation.run.EvaluationConfig` (``ks``, ``gzsl``, ``seen_features``,
    ``label_space``, ``plots``, ``device``...), each the flag of that name, with its type and
    default in this function's signature; a path option also takes a str. Nothing is printed."""
    known = _evaluate_options()
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UserInputError(f"evaluate: unknown option {unknown[0]!r}; known: {', '.join(sorted(known))}")
    paths = {
        k: Path(v)
        for k, v in options.items()
        if known[k].annotation.startswith("str | Path") and v is not None
    }
    cfg = EvaluationConfig(
        features=Path(features),
        split=split_file(split),
        out=Path(out),
        model=Path(model),
        **{**options, **paths},
    )
    run_evaluation(cfg, progress=False)
    return Path(out)


def _evaluate_options() -> dict[str, inspect.Parameter]:
    """:func:`evaluate`'s keyword options: every field of ``EvaluationConfig`` but the fixed four,
    keyword-only, with the field's type (a ``Path`` field also takes a str) and default."""
    options = {}
    for field in dataclasses.fields(EvaluationConfig):
        if field.name in _EVALUATE_FIXED:
            continue
        annotation = str(field.type)
        if annotation.startswith("Path"):
            annotation = f"str | {annotation}"
        options[field.name] = inspect.Parameter(
            field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=annotation
        )
    return options


# ``**options`` keeps evaluate at the toolkit's 8 arguments a function; its signature states
# every option (help(), inspect.signature and tests/public_api.txt show them)
evaluate.__signature__ = inspect.signature(evaluate).replace(  # type: ignore[attr-defined]
    parameters=[
        *(p for p in inspect.signature(evaluate).parameters.values() if p.name in _EVALUATE_FIXED),
        *_evaluate_options().values(),
    ]
)


def run_batch(recipe: str | Path, out: str | Path, progress: bool = False) -> Path:
    """Many models × many splits from one recipe (``imagenet-zsl run``), resumable; returns
    ``out``, whose ``summary.csv`` is the table and ``cells/`` the run directories. A failed cell
    is a UserInputError naming the first failure (the other cells are still written)."""
    result = run(recipe, out, progress=progress, echo=lambda line: None)
    if result.failed:
        first, cause = next(iter(result.errors.items()))
        failed = ", ".join(result.failed)
        raise UserInputError(f"{len(result.failed)} cells failed: {failed}; first, {first}: {cause}")
    return Path(out)


def hit_at_k_table(runs: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """One row per run (every column of ``imagenet-zsl report``'s CSV, in its order): backbone, model,
    split, class vectors, label space (its name and size), classes, ``hit@K`` (flat hit@K, fractions
    in [0, 1], expected value under random tie-breaking), the hit@1 interval, per-class hit@1,
    strict hit@K, hP@K, GZSL U/S/H (both tie rules), AUSUC, calibrated and validation H (NaN
    without GZSL), the models not significantly different and the classes seen in pretraining.

    ``runs``: run directories (``evaluate``), or a ``run`` batch directory (its ``cells/``, or
    ``backbones/NAME/cells/`` of a recipe over several feature sets: one row per backbone, model
    and split)."""
    given = [runs] if isinstance(runs, str | Path) else list(runs)
    dirs: list[Path] = []
    for path in map(Path, given):
        found = [*path.glob("cells/*"), *path.glob("backbones/*/cells/*")]
        cell_dirs = sorted(p for p in found if p.is_dir())
        is_batch = bool(cell_dirs) and not (path / "metrics.json").exists()
        dirs += cell_dirs if is_batch else [path]
    return aggregate_runs(dirs)
