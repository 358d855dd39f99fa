"""The run record (``run.json``) of an extraction: its identity, which a resumed run must match,
and the feature manifest's fields but the shards; and ``head.npz``."""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_bytes, atomic_write_json, canonical_json
from imagenet_zsl.checksums import sha256_bytes, sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features import distributed as dist
from imagenet_zsl.features.backbones import get_spec
from imagenet_zsl.features.extract_setup import TOOL, ExtractConfig, ExtractionSetup, provenance_fields
from imagenet_zsl.features.head import HEAD_FILE, BackboneHead
from imagenet_zsl.features.hub_weights import RANDOM
from imagenet_zsl.features.shard_files import encode_head
from imagenet_zsl.images.store import ImageStore
from imagenet_zsl.manifests import file_record
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.pretraining import pretraining_of


def run_record(
    setup: ExtractionSetup, store: ImageStore, weights: dict[str, Any], logit_classes: list[str] | None
) -> dict:
    """run.json: the run's identity (must match to resume) and the manifest without shards."""
    cfg, work, pre, dim = setup.cfg, setup.work, setup.pre, setup.dim
    num_shards = math.ceil(len(work) / cfg.shard_size)
    parameters = {
        "per_class": cfg.per_class,
        "seed": cfg.seed,
        "shard_size": cfg.shard_size,
        "batch_size": setup.batch_size,
        "decode": setup.decode,
        "precision": setup.precision,
        "mode": cfg.mode,
        "device_type": setup.device.type,
        "logits": cfg.logits,
        "compile": cfg.compile,
    }
    inputs = {
        "store": {
            "path": str(store.root),
            "layout": store.layout,
            "index_key": store.key,
            "images_in_store": len(store),
        },
        "classes_file": file_record(cfg.classes_file),
    }
    if cfg.val_labels:
        inputs["val_labels"] = file_record(cfg.val_labels)
    identity = {
        "store": inputs["store"],
        "classes_sha256": inputs["classes_file"]["sha256"],
        "backbone": cfg.backbone,
        "weights_sha256": weights["sha256"],
        "weights": weights["source"],
        "preprocessing": pre.describe(),
        **parameters,
        "work_digest": work.digest(),
        "num_items": len(work),
    }
    manifest = {
        "tool": TOOL,
        "classes": work.classes,
        "simulated": False,
        "inputs": inputs,
        **provenance_fields(cfg.backbone, dim, weights, pre),
        "parameters": parameters,
        "classes_without_images": work.missing_classes,
        "store_problems": store.problems,
        "store_ledger": store.ledger_record(),
        "pretraining": pretraining_record(cfg, weights),
    }
    if logit_classes is not None:
        manifest["logits"] = {
            "classes": logit_classes,
            "order": "sorted ILSVRC-2012 wnids (the torchvision/timm 1K output order)",
        }
    if setup.head is not None:
        manifest["head"] = {
            "file": HEAD_FILE,
            "sha256": sha256_bytes(encode_head(setup.head)),
            "shape": list(setup.head.weight.shape),
            "order": "sorted ILSVRC-2012 wnids (the torchvision/timm 1K output order)",
            "use": "logits = features @ weight.T + bias",
        }
    return {
        "format": dist.RUN_FORMAT,
        "identity": identity,
        "manifest": manifest,
        "num_shards": num_shards,
        "num_items": len(work),
    }


def pretraining_record(cfg: ExtractConfig, weights: dict[str, Any]) -> dict[str, Any]:
    """What the backbone was pretrained on: ``--pretraining-classes FILE`` if given, else the label
    sets its name's pretrained tag names (:func:`~imagenet_zsl.splits.pretraining.pretraining_of`;
    torchvision's registered weights are ImageNet-1K; timm weights fetched by name, the tag of their
    hub repository: ``timm:resnet18`` → ``timm/resnet18.a1_in1k``). Random weights saw nothing."""
    if cfg.pretraining_classes:
        wnids = read_wnid_list(cfg.pretraining_classes)
        return {
            "model": cfg.backbone,
            "label_sets": [],
            "file": file_record(cfg.pretraining_classes),
            "web_data": False,
            "n_classes": len(wnids),
            "note": f"{cfg.backbone}: pretrained on the {len(wnids)} classes of {cfg.pretraining_classes}",
        }
    if weights.get("source") == RANDOM:
        return {
            "model": cfg.backbone,
            "label_sets": [],
            "web_data": False,
            "n_classes": 0,
            "note": "random weights: no pretraining",
        }
    spec = get_spec(cfg.backbone)
    if spec.library == "torchvision":
        name = f"{spec.arch}.tv_in1k"
    elif spec.library == "open_clip":
        name = f"{spec.arch}/{spec.weights_tag or ''}"
    else:  # timm: the tagged repository the weights came from by name (timm/<model>.<tag>)
        repo = weights.get("repo") if weights.get("source") == "hf-cache" else None
        name = (repo or spec.arch).removeprefix("hf-hub:").split("@")[0].split("/")[-1]
    return pretraining_of(name).as_dict()


#: identity keys added after run records of RUN_FORMAT were first written, with the value an older
#: record (without the key) ran with, so that such runs still resume
_IDENTITY_DEFAULTS = {"compile": False, "mode": "fast"}


def check_run(out: Path, record: dict) -> bool:
    """Refuse an ``out`` holding another run (or other files); True when ``out`` holds no run yet.
    Another torchrun rank may write the run record (and then its other files) while this one
    looks: files found beside a record that appeared meanwhile are that rank's."""
    path = out / dist.RUN_FILE
    if path.exists():
        existing = dist.read_run(out)
        old = {**_IDENTITY_DEFAULTS, **existing.get("identity", {})}
        new = json.loads(canonical_json(record["identity"]))  # tuples → lists, as stored
        differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if differ:
            raise UserInputError(
                f"{out} holds a different extraction ({', '.join(differ)} differ); re-run the "
                "original command to resume it, or choose another --out"
            )
        return False
    if out.exists() and any(not e.name.startswith(".") for e in os.scandir(out)):
        if path.exists():  # written by another rank since we looked: check it
            return check_run(out, record)
        raise UserInputError(f"{out} is not empty and is not an extraction directory; choose another --out")
    return True


def write_run(out: Path, record: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / dist.RUN_FILE, record)


def ensure_head(out: Path, head: BackboneHead | None, written: Path | None = None) -> None:
    """Write ``head.npz`` (after run.json, so a directory holding it is always an extraction
    directory) unless it is there with the same bytes; its sha256 is in the run's manifest and
    :func:`~imagenet_zsl.features.distributed.merge` checks it. Every rank computes the same bytes.
    ``written``: a head file this process wrote from the same ``head`` (a fused run's planned
    directory), hard-linked when ``out`` has none (written as usual where links fail)."""
    if head is None:
        return
    path = out / HEAD_FILE
    if written is not None and not path.exists():
        with contextlib.suppress(OSError):
            os.link(written, path)
            return
    data = encode_head(head)
    if path.is_file() and sha256_file(path) == sha256_bytes(data):
        return
    atomic_write_bytes(path, data)
