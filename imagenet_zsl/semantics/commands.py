"""The handlers of ``imagenet-zsl labels ...`` (flags in :mod:`imagenet_zsl.semantics.cli`).

Each takes its typed options (``<Command>Options``: one field per flag, named by the flag's
``dest``; the command layer builds them from the parsed flags) and returns the exit status; imported
only when one of these commands runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.data import fall11_counts
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.hierarchy.universe import universe_wnids
from imagenet_zsl.safe_output import check_out_dir, check_out_file
from imagenet_zsl.semantics.config import DEFAULT_LABEL_CONFIG, LabelConfig, load_label_config
from imagenet_zsl.semantics.encode import check_wnids, encode_class_vectors
from imagenet_zsl.semantics.labels import build_label_tables
from imagenet_zsl.semantics.lemma_vectors import build_class_vectors, vectorizer_for
from imagenet_zsl.semantics.prompts import prompt_set
from imagenet_zsl.semantics.report import BUILD_TOOL, figures, write_label_outputs
from imagenet_zsl.semantics.senses import PrimarySenseModel, word_key
from imagenet_zsl.semantics.text_encoders import create_text_encoder
from imagenet_zsl.semantics.vector_files import is_class_vector_output, save_class_vectors
from imagenet_zsl.splits.io import read_wnid_list

#: the files ``labels vectors|encode --out`` may name
VECTOR_SUFFIXES = (".npz", ".parquet")


def _config(value: str | None, trust_pickle: bool = False) -> LabelConfig:
    """The labels config named on the command line (a YAML, or a vector-set name/path);
    ``--trust-pickle`` allows a pickled vector file (the config key can too, never the default)."""
    if value is None:
        cfg = load_label_config(DEFAULT_LABEL_CONFIG if Path(DEFAULT_LABEL_CONFIG).is_file() else None)
    elif value.endswith((".yaml", ".yml")):
        cfg = load_label_config(value)
    else:
        cfg = load_label_config({"vectors": value})
    if trust_pickle:
        cfg = dataclasses.replace(cfg, vectors=dataclasses.replace(cfg.vectors, trust_pickle=True))
    return cfg


def _vector_inputs(cfg: LabelConfig) -> list[Path | None]:
    """The files a labels config reads: itself and its word-vector file or folder."""
    return [cfg.path, None if cfg.vectors.is_named else Path(cfg.vectors.source)]


def _check_out(out: Path, inputs: list[Path | None]) -> None:
    """``--out`` is a new file, or a class-vector file this toolkit wrote (replaced)."""
    check_out_file(out, inputs, VECTOR_SUFFIXES, replaces=is_class_vector_output, what="a class-vector file")


@dataclass(frozen=True)
class VectorsOptions:
    """``labels vectors``."""

    #: a labels YAML, or a vector-set name or path
    config: str
    #: the output .npz or .parquet file
    out: Path
    #: load a pickled word-vector file (it executes any code in it)
    trust_pickle: bool = False


def vectors(options: VectorsOptions) -> int:
    """``labels vectors``: the class-vector matrix from WordNet lemmas and a word-vector set."""
    cfg = _config(options.config, options.trust_pickle)
    _check_out(options.out, _vector_inputs(cfg))
    built = build_class_vectors(cfg)
    save_class_vectors(built, options.out)
    counts = fall11_counts()
    total = len(universe_wnids())
    fall11_ok = sum(1 for w in built.wnids if w in counts)
    print(
        f"coverage: {fall11_ok:,} of the {len(counts):,} ImageNet-21K (fall11) classes have vectors "
        f"({len(built):,} of {total:,} with the ILSVRC-2012 extra), dim {built.dim}; {built.source}"
    )
    if built.missing:
        print(
            f"no vector ({len(built.missing):,}): {preview(built.missing)} "
            f"(listed in {options.out.name}; use pool filter has_vector)"
        )
    print(f"wrote {options.out}")
    return 0


@dataclass(frozen=True)
class EncodeOptions:
    """``labels encode``."""

    #: clip:ARCH/PRETRAINED or sentence:MODEL (:mod:`imagenet_zsl.semantics.text_encoders`)
    encoder: str
    #: the output .npz or .parquet file
    out: Path
    #: prompts with {} for the class name (None: the default template, or ``templates``)
    template: Sequence[str] | None = None
    #: a named template set (:data:`~imagenet_zsl.semantics.prompts.TEMPLATE_SETS`)
    templates: str | None = None
    #: per-class prompts (CuPL-style JSON {wnid: [prompt, ...]})
    prompts: Path | None = None
    #: a class ``prompts`` does not list: "error", or "templates" (its template texts)
    missing_prompts: str = "error"
    #: append the WordNet definition to each text
    gloss: bool = False
    #: a local checkpoint file or model folder
    weights: Path | None = None
    #: encode only the wnids in this file (None: all 21,842)
    classes: Path | None = None
    #: texts per forward pass
    batch_size: int = 256
    #: "auto", "cpu", "cuda" or "cuda:N"
    device: str = "auto"


def encode(options: EncodeOptions) -> int:
    """``labels encode``: class vectors from a text encoder over templates or per-class prompts."""
    _check_out(options.out, [options.classes, options.weights, options.prompts])
    if options.batch_size < 1:
        raise UserInputError(f"--batch-size {options.batch_size}: must be at least 1")
    prompts = prompt_set(options.template, options.templates, options.prompts, options.missing_prompts)
    wnids = read_wnid_list(options.classes) if options.classes is not None else list(universe_wnids())
    check_wnids(wnids)  # before loading a model
    fallback = prompts.check_covers(wnids)
    encoder = create_text_encoder(options.encoder, weights=options.weights, device=options.device)
    vectors = encode_class_vectors(
        encoder, wnids, prompts, gloss=options.gloss, batch_size=options.batch_size, progress=True
    )
    save_class_vectors(vectors, options.out)
    own = f", {len(wnids) - len(fallback):,} with their own prompts" if options.prompts else ""
    print(
        f"encoded {len(vectors):,} classes with {options.encoder} ({len(prompts.templates)} template(s)"
        f"{', + gloss' if options.gloss else ''}{own}), dim {vectors.dim}"
    )
    print(f"wrote {options.out}")
    return 0


@dataclass(frozen=True)
class BuildOptions:
    """``labels build``."""

    #: the labels YAML
    config: str
    #: the output folder (replaced atomically)
    out: Path
    #: analyse only the wnids in this file (None: all)
    classes: Path | None = None
    #: load a pickled word-vector file (it executes any code in it)
    trust_pickle: bool = False


def build(options: BuildOptions) -> int:
    """``labels build``: lemma and class tables, exclusion reasons, report and class vectors."""
    if not str(options.config).endswith((".yaml", ".yml")):
        raise UserInputError(
            f"{options.config}: labels build needs a labels YAML config (configs/labels.yaml)"
        )
    cfg = _config(str(options.config), options.trust_pickle)
    check_out_dir(options.out, BUILD_TOOL, [*_vector_inputs(cfg), options.classes], own_files=True)
    wnids = None
    if options.classes is not None:
        wnids = read_wnid_list(options.classes)
    tables = build_label_tables(cfg, wnids)
    inputs = {
        "config": {"name": Path(options.config).name, "sha256": sha256_file(options.config)},
        "vectors": cfg.vectors.identity(),
        "wordnet_sha256": load_wordnet_nouns().digest,
        "frequency": tables.frequency_source,
    }
    if options.classes is not None:
        inputs["classes"] = {"name": options.classes.name, "sha256": sha256_file(options.classes)}
    write_label_outputs(tables, options.out, inputs, sources=[*_vector_inputs(cfg), options.classes])
    print(figures(tables).to_string())
    print(
        f"wrote {options.out}/lemmas.csv ({len(tables.lemmas):,} rows), classes.csv "
        f"({len(tables.classes):,} rows, {int(tables.classes['kept'].sum()):,} kept), report.md"
    )
    return 0


@dataclass(frozen=True)
class SenseOptions:
    """``labels sense``."""

    #: a label word, e.g. cairn or 'cairn terrier'
    word: str
    #: the labels YAML (None: :data:`~imagenet_zsl.semantics.config.DEFAULT_LABEL_CONFIG` if present)
    config: str | None = None
    #: list every noun sense, not only the ImageNet classes (``--all``)
    all_senses: bool = False
    #: load a pickled word-vector file (it executes any code in it)
    trust_pickle: bool = False


def sense(options: SenseOptions) -> int:
    """``labels sense``: a word's noun senses, the primary one marked, with the evidence for it."""
    cfg = _config(options.config, options.trust_pickle)
    nouns = load_wordnet_nouns()
    key = word_key(options.word)
    if key not in nouns.senses:
        raise UserInputError(f"{options.word!r} is not a WordNet 3.0 noun (try its base form, e.g. 'cairn')")
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
        if not (imagenet or options.all_senses or row.is_primary):
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
