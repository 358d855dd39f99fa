"""``imagenet-zsl train | finetune-dgp | models``: the flags; the handlers are
:mod:`imagenet_zsl.models.commands`.

Start-up imports nothing of the stage (issue 27: ``imagenet-zsl --help`` imports no model, torch or
scipy): each command names its handler by dotted target, resolved only when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import allow_incomplete_flag, overwrite_flag, seed
from imagenet_zsl.devices import DEVICE_HELP

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    train = tree.command(
        "train",
        "fit a zero-shot model on the seen classes of a feature directory and save it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: imagenet-zsl train --config configs/models/eszsl.yaml "
        "--features features/train --out models/eszsl\n\n"
        "conse, trivial, gcnz, sgcn and dgp build on the backbone's own classifier when the "
        "feature directory stores it\n(head.npz, written by 'imagenet-zsl extract'): their seen "
        "classes are then the head's classes, and they\nneed no seen-class image. vlm_zero_shot "
        "learns nothing and reads no image. Every other model needs images\nof at least two seen "
        "classes.",
    )
    train.add_argument("--config", required=True, type=Path, help="model YAML (configs/models/*.yaml)")
    train.add_argument("--features", required=True, type=Path, help="feature directory of the seen classes")
    train.add_argument("--out", required=True, type=Path, help="model directory to write (replaced)")
    overwrite_flag(train)
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        metavar="PARAM=VALUE",
        help="override a hyper-parameter (YAML value, checked against its type and range: "
        "'imagenet-zsl models'), e.g. --set epochs=100 --set lr=1e-3; it wins over the "
        "config's params and over its select grid (a parameter set here is not searched)",
    )
    train.set_defaults(func="imagenet_zsl.models.commands:train")

    dgp = tree.command(
        "finetune-dgp",
        "DGP's second stage: train the backbone's last block (default) or, as the reference does, the "
        "whole backbone (--scope backbone) under the model's fixed seen classifiers",
        epilog="example: imagenet-zsl finetune-dgp models/dgp --features features/train --images "
        "images/train --out models/dgp-backbone; then imagenet-zsl extract ... --weights "
        "models/dgp-backbone/backbone.pt",
    )
    dgp.add_argument("model", type=Path, help="model directory written by `train` (dgp, sgcn or gcnz)")
    dgp.add_argument("--features", required=True, type=Path, help="the seen-class features it was trained on")
    dgp.add_argument("--images", required=True, type=Path, help="the image store of those features")
    dgp.add_argument("--out", required=True, type=Path, help="output directory (backbone.pt + manifest)")
    overwrite_flag(dgp)
    dgp.add_argument("--backbone", help="default: the one the feature manifest records")
    dgp.add_argument("--weights", help="default: the ones the feature manifest records")
    dgp.add_argument("--finetune-epochs", type=int)
    dgp.add_argument("--finetune-batch-size", type=int)
    dgp.add_argument("--finetune-lr", type=float, help="SGD lr (reference: 1e-4)")
    dgp.add_argument("--weight-decay", type=float)
    dgp.add_argument("--min-steps", type=int)
    dgp.add_argument("--workers", type=int)
    allow_incomplete_flag(dgp)
    dgp.add_argument(
        "--scope",
        choices=("last_block", "backbone"),
        help="what is trained: the last block (default: about half the compute per step on CPU, and "
        "BatchNorm statistics stay frozen with small batches) or the whole backbone in train mode "
        "with random resized crops and flips (Kampffmeyer et al.'s reference recipe)",
    )
    dgp.add_argument("--seed", type=seed)
    dgp.add_argument("--device", metavar="auto|cpu|cuda[:N]", help=DEVICE_HELP)
    dgp.set_defaults(func="imagenet_zsl.models.commands:finetune_dgp")

    models = tree.command(
        "models", "list the zero-shot models with their hyper-parameters (type, range or choices, default)"
    )
    models.add_argument("--json", action="store_true", help="machine-readable output")
    models.set_defaults(func="imagenet_zsl.models.commands:models")
