"""Training a run's models once: a model whose key file matches its digest is loaded, not trained
again; a model that fails to train is recorded (its cells fail) and the others go on."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from imagenet_zsl.batch.faults import one_line, stop_on_fatal
from imagenet_zsl.batch.plan import Features, Plan, RunResult
from imagenet_zsl.batch.recipe import ModelSpec
from imagenet_zsl.io import MANIFEST_NAME, atomic_write_json, sha256_file
from imagenet_zsl.models.training import train


def ensure_model(spec: ModelSpec, features: Features, out: Path) -> tuple[Path, str, bool]:
    """(model directory, its digest, whether it was trained now): trained unless its key matches."""
    if spec.fitted is not None:
        return spec.fitted, spec.digest(""), False
    assert spec.train is not None
    digest = spec.digest(sha256_file(features.train / MANIFEST_NAME))
    model_dir = out / "models" / spec.name
    key_path = out / "models" / f"{spec.name}.key.json"
    if key_path.is_file() and (model_dir / MANIFEST_NAME).is_file():
        try:
            if json.loads(key_path.read_text())["digest"] == digest:
                return model_dir, digest, False
        except (ValueError, KeyError):
            pass
    key_path.unlink(missing_ok=True)
    train(spec.train, features.train, model_dir, config_path=spec.config_path)
    atomic_write_json(key_path, {"digest": digest, "model": spec.name, "train_config": spec.train.as_dict()})
    return model_dir, digest, True


def train_models(
    plan: Plan,
    features: Features,
    result: RunResult,
    echo: Callable[[str], None],
    owns: Callable[[int], bool] = lambda index: True,
) -> tuple[dict[str, tuple[Path, str]], dict[str, str]]:
    """Train (or load) every model this process owns (``owns(index in the plan)``; under torchrun
    each model is trained by one rank): ({name: (directory, digest)}, {name: error})."""
    trained: dict[str, tuple[Path, str]] = {}
    errors: dict[str, str] = {}
    for index, spec in enumerate(plan.models):
        if not owns(index):
            continue
        tic = time.perf_counter()
        try:
            model_dir, digest, fresh = ensure_model(spec, features, plan.out)
        except Exception as err:  # isolated: the model's cells are reported as failed
            stop_on_fatal(err, plan.out / "models" / spec.name)
            errors[spec.name] = f"training failed: {one_line(err)}"
            echo(f"model {spec.name}: {errors[spec.name]}")
            continue
        trained[spec.name] = (model_dir, digest)
        if fresh:
            result.trained.append(spec.name)
            echo(f"model {spec.name}: trained in {time.perf_counter() - tic:.1f} s")
    return trained, errors
