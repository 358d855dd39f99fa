"""The on-disk feature format shared by extraction, simulation, filtering, models and evaluation.

A feature directory holds fixed-size shards plus one ``manifest.json``::

    DIR/manifest.json                 format, classes (the label space), dim, shards, provenance,
                                      files (path, bytes, sha256 of every other file)
    DIR/<shard>.features.npy          (n, D) float16 image features
    DIR/<shard>.labels.npy            (n,)   int32, index into manifest["classes"]
    DIR/<shard>.ids.npy               (n,)   unicode image ids, e.g. "n01440764/n01440764_10026.JPEG"
    DIR/<shard>.logits.npy            (n, K) float16, optional: backbone's 1K-class logits
    DIR/<shard>.done.json             written last: rows and sha256 of each file (resume marker)
    DIR/head.npz                      optional: the backbone's own classifier (weight (K, D), bias
                                      (K,), classes), its sha256 in manifest["head"]
    DIR/run.json, DIR/logs/           extraction only: the run's identity (resume), per-rank logs

Shard names sort in work order (``r{rank:03d}-s{index:06d}``). A shard exists only once its
``.done.json`` is written, so an interrupted run leaves at most temp files that are ignored. The
directory is written incrementally (resumable, several torchrun ranks), so it is not one
``atomic_directory``; its manifest is written last by :func:`write_manifest`
(:func:`imagenet_zsl.io.write_manifest`, shard sha256s reused) and read by :class:`FeatureDir`
(:func:`imagenet_zsl.io.read_manifest_verified`: every file's size, small files' sha256; a shard
file's sha256 is checked on its first use).

Modules: :mod:`.shard_files` (writing), :mod:`.shard_checks` (verification),
:mod:`.feature_dir` (reading), :mod:`.shared_blocks` (in-process sharing); this module is their
public face.
"""

from __future__ import annotations

from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.shard_files import (
    FORMAT,
    SHARD_FILES,
    FeatureBlock,
    check_head_file,
    encode_head,
    finished_shard,
    shard_file,
    shard_name,
    write_manifest,
    write_shard,
)
from imagenet_zsl.features.shared_blocks import SharedBlocks, shared_blocks

__all__ = [
    "FORMAT",
    "SHARD_FILES",
    "FeatureBlock",
    "FeatureDir",
    "SharedBlocks",
    "check_head_file",
    "encode_head",
    "finished_shard",
    "shard_file",
    "shard_name",
    "shared_blocks",
    "write_manifest",
    "write_shard",
]
