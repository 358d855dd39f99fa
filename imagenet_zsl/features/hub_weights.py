"""Pretrained weights by name: the Hugging Face hub cache (timm, open_clip) and the torch hub cache
(torchvision), fetched the way those libraries fetch them, or named exactly when they cannot be.

Online, a missing file is downloaded into the cache the library itself uses (``HF_HOME`` /
``HF_HUB_CACHE``; ``TORCH_HOME``). With ``HF_HUB_OFFLINE=1`` nothing is downloaded, for the torch
hub as well: only cached files are used, and a missing one is one error line naming the repository,
the file and the command that fetches it. The environment is read at call time, so a variable set
after ``huggingface_hub`` was imported still counts. What was loaded is recorded as a
:class:`WeightsInfo` (its sha256 goes into the feature manifest).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.io import sha256_file

RANDOM = "random"
_TRUE = {"1", "on", "yes", "true"}
NO_WEIGHTS_HINT = "or pass --weights PATH (--weights random is for tests and benchmarks only)"


@dataclass
class WeightsInfo:
    """Where the weights came from, for the manifest (``sha256`` of the file; None for random).

    ``source``: "file", "torch-hub-cache", "hf-cache" or "random"; ``repo``/``filename``: the Hugging
    Face repository and file the weights came from (hf-cache only)."""

    source: str
    path: str | None
    sha256: str | None
    seed: int | None = None
    repo: str | None = None
    filename: str | None = None

    def describe(self) -> dict[str, Any]:
        record = {"source": self.source, "path": self.path, "sha256": self.sha256}
        if self.repo is not None:
            record["repo"] = self.repo
            record["filename"] = self.filename
        if self.source == RANDOM:
            record["seed"] = self.seed
            record["note"] = "RANDOM WEIGHTS: for tests and benchmarks only, features are meaningless"
        return record


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (read now, not at import) forbids downloads."""
    import huggingface_hub.constants  # deferred: `extract --help` imports this module (via backbones)

    value = os.environ.get("HF_HUB_OFFLINE")
    if value is not None:
        return value.strip().lower() in _TRUE
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache: ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else the library's default."""
    import huggingface_hub.constants  # deferred: `extract --help` imports this module (via backbones)

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(huggingface_hub.constants.HF_HUB_CACHE)


def split_revision(repo: str) -> tuple[str, str | None]:
    """``org/name@rev`` → (``org/name``, ``rev``); no ``@``: (repo, None)."""
    name, _, revision = repo.strip().rstrip("/").partition("@")
    return name, revision or None


def _not_found(backbone: str, repo: str, filenames: tuple[str, ...], why: str, what: str) -> UserInputError:
    name, revision = split_revision(repo)
    rev = f" --revision {revision}" if revision else ""
    hint = NO_WEIGHTS_HINT if what == "pretrained weights" else "(--weights does not replace it)"
    return UserInputError(
        f"no {what} for --backbone {backbone}: {name}/{filenames[0]} is not in the Hugging Face cache "
        f"{hub_cache_dir()} ({why}); fetch it with `hf download {name} {filenames[0]}{rev}` into the "
        f"same HF_HOME, {hint}"
    )


def fetch_hub_file(
    repo: str, filenames: tuple[str, ...], backbone: str, what: str = "pretrained weights"
) -> tuple[Path, str]:
    """The first of ``filenames`` that ``repo`` (``org/name[@rev]``) holds, from the hub cache or
    downloaded into it (not when offline) → (local path, filename). UserInputError naming the
    repository and file (``what`` it is) when none can be had."""
    # deferred: `extract --help` imports this module (via backbones); only a fetch needs the hub client
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (  # deferred: as hf_hub_download above
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
    )

    name, revision = split_revision(repo)
    offline = hub_offline()
    why = "HF_HUB_OFFLINE=1: nothing is downloaded" if offline else "not found on the hub"
    for filename in filenames:
        try:
            path = hf_hub_download(
                name, filename, revision=revision, cache_dir=hub_cache_dir(), local_files_only=offline
            )
        except LocalEntryNotFoundError:  # not cached, and offline or the hub cannot be reached
            why = "HF_HUB_OFFLINE=1: nothing is downloaded" if offline else "the hub cannot be reached"
            continue
        except EntryNotFoundError:  # the repository has no such file
            continue
        except (HfHubHTTPError, OSError, ValueError) as err:
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise UserInputError(
                f"--backbone {backbone}: cannot fetch {name}/{filename} from the Hugging Face hub: "
                f"{type(err).__name__}: {first}; {NO_WEIGHTS_HINT}"
            ) from None
        return Path(path), filename
    raise _not_found(backbone, repo, filenames, why, what)


def hub_weights(repo: str, filenames: tuple[str, ...], backbone: str) -> WeightsInfo:
    """:func:`fetch_hub_file` recorded as a :class:`WeightsInfo` (sha256 of the file)."""
    path, filename = fetch_hub_file(repo, filenames, backbone)
    return WeightsInfo("hf-cache", str(path), sha256_file(path), repo=repo, filename=filename)


def torch_hub_weights(url: str, backbone: str) -> WeightsInfo:
    """torchvision weights: the torch hub cache's ``checkpoints/<file>``, downloaded there as
    ``torchvision`` does (hash prefix of the name checked) unless ``HF_HUB_OFFLINE=1``."""
    import torch  # deferred: `extract --help` and training import this module (via backbones)

    path = Path(torch.hub.get_dir()) / "checkpoints" / Path(url).name
    if not path.is_file():
        if hub_offline():
            raise UserInputError(
                f"no pretrained weights for --backbone {backbone}: {path} is not in the torch hub "
                f"cache (HF_HUB_OFFLINE=1: nothing is downloaded); download {url} there (or set "
                f"TORCH_HOME) {NO_WEIGHTS_HINT}"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        found = re.search(r"-([a-f0-9]{8,})\.", path.name)
        try:
            torch.hub.download_url_to_file(url, str(path), found.group(1) if found else None, progress=False)
        except (OSError, RuntimeError) as err:
            raise UserInputError(
                f"no pretrained weights for --backbone {backbone}: cannot download {url} to {path} "
                f"({type(err).__name__}: {str(err)[:160]}) {NO_WEIGHTS_HINT}"
            ) from None
    return WeightsInfo("torch-hub-cache", str(path), sha256_file(path))
