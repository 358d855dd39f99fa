"""Training a run's models once: a model whose key file matches its digest is loaded, not trained
again; a model that fails to train is recorded (its cells fail) and the others go on. With a
carved GZSL calibration each model has a copy fitted without the validation classes
(``OUT/calibration/NAME``) that chooses γ. How long each fit took is kept in ``OUT/timings.json``
(:func:`write_timings`), which the run's manifest does not hash: every other file of two runs of
the same recipe has the same bytes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imagenet_zsl.atomic import atomic_write_json, canonical_json
from imagenet_zsl.batch.faults import one_line, stop_on_fatal
from imagenet_zsl.batch.plan import CALIBRATION_DIR, Features, Plan
from imagenet_zsl.batch.recipe import ModelSpec
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import overwriting
from imagenet_zsl.manifests import MANIFEST_NAME, TIMINGS_NAME
from imagenet_zsl.models.training import train


def ensure_model(spec: ModelSpec, features: Features, root: Path) -> tuple[Path, str, float | None]:
    """(model directory ``root/NAME``, its digest, the seconds its fit took now: None when it was
    not trained now): trained unless its key file (``root/NAME.key.json``: what the model depends
    on, never a timing) matches."""
    if spec.fitted is not None:
        return spec.fitted, spec.digest(""), None
    assert spec.train is not None
    digest = spec.digest(sha256_file(features.train / MANIFEST_NAME))
    model_dir = root / spec.name
    key_path = root / f"{spec.name}.key.json"
    key = {"digest": digest, "model": spec.name, "train_config": spec.train.as_dict()}
    if key_path.is_file() and (model_dir / MANIFEST_NAME).is_file():
        try:
            text = key_path.read_text()
            if json.loads(text)["digest"] == digest:
                if text != canonical_json(key):  # an older version's, with its fit's seconds
                    atomic_write_json(key_path, key)
                return model_dir, digest, None
        except (ValueError, KeyError, TypeError):
            pass
    key_path.unlink(missing_ok=True)
    tic = time.perf_counter()
    with overwriting():  # the run's own model directory, trained again since its key changed
        train(spec.train, features.train, model_dir, config_path=spec.config_path)
    seconds = round(time.perf_counter() - tic, 3)
    atomic_write_json(key_path, key)
    return model_dir, digest, seconds


@dataclass
class Trained:
    """What training a run's models gave: {name: (directory, digest)}, {name: error}, the
    calibration copies {name: directory} (carved calibration only), the models trained now, and
    the seconds of the fits made now ({"models/NAME" or "calibration/NAME": seconds})."""

    models: dict[str, tuple[Path, str]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    calibration: dict[str, Path] = field(default_factory=dict)
    fresh: list[str] = field(default_factory=list)
    fit_seconds: dict[str, float] = field(default_factory=dict)


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
            model_dir, digest, seconds = ensure_model(spec, features, plan.out / "models")
            if spec.name in calibration:
                root = plan.out / CALIBRATION_DIR
                cal_dir, _, cal_seconds = ensure_model(calibration[spec.name], features, root)
                done.calibration[spec.name] = cal_dir
                if cal_seconds is not None:
                    done.fit_seconds[f"{CALIBRATION_DIR}/{spec.name}"] = cal_seconds
                    echo(f"model {spec.name}: calibration copy fitted in {cal_seconds:.1f} s")
        except Exception as err:  # isolated: the model's cells are reported as failed
            stop_on_fatal(err, plan.out / "models" / spec.name)
            done.errors[spec.name] = f"training failed: {one_line(err)}"
            echo(f"model {spec.name}: {done.errors[spec.name]}")
            continue
        done.models[spec.name] = (model_dir, digest)
        if seconds is not None:
            done.fresh.append(spec.name)
            done.fit_seconds[f"models/{spec.name}"] = seconds
            echo(f"model {spec.name}: trained in {seconds:.1f} s")
    return done


def write_timings(out: Path, fit_seconds: dict[str, float]) -> None:
    """Add the seconds of the fits made now to ``OUT/timings.json`` (``{"fit_seconds": {"models/NAME"
    or "calibration/NAME": seconds}}``; a model trained by an earlier run keeps that run's seconds).
    Timings differ from run to run, so they live in this file alone, which no manifest hashes
    (:data:`imagenet_zsl.manifests.TIMINGS_NAME`)."""
    path = out / TIMINGS_NAME
    try:
        found = json.loads(path.read_text())
        known = found["fit_seconds"] if isinstance(found["fit_seconds"], dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        known = {}
    if fit_seconds or not path.is_file():
        atomic_write_json(path, {"fit_seconds": {**known, **fit_seconds}})
