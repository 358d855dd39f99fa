"""The handler of ``imagenet-zsl images filter`` (flags in :mod:`imagenet_zsl.image_filter.cli`).

Imported only when the command runs. Importing it loads no torch: with ``--finetune-last-block``
the handler first tunes the process for decoding images in workers
(:func:`imagenet_zsl.devices.tune_process_for_image_pipeline`), which works only before torch loads.
"""

from __future__ import annotations

import argparse

from imagenet_zsl import devices
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.finetune import FinetuneParams
from imagenet_zsl.image_filter.params import FilterParams
from imagenet_zsl.image_filter.quality import filter_feature_dir


def filter_images(args: argparse.Namespace) -> int:
    """Handler of ``images filter``: check the flags, run :func:`filter_feature_dir`, print a line."""
    finetune = None
    if args.finetune_last_block:
        devices.tune_process_for_image_pipeline()  # it decodes images in workers; torch is not loaded yet
        if args.images is None:
            raise UserInputError(
                "--finetune-last-block needs --images STORE: the image store the features were "
                "extracted from (it trains on the images themselves)"
            )
        finetune = FinetuneParams(
            images=args.images,
            backbone=args.backbone,
            weights=args.weights,
            epochs=args.finetune_epochs,
            batch_size=args.finetune_batch_size,
            lr=args.finetune_lr,
            workers=args.workers,
            allow_incomplete=args.allow_incomplete,
        ).validate()
    else:
        given = [
            flag
            for flag, value in (
                ("--images", args.images),
                ("--backbone", args.backbone),
                ("--weights", args.weights),
                ("--allow-incomplete", args.allow_incomplete or None),
            )
            if value is not None
        ]
        if given:
            raise UserInputError(
                f"{', '.join(given)}: only used with --finetune-last-block; add it or drop them"
            )
    if args.threads is not None:
        if args.threads < 1:
            raise UserInputError(f"--threads must be at least 1 (got {args.threads})")
        # deferred: this module loads no torch, so the OpenMP tuning above still takes effect
        import torch

        torch.set_num_threads(args.threads)
    params = FilterParams(
        folds=args.folds,
        seeds=args.seeds,
        seed=args.seed,
        classifier=args.classifier,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        ridge_alpha=args.ridge_alpha,
        min_class_accuracy=args.min_class_accuracy,
        min_images=args.min_images,
        device=args.device,
    )
    summary = filter_feature_dir(
        args.features, args.out, params, progress=not args.no_progress, finetune=finetune
    )
    print(
        f"kept {summary['images_after']}/{summary['images_before']} images and "
        f"{summary['classes_after']}/{summary['classes_before']} classes "
        f"(held-out accuracy {summary['heldout_accuracy']:.4f}) -> {args.out}"
    )
    return 0
