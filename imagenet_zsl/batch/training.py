"""Training a run's models once: a model whose key file matches its digest is loaded, not trained
again; a model that fails to train is recorded (its cells fail) and the others go on. With a
carved GZSL calibration each model has a copy fitted without the validation classes
(``OUT/calibration/NAME``) that chooses γ; the time of that extra fit is kept in its key file."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imagenet_zsl.batch.faults import one_line, stop_on_fatal
from imagenet_zsl.batch.plan import Features, Plan
from imagenet_zsl.batch.recipe import ModelSpec
from imagenet_zsl.io import MANIFEST_NAME, atomic_write_json, sha256_file
from imagenet_zsl.models.training import train

#: the directory of the models that choose the carved GZSL γ (one per trained model)
CALIBRATION_DIR = "calibration"


def ensure_model(spec: ModelSpec, features: Features, root: Path) -> tuple[Path, str, bool, float]:
    """(model directory ``root/NAME``, its digest, whether it was trained now, the seconds its fit
    took, now or when it was trained): trained unless its key matches."""
    if spec.fitted is not None:
        return spec.fitted, spec.digest(""), False, 0.0
    assert spec.train is not None
    digest = spec.digest(sha256_file(features.train / MANIFEST_NAME))
    model_dir = root / spec.name
    key_path = root / f"{spec.name}.key.json"
    if key_path.is_file() and (model_dir / MANIFEST_NAME).is_file():
        try:
            key = json.loads(key_path.read_text())
            if key["digest"] == digest:
                return model_dir, digest, False, float(key.get("fit_seconds", 0.0))
        except (ValueError, KeyError, TypeError):
            pass
    key_path.unlink(missing_ok=True)
    tic = time.perf_counter()
    train(spec.train, features.train, model_dir, config_path=spec.config_path)
    seconds = round(time.perf_counter() - tic, 3)
    key = {"digest": digest, "model": spec.name, "train_config": spec.train.as_dict(), "fit_seconds": seconds}
    atomic_write_json(key_path, key)
    return model_dir, digest, True, seconds


@dataclass
class Trained:
    """What training a run's models gave: {name: (directory, digest)}, {name: error}, and the
    calibration copies {name: (directory, fit seconds)} (carved calibration only)."""

    models: dict[str, tuple[Path, str]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    calibration: dict[str, tuple[Path, float]] = field(default_factory=dict)
    fresh: list[str] = field(default_factory=list)


def train_models(
    plan: Plan,
    features: Features,
    echo: Callable[[str], None],
    calibration: dict[str, ModelSpec],
    owns: Callable[[int], bool] = lambda index: True,
) -> Trained:
    """Train (or load) every model this process owns (``owns(index in the plan)``; under torchrun
    each model is trained by one rank), and its calibration copy (``calibration``: name -> spec)."""
    done = Trained()
    for index, spec in enumerate(plan.models):
        if not owns(index):
            continue
        try:
            model_dir, digest, fresh, seconds = ensure_model(spec, features, plan.out / "models")
            if spec.name in calibration:
                root = plan.out / CALIBRATION_DIR
                cal_dir, _, cal_fresh, cal_seconds = ensure_model(calibration[spec.name], features, root)
                done.calibration[spec.name] = (cal_dir, cal_seconds)
                if cal_fresh:
                    echo(f"model {spec.name}: calibration copy fitted in {cal_seconds:.1f} s")
        except Exception as err:  # isolated: the model's cells are reported as failed
            stop_on_fatal(err, plan.out / "models" / spec.name)
            done.errors[spec.name] = f"training failed: {one_line(err)}"
            echo(f"model {spec.name}: {done.errors[spec.name]}")
            continue
        done.models[spec.name] = (model_dir, digest)
        if fresh:
            done.fresh.append(spec.name)
            echo(f"model {spec.name}: trained in {seconds:.1f} s")
    return done
