"""The handler of ``imagenet-zsl images filter`` (flags in :mod:`imagenet_zsl.image_filter.cli`).

Imported only when the command runs. Importing it loads no torch: with ``--finetune-last-block``
the handler first tunes the process for decoding images in workers
(:func:`imagenet_zsl.devices.tune_process_for_image_pipeline`), which works only before torch loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenet_zsl import devices
from imagenet_zsl.config import shared_fields
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.finetune import FinetuneParams
from imagenet_zsl.image_filter.params import FilterParams
from imagenet_zsl.image_filter.quality import filter_feature_dir


@dataclass(frozen=True)
class FilterImagesOptions:
    """The flags of ``images filter``: the :class:`FilterParams` fields of the same names, the
    fine-tuning's (:class:`FinetuneParams`; its epochs, batch size and learning rate as
    ``finetune_*``) and the run's own. The defaults are the parameters' own."""

    #: the feature directory written by ``extract`` or ``simulate``
    features: str
    #: the output directory
    out: str
    folds: int = FilterParams.folds
    seeds: int = FilterParams.seeds
    seed: int = FilterParams.seed
    min_class_accuracy: float = FilterParams.min_class_accuracy
    min_images: int = FilterParams.min_images
    classifier: str = FilterParams.classifier
    epochs: int = FilterParams.epochs
    batch_size: int = FilterParams.batch_size
    lr: float = FilterParams.lr
    weight_decay: float = FilterParams.weight_decay
    ridge_alpha: float = FilterParams.ridge_alpha
    device: str = FilterParams.device
    #: torch CPU threads (None: torch's default)
    threads: int | None = None
    #: judge images by fine-tuning the backbone's last block on the images (needs ``images``)
    finetune_last_block: bool = False
    images: str | None = None
    backbone: str | None = None
    weights: str | None = None
    finetune_epochs: int = FinetuneParams.epochs
    finetune_batch_size: int = FinetuneParams.batch_size
    finetune_lr: float = FinetuneParams.lr
    allow_incomplete: bool = False
    workers: int | None = None
    #: show progress bars
    progress: bool = True

    def filter_params(self) -> FilterParams:
        """The :class:`FilterParams` these options set (its fields of the same names)."""
        return shared_fields(FilterParams, self)


def filter_images(cfg: FilterImagesOptions) -> int:
    """Handler of ``images filter``: check the flags, run :func:`filter_feature_dir`, print a line."""
    finetune = None
    if cfg.finetune_last_block:
        devices.tune_process_for_image_pipeline()  # it decodes images in workers; torch is not loaded yet
        if cfg.images is None:
            raise UserInputError(
                "--finetune-last-block needs --images STORE: the image store the features were "
                "extracted from (it trains on the images themselves)"
            )
        finetune = FinetuneParams(
            images=cfg.images,
            backbone=cfg.backbone,
            weights=cfg.weights,
            epochs=cfg.finetune_epochs,
            batch_size=cfg.finetune_batch_size,
            lr=cfg.finetune_lr,
            workers=cfg.workers,
            allow_incomplete=cfg.allow_incomplete,
        ).validate()
    else:
        given = [
            flag
            for flag, value in (
                ("--images", cfg.images),
                ("--backbone", cfg.backbone),
                ("--weights", cfg.weights),
                ("--allow-incomplete", cfg.allow_incomplete or None),
            )
            if value is not None
        ]
        if given:
            raise UserInputError(
                f"{', '.join(given)}: only used with --finetune-last-block; add it or drop them"
            )
    if cfg.threads is not None:
        if cfg.threads < 1:
            raise UserInputError(f"--threads must be at least 1 (got {cfg.threads})")
        # deferred: this module loads no torch, so the OpenMP tuning above still takes effect
        import torch

        torch.set_num_threads(cfg.threads)
    summary = filter_feature_dir(
        cfg.features, cfg.out, cfg.filter_params(), progress=cfg.progress, finetune=finetune
    )
    print(
        f"kept {summary['images_after']}/{summary['images_before']} images and "
        f"{summary['classes_after']}/{summary['classes_before']} classes "
        f"(held-out accuracy {summary['heldout_accuracy']:.4f}) -> {cfg.out}"
    )
    return 0
