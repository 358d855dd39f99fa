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

from imagenet_zsl.atomic import atomic_write_bytes
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.paths import regular_input_file


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

    def require_nonzero_rows(self, where: str) -> None:
        """Refuse a zero row where the rows are L2-normalised (cosine scores): its direction is
        undefined, so its class would score 0 (or NaN) against every image, silently."""
        norms = np.linalg.norm(self.matrix, axis=1)
        zero = np.flatnonzero(norms == 0)
        if len(zero):
            raise UserInputError(
                f"{where}: {len(zero)} classes have an all-zero vector, which has no direction "
                f"under L2 normalisation: {preview([self.wnids[i] for i in zero])}; drop them or "
                "fix their vectors"
            )

    @classmethod
    def load(cls, path: str | Path) -> ClassVectors:
        """Read a file written by :meth:`save`. Refused in one line naming the file: a missing
        file or a special one (a FIFO would block), pickled arrays (never loaded), wnids that are
        not strings, a matrix that is not real numbers, or a NaN or ±inf entry."""
        path = regular_input_file(path, "class-vector file")
        try:
            with np.load(path, allow_pickle=False) as data:
                wnids, matrix = data["wnids"], data["matrix"]
                problem = _array_problem(wnids, matrix)
                if problem:
                    raise UserInputError(f"{path}: {problem}")
                vectors = cls(
                    wnids=[str(w) for w in wnids],
                    matrix=matrix,
                    missing=[str(w) for w in data["missing"]] if "missing" in data else [],
                    source=str(data["source"]) if "source" in data else str(path),
                )
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            if "allow_pickle" in first:
                first = "it holds pickled Python objects, which are never loaded (allow_pickle=False)"
            raise UserInputError(
                f"{path}: not a readable class-vector npz (needs arrays 'wnids' and 'matrix'; "
                f"truncated or damaged?): {first[:200]}"
            ) from err
        vectors.require_finite(str(path))
        return vectors

    def require_finite(self, where: str) -> None:
        """Refuse a NaN or ±inf entry (also a float64 value beyond float32's range): every score
        against that class would be NaN or infinite, silently deciding the ranking."""
        bad = np.flatnonzero(~np.isfinite(self.matrix).all(axis=1))
        if len(bad):
            row = self.matrix[bad[0]]
            value = row[~np.isfinite(row)][0]
            raise UserInputError(
                f"{where}: the vectors of {len(bad)} classes hold NaN or infinity (first: "
                f"{self.wnids[bad[0]]} = {value}); fix or drop them"
            )


def _array_problem(wnids: np.ndarray, matrix: np.ndarray) -> str | None:
    """What is wrong with the dtypes of a class-vector npz's arrays (None: fine)."""
    if wnids.dtype.kind != "U":
        return f"'wnids' must be strings, not {wnids.dtype}"
    if matrix.dtype.kind not in "fiu":
        return f"'matrix' must hold real numbers, not {matrix.dtype}"
    return None
