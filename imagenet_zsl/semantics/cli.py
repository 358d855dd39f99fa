"""``imagenet-zsl labels vectors | encode | build | sense``: the flags; the handlers are
:mod:`imagenet_zsl.semantics.commands`.

Start-up imports nothing of the stage (word vectors, pandas, a text encoder's torch): each command
names its handler by dotted target, and help texts that list a stage's names are dotted targets
too, resolved only when shown. Each flag's ``dest`` is a field of its handler's options
(``commands.<Command>Options``), which hold the defaults: no flag here states one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from imagenet_zsl.cli_types import lazy_help, overwrite_flag
from imagenet_zsl.devices import DEVICE_HELP

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree

TRUST_PICKLE_HELP = (
    "load a pickled word-vector file (gensim KeyedVectors.save, .kv): this EXECUTES ANY CODE in "
    "the file, so use it only for files you trust (config: vectors: {source: ..., trust_pickle: true})"
)


def register(tree: CommandTree) -> None:
    """Add the ``labels`` group to the `imagenet-zsl` command line."""
    group = tree.group("labels", "label curation: class word vectors, rare words, polysemy")

    vectors = group.add_parser(
        "vectors",
        help="write the class-vector matrix of the 21,842 classes (npz or parquet)",
        description="Class vectors from WordNet lemmas and a word-vector set; prints the coverage.",
    )
    vectors.add_argument("config", help="labels YAML (configs/labels.yaml) or a vector-set name/path")
    vectors.add_argument("--out", required=True, type=Path, help="output .npz or .parquet file")
    vectors.add_argument("--trust-pickle", action="store_true", help=TRUST_PICKLE_HELP)
    vectors.set_defaults(func="imagenet_zsl.semantics.commands:vectors")

    encode = group.add_parser(
        "encode",
        help="class vectors from a text encoder (CLIP text tower or sentence model), npz or parquet",
        description="Mean over templates × WordNet lemmas (or a class's own --prompts) of the unit text "
        "vectors, L2-normalised, as open_clip builds its zero-shot classifier (see "
        "imagenet_zsl/semantics/encode.py and prompts.py). Weights are never downloaded.",
    )
    encode.add_argument(
        "--encoder",
        required=True,
        help="clip:ARCH/PRETRAINED (open_clip, e.g. clip:ViT-B-32/openai) or sentence:MODEL "
        "(e.g. sentence:all-MiniLM-L6-v2, or a model folder)",
    )
    lazy_help(
        encode.add_argument("--template", action="append"),
        "prompt with {} for the class name; repeatable (default: %(default_template)s)",
        default_template="imagenet_zsl.semantics.prompts:default_template_help",
    )
    lazy_help(
        encode.add_argument("--templates", metavar="NAME"),
        "a named template set from open_clip, instead of --template: %(sets)s",
        sets="imagenet_zsl.semantics.prompts:TEMPLATE_SETS",
    )
    encode.add_argument(
        "--prompts",
        type=Path,
        help="per-class prompts (CuPL-style JSON {wnid: [prompt, ...]}), encoded as they are; the "
        "class vector averages a class's prompts",
    )
    encode.add_argument(
        "--missing-prompts",
        choices=("error", "templates"),
        help="a class that --prompts does not list: an error (default), or its template texts",
    )
    encode.add_argument("--gloss", action="store_true", help="append the WordNet definition to each text")
    encode.add_argument("--weights", type=Path, help="local checkpoint file or model folder")
    encode.add_argument(
        "--classes", type=Path, help="encode only the wnids in this file (default: all 21,842)"
    )
    encode.add_argument("--batch-size", type=int, help="texts per forward pass (default 256)")
    encode.add_argument("--device", metavar="auto|cpu|cuda[:N]", help=DEVICE_HELP)
    encode.add_argument("--out", required=True, type=Path, help="output .npz or .parquet file")
    encode.set_defaults(func="imagenet_zsl.semantics.commands:encode")

    build = group.add_parser(
        "build",
        help="lemma and class tables, exclusion reasons and a report",
        description="Writes DIR/lemmas.csv, DIR/classes.csv, DIR/report.md, DIR/class_vectors.npz, "
        "plots and manifest.json.",
    )
    build.add_argument("config", help="labels YAML (configs/labels.yaml)")
    build.add_argument("--out", required=True, type=Path, help="output folder (replaced atomically)")
    overwrite_flag(build)
    build.add_argument(
        "--classes",
        type=Path,
        help="analyse only the wnids in this file (one per line, e.g. a split); default: all",
    )
    build.add_argument("--trust-pickle", action="store_true", help=TRUST_PICKLE_HELP)
    build.set_defaults(func="imagenet_zsl.semantics.commands:build")

    sense = group.add_parser(
        "sense",
        help="a word's noun senses that are ImageNet classes, the primary one marked",
        description="Shows the WordNet and embedding evidence behind the primary-meaning decision.",
    )
    sense.add_argument("word", help="a label word, e.g. cairn or 'cairn terrier'")
    lazy_help(
        sense.add_argument("--config"),
        "labels YAML (default: %(default_config)s if present)",
        default_config="imagenet_zsl.semantics.config:DEFAULT_LABEL_CONFIG",
    )
    sense.add_argument(
        "--all",
        dest="all_senses",
        action="store_true",
        help="list every noun sense, not only ImageNet classes",
    )
    sense.add_argument("--trust-pickle", action="store_true", help=TRUST_PICKLE_HELP)
    sense.set_defaults(func="imagenet_zsl.semantics.commands:sense")
