"""The handlers of ``imagenet-zsl attributes ...`` (flags in :mod:`imagenet_zsl.attributes.cli`).

Each takes the parsed ``argparse.Namespace`` and returns the exit status; imported only when one of
these commands runs.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from imagenet_zsl.attributes.dataset import given_split_file, load_dataset, packaged_dir, ps_class_lists
from imagenet_zsl.attributes.demo import run_demo
from imagenet_zsl.attributes.grab import Proportion, make_split, split_inputs, write_split_dir
from imagenet_zsl.attributes.outputs import SPLIT_TOOL, TABLE_TOOL, load_results
from imagenet_zsl.attributes.protocol import RunConfig, run_to_directory
from imagenet_zsl.attributes.robustness import StudyOptions, study_to_directory
from imagenet_zsl.attributes.table import render, table_to_directory
from imagenet_zsl.attributes.upper_bound import UpperBoundConfig, upper_bound_to_directory
from imagenet_zsl.attributes.xlsa17 import load_att_splits
from imagenet_zsl.config import parse_recipe_yaml, shorten
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


def _pairs(items: list[str] | None, option: str, many: bool) -> dict[str, Any]:
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


def run(args: argparse.Namespace) -> int:
    """``attributes run``: one model under the GBU protocol (optionally tested on a second dataset)."""
    if args.test_root is not None and args.test_dataset is None:
        raise UserInputError("--test-root needs --test-dataset")
    if args.test_dataset is not None and args.test_dataset == args.dataset:
        raise UserInputError(f"--test-dataset {args.test_dataset}: must differ from --dataset")
    params, grid = _pairs(args.param, "--param", False), _pairs(args.grid, "--grid", True) or None
    ds = load_dataset(
        args.dataset, args.root, att_splits=args.att_splits, ss_dir=args.ss_dir, need_ss=args.split == "ss"
    )
    test_ds = None
    if args.test_dataset is not None:
        test_ds = load_dataset(args.test_dataset, args.test_root or args.root, need_ss=args.split == "ss")
    config = RunConfig(
        dataset=ds.name,
        model=args.model.lower(),
        split=args.split,
        val_split=args.val_split,
        seed=args.seed,
        params=params,
        grid=grid,
        att_splits=str(args.att_splits) if args.att_splits else None,
        select=args.select,
        test_dataset=test_ds.name if test_ds is not None else None,
        semantics=args.semantics,
    )
    results = run_to_directory(ds, config, args.out, progress=_progress, test_ds=test_ds)
    zsl = results["zsl"]["top1_per_class"] * 100
    line = f"{ds.name} {args.split.upper()} {config.model}: ZSL top-1 {zsl:.1f}"
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
    print(f"wrote {args.out}")
    return 0


def upper_bound(args: argparse.Namespace) -> int:
    """``attributes upper-bound``: Chao et al.'s classifier trained on every class."""
    config = UpperBoundConfig(
        dataset=args.dataset,
        split=args.split,
        seed=args.seed,
        reg=args.reg,
        max_iter=args.max_iter,
        att_splits=str(args.att_splits) if args.att_splits else None,
    )
    config.check()  # before the dataset is read
    ds = load_dataset(
        args.dataset, args.root, att_splits=args.att_splits, ss_dir=args.ss_dir, need_ss=args.split == "ss"
    )
    results = upper_bound_to_directory(ds, config, args.out)
    line = (
        f"{ds.name} {args.split.upper()} upper bound: ZSL top-1 {results['zsl']['top1_per_class'] * 100:.1f}"
    )
    if results.get("gzsl"):
        g = results["gzsl"]
        line += f" | GZSL u {g['unseen'] * 100:.1f} s {g['seen'] * 100:.1f} H {g['H'] * 100:.1f}"
    print(line)
    print(f"wrote {args.out}")
    return 0


def table(args: argparse.Namespace) -> int:
    """``attributes table``: the GBU tables of finished runs (printed, and written with ``--out``)."""
    if args.out:
        check_out_dir(args.out, TABLE_TOOL, inputs=args.runs)  # before anything is printed
    results = load_results(args.runs)
    if not args.out:
        print(render(results)[0])
        return 0
    print(table_to_directory(results, args.out, args.runs))
    print(f"wrote {args.out}")
    return 0


def split(args: argparse.Namespace) -> int:
    """``attributes split``: a GRAB class split or attribute subset as a split folder."""
    check_out_dir(args.out, SPLIT_TOOL, inputs=[args.root, args.att_splits])  # before any reading
    ds = load_dataset(args.dataset, args.root, att_splits=args.att_splits)
    result = make_split(
        ds,
        args.method,
        inverse=args.inverse,
        k=args.k,
        seed=args.seed,
        proportion=Proportion(prop=args.prop, seen_share=args.seen_share),
        mas_attributes=args.mas_attributes,
    )
    path = write_split_dir(result, ds, args.out, inputs=[args.root, *split_inputs(ds)])
    made = result.split
    left_out = made.num_classes - made.seen_classes.size - made.unseen_classes.size
    print(
        f"{ds.name} {args.method}{' (inverse)' if args.inverse else ''}: "
        f"{made.seen_classes.size} seen / {made.unseen_classes.size} unseen classes"
        f"{f' ({left_out} left out)' if left_out else ''}, "
        f"{made.num_attributes} attributes; images trainval {made.locs['trainval_loc'].size} "
        f"/ test seen {made.locs['test_seen_loc'].size} / test unseen "
        f"{made.locs['test_unseen_loc'].size}"
    )
    print(f"wrote {path}")
    return 0


def robustness(args: argparse.Namespace) -> int:
    """``attributes robustness``: GRAB's generalizability and robustness study of one model."""
    params = _pairs(args.param, "--param", False)  # before the dataset loads
    ds = load_dataset(args.dataset, args.root)
    text = study_to_directory(
        ds,
        args.model.lower(),
        args.methods,
        args.seeds,
        args.out,
        options=StudyOptions(inverse=args.inverse, k=args.k, mas_attributes=args.mas_attributes),
        params=params,
        progress=_progress,
    )
    print(text)
    print(f"wrote {args.out}")
    return 0


def info(args: argparse.Namespace) -> int:
    """``attributes info``: class and image counts of a packaged or given split."""
    path = (
        given_split_file(args.att_splits)
        if args.att_splits
        else packaged_dir(args.dataset) / "att_splits.mat"
    )
    att_splits = load_att_splits(path)
    lists = ps_class_lists(args.dataset, att_splits)
    val = ", ".join(f"{len(lists.train[k])}/{len(lists.val[k])}" for k in sorted(lists.val))
    print(f"{args.dataset} ({path})")
    print(
        f"  {att_splits.num_attributes} attributes x {att_splits.num_classes} classes; "
        f"{len(lists.trainval)} seen (train/val: {val}) / {len(lists.test)} unseen"
    )
    for name, loc in att_splits.locs.items():
        print(f"  {name}: {loc.size} images")
    return 0


def demo(args: argparse.Namespace) -> int:
    """``attributes demo``: the GBU table on generated features."""
    print(
        run_demo(
            args.out,
            datasets=args.datasets,
            models=args.models,
            dim=args.dim,
            val_splits=args.val_splits,
            progress=_progress,
        )
    )
    print(f"wrote {args.out} (generated features: the numbers describe the demo data only)")
    return 0
