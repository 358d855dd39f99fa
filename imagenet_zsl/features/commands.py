"""The handlers of ``imagenet-zsl extract``, ``simulate`` and ``labels visual-prototypes`` (flags in
:mod:`imagenet_zsl.features.cli`).

Each takes the parsed ``argparse.Namespace`` and returns the exit status; imported only when one of
these commands runs. Importing this module loads no torch (the extraction modules import it when
they run), so :func:`~imagenet_zsl.devices.tune_process_for_image_pipeline` still takes effect.
"""

from __future__ import annotations

import argparse

from imagenet_zsl.devices import tune_process_for_image_pipeline
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.extract import ExtractConfig, merge_run, run_extraction
from imagenet_zsl.features.extract_setup import check_out_outside_store, pipeline_settings
from imagenet_zsl.features.prototypes import visual_prototypes as class_prototypes
from imagenet_zsl.features.simulate import SIMULATION_FORMAT, WARNING, load_simulation_config
from imagenet_zsl.features.simulate import simulate as simulate_features
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.safe_output import check_out_file
from imagenet_zsl.semantics.vector_files import is_class_vector_output

#: extraction flags that ``--merge`` (which only checks shards already written) cannot take
_EXTRACTION_ONLY = (
    "store", "classes", "out", "weights", "per_class", "val_labels", "pretraining_classes", "resize",
    "crop", "logits", "ten_crop", "jpeg_draft", "compile", "allow_incomplete",
)  # fmt: skip


def _check_merge_flags(args: argparse.Namespace) -> None:
    """``--merge`` takes no extraction flag and ``--no-verify`` needs ``--merge``: one line each,
    never a flag silently ignored."""
    if args.merge:
        given = ["--" + name.replace("_", "-") for name in _EXTRACTION_ONLY if getattr(args, name)]
        if given:
            raise UserInputError(
                f"--merge {args.merge} checks the shards already in DIR and writes its manifest; it "
                f"takes no {', '.join(given)}: drop them, or drop --merge to extract"
            )
    elif args.no_verify:
        raise UserInputError(
            "--no-verify applies to --merge DIR only: an extraction hashes every shard it writes "
            "(re-running a finished one verifies them all)"
        )


def extract(args: argparse.Namespace) -> int:
    """``extract``: backbone features of an image store into shards, or ``--merge`` a run's shards."""
    _check_merge_flags(args)
    if args.merge:
        path = merge_run(args.merge, verify=not args.no_verify)
        print(f"merged: {path}")
        return 0
    missing = [f"--{n}" for n in ("store", "classes", "out") if not getattr(args, n)]
    if missing:
        raise UserInputError(f"extract needs {', '.join(missing)} (or --merge DIR)")
    check_out_outside_store(args.out, args.store)  # before the store is indexed or torch imported
    tune_process_for_image_pipeline()  # before run_extraction imports torch
    config = ExtractConfig(
        store=args.store,
        classes_file=args.classes,
        backbone=args.backbone,
        out=args.out,
        weights=args.weights,
        per_class=args.per_class,
        seed=args.seed,
        shard_size=args.shard_size,
        logits=args.logits,
        layout=args.layout,
        val_labels=args.val_labels,
        allow_incomplete=args.allow_incomplete,
        progress=not args.no_progress,
        pretraining_classes=args.pretraining_classes,
        **pipeline_settings(args),
    )
    run_extraction(config)
    return 0


def visual_prototypes(args: argparse.Namespace) -> int:
    """``labels visual-prototypes``: a class-vectors file of each class's mean feature."""
    check_out_file(
        args.out,
        [args.features],
        suffixes=(".npz",),
        replaces=is_class_vector_output,
        what="a class-vector file",
    )
    vectors = class_prototypes(args.features)
    vectors.save(args.out)
    print(f"wrote {args.out}: {len(vectors)} classes x {vectors.dim} (mean visual features)")
    if vectors.missing:
        print(f"{len(vectors.missing)} classes of {args.features} have no images and no vector")
    return 0


def simulate(args: argparse.Namespace) -> int:
    """``simulate``: simulated feature directories over the real WordNet graph (a test bed)."""
    config = load_simulation_config(args.config)
    if args.seed is not None:
        config.seed = args.seed
    out = simulate_features(config, args.out, base_dir=args.config.parent)
    manifest = read_manifest_verified(out, SIMULATION_FORMAT, hash_files=False)  # just written
    for role, part in manifest["parts"].items():
        print(f"{out / role}: {part['classes']} classes, {part['images']} images")
    print(f"WARNING: {WARNING}")
    return 0
