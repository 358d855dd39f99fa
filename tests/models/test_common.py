"""Shared model helpers: thread counts chosen from the size of the work."""

from __future__ import annotations

import torch

from imagenet_zsl.models.common import FLOPS_PER_THREAD, _threads_for, blas_threads, torch_threads


def test_thread_count_by_hand():
    """One thread per FLOPS_PER_THREAD of a step, at least one, at most what is available."""
    assert _threads_for(0, 8) == 1
    assert _threads_for(3.5 * FLOPS_PER_THREAD, 8) == 3
    assert _threads_for(100 * FLOPS_PER_THREAD, 8) == 8


def test_thread_limits_are_restored():
    before = torch.get_num_threads()
    with torch_threads(1.0) as threads:
        assert threads == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with blas_threads(1.0) as threads:
        assert threads in (0, 1)  # 0: threadpoolctl missing, nothing changed
