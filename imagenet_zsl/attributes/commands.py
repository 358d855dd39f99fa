"""The handlers of ``imagenet-zsl attributes ...`` (flags in :mod:`imagenet_zsl.attributes.cli`).

Each takes its typed options (``<Command>Options``: one field per flag, named by the flag's
``dest``; the command layer builds them from the parsed flags) and returns the exit status; imported
only when one of these commands runs. A default that a library config also has is read from it
(``RunConfig.split``), so it is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imagenet_zsl.attributes.dataset import given_split_file, load_dataset, packaged_dir, ps_class_lists
from imagenet_zsl.attributes.demo import DEFAULT_DATASETS, run_demo
from imagenet_zsl.attributes.grab import Proportion, make_split, split_inputs, write_split_dir
from imagenet_zsl.attributes.outputs import SPLIT_TOOL, TABLE_TOOL, load_results
from imagenet_zsl.attributes.protocol import RunConfig, run_to_directory
from imagenet_zsl.attributes.robustness import StudyOptions, study_to_directory
from imagenet_zsl.attributes.table import render, table_to_directory
from imagenet_zsl.attributes.upper_bound import UpperBoundConfig, upper_bound_to_directory
from imagenet_zsl.attributes.xlsa17 import load_att_splits
from imagenet_zsl.config import parse_recipe_yaml, shared_fields, shorten
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.safe_output import check_out_dir


def _value(text: str, option: str, item: str) -> Any:
    """VALUE read as a recipe's YAML is (``config.parse_recipe_yaml``): YAML 1.1 octal, sexagesimal
    or ``yes`` values and alias bombs are one line naming ``option`` and the item."""
    try:
        return parse_recipe_yaml(text)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserInputError(
            f"{option} {shorten(repr(item))}: the value is not valid YAML ({shorten(problem)})"
        ) from None


def _pairs(items: Sequence[str] | None, option: str, many: bool) -> dict[str, Any]:
    """``k=v`` (or ``k=v1,v2`` with ``many``) options → dict with YAML-typed values."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserInputError(f"{option} {shorten(repr(item))}: expected NAME=VALUE")
        parts = value.split(",") if many else [value]
        values = [_value(v, option, item) for v in parts]
        out[key] = values if many else values[0]
    return out


def _progress(message: str) -> None:
    print(message, flush=True)


@dataclass(frozen=True)
class RunOptions:
    """``attributes run``."""

    #: APY, AWA1, AWA2, CUB or SUN
    dataset: str
    #: the folder with res101.mat (xlsa17/data)
    root: Path
    #: a registered model's name
    model: str
    #: the run directory
    out: Path
    #: "ps" (Proposed Split) or "ss" (Standard Split)
    split: str = RunConfig.split
    #: which of the three train/val class splits chooses the hyper-parameters
    val_split: int = RunConfig.val_split
    #: an att_splits.mat or a split folder (e.g. GRAB's)
    att_splits: Path | None = None
    #: xlsa17 standard_split/<DATASET> class lists
    ss_dir: Path | None = None
    seed: int = RunConfig.seed
    #: "zsl" (val ZSL top-1, GBU) or "gzsl" (val H after calibration)
    select: str = RunConfig.select
    #: "attributes", or "visual" (class vectors = mean res101 feature per class)
    semantics: str = RunConfig.semantics
    #: also test on this dataset (same classes and attributes)
    test_dataset: str | None = None
    #: the folder with ``test_dataset``'s res101.mat (None: ``root``)
    test_root: Path | None = None
    #: fixed hyper-parameters, NAME=VALUE
    param: Sequence[str] = ()
    #: values searched instead of the model's grid, NAME=V1,V2
    grid: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.test_root is not None and self.test_dataset is None:
            raise UserInputError("--test-root needs --test-dataset")
        if self.test_dataset is not None and self.test_dataset == self.dataset:
            raise UserInputError(f"--test-dataset {self.test_dataset}: must differ from --dataset")


def run(options: RunOptions) -> int:
    """``attributes run``: one model under the GBU protocol (optionally tested on a second dataset)."""
    params, grid = _pairs(options.param, "--param", False), _pairs(options.grid, "--grid", True) or None
    need_ss = options.split == "ss"
    ds = load_dataset(
        options.dataset, options.root, att_splits=options.att_splits, ss_dir=options.ss_dir, need_ss=need_ss
    )
    test_ds = None
    if options.test_dataset is not None:
        test_ds = load_dataset(options.test_dataset, options.test_root or options.root, need_ss=need_ss)
    config = shared_fields(  # split, val_split, seed, select and semantics by name
        RunConfig,
        options,
        dataset=ds.name,
        model=options.model.lower(),
        params=params,
        grid=grid,
        att_splits=str(options.att_splits) if options.att_splits else None,
        test_dataset=test_ds.name if test_ds is not None else None,
    )
    results = run_to_directory(ds, config, options.out, progress=_progress, test_ds=test_ds)
    zsl = results["zsl"]["top1_per_class"] * 100
    line = f"{ds.name} {options.split.upper()} {config.model}: ZSL top-1 {zsl:.1f}"
    if results.get("gzsl"):
        g = results["gzsl"]
        line += (
            f" | GZSL u {g['unseen'] * 100:.1f} s {g['seen'] * 100:.1f} H {g['H'] * 100:.1f}"
            f" | calibrated H {g['H_cs'] * 100:.1f} | AUSUC {g['ausuc'] * 100:.1f}"
        )
    print(line)
    cross = results.get("cross_dataset")
    if cross:
        t = cross["ttest"]
        p = "n/a" if t["pvalue"] is None else f"{t['pvalue']:.3g}"
        print(
            f"tested on {cross['test_dataset']}: ZSL top-1 {cross['zsl']['top1_per_class'] * 100:.1f} "
            f"(paired t-test over {t['classes']} classes: p = {p})"
        )
    print(f"wrote {options.out}")
    return 0


@dataclass(frozen=True)
class UpperBoundOptions:
    """``attributes upper-bound``."""

    #: APY, AWA1, AWA2, CUB or SUN
    dataset: str
    #: the folder with res101.mat (xlsa17/data)
    root: Path
    #: the run directory
    out: Path
    #: "ps" (Proposed Split) or "ss" (Standard Split)
    split: str = UpperBoundConfig.split
    #: an att_splits.mat or a split folder (e.g. GRAB's)
    att_splits: Path | None = None
    #: xlsa17 standard_split/<DATASET> class lists
    ss_dir: Path | None = None
    #: which unseen images train (a seeded share)
    seed: int = UpperBoundConfig.seed
    #: L2 weight (standardised features) and L-BFGS iterations
    reg: float = UpperBoundConfig.reg
    max_iter: int = UpperBoundConfig.max_iter


def upper_bound(options: UpperBoundOptions) -> int:
    """``attributes upper-bound``: Chao et al.'s classifier trained on every class."""
    config = shared_fields(  # dataset, split, seed, reg and max_iter by name
        UpperBoundConfig, options, att_splits=str(options.att_splits) if options.att_splits else None
    )
    config.check()  # before the dataset is read
    ds = load_dataset(
        options.dataset,
        options.root,
        att_splits=options.att_splits,
        ss_dir=options.ss_dir,
        need_ss=options.split == "ss",
    )
    results = upper_bound_to_directory(ds, config, options.out)
    line = (
        f"{ds.name} {options.split.upper()} upper bound: "
        f"ZSL top-1 {results['zsl']['top1_per_class'] * 100:.1f}"
    )
    if results.get("gzsl"):
        g = results["gzsl"]
        line += f" | GZSL u {g['unseen'] * 100:.1f} s {g['seen'] * 100:.1f} H {g['H'] * 100:.1f}"
    print(line)
    print(f"wrote {options.out}")
    return 0


@dataclass(frozen=True)
class TableOptions:
    """``attributes table``."""

    #: run directories (searched recursively)
    runs: Sequence[Path]
    #: also write table.md, the CSVs and the ranking PNGs here
    out: Path | None = None


def table(options: TableOptions) -> int:
    """``attributes table``: the GBU tables of finished runs (printed, and written with ``--out``)."""
    if options.out:
        check_out_dir(options.out, TABLE_TOOL, inputs=options.runs)  # before anything is printed
    results = load_results(options.runs)
    if not options.out:
        print(render(results)[0])
        return 0
    print(table_to_directory(results, options.out, options.runs))
    print(f"wrote {options.out}")
    return 0


@dataclass(frozen=True)
class SplitOptions:
    """``attributes split``."""

    #: APY, AWA1, AWA2, CUB or SUN
    dataset: str
    #: the folder with res101.mat (its labels place the images)
    root: Path
    #: random, gcs, ccs, mas, pas or proportion (:func:`~imagenet_zsl.attributes.grab.make_split`)
    method: str
    #: the split folder
    out: Path
    #: the source att_splits.mat (None: the Proposed Split)
    att_splits: Path | None = None
    #: proportion: GRAB Table 3's Prop 1..4, or the share of the classes seen (one of the two)
    prop: int | None = None
    seen_share: float | None = None
    #: mas: "binary" (GRAB Eq. 14) or "continuous" attributes
    mas_attributes: str = "binary"
    #: gcs/ccs: the other end; mas: the most correlated
    inverse: bool = False
    #: mas/pas: attributes/components kept (None: GRAB's 40, capped)
    k: int | None = None
    seed: int = 0


def split(options: SplitOptions) -> int:
    """``attributes split``: a GRAB class split or attribute subset as a split folder."""
    check_out_dir(options.out, SPLIT_TOOL, inputs=[options.root, options.att_splits])  # before any reading
    ds = load_dataset(options.dataset, options.root, att_splits=options.att_splits)
    result = make_split(
        ds,
        options.method,
        inverse=options.inverse,
        k=options.k,
        seed=options.seed,
        proportion=Proportion(prop=options.prop, seen_share=options.seen_share),
        mas_attributes=options.mas_attributes,
    )
    path = write_split_dir(result, ds, options.out, inputs=[options.root, *split_inputs(ds)])
    made = result.split
    left_out = made.num_classes - made.seen_classes.size - made.unseen_classes.size
    print(
        f"{ds.name} {options.method}{' (inverse)' if options.inverse else ''}: "
        f"{made.seen_classes.size} seen / {made.unseen_classes.size} unseen classes"
        f"{f' ({left_out} left out)' if left_out else ''}, "
        f"{made.num_attributes} attributes; images trainval {made.locs['trainval_loc'].size} "
        f"/ test seen {made.locs['test_seen_loc'].size} / test unseen "
        f"{made.locs['test_unseen_loc'].size}"
    )
    print(f"wrote {path}")
    return 0


@dataclass(frozen=True)
class RobustnessOptions:
    """``attributes robustness``."""

    #: APY, AWA1, AWA2, CUB or SUN
    dataset: str
    #: the folder with res101.mat (xlsa17/data)
    root: Path
    #: a registered model's name
    model: str
    #: the study directory
    out: Path
    #: the GRAB split methods studied (default: every one but proportion)
    methods: Sequence[str] = ("random", "gcs", "ccs", "mas", "pas")
    #: also run the gcs/ccs/mas inverses
    inverse: bool = StudyOptions.inverse
    #: mas/pas: attributes/components kept (None: GRAB's 40, capped)
    k: int | None = StudyOptions.k
    #: mas: "binary" (GRAB Eq. 14) or "continuous" attributes
    mas_attributes: str = StudyOptions.mas_attributes
    #: seeds per split method
    seeds: int = 5
    #: fixed hyper-parameters, NAME=VALUE
    param: Sequence[str] = ()


def robustness(options: RobustnessOptions) -> int:
    """``attributes robustness``: GRAB's generalizability and robustness study of one model."""
    params = _pairs(options.param, "--param", False)  # before the dataset loads
    ds = load_dataset(options.dataset, options.root)
    text = study_to_directory(
        ds,
        options.model.lower(),
        options.methods,
        options.seeds,
        options.out,
        options=StudyOptions(inverse=options.inverse, k=options.k, mas_attributes=options.mas_attributes),
        params=params,
        progress=_progress,
    )
    print(text)
    print(f"wrote {options.out}")
    return 0


@dataclass(frozen=True)
class InfoOptions:
    """``attributes info``."""

    #: APY, AWA1, AWA2, CUB or SUN
    dataset: str
    #: a given att_splits.mat or split folder (None: the packaged Proposed Split)
    att_splits: Path | None = None


def info(options: InfoOptions) -> int:
    """``attributes info``: class and image counts of a packaged or given split."""
    path = (
        given_split_file(options.att_splits)
        if options.att_splits
        else packaged_dir(options.dataset) / "att_splits.mat"
    )
    att_splits = load_att_splits(path)
    lists = ps_class_lists(options.dataset, att_splits)
    val = ", ".join(f"{len(lists.train[k])}/{len(lists.val[k])}" for k in sorted(lists.val))
    print(f"{options.dataset} ({path})")
    print(
        f"  {att_splits.num_attributes} attributes x {att_splits.num_classes} classes; "
        f"{len(lists.trainval)} seen (train/val: {val}) / {len(lists.test)} unseen"
    )
    for name, loc in att_splits.locs.items():
        print(f"  {name}: {loc.size} images")
    return 0


@dataclass(frozen=True)
class DemoOptions:
    """``attributes demo``."""

    #: the demo directory
    out: Path
    datasets: Sequence[str] = DEFAULT_DATASETS
    #: registered model names (None: every one that runs on attributes, GBU's 13 + ridge)
    models: Sequence[str] | None = None
    #: the dimension of the generated features (>= 1)
    dim: int = 32
    val_splits: Sequence[int] = (1,)


def demo(options: DemoOptions) -> int:
    """``attributes demo``: the GBU table on generated features."""
    print(
        run_demo(
            options.out,
            datasets=options.datasets,
            models=options.models,
            dim=options.dim,
            val_splits=options.val_splits,
            progress=_progress,
        )
    )
    print(f"wrote {options.out} (generated features: the numbers describe the demo data only)")
    return 0
