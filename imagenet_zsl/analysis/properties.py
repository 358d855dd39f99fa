"""Per-class label properties the analyses vary or correct for, from the label-curation code.

Everything here is ``imagenet_zsl.semantics``'s own decision, never a re-implementation: the label
is the class's first WordNet lemma (``semantics.labels.chosen_labels``), its frequency and the
rare-word threshold come from the label config's ``frequency`` section (``semantics.frequency``;
default: wordfreq, rare below 50 occurrences per 3·10⁹ words), and the primary meaning from
``semantics.senses.PrimarySenseModel`` via ``semantics.labels.primary_decisions``. A finished
``imagenet-zsl labels build`` directory can be read instead (its ``classes.csv``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.manifests import MANIFEST_NAME, read_manifest_verified
from imagenet_zsl.semantics.config import LabelConfig, load_label_config
from imagenet_zsl.semantics.labels import chosen_labels, primary_decisions
from imagenet_zsl.semantics.lemma_vectors import vectorizer_for
from imagenet_zsl.semantics.report import LABELS_FORMAT
from imagenet_zsl.semantics.senses import PrimarySenseModel

#: columns of :func:`label_properties`
LABEL_COLUMNS = ("wnid", "label", "zipf", "rare", "primary", "primary_confidence")


def label_properties(wnids: Sequence[str], config: LabelConfig | str | Path | None = None) -> pd.DataFrame:
    """One row per class (``LABEL_COLUMNS``): chosen label, its Zipf frequency, whether it is rare,
    whether the class is the label's primary meaning and that sense's posterior."""
    if not isinstance(config, LabelConfig):
        config = load_label_config(config)
    wnids = list(wnids)
    nouns = load_wordnet_nouns()
    unknown = [w for w in wnids if w not in nouns.index]
    if unknown:
        raise UserInputError(
            f"{len(unknown)} classes are not WordNet 3.0 noun synsets, so their labels cannot be "
            f"derived (e.g. {preview(unknown, 3)}); give a label table with --labels "
            "(the --out of `imagenet-zsl labels build`)"
        )
    labels = chosen_labels(wnids, nouns)
    frequencies = config.frequency.load()
    zipf = frequencies.zipf(labels)
    threshold = config.frequency.threshold(frequencies)
    model = PrimarySenseModel(vectorizer_for(config.vectors), **dict(config.sense_params))
    primary, confidence, _ = primary_decisions(labels, wnids, model)
    return pd.DataFrame(
        {
            "wnid": wnids,
            "label": labels,
            "zipf": np.round(zipf, 3),
            "rare": np.round(zipf, 3) < threshold,
            "primary": np.asarray(primary, dtype=bool),
            "primary_confidence": np.round(confidence, 4),
        }
    )


def read_label_tables(labels_dir: str | Path, wnids: Sequence[str]) -> pd.DataFrame:
    """``LABEL_COLUMNS`` for ``wnids`` from a ``labels build`` output directory (its classes.csv)."""
    path = Path(labels_dir)
    if path.is_dir() and (path / MANIFEST_NAME).is_file():
        read_manifest_verified(
            path,
            LABELS_FORMAT,
            hash_files=lambda rel: rel == "classes.csv",
            rerun="re-run 'imagenet-zsl labels build'",
        )
    path = path / "classes.csv" if path.is_dir() else path
    if not path.is_file():
        raise UserInputError(
            f"{labels_dir}: no classes.csv here; give the --out of `imagenet-zsl labels build`"
        )
    try:
        table = pd.read_csv(path, dtype={"wnid": str, "label": str})
    except (ValueError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: not a readable CSV table ({err})") from err
    needed = ("wnid", "label", "label_zipf", "label_rare", "is_primary", "primary_confidence")
    absent = [c for c in needed if c not in table.columns]
    if absent:
        raise UserInputError(
            f"{path}: missing column(s) {', '.join(absent)}; is it a labels build classes.csv?"
        )
    table = table.drop_duplicates("wnid").set_index("wnid")
    missing = [w for w in wnids if w not in table.index]
    if missing:
        raise UserInputError(
            f"{path}: {len(missing)} classes of the run are not in the label table: {preview(missing)}"
        )
    rows = table.loc[list(wnids)]
    return pd.DataFrame(
        {
            "wnid": list(wnids),
            "label": rows["label"].to_numpy(),
            "zipf": rows["label_zipf"].to_numpy(dtype=np.float64),
            "rare": _bools(rows["label_rare"], path, "label_rare"),
            "primary": _bools(rows["is_primary"], path, "is_primary"),
            "primary_confidence": rows["primary_confidence"].to_numpy(dtype=np.float64),
        }
    )


def _bools(column: pd.Series, path: Path, name: str) -> np.ndarray:
    text = column.astype(str).str.strip().str.lower()
    bad = sorted(set(text) - {"true", "false", "1", "0"})
    if bad:
        raise UserInputError(f"{path}: column {name} holds non-boolean values {bad[:3]}")
    return text.isin(("true", "1")).to_numpy()
