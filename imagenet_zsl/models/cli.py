"""Command-line entry points of the `models` stage: ``train``, ``finetune-dgp`` and ``models``.

Lazy (issue 27): at module level only the standard library, ``imagenet_zsl.errors`` and light
constants; each handler imports the stage modules it calls, so ``imagenet-zsl --help`` imports no
model, torch or scipy."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagenet_zsl.cli_types import seed
from imagenet_zsl.devices import DEVICE_HELP
from imagenet_zsl.errors import UserInputError

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
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        help="override a hyper-parameter (YAML value, checked against its type and range: "
        "'imagenet-zsl models'), e.g. --set epochs=100 --set lr=1e-3; it wins over the "
        "config's params and over its select grid (a parameter set here is not searched)",
    )
    train.set_defaults(func=_train)

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
    dgp.add_argument("--backbone", help="default: the one the feature manifest records")
    dgp.add_argument("--weights", help="default: the ones the feature manifest records")
    dgp.add_argument("--finetune-epochs", type=int, default=3)
    dgp.add_argument("--finetune-batch-size", type=int, default=64)
    dgp.add_argument("--finetune-lr", type=float, default=1e-4, help="SGD lr (reference: 1e-4)")
    dgp.add_argument("--weight-decay", type=float, default=0.0)
    dgp.add_argument("--min-steps", type=int, default=0)
    dgp.add_argument("--workers", type=int, default=None)
    dgp.add_argument(
        "--scope",
        choices=("last_block", "backbone"),
        default="last_block",
        help="what is trained: the last block (default: about half the compute per step on CPU, and "
        "BatchNorm statistics stay frozen with small batches) or the whole backbone in train mode "
        "with random resized crops and flips (Kampffmeyer et al.'s reference recipe)",
    )
    dgp.add_argument("--seed", type=seed, default=0)
    dgp.add_argument("--device", default="auto", metavar="auto|cpu|cuda[:N]", help=DEVICE_HELP)
    dgp.set_defaults(func=_finetune_dgp)

    models = tree.command(
        "models", "list the zero-shot models with their hyper-parameters (type, range or choices, default)"
    )
    models.add_argument("--json", action="store_true", help="machine-readable output")
    models.set_defaults(func=_models)


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    """``--set PARAM=VALUE`` items → {param: value}; a VALUE is read as a recipe's YAML is (so
    ``1e-3`` is a number), its type and range are checked with the config's params."""
    import yaml

    from imagenet_zsl.config import parse_recipe_yaml, shorten

    overrides: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UserInputError(f"--set {shorten(repr(item))}: expected PARAM=VALUE")
        key, value = item.split("=", 1)
        try:
            overrides[key.strip()] = parse_recipe_yaml(value)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise UserInputError(
                f"--set {shorten(repr(item))}: the value is not valid YAML ({shorten(problem)})"
            ) from None
    return overrides


def _train(args: argparse.Namespace) -> int:
    from imagenet_zsl.models.training import load_train_config, train

    config = load_train_config(args.config)
    out = train(
        config, args.features, args.out, config_path=args.config, overrides=_parse_overrides(args.set)
    )
    manifest = json.loads((out / "manifest.json").read_text())
    print(f"saved {manifest['model']} to {out}")
    if "selection" in manifest:
        selection = manifest["selection"]
        print(
            f"chosen on {len(selection['val_classes'])} validation classes ({selection['mode']}): "
            f"{selection['best_params']} (score {selection['best_score']:.4f})"
        )
        fixed = selection.get("fixed_by_set") or {}
        if fixed:
            values = ", ".join(f"{k}={v!r}" for k, v in fixed.items())
            print(f"--set wins over the select grid: {values} fixed, not searched")
    return 0


def _finetune_dgp(args: argparse.Namespace) -> int:
    from imagenet_zsl.devices import tune_process_for_image_pipeline

    tune_process_for_image_pipeline()  # it decodes images in workers; torch is not loaded yet
    from imagenet_zsl.features.finetune import FinetuneParams
    from imagenet_zsl.models.dgp_finetune import CHECKPOINT_NAME, finetune_dgp

    params = FinetuneParams(
        images=str(args.images),
        backbone=args.backbone,
        weights=args.weights,
        epochs=args.finetune_epochs,
        batch_size=args.finetune_batch_size,
        lr=args.finetune_lr,
        weight_decay=args.weight_decay,
        min_steps=args.min_steps,
        workers=args.workers,
    ).validate()
    manifest = finetune_dgp(
        args.model, args.features, args.out, params, seed=args.seed, device=args.device, scope=args.scope
    )
    training = manifest["training"]
    part = "the last block" if args.scope == "last_block" else "the whole backbone"
    print(
        f"fine-tuned {part} of {manifest['backbone']} for {training['steps']} steps: "
        f"loss {training['loss_before']:.4f} -> {training['loss_after']:.4f}"
    )
    print(
        f"wrote {args.out}; re-extract with --backbone {manifest['backbone']} "
        f"--weights {args.out / CHECKPOINT_NAME}"
    )
    return 0


def _models(args: argparse.Namespace) -> int:
    from imagenet_zsl.models.base import MODELS
    from imagenet_zsl.models.catalog import describe
    from imagenet_zsl.models.params import describe_params

    if args.json:
        print(
            json.dumps(
                {
                    name: {
                        "description": describe(cls),
                        "defaults": cls.defaults,
                        "params": describe_params(cls.Params),
                        "grid": cls.grid,
                    }
                    for name, cls in MODELS.items()
                },
                indent=2,
                sort_keys=True,
            )
        )
        return 0
    for name, cls in MODELS.items():
        print(f"{name:10s} {describe(cls)}")
        params = describe_params(cls.Params)
        if not params:
            print(f"{'':10s} no hyper-parameters")
        width = max((len(key) for key in params), default=0)
        for key, info in sorted(params.items()):
            kind = f"{info['type']} {info['range']}".strip()
            print(f"{'':10s} {key:{width}s}  {kind:40s} default {info['default']!r}")
        grid = cls.grid
        if grid:
            print(f"{'':10s} grid: " + "; ".join(f"{k} in {v}" for k, v in sorted(grid.items())))
    return 0
