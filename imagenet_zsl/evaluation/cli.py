"""``imagenet-zsl evaluate | report | predict``: the flags; the handlers are
:mod:`imagenet_zsl.evaluation.commands` (``evaluate``), :mod:`imagenet_zsl.evaluation.report_command`
(``report``) and :mod:`imagenet_zsl.evaluation.predict` (``predict``).

Start-up imports nothing of the stage: each command names its handler by dotted target, resolved
only when the command runs (``predict`` never loads torch for its ``--help``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import overwrite_flag, positive_int, seed
from imagenet_zsl.devices import DEVICE_HELP

#: help of --label-space (the names are ``splits.label_space.NAMED_LABEL_SPACES``)
LABEL_SPACE_HELP = (
    "the classes each test image is ranked against: 'split' (the split's classes, the default; "
    "classes without test images stay as distractors), 'all' (every ImageNet-21K class that is "
    "not a training class: the 'All' protocol), or a wnid list FILE holding the split's classes"
)

#: help of evaluate's --allow-feature-mismatch
MISMATCH_HELP = (
    "combine features whose identity (backbone, weights, preprocessing, layer) differs from the "
    "model's training features or from each other; the override is recorded and shown in every table"
)

#: the epilog of ``predict --help``
PREDICT_EPILOG = """\
examples:
  imagenet-zsl predict coffee.png cat.jpg --model models/conse --backbone timm:tf_efficientnet_lite0 \\
      --weights lite0.pth --label-space all -k 5
  imagenet-zsl predict photo.jpg --model models/eszsl --backbone resnet50 \\
      --label-space split --split splits/hop2.txt

Each photo is decoded and preprocessed as 'extract' does it (give the same --resize/--crop/--ten-crop
as the extraction the model was trained on). The model's feature identity (backbone, weights
sha256, preprocessing) must match, unless --allow-feature-mismatch. Label space 'all' (default):
every ImageNet-21K class that is not a seen class of the model; classes without a prototype
(e.g. no word vector) are left out and counted.
"""

#: help of predict's --label-space
PREDICT_LABEL_SPACE_HELP = (
    "the classes each photo is ranked against: 'all' (default: every ImageNet-21K class that is not "
    "a seen class of the model), 'split' (the classes of --split), or a wnid list FILE"
)

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree


def open_fraction(text: str) -> float:
    """A fraction strictly between 0 and 1 (``nan``, ``inf``, 0 and 1 are usage errors)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a number") from None
    if not math.isfinite(value) or not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be a number strictly between 0 and 1")
    return value


#: ``--columns`` of ``report`` (``run`` has the same words: each stage's cli imports no other)
COLUMNS_HELP = (
    "the columns of the Markdown and LaTeX tables, comma-separated: names (e.g. 'strict hit@1', "
    "'validation H') or groups: paper (default: model, split, label space, hit@1 [95%% CI], hit@2/5/"
    "10/20, GZSL U/S/H; at most 12 columns), strict, gzsl, all; the CSV always has every column"
)


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    ev = tree.command(
        "evaluate",
        "Score images against class prototypes (exact top-k) and write ZSL/GZSL metrics, "
        "per-class table, report and plots.",
    )
    ev.add_argument(
        "--features", type=Path, required=True, help="feature directory holding the test classes' images"
    )
    ev.add_argument(
        "--split",
        type=Path,
        required=True,
        help="test-class list (one wnid per line), a published split (dgp-2hops, dgp-3hops, dgp-all) "
        "or a committed name (splits/NAME.txt)",
    )
    ev.add_argument("--label-space", metavar="split|all|FILE", help=LABEL_SPACE_HELP)
    ev.add_argument("--allow-feature-mismatch", action="store_true", help=MISMATCH_HELP)
    source = ev.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path, help="fitted model directory (imagenet-zsl train)")
    source.add_argument(
        "--prototypes",
        type=Path,
        help="ClassVectors .npz (wnids + matrix) in feature space, scored against the raw features",
    )
    ev.add_argument(
        "--l2-normalize", action="store_true", help="L2-normalise queries and prototypes (cosine similarity)"
    )
    ev.add_argument(
        "--k",
        dest="ks",
        type=int,
        nargs="+",
        metavar="K",
        help="hit@K values (default: 1 2 5 10 20)",  # = DEFAULT_KS, checked in tests/test_cli.py
    )
    ev.add_argument("--gzsl", action="store_true", help="also evaluate generalized ZSL (test + seen classes)")
    ev.add_argument(
        "--seen-features",
        type=Path,
        help="held-out images of the seen classes (e.g. ILSVRC-2012 val); --gzsl",
    )
    ev.add_argument(
        "--seen-classes", type=Path, help="seen-class list (default: classes with images in --seen-features)"
    )
    ev.add_argument(
        "--val-split",
        type=Path,
        help="validation classes (disjoint from test and seen) to choose the calibration γ maximising H",
    )
    ev.add_argument(
        "--val-features", type=Path, help="features of the validation classes (default: --features)"
    )
    ev.add_argument(
        "--val-seen-features",
        type=Path,
        help="held-out seen images for validation (default: hold out --val-seen-fraction of --seen-features)",
    )
    ev.add_argument(
        "--val-seen-fraction",
        type=open_fraction,
        help="share of the seen images held out to choose γ, in (0, 1) (default 0.5)",
    )
    ev.add_argument("--seed", type=seed, help="seed of the seen-image hold-out (default 0)")
    ev.add_argument(
        "--graph",
        help="hierarchy for the error breakdown and class properties: wordnet, "
        "imagenet, none, a parent<TAB>child edge file, or auto (default: "
        "WordNet when installed, else none)",
    )
    ev.add_argument(
        "--no-label-frequency",
        dest="label_frequency",
        action="store_false",
        help="skip the label-frequency column (needs WordNet)",
    )
    ev.add_argument(
        "--kept-images",
        type=Path,
        help="output dir of 'imagenet-zsl images filter': evaluate only kept test images",
    )
    ev.add_argument("--no-plots", dest="plots", action="store_false", help="write no plots")
    ev.add_argument(
        "--block-rows",
        type=positive_int,
        help="images read and converted at once (memory bound; default 32768)",
    )
    ev.add_argument(
        "--search",
        choices=("exact", "faiss"),
        help="exact: the fixed-shape BLAS search (default, and the faster on the CPU); faiss: faiss's "
        "IndexFlatIP proposes candidates, the exact scores decide (the same files), for faiss-gpu's "
        "index with a CUDA --device; on the CPU it costs about 1.8x the exact search's CPU and 1.5x "
        "its memory",
    )
    ev.add_argument("--device", metavar="auto|cpu|cuda[:N]", help=DEVICE_HELP)
    ev.add_argument("--out", type=Path, required=True, help="run directory to write")
    overwrite_flag(ev)
    ev.set_defaults(func="imagenet_zsl.evaluation.commands:evaluate")

    rep = tree.command(
        "report",
        "Aggregate evaluation runs into one table (Markdown, CSV and LaTeX): models x splits "
        "x hit@K, ZSL and GZSL; results of many runs and machines merge into one table.",
    )
    rep.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="run directories of 'imagenet-zsl evaluate', result records (results/*.json) of "
        "'imagenet-zsl run', or directories of them (a run directory: its results/); a row given "
        "twice is reported once (refused if its numbers differ)",
    )
    rep.add_argument("--columns", metavar="NAME,...", help=COLUMNS_HELP)
    rep.add_argument(
        "--out",
        type=Path,
        help="output path, outside every RUN; .md, .csv and .tex files are written beside it (and "
        ".bib with --published)",
    )
    rep.add_argument(
        "--published",
        action="store_true",
        help="put the published rows of the same splits beside yours (packaged figures of GBU, Chao "
        "et al., Hascoet et al.), sorted by hit@1, with their source and every protocol difference "
        "from your rows (a 'comparable' mark only when none is material); the .tex cites them by key "
        "from the .bib written beside it",
    )
    rep.add_argument(
        "--html",
        type=Path,
        metavar="DIR",
        help="also (or instead of --out) write one static page to DIR: the table (sortable), hit@K "
        "curves per split, and per class of a picked row its hit@K and the classes it is most often "
        "taken for, with their WordNet distance (from the stored top-k lists); no server, no network",
    )
    overwrite_flag(rep)  # --html DIR is a directory the command replaces
    rep.set_defaults(func="imagenet_zsl.evaluation.report_command:report")

    _register_predict(tree)


def _register_predict(tree: CommandTree) -> None:
    """Add ``imagenet-zsl predict``: the top-k classes of a few photos under a fitted model."""
    parser = tree.command(
        "predict",
        "print the top-k classes (wnid, lemma, gloss, score) of photos under a fitted model",
        epilog=PREDICT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("photos", nargs="+", type=Path, help="image files (any format PIL reads)")
    parser.add_argument("--model", required=True, type=Path, help="model directory written by 'train'")
    parser.add_argument("--backbone", required=True, help="the backbone the model's features came from")
    parser.add_argument(
        "--weights",
        help="its weights file, or 'random' (tests only); default: the torch hub / Hugging Face cache",
    )
    parser.add_argument("--seed", type=seed, help="seed of --weights random")
    parser.add_argument("--label-space", help=PREDICT_LABEL_SPACE_HELP)
    parser.add_argument(
        "--split",
        help="the split (needed by --label-space split): a wnid list file, a published list (dgp-2hops) "
        "or a committed name (hop1, looked up in splits/), as evaluate and run resolve it",
    )
    parser.add_argument("-k", "--top-k", type=positive_int, help="classes per photo (default 5)")
    parser.add_argument(
        "--resize", type=positive_int, help="as given to extract (default: the backbone's own)"
    )
    parser.add_argument("--crop", type=positive_int, help="as given to extract (default: the backbone's own)")
    parser.add_argument("--ten-crop", action="store_true", help="as given to extract")
    parser.add_argument(
        "--allow-feature-mismatch",
        action="store_true",
        help="score even if the model was fitted on features of another backbone/weights/preprocessing",
    )
    parser.add_argument("--device", metavar="auto|cpu|cuda[:N]", help=DEVICE_HELP)
    parser.set_defaults(func="imagenet_zsl.evaluation.predict:predict_command")
