"""The one device resolver: a user's ``--device`` choice → a ``torch.device``, with clear errors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from imagenet_zsl.errors import UserInputError

if TYPE_CHECKING:
    import torch


def resolve_device(requested: str, local_rank: int = 0) -> torch.device:
    """``auto`` → the GPU when torch sees one, else the CPU; ``cuda`` → GPU ``local_rank`` (mod the
    number of GPUs, for torchrun); ``cuda:N`` and ``cpu`` as given. A CUDA choice without a visible
    GPU, or any other string, is a user error."""
    import torch

    name = str(requested)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UserInputError(f"--device {requested}: no CUDA GPU is visible; use --device cpu")
        if name == "cuda":
            name = f"cuda:{local_rank % torch.cuda.device_count()}"
        try:
            return torch.device(name)
        except RuntimeError as err:
            raise UserInputError(f"--device {requested}: {err}") from err
    raise UserInputError(f"--device {requested!r}: use cuda, cuda:N, cpu or auto")
