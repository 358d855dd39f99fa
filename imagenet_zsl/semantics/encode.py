"""Class vectors from a text encoder: prompt templates × WordNet lemmas, averaged (``labels encode``).

For each class the texts are every template filled with every lemma of its synset (``_`` → space,
WordNet order), e.g. ``"a photo of a {}."`` × (``cairn terrier``, ``cairn``). With ``gloss=True``
the synset's WordNet definition is appended to each text after a space (``"a photo of a cairn.
a mound of stones piled up as a memorial or to mark a boundary or path"``).

The class vector is the mean of the texts' vectors, each **L2-normalised before averaging** (so no
single text dominates by its norm), and the mean is L2-normalised again so dot products are
cosines, as CLIP's zero-shot classifiers are built. Every class with at least one lemma gets a
vector (WordNet synsets always have one), so ``missing`` stays empty.

Each distinct text is encoded once, in a fixed order (by length, then text) and in fixed batches,
so the output is the same bytes on every run on the same machine and library versions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import WordNetNouns, load_wordnet_nouns
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.text_encoders import TextEncoder

DEFAULT_TEMPLATES = ("a photo of a {}.",)
PLACEHOLDER = "{}"


def check_templates(templates: Sequence[str]) -> list[str]:
    """Templates as a list; each must hold ``{}`` exactly once (else a one-line error naming it)."""
    templates = list(templates) or list(DEFAULT_TEMPLATES)
    for template in templates:
        if template.count(PLACEHOLDER) != 1:
            raise UserInputError(
                f"--template {template!r}: must contain '{{}}' exactly once (where the class name goes)"
            )
    if len(set(templates)) != len(templates):
        raise UserInputError(f"--template: a template is given twice: {preview(templates)}")
    return templates


def check_wnids(wnids: Sequence[str], nouns: WordNetNouns | None = None) -> WordNetNouns:
    """The WordNet nouns, after checking that every wnid is one of its synsets (else an error naming them)."""
    nouns = nouns or load_wordnet_nouns()
    absent = [w for w in wnids if w not in nouns]
    if absent:
        raise UserInputError(f"{len(absent)} wnids are not WordNet 3.0 noun synsets: {preview(absent)}")
    return nouns


def class_texts(
    wnids: Sequence[str],
    templates: Sequence[str],
    gloss: bool = False,
    nouns: WordNetNouns | None = None,
) -> tuple[list[str], np.ndarray]:
    """(texts, owner): every template × lemma (+ gloss) text and the class index (len(texts),) of each."""
    nouns = check_wnids(wnids, nouns)
    texts: list[str] = []
    owner: list[int] = []
    for i, wnid in enumerate(wnids):
        row = nouns.index[wnid]
        suffix = f" {nouns.definitions[row]}" if gloss else ""
        for lemma in nouns.lemmas[row]:
            name = lemma.replace("_", " ")
            for template in templates:
                texts.append(template.replace(PLACEHOLDER, name) + suffix)
                owner.append(i)
    return texts, np.asarray(owner, dtype=np.int64)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def encode_texts(
    encoder: TextEncoder,
    texts: Sequence[str],
    batch_size: int = 256,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """(len(texts), D) float32 unit vectors; batches of ``batch_size`` in the given order."""
    if batch_size < 1:
        raise UserInputError(f"--batch-size {batch_size}: must be at least 1")
    chunks = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        out = np.asarray(encoder.encode(batch), dtype=np.float32)
        if out.ndim != 2 or out.shape[0] != len(batch):
            raise ValueError(f"text encoder returned shape {out.shape} for {len(batch)} texts")
        if not np.isfinite(out).all():
            raise UserInputError(f"--encoder {encoder.spec}: produced NaN or infinite vectors")
        chunks.append(out)
        if progress is not None:
            progress(len(batch))
    if not chunks:
        raise UserInputError("no texts to encode: the class list is empty")
    return _unit_rows(np.concatenate(chunks))


def encode_class_vectors(
    encoder: TextEncoder,
    wnids: Sequence[str],
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    gloss: bool = False,
    batch_size: int = 256,
    progress: bool = False,
) -> ClassVectors:
    """Class vectors (len(wnids), D) of ``wnids`` from ``encoder`` (see the module docstring)."""
    templates = check_templates(templates)
    wnids = list(wnids)
    texts, owner = class_texts(wnids, templates, gloss)
    unique = sorted(set(texts), key=lambda t: (len(t), t))
    position = {t: i for i, t in enumerate(unique)}
    with tqdm(total=len(unique), unit="text", desc="encode", disable=None if progress else True) as bar:
        unit = encode_texts(encoder, unique, batch_size, bar.update)
    per_text = unit[[position[t] for t in texts]]
    sums = np.zeros((len(wnids), unit.shape[1]), dtype=np.float64)
    np.add.at(sums, owner, per_text)
    counts = np.bincount(owner, minlength=len(wnids))
    matrix = _unit_rows((sums / counts[:, None]).astype(np.float32))
    source = f"{encoder.spec}; templates {templates}" + ("; + WordNet gloss" if gloss else "")
    return ClassVectors(wnids=wnids, matrix=matrix, source=source)
