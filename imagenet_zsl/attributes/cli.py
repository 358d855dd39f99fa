"""``imagenet-zsl attributes run | upper-bound | table | split | robustness | info | demo`` (xlsa17
datasets, GBU protocol, GRAB): the flags; the handlers are :mod:`imagenet_zsl.attributes.commands`.

Start-up imports nothing of the stage: each command names its handler by dotted target, and GRAB's
choices are dotted targets into :mod:`imagenet_zsl.attributes.grab`, read only when their flag is
given or its help shown. Each flag's ``dest`` is a field of its handler's options
(``commands.<Command>Options``), which hold the defaults: no flag here states one.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import LazyChoices, overwrite_flag, seed

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree

DATASET_CHOICES = ("APY", "AWA1", "AWA2", "CUB", "SUN")
METHOD_CHOICES = ("random", "gcs", "ccs", "mas", "pas")
#: `attributes split` also writes GRAB's seen/unseen proportion splits (needs --prop or --seen-share)
SPLIT_METHOD_CHOICES = (*METHOD_CHOICES, "proportion")

MAS_ATTRIBUTE_CHOICES = LazyChoices("imagenet_zsl.attributes.grab:MAS_ATTRIBUTES")
PROP_CHOICES = LazyChoices("imagenet_zsl.attributes.grab:PROPS")


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


def _add_run(group: argparse._SubParsersAction) -> None:
    run = group.add_parser("run", help="train and evaluate one model with the GBU protocol")
    _dataset_arg(run)
    run.add_argument("--root", required=True, type=Path, help="folder with res101.mat (xlsa17/data)")
    run.add_argument("--model", required=True)
    run.add_argument("--split", choices=("ps", "ss"))
    run.add_argument("--val-split", type=int, choices=(1, 2, 3))
    run.add_argument("--att-splits", type=_att_splits_path, help="att_splits.mat or split folder (e.g. GRAB)")
    run.add_argument("--ss-dir", type=Path, help="xlsa17 standard_split/<DATASET> class lists")
    run.add_argument("--seed", type=seed)
    run.add_argument(
        "--select",
        choices=("zsl", "gzsl"),
        help="choose hyper-parameters by val ZSL top-1 (GBU) or by val H after calibration (gzsl)",
    )
    run.add_argument(
        "--semantics",
        choices=("attributes", "visual"),
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
    overwrite_flag(run)
    run.set_defaults(func="imagenet_zsl.attributes.commands:run")


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
    bound.add_argument("--split", choices=("ps", "ss"))
    bound.add_argument(
        "--att-splits", type=_att_splits_path, help="att_splits.mat or split folder (e.g. GRAB)"
    )
    bound.add_argument("--ss-dir", type=Path, help="xlsa17 standard_split/<DATASET> class lists")
    bound.add_argument("--seed", type=seed, help="which unseen images train (seeded share)")
    bound.add_argument("--reg", type=float, help="L2 weight (standardised features)")
    bound.add_argument("--max-iter", type=int, help="L-BFGS iterations")
    bound.add_argument("--out", required=True, type=Path)
    overwrite_flag(bound)
    bound.set_defaults(func="imagenet_zsl.attributes.commands:upper_bound")


def _add_table(group: argparse._SubParsersAction) -> None:
    table = group.add_parser("table", help="GBU-style table and ranking matrix of finished runs")
    table.add_argument("runs", nargs="+", type=Path, help="run directories (searched recursively)")
    table.add_argument("--out", type=Path, help="also write table.md, CSVs and ranking PNGs here")
    overwrite_flag(table)
    table.set_defaults(func="imagenet_zsl.attributes.commands:table")


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
    split.add_argument("--seed", type=seed)
    split.add_argument("--out", required=True, type=Path)
    overwrite_flag(split)
    split.set_defaults(func="imagenet_zsl.attributes.commands:split")


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
    robust.add_argument("--methods", nargs="+", choices=METHOD_CHOICES)
    robust.add_argument("--inverse", action="store_true", help="also run gcs/ccs/mas inverses")
    robust.add_argument(
        "--k", type=int, help="mas/pas: attributes/components kept (default 40, capped as in split)"
    )
    robust.add_argument(
        "--mas-attributes",
        choices=MAS_ATTRIBUTE_CHOICES,
        metavar="KIND",
        help="mas: binarised (GRAB Eq. 14, default) or continuous attributes: %(choices)s",
    )
    robust.add_argument("--seeds", type=int)
    robust.add_argument("--param", action="append", metavar="NAME=VALUE")
    robust.add_argument("--out", required=True, type=Path)
    overwrite_flag(robust)
    robust.set_defaults(func="imagenet_zsl.attributes.commands:robustness")


def _add_info(group: argparse._SubParsersAction) -> None:
    info = group.add_parser("info", help="class and image counts of a packaged or given split")
    _dataset_arg(info)
    info.add_argument("--att-splits", type=_att_splits_path)
    info.set_defaults(func="imagenet_zsl.attributes.commands:info")


def _add_demo(group: argparse._SubParsersAction) -> None:
    demo = group.add_parser("demo", help="GBU table on generated features (real class structure)")
    demo.add_argument("--out", required=True, type=Path)
    overwrite_flag(demo)
    demo.add_argument("--datasets", nargs="+", type=str.upper, choices=DATASET_CHOICES)
    demo.add_argument(
        "--models",
        nargs="+",
        help="default: every registered model that runs on attributes (GBU's 13 + ridge)",
    )
    demo.add_argument("--dim", type=int, help="dimension of the generated features (>= 1)")
    demo.add_argument("--val-splits", nargs="+", type=int, choices=(1, 2, 3))
    demo.set_defaults(func="imagenet_zsl.attributes.commands:demo")


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    group = tree.group("attributes", "attribute datasets (xlsa17): GBU protocol, GRAB splits")
    for add in (_add_run, _add_upper_bound, _add_table, _add_split, _add_robustness, _add_info, _add_demo):
        add(group)
