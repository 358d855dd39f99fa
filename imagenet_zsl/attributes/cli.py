"""Command-line entry points of the `attributes` stage (xlsa17 datasets, GBU protocol, GRAB).

Start-up imports nothing of the stage: each handler imports what it runs; GRAB's choices are
read from :mod:`imagenet_zsl.attributes.grab` only when their flag is given or its help shown.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.cli_types import LazyChoices, seed
from imagenet_zsl.errors import UserInputError

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree

DATASET_CHOICES = ("APY", "AWA1", "AWA2", "CUB", "SUN")
METHOD_CHOICES = ("random", "gcs", "ccs", "mas", "pas")
#: `attributes split` also writes GRAB's seen/unseen proportion splits (needs --prop or --seen-share)
SPLIT_METHOD_CHOICES = (*METHOD_CHOICES, "proportion")


def _mas_attributes() -> tuple[str, ...]:
    from imagenet_zsl.attributes.grab import MAS_ATTRIBUTES

    return MAS_ATTRIBUTES


def _props() -> tuple[int, ...]:
    from imagenet_zsl.attributes.grab import PROPS

    return PROPS


MAS_ATTRIBUTE_CHOICES = LazyChoices(_mas_attributes)
PROP_CHOICES = LazyChoices(_props)


def _value(text: str, option: str, item: str) -> Any:
    """VALUE read as a recipe's YAML is (``config.parse_recipe_yaml``): YAML 1.1 octal, sexagesimal
    or ``yes`` values and alias bombs are one line naming ``option`` and the item."""
    import yaml

    from imagenet_zsl.config import parse_recipe_yaml, shorten

    try:
        return parse_recipe_yaml(text)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserInputError(
            f"{option} {shorten(repr(item))}: the value is not valid YAML ({shorten(problem)})"
        ) from None


def _pairs(items: list[str] | None, option: str, many: bool) -> dict[str, Any]:
    """``k=v`` (or ``k=v1,v2`` with ``many``) options → dict with YAML-typed values."""
    from imagenet_zsl.config import shorten

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserInputError(f"{option} {shorten(repr(item))}: expected NAME=VALUE")
        parts = value.split(",") if many else [value]
        values = [_value(v, option, item) for v in parts]
        out[key] = values if many else values[0]
    return out


def _att_splits_path(text: str) -> Path:
    """``--att-splits``: a .mat file or a split folder; a FIFO, socket or device is a usage error
    before anything opens it (the reader would block, or call it missing)."""
    path = Path(text)
    if path.exists() and not (path.is_file() or path.is_dir()):
        raise argparse.ArgumentTypeError(
            f"{text[:200]} is a FIFO, socket or device; give an att_splits.mat file or a split folder"
        )
    return path


def _dataset_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", required=True, type=str.upper, choices=DATASET_CHOICES)


def _progress(message: str) -> None:
    print(message, flush=True)


def _run(args: argparse.Namespace) -> int:
    from imagenet_zsl.attributes.dataset import load_dataset
    from imagenet_zsl.attributes.protocol import RunConfig, run_to_directory

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


def _upper_bound(args: argparse.Namespace) -> int:
    from imagenet_zsl.attributes.dataset import load_dataset
    from imagenet_zsl.attributes.upper_bound import UpperBoundConfig, upper_bound_to_directory

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


def _table(args: argparse.Namespace) -> int:
    from imagenet_zsl.attributes.outputs import TABLE_TOOL, load_results
    from imagenet_zsl.attributes.table import render, table_to_directory
    from imagenet_zsl.io import check_out_dir

    if args.out:
        check_out_dir(args.out, TABLE_TOOL, inputs=args.runs)  # before anything is printed
    results = load_results(args.runs)
    if not args.out:
        print(render(results)[0])
        return 0
    print(table_to_directory(results, args.out, args.runs))
    print(f"wrote {args.out}")
    return 0


def _split(args: argparse.Namespace) -> int:
    from imagenet_zsl.attributes.dataset import load_dataset
    from imagenet_zsl.attributes.grab import Proportion, make_split, split_inputs, write_split_dir
    from imagenet_zsl.attributes.outputs import SPLIT_TOOL
    from imagenet_zsl.io import check_out_dir

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
    split = result.split
    left_out = split.num_classes - split.seen_classes.size - split.unseen_classes.size
    print(
        f"{ds.name} {args.method}{' (inverse)' if args.inverse else ''}: "
        f"{split.seen_classes.size} seen / {split.unseen_classes.size} unseen classes"
        f"{f' ({left_out} left out)' if left_out else ''}, "
        f"{split.num_attributes} attributes; images trainval {split.locs['trainval_loc'].size} "
        f"/ test seen {split.locs['test_seen_loc'].size} / test unseen "
        f"{split.locs['test_unseen_loc'].size}"
    )
    print(f"wrote {path}")
    return 0


def _robustness(args: argparse.Namespace) -> int:
    from imagenet_zsl.attributes.dataset import load_dataset
    from imagenet_zsl.attributes.robustness import StudyOptions, study_to_directory

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


def _info(args: argparse.Namespace) -> int:
    from imagenet_zsl.attributes.dataset import given_split_file, packaged_dir, ps_class_lists
    from imagenet_zsl.attributes.xlsa17 import load_att_splits

    path = (
        given_split_file(args.att_splits)
        if args.att_splits
        else packaged_dir(args.dataset) / "att_splits.mat"
    )
    split = load_att_splits(path)
    lists = ps_class_lists(args.dataset, split)
    val = ", ".join(f"{len(lists.train[k])}/{len(lists.val[k])}" for k in sorted(lists.val))
    print(f"{args.dataset} ({path})")
    print(
        f"  {split.num_attributes} attributes x {split.num_classes} classes; "
        f"{len(lists.trainval)} seen (train/val: {val}) / {len(lists.test)} unseen"
    )
    for name, loc in split.locs.items():
        print(f"  {name}: {loc.size} images")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from imagenet_zsl.attributes.demo import run_demo

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


def _add_run(group: argparse._SubParsersAction) -> None:
    run = group.add_parser("run", help="train and evaluate one model with the GBU protocol")
    _dataset_arg(run)
    run.add_argument("--root", required=True, type=Path, help="folder with res101.mat (xlsa17/data)")
    run.add_argument("--model", required=True)
    run.add_argument("--split", choices=("ps", "ss"), default="ps")
    run.add_argument("--val-split", type=int, choices=(1, 2, 3), default=1)
    run.add_argument("--att-splits", type=_att_splits_path, help="att_splits.mat or split folder (e.g. GRAB)")
    run.add_argument("--ss-dir", type=Path, help="xlsa17 standard_split/<DATASET> class lists")
    run.add_argument("--seed", type=seed, default=0)
    run.add_argument(
        "--select",
        choices=("zsl", "gzsl"),
        default="zsl",
        help="choose hyper-parameters by val ZSL top-1 (GBU) or by val H after calibration (gzsl)",
    )
    run.add_argument(
        "--semantics",
        choices=("attributes", "visual"),
        default="attributes",
        help="visual: class vectors = mean res101 feature per class (Chao et al.'s idealised G-attr)",
    )
    _add_cross_dataset(run)
    run.add_argument("--param", action="append", metavar="NAME=VALUE", help="fixed hyper-parameter")
    run.add_argument(
        "--grid",
        action="append",
        metavar="NAME=V1,V2",
        help="search these values instead of the model's grid",
    )
    run.add_argument("--out", required=True, type=Path)
    run.set_defaults(func=_run)


def _add_cross_dataset(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--test-dataset",
        type=str.upper,
        choices=DATASET_CHOICES,
        help="also test on this dataset (same classes/attributes: AWA1 <-> AWA2, GBU Table 4)",
    )
    run.add_argument(
        "--test-root", type=Path, help="folder with the --test-dataset's res101.mat (default --root)"
    )


def _add_upper_bound(group: argparse._SubParsersAction) -> None:
    bound = group.add_parser(
        "upper-bound",
        help="Chao et al.'s upper bound: a softmax classifier trained on all classes (seen and unseen)",
    )
    _dataset_arg(bound)
    bound.add_argument("--root", required=True, type=Path, help="folder with res101.mat (xlsa17/data)")
    bound.add_argument("--split", choices=("ps", "ss"), default="ps")
    bound.add_argument(
        "--att-splits", type=_att_splits_path, help="att_splits.mat or split folder (e.g. GRAB)"
    )
    bound.add_argument("--ss-dir", type=Path, help="xlsa17 standard_split/<DATASET> class lists")
    bound.add_argument("--seed", type=seed, default=0, help="which unseen images train (seeded share)")
    bound.add_argument("--reg", type=float, default=1e-4, help="L2 weight (standardised features)")
    bound.add_argument("--max-iter", type=int, default=200, help="L-BFGS iterations")
    bound.add_argument("--out", required=True, type=Path)
    bound.set_defaults(func=_upper_bound)


def _add_table(group: argparse._SubParsersAction) -> None:
    table = group.add_parser("table", help="GBU-style table and ranking matrix of finished runs")
    table.add_argument("runs", nargs="+", type=Path, help="run directories (searched recursively)")
    table.add_argument("--out", type=Path, help="also write table.md, CSVs and ranking PNGs here")
    table.set_defaults(func=_table)


def _add_split(group: argparse._SubParsersAction) -> None:
    split = group.add_parser("split", help="write a GRAB class split or attribute subset")
    _dataset_arg(split)
    split.add_argument(
        "--root", required=True, type=Path, help="folder with res101.mat (its labels place the images)"
    )
    split.add_argument("--att-splits", type=_att_splits_path, help="source att_splits.mat (default: PS)")
    split.add_argument("--method", required=True, choices=SPLIT_METHOD_CHOICES)
    _add_proportion(split)
    split.add_argument(
        "--mas-attributes",
        choices=MAS_ATTRIBUTE_CHOICES,
        default="binary",
        metavar="KIND",
        help="mas: score co-occurrences on binarised attributes (GRAB Eq. 14, default) or on the "
        "continuous ones (GRAB's experiments): %(choices)s",
    )
    split.add_argument("--inverse", action="store_true", help="gcs/ccs: other end; mas: most correlated")
    split.add_argument(
        "--k",
        type=int,
        help="mas/pas: attributes/components kept (default 40 as in GRAB's code, capped at A for mas, "
        "min(A, C-1) for pas)",
    )
    split.add_argument("--seed", type=seed, default=0)
    split.add_argument("--out", required=True, type=Path)
    split.set_defaults(func=_split)


def _add_proportion(split: argparse.ArgumentParser) -> None:
    split.add_argument(
        "--prop",
        type=int,
        choices=PROP_CHOICES,
        metavar="N",
        help="proportion (GRAB Table 3, the paper's design): Prop 1..4, a fixed set of n_U = half the "
        "PS unseen classes (AWA 5) and nested seen sets of n_S(PS) + (prop - 3) * n_U classes "
        "(AWA 30/35/40/45); the other classes are left out",
    )
    split.add_argument(
        "--seen-share",
        type=float,
        metavar="S",
        help="proportion, share-based option: round(S * C) classes seen, all others unseen",
    )


def _add_robustness(group: argparse._SubParsersAction) -> None:
    robust = group.add_parser(
        "robustness",
        help="GRAB: generalizability (Eq. 9, std over seeds and over random splits) and robustness "
        "(Eq. 10, mean over random splits minus the worst GRAB split) for ZSL, u, s, H",
    )
    _dataset_arg(robust)
    robust.add_argument("--root", required=True, type=Path)
    robust.add_argument("--model", required=True)
    robust.add_argument("--methods", nargs="+", choices=METHOD_CHOICES, default=list(METHOD_CHOICES))
    robust.add_argument("--inverse", action="store_true", help="also run gcs/ccs/mas inverses")
    robust.add_argument(
        "--k", type=int, help="mas/pas: attributes/components kept (default 40, capped as in split)"
    )
    robust.add_argument(
        "--mas-attributes",
        choices=MAS_ATTRIBUTE_CHOICES,
        default="binary",
        metavar="KIND",
        help="mas: binarised (GRAB Eq. 14, default) or continuous attributes: %(choices)s",
    )
    robust.add_argument("--seeds", type=int, default=5)
    robust.add_argument("--param", action="append", metavar="NAME=VALUE")
    robust.add_argument("--out", required=True, type=Path)
    robust.set_defaults(func=_robustness)


def _add_info(group: argparse._SubParsersAction) -> None:
    info = group.add_parser("info", help="class and image counts of a packaged or given split")
    _dataset_arg(info)
    info.add_argument("--att-splits", type=_att_splits_path)
    info.set_defaults(func=_info)


def _add_demo(group: argparse._SubParsersAction) -> None:
    demo = group.add_parser("demo", help="GBU table on generated features (real class structure)")
    demo.add_argument("--out", required=True, type=Path)
    demo.add_argument(
        "--datasets", nargs="+", type=str.upper, choices=DATASET_CHOICES, default=["APY", "AWA2"]
    )
    demo.add_argument(
        "--models",
        nargs="+",
        help="default: every registered model that runs on attributes (GBU's 13 + ridge)",
    )
    demo.add_argument("--dim", type=int, default=32, help="dimension of the generated features (>= 1)")
    demo.add_argument("--val-splits", nargs="+", type=int, choices=(1, 2, 3), default=[1])
    demo.set_defaults(func=_demo)


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    group = tree.group("attributes", "attribute datasets (xlsa17): GBU protocol, GRAB splits")
    for add in (_add_run, _add_upper_bound, _add_table, _add_split, _add_robustness, _add_info, _add_demo):
        add(group)
