"""Command-line entry point of this stage (its commands are added as the stage is written)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imagenet_zsl.cli import CommandTree  # the tree is handed in; never imported upward


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the command line."""
