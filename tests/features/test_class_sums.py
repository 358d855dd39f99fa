"""add_rows_by_label: np.add.at's bits, as sparse products (GFZSL, SSE and visual prototypes)."""

from __future__ import annotations

import numpy as np
import pytest

from imagenet_zsl.features import prototypes
from imagenet_zsl.features.prototypes import add_rows_by_label


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("classes", "rows", "dim"), [(1, 5, 3), (7, 50, 4), (40, 3001, 9)])
def test_same_bits_as_np_add_at_over_chunks(monkeypatch, dtype, classes, rows, dim):
    # chunks of 64 rows: every class's rows span several chunks, so the running sums carry over
    monkeypatch.setattr(prototypes, "_SUM_CHUNK", 64)
    rng = np.random.default_rng(rows)
    # magnitudes from 1e-6 to 1e6: any change of summation order changes the last bits
    values = (rng.standard_normal((rows, dim)) * 10.0 ** rng.uniform(-6, 6, (rows, 1))).astype(dtype)
    labels = rng.integers(0, max(1, classes - 2), rows)  # the last classes get no row
    start = rng.standard_normal((classes, dim))  # sums already running, as across blocks
    expected, got = start.copy(), start.copy()
    np.add.at(expected, labels, values)
    add_rows_by_label(got, labels, values)
    assert np.array_equal(got, expected)
    assert got.tobytes() == expected.tobytes()  # -0.0 and NaN-free: the very same bytes


def test_no_rows_changes_nothing():
    sums = np.arange(6.0).reshape(2, 3)
    add_rows_by_label(sums, np.zeros(0, np.int64), np.zeros((0, 3)))
    assert np.array_equal(sums, np.arange(6.0).reshape(2, 3))


def test_hand_computed_sums():
    sums = np.zeros((3, 2))
    add_rows_by_label(
        sums, np.array([2, 0, 2, 2]), np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    )
    assert sums.tolist() == [[3.0, 4.0], [0.0, 0.0], [13.0, 16.0]]
