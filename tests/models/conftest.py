"""Fixtures for the model tests. torch runs single-threaded here: the problems are tiny, and
thread start-up would dominate their run time."""

from __future__ import annotations

import pytest
import torch

from tests.models.problems import Problem

torch.set_num_threads(1)


@pytest.fixture()
def problem() -> Problem:
    return Problem()
