"""The label-curation config (``configs/labels.yaml``): vectors, frequency and polysemy settings.

Every key is optional; unknown keys are an error (a typo must not silently fall back to a
default)::

    vectors: glove-6b-50d        # a named set, a path, or {source: PATH, format: auto, dim: 300}
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

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.frequency import DEFAULT_MIN_COUNT, load_frequencies, rare_threshold
from imagenet_zsl.semantics.spec import DEFAULT_MIN_CONFIDENCE, LEMMA_RULES, SENSE_DEFAULTS
from imagenet_zsl.semantics.word_vectors import VectorSpec


@dataclass(frozen=True)
class FrequencyConfig:
    source: str = "wordfreq"
    lang: str = "en"
    min_count: float | None = DEFAULT_MIN_COUNT
    reference_tokens: float | None = None
    min_zipf: float | None = None
    base_dir: Path | None = None

    def load(self):
        return load_frequencies(self.source, self.lang, self.base_dir)

    def threshold(self, frequencies=None) -> float:
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


def _check_keys(section: Mapping, allowed: set[str], where: str) -> None:
    unknown = set(section) - allowed
    if unknown:
        raise UserInputError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


def _number(value: Any, where: str, positive: bool = False, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UserInputError(f"{where}: expected a number, got {value!r}")
    try:
        number = float(value)
    except ValueError as err:
        raise UserInputError(f"{where}: expected a number, got {value!r}") from err
    if positive and not number > 0:
        raise UserInputError(f"{where}: must be > 0, got {value!r}")
    return number


def load_label_config(source: str | Path | Mapping | None = None) -> LabelConfig:
    """Parse a labels YAML file (or an already-loaded mapping; None → all defaults)."""
    path: Path | None = None
    if source is None:
        data: Any = {}
    elif isinstance(source, Mapping):
        data = dict(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise UserInputError(f"{path}: label config not found")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            raise UserInputError(f"{path}: invalid YAML ({err})") from err
    where = str(path) if path else "label config"
    if not isinstance(data, Mapping):
        raise UserInputError(f"{where}: expected a mapping at the top level")
    _check_keys(data, {"vectors", "lemma_rule", "normalize", "frequency", "polysemy"}, where)
    base_dir = path.parent if path else None
    vectors = VectorSpec.parse(data.get("vectors", "glove-6b-50d"), base_dir, f"{where}: vectors")
    rule = data.get("lemma_rule", "mean")
    if rule not in LEMMA_RULES:
        raise UserInputError(f"{where}: lemma_rule must be one of {', '.join(LEMMA_RULES)}, got {rule!r}")
    normalize = data.get("normalize", True)
    if not isinstance(normalize, bool):
        raise UserInputError(f"{where}: normalize must be true or false, got {normalize!r}")

    freq = data.get("frequency") or {}
    if not isinstance(freq, Mapping):
        raise UserInputError(f"{where}: frequency must be a mapping")
    _check_keys(freq, {"source", "lang", "min_count", "reference_tokens", "min_zipf"}, f"{where}: frequency")
    frequency = FrequencyConfig(
        source=str(freq.get("source", "wordfreq")),
        lang=str(freq.get("lang", "en")),
        min_count=_number(freq.get("min_count", DEFAULT_MIN_COUNT), f"{where}: frequency.min_count"),
        reference_tokens=_number(
            freq.get("reference_tokens"), f"{where}: frequency.reference_tokens", positive=True
        ),
        min_zipf=_number(freq.get("min_zipf"), f"{where}: frequency.min_zipf"),
        base_dir=base_dir,
    )
    poly = data.get("polysemy") or {}
    if not isinstance(poly, Mapping):
        raise UserInputError(f"{where}: polysemy must be a mapping")
    _check_keys(poly, {"min_confidence", *SENSE_DEFAULTS}, f"{where}: polysemy")
    min_conf = _number(
        poly.get("min_confidence", DEFAULT_MIN_CONFIDENCE),
        f"{where}: polysemy.min_confidence",
        optional=False,
    )
    if not 0 <= min_conf <= 1:
        raise UserInputError(f"{where}: polysemy.min_confidence must be in [0, 1], got {min_conf}")
    params = {
        k: _number(poly.get(k, v), f"{where}: polysemy.{k}", positive=True, optional=False)
        for k, v in SENSE_DEFAULTS.items()
    }
    if params["order_decay"] > 1:
        raise UserInputError(f"{where}: polysemy.order_decay must be in (0, 1], got {params['order_decay']}")
    return LabelConfig(
        vectors=vectors,
        lemma_rule=rule,
        normalize=normalize,
        frequency=frequency,
        min_confidence=min_conf,
        sense_params=tuple(sorted(params.items())),
        path=path,
    )
