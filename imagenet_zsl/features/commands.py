"""The handlers of ``imagenet-zsl extract``, ``simulate`` and ``labels visual-prototypes`` (flags in
:mod:`imagenet_zsl.features.cli`).

Each takes its config (:class:`ExtractOptions`, :class:`SimulateOptions`,
:class:`VisualPrototypesOptions`: one field per flag, built by :func:`imagenet_zsl.cli.handler_config`)
and returns the exit status; imported only when one of these commands runs. Importing this module
loads no torch (the extraction modules import it when they run), so
:func:`~imagenet_zsl.devices.tune_process_for_image_pipeline` still takes effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagenet_zsl.devices import tune_process_for_image_pipeline
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.extract import ExtractConfig, merge_run, run_extraction
from imagenet_zsl.features.extract_setup import DEFAULT_BACKBONE, check_out_outside_store, extract_config
from imagenet_zsl.features.prototypes import visual_prototypes as class_prototypes
from imagenet_zsl.features.simulate import SIMULATION_FORMAT, WARNING, load_simulation_config
from imagenet_zsl.features.simulate import simulate as simulate_features
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.safe_output import check_out_file
from imagenet_zsl.semantics.vector_files import is_class_vector_output


@dataclass
class ExtractOptions(ExtractConfig):
    """The flags of ``extract``: the extraction's own config (each flag sets the
    :class:`ExtractConfig` field of its name), or ``--merge DIR`` (``merge``, ``verify``).

    ``store``, ``classes_file`` and ``out`` are empty when left off (``--merge`` takes none of them;
    an extraction needs all three: :func:`extract` says which is missing)."""

    store: str = ""
    classes_file: str = ""
    backbone: str = DEFAULT_BACKBONE
    out: str = ""
    #: instead of extracting: check this directory's shards and write its manifest
    merge: str | None = None
    #: with ``merge``: re-hash the shards (``--no-verify``: trust their records)
    verify: bool = True


@dataclass(frozen=True)
class SimulateOptions:
    """The flags of ``simulate``."""

    #: the simulation YAML
    config: Path
    #: the output directory (replaced)
    out: Path
    #: overrides the config's seed
    seed: int | None = None


@dataclass(frozen=True)
class VisualPrototypesOptions:
    """The flags of ``labels visual-prototypes``."""

    #: the feature directory
    features: Path
    #: the class-vectors file to write (.npz)
    out: Path


#: extraction fields (by flag) that ``--merge`` (which only checks shards already written) cannot take
_EXTRACTION_ONLY = {
    "--store": "store", "--classes": "classes_file", "--out": "out", "--weights": "weights",
    "--per-class": "per_class", "--val-labels": "val_labels", "--pretraining-classes": "pretraining_classes",
    "--resize": "resize", "--crop": "crop", "--logits": "logits", "--ten-crop": "ten_crop",
    "--jpeg-draft": "jpeg_draft", "--compile": "compile", "--allow-incomplete": "allow_incomplete",
}  # fmt: skip


def _check_merge_flags(cfg: ExtractOptions) -> None:
    """``--merge`` takes no extraction flag and ``--no-verify`` needs ``--merge``: one line each,
    never a flag silently ignored."""
    if cfg.merge:
        given = [flag for flag, name in _EXTRACTION_ONLY.items() if getattr(cfg, name)]
        if given:
            raise UserInputError(
                f"--merge {cfg.merge} checks the shards already in DIR and writes its manifest; it "
                f"takes no {', '.join(given)}: drop them, or drop --merge to extract"
            )
    elif not cfg.verify:
        raise UserInputError(
            "--no-verify applies to --merge DIR only: an extraction hashes every shard it writes "
            "(re-running a finished one verifies them all)"
        )


def extract(cfg: ExtractOptions) -> int:
    """``extract``: backbone features of an image store into shards, or ``--merge`` a run's shards."""
    _check_merge_flags(cfg)
    if cfg.merge:
        path = merge_run(cfg.merge, verify=cfg.verify)
        print(f"merged: {path}")
        return 0
    needed = (("--store", cfg.store), ("--classes", cfg.classes_file), ("--out", cfg.out))
    missing = [flag for flag, value in needed if not value]
    if missing:
        raise UserInputError(f"extract needs {', '.join(missing)} (or --merge DIR)")
    check_out_outside_store(cfg.out, cfg.store)  # before the store is indexed or torch imported
    tune_process_for_image_pipeline()  # before run_extraction imports torch
    run_extraction(extract_config(cfg))
    return 0


def visual_prototypes(cfg: VisualPrototypesOptions) -> int:
    """``labels visual-prototypes``: a class-vectors file of each class's mean feature."""
    check_out_file(
        cfg.out,
        [cfg.features],
        suffixes=(".npz",),
        replaces=is_class_vector_output,
        what="a class-vector file",
    )
    vectors = class_prototypes(cfg.features)
    vectors.save(cfg.out)
    print(f"wrote {cfg.out}: {len(vectors)} classes x {vectors.dim} (mean visual features)")
    if vectors.missing:
        print(f"{len(vectors.missing)} classes of {cfg.features} have no images and no vector")
    return 0


def simulate(cfg: SimulateOptions) -> int:
    """``simulate``: simulated feature directories over the real WordNet graph (a test bed)."""
    config = load_simulation_config(cfg.config)
    if cfg.seed is not None:
        config.seed = cfg.seed
    out = simulate_features(config, cfg.out, base_dir=cfg.config.parent)
    manifest = read_manifest_verified(out, SIMULATION_FORMAT, hash_files=False)  # just written
    for role, part in manifest["parts"].items():
        print(f"{out / role}: {part['classes']} classes, {part['images']} images")
    print(f"WARNING: {WARNING}")
    return 0
