"""Class vectors from a text encoder: prompt templates × WordNet lemmas, averaged (``labels encode``).

For each class the texts are every template filled with every lemma of its synset (``_`` → space,
WordNet order), e.g. ``"a photo of a {}."`` × (``cairn terrier``, ``cairn``). With ``gloss=True``
the synset's WordNet definition is appended to each text after a space (``"a photo of a cairn.
a mound of stones piled up as a memorial or to mark a boundary or path"``).

A class listed in a per-class prompt file (:class:`~imagenet_zsl.semantics.prompts.PromptSet`:
``--prompts``, CuPL-style) has its own prompts as its texts instead, encoded as they are (no gloss);
``--templates NAME`` takes open_clip's named template sets (``semantics.prompts``).

The class vector is the mean of the texts' vectors, each **L2-normalised before averaging** (so no
single text dominates by its norm), and the mean is L2-normalised again so dot products are
cosines, as CLIP's zero-shot classifiers are built. Every class with at least one lemma gets a
vector (WordNet synsets always have one), so ``missing`` stays empty.

Each distinct text is encoded once, in a fixed order (by length, then text) and in fixed batches,
so the output is the same bytes on every run on the same machine and library versions.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import numpy as np
from tqdm.auto import tqdm

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import WordNetNouns, load_wordnet_nouns
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.prompts import DEFAULT_TEMPLATES, PLACEHOLDER, PromptSet, check_templates
from imagenet_zsl.semantics.text_encoders import TextEncoder

__all__ = ["DEFAULT_TEMPLATES", "PLACEHOLDER", "PromptSet", "check_templates", "encode_class_vectors"]
#: seconds between two progress lines when stderr is not a terminal (a log file, a batch job)
PROGRESS_INTERVAL_S = 30.0


class ProgressLines:
    """Progress as plain lines for a log file: a first line, one every ``interval`` seconds, and
    a last one (``encode: 1,024/52,000 texts (2%), 31 s, about 1,540 s left``).

    A terminal gets a tqdm bar instead (:func:`progress_bar`); a bar redrawn with carriage
    returns is one endless line in a file, and tqdm draws nothing at all when stderr is not a
    terminal and ``disable=None``, which left a 17-minute encode silent.
    """

    def __init__(self, total: int, desc: str, unit: str, stream: TextIO, interval: float):
        self.total, self.desc, self.unit, self.stream, self.interval = total, desc, unit, stream, interval
        self.done = 0
        self.start = self.last = time.monotonic()
        self._line(f"{self.done:,}/{self.total:,} {self.unit}")

    def _line(self, text: str) -> None:
        print(f"{self.desc}: {text}", file=self.stream, flush=True)

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.interval and self.done < self.total:
            self.last = now
            elapsed = now - self.start
            left = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
            share = self.done / self.total if self.total else 1.0
            self._line(
                f"{self.done:,}/{self.total:,} {self.unit} ({share:.0%}), {elapsed:,.0f} s, "
                f"about {left:,.0f} s left"
            )

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            elapsed = time.monotonic() - self.start
            self._line(f"{self.done:,}/{self.total:,} {self.unit} done in {elapsed:,.1f} s")


def progress_bar(
    total: int,
    desc: str,
    unit: str,
    enabled: bool = True,
    stream: TextIO | None = None,
    interval: float = PROGRESS_INTERVAL_S,
) -> Any:
    """A context manager with ``update(n)``: a tqdm bar on a terminal, :class:`ProgressLines`
    otherwise, nothing when not ``enabled`` (library calls, tests)."""
    stream = stream if stream is not None else sys.stderr
    if not enabled:
        return tqdm(total=total, disable=True)
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return tqdm(total=total, unit=unit, desc=desc, file=stream, dynamic_ncols=True)
    return ProgressLines(total, desc, f"{unit}s", stream, interval)


def check_wnids(wnids: Sequence[str], nouns: WordNetNouns | None = None) -> WordNetNouns:
    """The WordNet nouns, after checking that every wnid is one of its synsets (else an error naming them)."""
    nouns = nouns or load_wordnet_nouns()
    absent = [w for w in wnids if w not in nouns]
    if absent:
        raise UserInputError(f"{len(absent)} wnids are not WordNet 3.0 noun synsets: {preview(absent)}")
    return nouns


def class_texts(
    wnids: Sequence[str],
    templates: Sequence[str] | PromptSet,
    gloss: bool = False,
    nouns: WordNetNouns | None = None,
) -> tuple[list[str], np.ndarray]:
    """(texts, owner): every template × lemma (+ gloss) text, or a class's own prompts of a
    :class:`PromptSet`, and the class index (len(texts),) of each."""
    nouns = check_wnids(wnids, nouns)
    own = templates.per_class if isinstance(templates, PromptSet) else {}
    templates = templates.templates if isinstance(templates, PromptSet) else templates
    texts: list[str] = []
    owner: list[int] = []
    for i, wnid in enumerate(wnids):
        if wnid in own:
            texts += own[wnid]
            owner += [i] * len(own[wnid])
            continue
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
    templates: Sequence[str] | PromptSet = DEFAULT_TEMPLATES,
    gloss: bool = False,
    batch_size: int = 256,
    progress: bool = False,
    progress_interval: float = PROGRESS_INTERVAL_S,
) -> ClassVectors:
    """Class vectors (len(wnids), D) of ``wnids`` from ``encoder`` (see the module docstring).

    ``templates``: template strings, or a :class:`PromptSet` (a named set, per-class prompts).
    ``progress``: a bar on a terminal, else a line on stderr every ``progress_interval`` seconds.
    """
    if not isinstance(templates, PromptSet):
        templates = PromptSet(tuple(check_templates(templates)))
    wnids = list(wnids)
    templates.check_covers(wnids)
    texts, owner = class_texts(wnids, templates, gloss)
    unique = sorted(set(texts), key=lambda t: (len(t), t))
    position = {t: i for i, t in enumerate(unique)}
    with progress_bar(len(unique), "encode", "text", progress, interval=progress_interval) as bar:
        unit = encode_texts(encoder, unique, batch_size, bar.update)
    per_text = unit[[position[t] for t in texts]]
    sums = np.zeros((len(wnids), unit.shape[1]), dtype=np.float64)
    np.add.at(sums, owner, per_text)
    counts = np.bincount(owner, minlength=len(wnids))
    matrix = _unit_rows((sums / counts[:, None]).astype(np.float32))
    source = f"{encoder.spec}; {templates.describe(wnids)}" + ("; + WordNet gloss" if gloss else "")
    checkpoint = getattr(encoder, "weights_sha256", None)  # a CLIP tower's, paired by vlm_zero_shot
    if checkpoint:
        source += f"; weights sha256 {checkpoint}"
    return ClassVectors(wnids=wnids, matrix=matrix, source=source)
