"""Shared model helpers: thread counts chosen from the size of the work, the loss history kept on
the training device."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from imagenet_zsl.models.common import (
    FLOPS_PER_THREAD,
    LossHistory,
    _threads_for,
    blas_threads,
    torch_threads,
)


class EagerLossHistory:
    """The accumulation the models did before LossHistory, verbatim: the host reads every step's
    loss (``float(loss)``, a device sync) into Python floats."""

    def __init__(self, epochs: int, device: torch.device):
        self.sums = [0.0] * epochs

    def add(self, epoch: int, loss: torch.Tensor, weight: int = 1) -> None:
        self.sums[epoch] += float(loss.detach()) * weight

    def values(self) -> list[float]:
        return list(self.sums)


def check_losses_read_once(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, fit: Callable[[int], dict[str, Any]]
) -> None:
    """``fit(epochs)`` fits a model of ``module`` and returns its fit_info. The number of
    ``float(tensor)`` host reads does not grow with the epochs, and the recorded losses equal,
    bit for bit, those of the former per-step reads (:class:`EagerLossHistory`)."""
    reads: list[int] = []
    original = torch.Tensor.__float__

    def counting_float(self: torch.Tensor) -> float:
        reads.append(1)
        return original(self)

    with monkeypatch.context() as patch:
        patch.setattr(torch.Tensor, "__float__", counting_float)
        counts = []
        for epochs in (1, 4):
            reads.clear()
            fit(epochs)
            counts.append(len(reads))
        eager_counts = []
        patch.setattr(module, "LossHistory", EagerLossHistory)
        for epochs in (1, 4):
            reads.clear()
            eager = fit(epochs)
            eager_counts.append(len(reads))
    assert counts[0] == counts[1]
    assert eager_counts[1] > eager_counts[0]  # the check can fail: the old way reads every step
    losses = {key: value for key, value in fit(4).items() if key.startswith("loss")}
    assert losses == {key: value for key, value in eager.items() if key.startswith("loss")}
    assert losses["loss_first_epoch"] != losses["loss_last_epoch"]


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


def test_loss_history_equals_a_python_float_accumulation_bit_for_bit():
    """float32 losses widened to float64, weighted and summed per epoch in order, as a host loop
    ``total += float(loss) * weight`` does; epochs never reached stay 0."""
    rng = np.random.default_rng(0)
    losses = torch.from_numpy(rng.random(7).astype(np.float32) * 10)
    weights = [3, 1024, 1024, 7, 1, 999, 5]
    epochs = [0, 0, 0, 1, 1, 1, 1]
    history = LossHistory(3, torch.device("cpu"))
    expected = [0.0, 0.0, 0.0]
    for loss, weight, epoch in zip(losses, weights, epochs, strict=True):
        expected[epoch] += float(loss) * weight
        history.add(epoch, loss.requires_grad_(True), weight)  # detached by add
    assert history.values() == expected
    assert history.values()[2] == 0.0
