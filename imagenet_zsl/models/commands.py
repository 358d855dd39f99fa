"""The handlers of ``imagenet-zsl train | finetune-dgp | models`` (flags in
:mod:`imagenet_zsl.models.cli`).

Each takes its typed config (:class:`TrainOptions`, :class:`FinetuneDgpOptions`,
:class:`ModelsOptions`: one field per flag, built by :func:`imagenet_zsl.cli.handler_config`) and
returns the exit status; imported only when one of these commands runs. Nothing imported here
loads torch at import time: ``finetune-dgp`` must tune the process
(:func:`imagenet_zsl.devices.tune_process_for_image_pipeline`) before torch loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from imagenet_zsl import devices
from imagenet_zsl.config import parse_recipe_yaml, shorten
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.finetune import FinetuneParams
from imagenet_zsl.models.base import MODELS
from imagenet_zsl.models.catalog import describe
from imagenet_zsl.models.dgp_finetune import CHECKPOINT_NAME
from imagenet_zsl.models.dgp_finetune import finetune_dgp as run_finetune_dgp
from imagenet_zsl.models.params import describe_params
from imagenet_zsl.models.training import load_train_config
from imagenet_zsl.models.training import train as train_model


@dataclass(frozen=True)
class TrainOptions:
    """``imagenet-zsl train``: one field per flag."""

    config: Path
    features: Path
    out: Path
    #: the ``--set PARAM=VALUE`` items as given (read by :func:`parse_overrides`)
    overrides: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FinetuneDgpOptions:
    """``imagenet-zsl finetune-dgp``: one field per flag (``backbone``/``weights`` None: as the
    feature manifest records; ``workers`` None: 0 on CPU, up to 8 on CUDA)."""

    model: Path
    features: Path
    images: Path
    out: Path
    backbone: str | None = None
    weights: str | None = None
    finetune_epochs: int = 3
    finetune_batch_size: int = 64
    finetune_lr: float = 1e-4
    weight_decay: float = 0.0
    min_steps: int = 0
    workers: int | None = None
    allow_incomplete: bool = False
    #: what is trained: ``last_block`` or ``backbone``
    scope: str = "last_block"
    seed: int = 0
    device: str = "auto"


@dataclass(frozen=True)
class ModelsOptions:
    """``imagenet-zsl models``."""

    #: machine-readable output
    json: bool = False


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``--set PARAM=VALUE`` items → {param: value}; a VALUE is read as a recipe's YAML is (so
    ``1e-3`` is a number), its type and range are checked with the config's params."""
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


def train(cfg: TrainOptions) -> int:
    """``train``: fit a model on the seen classes of a feature directory and save it."""
    config = load_train_config(cfg.config)
    out = train_model(
        config, cfg.features, cfg.out, config_path=cfg.config, overrides=parse_overrides(cfg.overrides)
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


def finetune_dgp(cfg: FinetuneDgpOptions) -> int:
    """``finetune-dgp``: DGP's second stage, the backbone under the model's fixed seen classifiers."""
    # it decodes images in workers; torch is not loaded yet (looked up on the module: tests patch it)
    devices.tune_process_for_image_pipeline()
    params = FinetuneParams(
        images=str(cfg.images),
        backbone=cfg.backbone,
        weights=cfg.weights,
        epochs=cfg.finetune_epochs,
        batch_size=cfg.finetune_batch_size,
        lr=cfg.finetune_lr,
        weight_decay=cfg.weight_decay,
        min_steps=cfg.min_steps,
        workers=cfg.workers,
        allow_incomplete=cfg.allow_incomplete,
    ).validate()
    manifest = run_finetune_dgp(
        cfg.model, cfg.features, cfg.out, params, seed=cfg.seed, device=cfg.device, scope=cfg.scope
    )
    training = manifest["training"]
    part = "the last block" if cfg.scope == "last_block" else "the whole backbone"
    print(
        f"fine-tuned {part} of {manifest['backbone']} for {training['steps']} steps: "
        f"loss {training['loss_before']:.4f} -> {training['loss_after']:.4f}"
    )
    print(
        f"wrote {cfg.out}; re-extract with --backbone {manifest['backbone']} "
        f"--weights {cfg.out / CHECKPOINT_NAME}"
    )
    return 0


def models(cfg: ModelsOptions) -> int:
    """``models``: every registered model with its hyper-parameters (type, range, default) and grid."""
    if cfg.json:
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
