"""Command-line entry points of the `semantics` stage: ``imagenet-zsl labels vectors|build|sense``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from imagenet_zsl.data import fall11_counts
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import universe_wnids
from imagenet_zsl.io import sha256_file
from imagenet_zsl.semantics.config import load_label_config
from imagenet_zsl.semantics.labels import build_label_tables
from imagenet_zsl.semantics.lemma_vectors import build_class_vectors, vectorizer_for
from imagenet_zsl.semantics.report import figures, write_label_outputs
from imagenet_zsl.semantics.senses import PrimarySenseModel, word_key
from imagenet_zsl.semantics.vector_files import save_class_vectors
from imagenet_zsl.splits.io import read_wnid_list

if TYPE_CHECKING:
    from imagenet_zsl.cli import CommandTree  # the tree is handed in; never imported upward

DEFAULT_CONFIG = "configs/labels.yaml"


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
    vectors.set_defaults(func=_vectors)

    build = group.add_parser(
        "build",
        help="lemma and class tables, exclusion reasons and a report",
        description="Writes DIR/lemmas.csv, DIR/classes.csv, DIR/report.md, DIR/class_vectors.npz, "
        "plots and manifest.json.",
    )
    build.add_argument("config", help="labels YAML (configs/labels.yaml)")
    build.add_argument("--out", required=True, type=Path, help="output folder (replaced atomically)")
    build.add_argument(
        "--classes",
        type=Path,
        default=None,
        help="analyse only the wnids in this file (one per line, e.g. a split); default: all",
    )
    build.set_defaults(func=_build)

    sense = group.add_parser(
        "sense",
        help="a word's noun senses that are ImageNet classes, the primary one marked",
        description="Shows the WordNet and embedding evidence behind the primary-meaning decision.",
    )
    sense.add_argument("word", help="a label word, e.g. cairn or 'cairn terrier'")
    sense.add_argument("--config", default=None, help=f"labels YAML (default: {DEFAULT_CONFIG} if present)")
    sense.add_argument("--all", action="store_true", help="list every noun sense, not only ImageNet classes")
    sense.set_defaults(func=_sense)


def _config(value: str | None):
    if value is None:
        return load_label_config(DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
    if value.endswith((".yaml", ".yml")):
        return load_label_config(value)
    return load_label_config({"vectors": value})


def _vectors(args: argparse.Namespace) -> int:
    cfg = _config(args.config)
    if args.out.suffix not in (".npz", ".parquet"):
        raise UserInputError(f"{args.out}: --out must end in .npz or .parquet")
    vectors = build_class_vectors(cfg)
    save_class_vectors(vectors, args.out)
    counts = fall11_counts()
    total = len(universe_wnids())
    fall11_ok = sum(1 for w in vectors.wnids if w in counts)
    print(
        f"coverage: {fall11_ok:,} of the {len(counts):,} ImageNet-21K (fall11) classes have vectors "
        f"({len(vectors):,} of {total:,} with the ILSVRC-2012 extra), dim {vectors.dim}; {vectors.source}"
    )
    if vectors.missing:
        print(
            f"no vector ({len(vectors.missing):,}): {preview(vectors.missing)} "
            f"(listed in {args.out.name}; use pool filter has_vector)"
        )
    print(f"wrote {args.out}")
    return 0


def _build(args: argparse.Namespace) -> int:
    cfg = _config(str(args.config))
    wnids = None
    if args.classes is not None:
        wnids = read_wnid_list(args.classes)
    tables = build_label_tables(cfg, wnids)
    inputs = {
        "config": {"name": Path(args.config).name, "sha256": sha256_file(args.config)},
        "vectors": cfg.vectors.identity(),
        "wordnet_sha256": load_wordnet_nouns().digest,
        "frequency": tables.frequency_source,
    }
    if args.classes is not None:
        inputs["classes"] = {"name": args.classes.name, "sha256": sha256_file(args.classes)}
    write_label_outputs(tables, args.out, inputs)
    print(figures(tables).to_string())
    print(
        f"wrote {args.out}/lemmas.csv ({len(tables.lemmas):,} rows), classes.csv "
        f"({len(tables.classes):,} rows, {int(tables.classes['kept'].sum()):,} kept), report.md"
    )
    return 0


def _sense(args: argparse.Namespace) -> int:
    cfg = _config(args.config)
    nouns = load_wordnet_nouns()
    key = word_key(args.word)
    if key not in nouns.senses:
        raise UserInputError(f"{args.word!r} is not a WordNet 3.0 noun (try its base form, e.g. 'cairn')")
    vectorizer = vectorizer_for(cfg.vectors)
    model = PrimarySenseModel(vectorizer, nouns, **dict(cfg.sense_params))
    evidence = model.evidence([key])
    universe = set(universe_wnids())
    counts = fall11_counts()
    tokens, how = vectorizer.tokens(key)
    vocab = {"phrase": "in vocabulary", "words": "vector = mean of its words", "oov": "NO word vector"}[how]
    in_imagenet = evidence["wnid"].isin(universe)
    print(
        f"{key}: {len(evidence)} noun sense(s), {int(in_imagenet.sum())} of them ImageNet classes; "
        f"{vocab} ({cfg.vectors.source})"
    )
    print(
        "  * = primary meaning.  p_wordnet from SemCor counts + sense order; cos = word vector vs the "
        "sense's context; posterior ∝ p_wordnet · p_embedding"
    )
    header = (
        f"  {'':1} {'#':>2} {'wnid':9} {'images':>7} {'semcor':>6} {'p_wordnet':>9} {'cos':>6} "
        f"{'p_embed':>7} {'posterior':>9}  sense"
    )
    print(header)
    for row, imagenet in zip(evidence.itertuples(index=False), in_imagenet, strict=True):
        if not (imagenet or args.all or row.is_primary):
            continue
        i = nouns.index[row.wnid]
        images = f"{counts[row.wnid]:,}" if row.wnid in counts else ("yes" if imagenet else "-")
        cos = "-" if not np.isfinite(row.similarity) else f"{row.similarity:.3f}"
        gloss = nouns.definitions[i]
        gloss = gloss if len(gloss) <= 60 else gloss[:57] + "..."
        print(
            f"  {'*' if row.is_primary else ' '} {row.sense_rank:>2} {row.wnid:9} {images:>7} "
            f"{row.semcor_count:>6} {row.p_wordnet:>9.3f} {cos:>6} {row.p_embedding:>7.3f} "
            f"{row.posterior:>9.3f}  {nouns.names[i]}: {gloss}"
        )
    primary = evidence[evidence["is_primary"]].iloc[0]
    where = "an ImageNet class" if primary.wnid in universe else "not an ImageNet class"
    print(
        f"primary meaning: {primary.wnid} {nouns.names[nouns.index[primary.wnid]]} ({where}), "
        f"confidence {primary.posterior:.2f}; threshold min_confidence {cfg.min_confidence:g}"
    )
    return 0
