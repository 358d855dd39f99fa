"""Class semantics as one matrix with a wnid index: word vectors or attribute vectors alike.

Models read class semantics only through ``ClassVectors``, so ImageNet word vectors and
xlsa17 attribute vectors are interchangeable.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.io import atomic_write_bytes


@dataclass
class ClassVectors:
    """``matrix[i]`` is the semantic vector of class ``wnids[i]``; shape (C, E) float32.

    ``missing`` lists classes that were asked for but have no vector (reported, never zero-filled).
    """

    wnids: list[str]
    matrix: np.ndarray
    missing: list[str] = field(default_factory=list)
    source: str = ""

    def __post_init__(self) -> None:
        self.matrix = np.asarray(self.matrix, dtype=np.float32)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != len(self.wnids):
            raise ValueError(f"matrix {self.matrix.shape} does not match {len(self.wnids)} wnids")
        self._index = {w: i for i, w in enumerate(self.wnids)}
        if len(self._index) != len(self.wnids):
            raise ValueError("duplicate wnids in ClassVectors")

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def __contains__(self, wnid: str) -> bool:
        return wnid in self._index

    def __len__(self) -> int:
        return len(self.wnids)

    def get(self, wnids: Sequence[str]) -> np.ndarray:
        """Rows for ``wnids`` in that order; a clear error lists the classes without vectors."""
        absent = [w for w in wnids if w not in self._index]
        if absent:
            raise UserInputError(
                f"{len(absent)} classes have no semantic vector ({self.source or 'class vectors'}): "
                f"{preview(absent)}; filter them out of the split (pool filter 'has_vector')"
            )
        return self.matrix[[self._index[w] for w in wnids]]

    def save(self, path: str | Path) -> Path:
        """npz with ``wnids``, ``matrix``, ``missing`` (atomic)."""
        buffer = io.BytesIO()
        np.savez(
            buffer,
            wnids=np.asarray(self.wnids, dtype=np.str_),
            matrix=self.matrix,
            missing=np.asarray(self.missing, dtype=np.str_),
            source=np.asarray(self.source),
        )
        return atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> ClassVectors:
        path = Path(path)
        if not path.exists():
            raise UserInputError(f"{path}: class-vector file not found")
        try:
            with np.load(path, allow_pickle=False) as data:
                return cls(
                    wnids=[str(w) for w in data["wnids"]],
                    matrix=data["matrix"],
                    missing=[str(w) for w in data["missing"]] if "missing" in data else [],
                    source=str(data["source"]) if "source" in data else str(path),
                )
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserInputError(
                f"{path}: not a readable class-vector npz (needs arrays 'wnids' and 'matrix'; "
                f"truncated or damaged?): {first[:200]}"
            ) from err
