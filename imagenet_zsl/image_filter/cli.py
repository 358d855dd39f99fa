"""``imagenet-zsl images filter`` (drop ambiguous images with a cross-fitted classifier): the flags;
the handler is :mod:`imagenet_zsl.image_filter.commands`.

This stage's commands join the ``images`` group that :mod:`imagenet_zsl.images.cli` also adds
to (``CommandTree.group`` hands both the same group). Start-up imports nothing of the stage: the
command names its handler by dotted target; torch is imported only when the filter runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import (
    allow_incomplete_flag,
    int_at_least,
    non_negative_int,
    overwrite_flag,
    positive_int,
    seed,
)
from imagenet_zsl.devices import DEVICE_HELP

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree


def register(tree: CommandTree) -> None:
    """Add ``imagenet-zsl images filter`` to the command line."""
    _register_filter(tree.group("images"))


def _register_filter(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "filter",
        help="keep only images a cross-fitted classifier recognises (Hascoet et al.)",
        description=(
            "Train a classifier over the candidate classes on extracted features, cross-fitted "
            "so every image is judged by a model that never saw it, and keep an image only if "
            "it is classified correctly (under every seed). Classes with low held-out accuracy "
            "or too few surviving images are dropped, with the reason. Writes kept.csv, "
            "classes.csv, rejected.csv, report.md, class_accuracy.png and manifest.json."
        ),
    )
    parser.add_argument(
        "--features",
        required=True,
        metavar="DIR",
        help="feature directory written by 'imagenet-zsl extract' or 'simulate'",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    overwrite_flag(parser)
    parser.add_argument("--folds", type=int_at_least(2), help="cross-fitting folds (per class) (default: 5)")
    parser.add_argument(
        "--seeds",
        type=positive_int,
        help="number of seeds (fold splits); an image must be right under all (default: 1)",
    )
    parser.add_argument("--seed", type=seed, help="first seed (default: 0)")
    parser.add_argument(
        "--min-class-accuracy",
        type=float,
        metavar="A",
        help="drop classes whose held-out accuracy is below A (default: 0.0)",
    )
    parser.add_argument(
        "--min-images",
        type=non_negative_int,
        metavar="M",
        help="drop classes left with fewer than M images (default: 1)",
    )
    parser.add_argument(
        "--classifier",
        choices=("softmax", "ridge"),
        help="softmax layer trained with AdamW, or closed-form ridge regression "
        "(one pass for all folds: much faster on CPU at scale) (default: softmax)",
    )
    parser.add_argument("--epochs", type=positive_int, help="softmax: passes over the data (default: 10)")
    parser.add_argument("--batch-size", type=positive_int, help="softmax: mini-batch rows (default: 1024)")
    parser.add_argument("--lr", type=float, help="softmax: AdamW learning rate (default: 0.001)")
    parser.add_argument("--weight-decay", type=float, help="softmax: AdamW decay (default: 0.0001)")
    parser.add_argument(
        "--ridge-alpha",
        type=float,
        help="ridge: penalty relative to the mean feature variance (default: 0.01)",
    )
    parser.add_argument("--device", metavar="auto|cpu|cuda[:N]", help=f"{DEVICE_HELP} (default: auto)")
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (default: None)")
    tune = parser.add_argument_group(
        "fine-tuning (--finetune-last-block)",
        "Judge images by fine-tuning the backbone's last block (ResNet layer4) plus a new head over "
        "the classes on the images themselves, per (seed, fold), instead of a classifier on the "
        "features. Images are read from --images and preprocessed as at extraction; uses a CUDA GPU "
        "(bf16) when present, runs (slowly) on CPU. The head learns at --finetune-lr, the block at "
        "a tenth of it; BatchNorm statistics stay frozen.",
    )
    tune.add_argument(
        "--finetune-last-block",
        action="store_true",
        help="fine-tune the backbone's last block from the images (needs --images)",
    )
    tune.add_argument(
        "--images",
        metavar="STORE",
        help="the image store the features were extracted from (tars, class folders or val folder) "
        "(default: None)",
    )
    tune.add_argument(
        "--backbone",
        help="backbone to fine-tune; None: the one the features' manifest records (default: None)",
    )
    tune.add_argument(
        "--weights",
        metavar="PATH|random",
        help="its weights; None: as the features' manifest records (default: None)",
    )
    tune.add_argument(
        "--finetune-epochs", type=positive_int, help="passes over the training folds (default: 3)"
    )
    tune.add_argument("--finetune-batch-size", type=positive_int, help="images per step (default: 64)")
    tune.add_argument("--finetune-lr", type=float, help="AdamW learning rate of the head (default: 0.001)")
    allow_incomplete_flag(tune)
    tune.add_argument(
        "--workers",
        type=non_negative_int,
        help="image decoding processes; None: 0 on CPU, 8 on CUDA (default: None)",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    parser.set_defaults(func="imagenet_zsl.image_filter.commands:filter_images")
    return parser
