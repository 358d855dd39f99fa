"""Command-line entry points of the `features` stage: ``extract``, ``validate`` (the backbone's own
ImageNet-1K top-1 beside its published figure), ``simulate`` (simulated feature directories) and
``labels visual-prototypes`` (class vectors = mean feature per class, added to the semantics
stage's ``labels`` group): the flags; the handlers are :mod:`imagenet_zsl.features.commands` and
:mod:`imagenet_zsl.features.validate`, named by dotted target and imported only when a command runs
(``extract --help`` lists the registered backbones through a dotted target as well)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import (
    allow_incomplete_flag,
    lazy_help,
    non_negative_int,
    overwrite_flag,
    positive_int,
    seed,
)
from imagenet_zsl.devices import DETERMINISTIC_COST, DEVICE_HELP

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree

_EPILOG = """\
examples:
  imagenet-zsl extract --store /data/fall11 --classes splits/hop2.txt --backbone resnet50 \\
      --out feats/hop2 --logits
  torchrun --nproc_per_node 8 -m imagenet_zsl.cli extract ...   (same arguments; shards split by rank)
  imagenet-zsl extract --merge feats/hop2                          (check shards, write manifest)

Re-running the same command resumes (finished shards are kept) and, on a finished run, verifies
every shard's sha256. A backbone with an ImageNet-1K classifier (torchvision ResNets, timm 1K
models) also leaves its head in DIR/head.npz (weight, bias, class order; sha256 in the manifest),
with or without --logits: GCNZ/SGCN/DGP targets and ConSE then need no seen-class image.
Preprocessing: the backbone's own (torchvision: its weights' transforms(), e.g. resize 256 or 232
for ResNet-50 V2, centre crop 224, bilinear; timm: its pretrained config; open_clip: its preprocess
config), JPEGs decoded at full size (exactly torchvision's PIL pipeline; --jpeg-draft opts into
the faster reduced-scale decode of large JPEGs); --ten-crop averages the ten crops instead.
Weights: --weights PATH, or by name from the Hugging Face hub cache (timm, open_clip; HF_HOME) or
the torch hub cache (torchvision; TORCH_HOME), downloaded there when missing unless
HF_HUB_OFFLINE=1 or the hub cannot be reached (then the error names the repository, file and
`hf download` command, at once).

  imagenet-zsl extract --backbone timm:vit_small_patch16_224.augreg_in21k ...
  imagenet-zsl extract --backbone timm:hf-hub:timm/resnet50.a1_in1k ...
  imagenet-zsl extract --backbone open_clip:ViT-B-32/laion2b_s34b_b79k ...
"""


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    parser = tree.command(
        "extract",
        "Extract backbone features from an image store into resumable, verified shards.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--store",
        help="fall11 or winter21 <wnid>.tar folder, <wnid>/ folder tree, flat val folder, webdataset "
        "shards (timm/imagenet-22k-wds, -w21-wds, -w21-webp-wds), parquet files (timm/imagenet-w21-p) "
        "or ImageNet-21K-P (train/val/small_classes folders); the layout is detected",
    )
    parser.add_argument(
        "--classes",
        dest="classes_file",
        metavar="CLASSES",
        help="label space: one wnid per line (labels follow file order)",
    )
    lazy_help(
        parser.add_argument("--backbone"),
        "%(backbones)s",
        backbones="imagenet_zsl.features.backbones:describe_backbones",
    )
    parser.add_argument("--out", help="output directory (shards + manifest.json)")
    parser.add_argument(
        "--weights",
        help="weights file, or 'random' (tests/benchmarks only); default: by name from the Hugging Face / "
        "torch hub cache (downloaded unless HF_HUB_OFFLINE=1)",
    )
    parser.add_argument("--per-class", type=positive_int, help="seeded sample of at most N images per class")
    parser.add_argument(
        "--seed", type=seed, help="seed of --per-class sampling and of --weights random (default 0)"
    )
    parser.add_argument(
        "--logits",
        action="store_true",
        help="also store the backbone's ImageNet-1K logits (ConSE, GCN targets)",
    )
    parser.add_argument(
        "--shard-size",
        type=positive_int,
        help="images per shard (default 10240: 40 batches of 256)",
    )
    parser.add_argument("--layout", choices=["auto", "tars", "tree", "flat", "wds", "parquet", "in21k-p"])
    parser.add_argument(
        "--val-labels",
        help="labels of a flat store: devkit ground truth "
        "(ILSVRC2012_ID per line) or 'filename<TAB>wnid' lines",
    )
    allow_incomplete_flag(parser)
    pipeline_flags(parser)
    parser.add_argument(
        "--pretraining-classes",
        metavar="FILE",
        help="wnid list the backbone was pretrained on, recorded in the manifest (default: from "
        "the model name's pretrained tag, e.g. .in21k, .in12k, .in22k_ft_in1k)",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument(
        "--merge", metavar="DIR", help="instead of extracting: check DIR's shards and write its manifest"
    )
    parser.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="with --merge: trust the shards' records instead of re-hashing",
    )
    parser.set_defaults(func="imagenet_zsl.features.commands:extract")
    _register_validate(tree)
    simulate = tree.command(
        "simulate",
        "write SIMULATED feature directories over the real WordNet graph (test bed)",
        epilog="example: imagenet-zsl simulate configs/simulate.yaml --out sim",
    )
    simulate.add_argument("config", type=Path, help="simulation YAML (configs/simulate.yaml)")
    simulate.add_argument("--out", required=True, type=Path, help="output directory (replaced)")
    overwrite_flag(simulate)
    simulate.add_argument("--seed", type=seed, help="override the config's seed")
    simulate.set_defaults(func="imagenet_zsl.features.commands:simulate")

    labels = tree.group("labels")
    prototypes = labels.add_parser(
        "visual-prototypes",
        help="class vectors = mean visual feature per class (Chao et al.'s idealised semantics)",
        description="write a class-vectors .npz whose vector for each class is the mean of its "
        "features (Chao et al. 2016, Sec. 6): use it as 'semantics:' to bound what better semantics "
        "could give a model",
    )
    prototypes.add_argument("--features", required=True, type=Path, help="feature directory")
    prototypes.add_argument("--out", required=True, type=Path, help="class-vectors file to write (.npz)")
    prototypes.set_defaults(func="imagenet_zsl.features.commands:visual_prototypes")


def pipeline_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flags that define how images become features (decoder, numerics, preprocessing)
    and how they are loaded to ``extract`` and ``validate``: one definition, so that ``validate``
    checks exactly the pipeline an extraction runs (each flag sets the config field of its name,
    :data:`~imagenet_zsl.features.extract_setup.PIPELINE_FIELDS`, which
    ``features.extract_setup.extract_config`` hands to the extraction)."""
    parser.add_argument("--batch-size", type=positive_int, help="default 256 on CUDA, 32 on CPU")
    parser.add_argument("--device", metavar="auto|cpu|cuda[:N]", help=DEVICE_HELP)
    parser.add_argument(
        "--workers", type=non_negative_int, help="decode worker processes (default: from CPUs)"
    )
    parser.add_argument(
        "--decode",
        choices=["auto", "pil", "torchvision"],
        help="JPEG decoder: pil (decode and resize in worker processes, exactly torchvision's "
        "PIL pipeline unless --jpeg-draft) or torchvision (io.decode_jpeg on the device, nvJPEG on "
        "CUDA, then a batched tensor resize there: fewer CPU cores needed; features close to, not "
        "equal to, pil's; JPEGs it cannot take go to PIL). auto (the default): torchvision with "
        "--fast on CUDA, else pil. The decoder used is recorded in the manifest and must match to resume",
    )
    parser.add_argument(
        "--jpeg-draft",
        action="store_true",
        help="opt-in: decode JPEGs at least twice the resize at 1/2, 1/4 or 1/8 scale (libjpeg's "
        "DCT scaling, PIL draft) before the resize: 2-4x less decode work on large photos, but "
        "not torchvision's pixels (large photos' features: cosine 0.990-0.999 to the exact ones). "
        "Recorded in the manifest's preprocessing: drafted and exact features never compare equal",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        dest="mode",
        action="store_const",
        const="deterministic",
        help="the default: reproducible features (two runs give the same shard bytes, and CUDA "
        "features equal CPU ones to fp32 rounding). Computes in fp32 and turns off "
        f"{DETERMINISTIC_COST}. Cost on CUDA: fp32 instead of bf16 tensor cores and no autotuned "
        "kernels, so fewer images/s where the GPU rather than JPEG decoding is the bottleneck "
        "(tools/gpu_check.sh measures both modes); nothing on the CPU",
    )
    mode.add_argument(
        "--fast",
        dest="mode",
        action="store_const",
        const="fast",
        help="bf16 autocast on CUDA with cuDNN autotuning (and, with --decode auto, JPEGs decoded "
        "and resized on the GPU): fastest, but features are neither "
        "reproducible bit for bit nor equal to CPU ones (bf16: 2-3 significant digits). "
        "The mode is recorded in the manifest and must match to resume",
    )
    parser.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "fp16"],
        help="autocast dtype (auto: fp32; with --fast, bf16 on CUDA). An explicit bf16/fp16 with "
        "--deterministic stays reproducible run to run but no longer equals fp32 (CPU) features",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="opt-in: torch.compile the backbone (inductor, weights frozen; every batch padded to "
        "--batch-size so one graph serves the whole run). Costs a one-off compile (about 25 s for "
        "ResNet-50 on 2 CPU cores) and gives about 2x on CPU for ResNet-50; needs a C++ compiler "
        "(Triton on CUDA). Features agree with eager to float rounding; recorded in the manifest",
    )
    parser.add_argument(
        "--resize", type=positive_int, help="shorter side before the crop (default: the backbone's own)"
    )
    parser.add_argument(
        "--crop",
        type=positive_int,
        help="centre crop size (default: the backbone's own); at most --resize",
    )
    parser.add_argument(
        "--ten-crop",
        action="store_true",
        help="the feature (and logits) of an image is the mean over ten crops: the 4 corners and the "
        "centre of the resized image and of its horizontal flip (torchvision TenCrop), as in "
        "Le Cacheux et al.; 10x the forward passes. Recorded in the manifest's preprocessing",
    )


_VALIDATE_EPILOG = """\
examples:
  imagenet-zsl validate --store /data/ILSVRC2012_val --val-labels ILSVRC2012_validation_ground_truth.txt \\
      --backbone timm:tf_efficientnet_lite0
  imagenet-zsl validate --images photos.tsv --backbone resnet50 --out checks/resnet50

The images go through extract itself (the backbone's own preprocessing, the same decoder), and the
backbone's ImageNet-1K head predicts each one's class. Printed: images, top-1, top-5, the top-1 its
weights publish (packaged with its source; "not published" where none is known) and a verdict:
with a published top-1 P and at least 50 images, a one-sided exact binomial test of "top-1 >= P - 2
points"; rejected at p < 0.001 is FAR BELOW (exit status 1): check the preprocessing, the weights
and the labels before trusting any zero-shot number. Images of classes outside ImageNet-1K are left
out and counted.
"""


def _register_validate(tree: CommandTree) -> None:
    """``validate``: the backbone's own ImageNet-1K top-1 beside its published figure."""
    parser = tree.command(
        "validate",
        "Check a backbone first: its own ImageNet-1K top-1 on labelled images beside the figure its "
        "weights publish.",
        epilog=_VALIDATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--store",
        help="an image store extract reads (e.g. the ILSVRC-2012 val folder with --val-labels); only "
        "images of ImageNet-1K classes count",
    )
    parser.add_argument(
        "--images",
        metavar="FILE",
        help="instead of --store: 'path<TAB>wnid' lines (paths relative to FILE's folder), each "
        "wnid an ImageNet-1K class",
    )
    lazy_help(
        parser.add_argument("--backbone"),
        "%(backbones)s",
        backbones="imagenet_zsl.features.backbones:describe_backbones",
    )
    parser.add_argument(
        "--weights", help="weights file; default: by name from the Hugging Face / torch hub cache"
    )
    parser.add_argument("--per-class", type=positive_int, help="seeded sample of at most N images per class")
    parser.add_argument("--seed", type=seed, help="seed of --per-class (default 0)")
    parser.add_argument("--layout", choices=["auto", "tars", "tree", "flat", "wds", "parquet", "in21k-p"])
    parser.add_argument(
        "--val-labels",
        help="labels of a flat store: devkit ground truth (ILSVRC2012_ID per line) or "
        "'filename<TAB>wnid' lines",
    )
    allow_incomplete_flag(parser)
    pipeline_flags(parser)
    parser.add_argument(
        "--out", help="also write DIR/validate.json, validate.md and manifest.json (replaced)"
    )
    overwrite_flag(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.set_defaults(func="imagenet_zsl.features.validate:validate")
