"""The label-curation config (``configs/labels.yaml``): vectors, frequency and polysemy settings.

Read through the project's one typed config layer (``imagenet_zsl.config``): every key is
optional, and an unknown key (with the closest allowed one suggested), a wrong type or an
out-of-range value is a one-line error naming the file, the key path and the value, so a typo can
never silently fall back to a default::

    vectors: glove-6b-50d        # a named set, a path, or {source: PATH, format: auto, dim: 300}
                                 # trust_pickle: true loads a gensim .kv pickle: EXECUTES CODE in it
    lemma_rule: mean             # mean | first   (semantics.lemma_vectors)
    normalize: true              # unit-length class vectors
    frequency:
      source: wordfreq           # or a 'word<TAB>count' table
      lang: en
      min_count: 50              # rare label: seen < 50 times ... (Hascoet et al.)
      reference_tokens: 3.0e9    # ... in a corpus this size (English Wikipedia); null: the table's total
      min_zipf: null             # or the Zipf threshold itself (wins over min_count)
    polysemy:
      min_confidence: 0.5        # keep a class only if its label's primary sense, with this posterior
      temperature: 0.16          # semantics.senses.PrimarySenseModel parameters
      order_decay: 0.5
      prior_strength: 1.0
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from imagenet_zsl.config import Config, load_config, validate_config
from imagenet_zsl.semantics.frequency import DEFAULT_MIN_COUNT, Frequencies, load_frequencies, rare_threshold
from imagenet_zsl.semantics.spec import DEFAULT_MIN_CONFIDENCE, SENSE_DEFAULTS
from imagenet_zsl.semantics.word_vectors import DEFAULT_VECTORS, VectorSpec

#: the labels config a command reads when none is named and the file is there (``labels sense``)
DEFAULT_LABEL_CONFIG = "configs/labels.yaml"
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _yaml_number(value: Any) -> Any:
    """YAML 1.1 reads ``3.0e9`` (no exponent sign) as a string: accept such numeric strings."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _section(value: Any) -> Any:
    """An empty section (``frequency:`` with nothing under it) means all defaults."""
    return {} if value is None else value


def _vector_section(value: Any) -> Any:
    """``vectors: NAME_OR_PATH`` is short for ``vectors: {source: NAME_OR_PATH}``."""
    return {"source": str(value)} if isinstance(value, str | Path) else value


Number = Annotated[float, BeforeValidator(_yaml_number)]
#: ``auto`` or one of ``word_vectors.FORMATS`` (kept equal by tests/semantics/test_config.py)
VectorFormat = Literal[
    "auto", "npy-parquet", "word2vec-binary", "word2vec-text", "fasttext", "glove", "gensim"
]


class VectorsSection(Config):
    """``vectors:``: a named set or a path (relative to the config's folder), its format and dim."""

    source: str | None = None
    path: str | None = None  # synonym of source
    name: str | None = None  # synonym of source
    format: VectorFormat = "auto"
    dim: Annotated[int, Field(ge=1)] | None = None
    #: load a pickled (gensim ``KeyedVectors.save``) file: this executes any code in the file
    trust_pickle: bool = False


class FrequencySection(Config):
    """``frequency:``: where word frequencies come from and the rare-label threshold."""

    source: str = "wordfreq"
    lang: str = "en"
    min_count: Annotated[Number, Field(gt=0)] | None = float(DEFAULT_MIN_COUNT)
    reference_tokens: Annotated[Number, Field(gt=0)] | None = None
    min_zipf: Annotated[Number, Field(ge=0, le=9)] | None = None


class PolysemySection(Config):
    """``polysemy:``: the primary-meaning threshold and the sense model's parameters."""

    min_confidence: Annotated[Number, Field(ge=0, le=1)] = DEFAULT_MIN_CONFIDENCE
    temperature: Annotated[Number, Field(gt=0)] = SENSE_DEFAULTS["temperature"]
    order_decay: Annotated[Number, Field(gt=0, le=1)] = SENSE_DEFAULTS["order_decay"]
    prior_strength: Annotated[Number, Field(gt=0)] = SENSE_DEFAULTS["prior_strength"]


class LabelsRecipe(Config):
    """The whole ``configs/labels.yaml`` as typed by the config layer (see the module docstring)."""

    vectors: Annotated[VectorsSection, BeforeValidator(_vector_section)] = VectorsSection()
    lemma_rule: Literal["mean", "first"] = "mean"
    normalize: bool = True
    frequency: Annotated[FrequencySection, BeforeValidator(_section)] = FrequencySection()
    polysemy: Annotated[PolysemySection, BeforeValidator(_section)] = PolysemySection()


@dataclass(frozen=True)
class FrequencyConfig:
    source: str = "wordfreq"
    lang: str = "en"
    min_count: float | None = DEFAULT_MIN_COUNT
    reference_tokens: float | None = None
    min_zipf: float | None = None
    base_dir: Path | None = None

    def load(self) -> Frequencies:
        return load_frequencies(self.source, self.lang, self.base_dir)

    def threshold(self, frequencies: Frequencies | None = None) -> float:
        """Zipf value below which a label is rare."""
        frequencies = frequencies or self.load()
        return rare_threshold(frequencies, self.min_zipf, self.min_count, self.reference_tokens)


@dataclass(frozen=True)
class LabelConfig:
    vectors: VectorSpec = field(default_factory=VectorSpec)
    lemma_rule: str = "mean"
    normalize: bool = True
    frequency: FrequencyConfig = field(default_factory=FrequencyConfig)
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    sense_params: tuple[tuple[str, float], ...] = tuple(sorted(SENSE_DEFAULTS.items()))
    path: Path | None = None

    def as_dict(self) -> dict[str, Any]:
        """The resolved settings (for manifests)."""
        return {
            "vectors": {
                "source": self.vectors.source,
                "format": self.vectors.format,
                "dim": self.vectors.dim,
                **({"trust_pickle": True} if self.vectors.trust_pickle else {}),
            },
            "lemma_rule": self.lemma_rule,
            "normalize": self.normalize,
            "frequency": {
                "source": self.frequency.source,
                "lang": self.frequency.lang,
                "min_count": self.frequency.min_count,
                "reference_tokens": self.frequency.reference_tokens,
                "min_zipf": self.frequency.min_zipf,
            },
            "polysemy": {"min_confidence": self.min_confidence, **dict(self.sense_params)},
        }


def load_label_config(source: str | Path | Mapping | None = None) -> LabelConfig:
    """A labels YAML file (or an already-parsed mapping; None → all defaults), strictly validated.

    Unknown keys, wrong types and out-of-range values are one-line ``UserInputError``s naming the
    file, the key path and the value (``imagenet_zsl.config``).
    """
    path: Path | None = None
    if source is None:
        recipe = LabelsRecipe()
    elif isinstance(source, Mapping):
        recipe = validate_config(dict(source), LabelsRecipe, "label config")
    else:
        path = Path(source)
        recipe = load_config(path, LabelsRecipe)
    where = str(path) if path else "label config"
    base_dir = path.parent if path else None
    section = recipe.vectors
    vectors = VectorSpec.parse(
        {
            "source": section.source or section.path or section.name or DEFAULT_VECTORS,
            "format": section.format,
            "dim": section.dim,
            "trust_pickle": section.trust_pickle,
        },
        base_dir,
        f"{where}: vectors",
    )
    freq = recipe.frequency
    poly = recipe.polysemy
    return LabelConfig(
        vectors=vectors,
        lemma_rule=recipe.lemma_rule,
        normalize=recipe.normalize,
        frequency=FrequencyConfig(
            source=freq.source,
            lang=freq.lang,
            min_count=freq.min_count,
            reference_tokens=freq.reference_tokens,
            min_zipf=freq.min_zipf,
            base_dir=base_dir,
        ),
        min_confidence=poly.min_confidence,
        sense_params=tuple(sorted((k, float(getattr(poly, k))) for k in SENSE_DEFAULTS)),
        path=path,
    )
