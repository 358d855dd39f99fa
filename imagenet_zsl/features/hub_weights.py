"""Pretrained weights by name: the Hugging Face hub cache (timm, open_clip) and the torch hub cache
(torchvision), fetched the way those libraries fetch them, or named exactly when they cannot be.

A file already in the cache is used as it is, without asking the hub (so a cached run needs no
network and takes no time to find out that there is none). A missing file is downloaded into the
cache the library itself uses (``HF_HOME`` / ``HF_HUB_CACHE``; ``TORCH_HOME``) when the hub can be
reached: a TCP connection to it (or to the proxy) must open within :data:`CONNECT_TIMEOUT_S`, else
the error comes at once instead of after the hub client's minute of retries (whose log lines are
silenced). With ``HF_HUB_OFFLINE=1`` nothing is downloaded, for the torch hub as well. A missing
file is one error line naming the repository, the file and the command that fetches it. The
environment is read at call time, so a variable set after ``huggingface_hub`` was imported still
counts. Every cached file is checked to be a regular file before it is read (a FIFO would block).
What was loaded is recorded as a :class:`WeightsInfo` (its digests go into the feature manifest).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file

RANDOM = "random"
_TRUE = {"1", "on", "yes", "true"}
NO_WEIGHTS_HINT = "or pass --weights PATH (--weights random is for tests and benchmarks only)"
#: seconds a TCP connection to the hub (name lookup included) may take before it counts as unreachable
CONNECT_TIMEOUT_S = 3.0


@dataclass
class WeightsInfo:
    """Where the weights came from, for the manifest.

    ``source``: "file", "torch-hub-cache", "hf-cache" or "random"; ``sha256``: of the file (of the
    seeded state for random weights); ``tensors_sha256``: of the loaded tensors, whatever file held
    them (:func:`tensor_digest`, what the feature identity compares); ``repo``/``filename``: the
    Hugging Face repository and file (hf-cache only)."""

    source: str
    path: str | None
    sha256: str | None
    seed: int | None = None
    repo: str | None = None
    filename: str | None = None
    tensors_sha256: str | None = None

    def describe(self) -> dict[str, Any]:
        record = {"source": self.source, "path": self.path, "sha256": self.sha256}
        if self.tensors_sha256 is not None:
            record["tensors_sha256"] = self.tensors_sha256
        if self.repo is not None:
            record["repo"] = self.repo
            record["filename"] = self.filename
        if self.source == RANDOM:
            record["seed"] = self.seed
            record["note"] = "RANDOM WEIGHTS: for tests and benchmarks only, features are meaningless"
        return record


def state_digest(module: Any) -> str:
    """sha256 over a module's state (names, dtypes, shapes and bytes, in state_dict order): the
    ``sha256`` recorded for seeded random weights, which have no file to hash (kept as it was, so
    manifests written before :func:`tensor_digest` still compare)."""
    digest = hashlib.sha256()
    for key, value in module.state_dict().items():
        tensor = value.detach().cpu().contiguous()
        digest.update(f"{key}:{tensor.dtype}:{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def tensor_digest(module: Any) -> str:
    """The weights' identity: sha256 over the loaded network's tensors in sorted name order, each
    as ``name``, NUL, dtype, NUL, shape, newline, then its bytes (C order, native little-endian).

    It depends on the tensors alone, not on the file that held them: the names hashed are the
    network's own after loading, so the file's format (``.pth``, ``.safetensors``), the tensors'
    order in it and the names the loader maps (``module.``, a FeatureNet's ``model.``/``head.``,
    torchvision's ``fc.``) do not enter. One pass over the bytes, as a file's sha256 (ResNet-50:
    100 MB, about 0.1 s of CPU)."""
    import torch  # deferred: `extract --help` imports this module (via backbones) without torch

    digest = hashlib.sha256()
    state = module.state_dict()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        digest.update(f"{key}\0{str(tensor.dtype).removeprefix('torch.')}\0{tuple(tensor.shape)}\n".encode())
        if tensor.numel():  # as raw bytes, so bf16/fp8 tensors (which numpy lacks) hash as well
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


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


def unreachable(url: str, timeout: float | None = None) -> str | None:
    """Why ``url``'s host cannot be reached (a TCP connection to it, or to the proxy the
    environment names for it, does not open within ``timeout`` s, default
    :data:`CONNECT_TIMEOUT_S`), or None when it can. The name lookup runs in a daemon thread, so a
    resolver that hangs costs ``timeout`` too, never more."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        via = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = via.hostname or "", via.port or 80
    limit = CONNECT_TIMEOUT_S if timeout is None else timeout
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=limit).close()
            outcome.append(None)
        except OSError as err:
            outcome.append(f"{host}:{port}: {err.strerror or type(err).__name__}")

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(limit)
    return outcome[0] if outcome else f"{host}:{port}: no answer within {limit:g} s"


@contextlib.contextmanager
def quiet_logger(name: str | None) -> Iterator[None]:
    """Logger ``name`` (None: the root) at ERROR for the block: a library's chatter whose outcome
    this module reports in one line (the hub client's "Retrying in 8s [Retry 4/5]", open_clip's
    "initialized randomly" on the root logger while weights are loaded or recorded as random)."""
    log_ = logging.getLogger(name)
    old = log_.level
    log_.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log_.setLevel(old)


def _cached_file(name: str, filename: str, revision: str | None) -> Path | None:
    """``filename`` of repository ``name`` at ``revision`` from the hub cache (None: not there),
    checked to be a regular file: an entry of another kind (a FIFO would block its reader) is one
    error line naming it, where the hub's own lookup would call it missing."""
    from huggingface_hub import try_to_load_from_cache  # deferred: as in fetch_hub_file

    cache = hub_cache_dir()
    found = try_to_load_from_cache(name, filename, cache_dir=cache, revision=revision)
    if isinstance(found, str):
        return regular_input_file(found, "cached weights file")
    folder = cache / ("models--" + name.replace("/", "--"))
    ref = folder / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() and ref.stat().st_size < 4096 else revision or ""
    entry = folder / "snapshots" / commit / filename
    if commit and (entry.exists() or entry.is_symlink()):
        regular_input_file(entry, f"cached {filename}")  # not a regular file: raises, naming it
    return None


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
    """The first of ``filenames`` that ``repo`` (``org/name[@rev]``) holds in the hub cache, else
    the first the hub gives, downloaded into the cache (not when offline or unreachable) → (local
    path, filename). UserInputError naming the repository and file (``what`` it is) when none can
    be had."""
    # deferred: `extract --help` imports this module (via backbones); only a fetch needs the hub client
    import huggingface_hub.constants
    from huggingface_hub import hf_hub_download  # deferred: as huggingface_hub.constants above
    from huggingface_hub.errors import (  # deferred: as hf_hub_download above
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
    )

    name, revision = split_revision(repo)
    for filename in filenames:
        cached = _cached_file(name, filename, revision)
        if cached is not None:
            return cached, filename
    if hub_offline():
        raise _not_found(backbone, repo, filenames, "HF_HUB_OFFLINE=1: nothing is downloaded", what)
    endpoint = huggingface_hub.constants.ENDPOINT
    problem = unreachable(endpoint)
    if problem is not None:
        raise _not_found(backbone, repo, filenames, f"the hub {endpoint} cannot be reached: {problem}", what)
    why = "not found on the hub"
    for filename in filenames:
        try:
            with quiet_logger("huggingface_hub"):
                path = hf_hub_download(
                    name, filename, revision=revision, cache_dir=hub_cache_dir(), local_files_only=False
                )
        except LocalEntryNotFoundError:  # not cached, and the hub stopped answering
            why = f"the hub {endpoint} cannot be reached"
            continue
        except EntryNotFoundError:  # the repository has no such file
            continue
        except (HfHubHTTPError, OSError, ValueError) as err:
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise UserInputError(
                f"--backbone {backbone}: cannot fetch {name}/{filename} from the Hugging Face hub: "
                f"{type(err).__name__}: {first}; {NO_WEIGHTS_HINT}"
            ) from None
        return regular_input_file(path, "downloaded weights file"), filename
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
    if path.exists() or path.is_symlink():
        regular_input_file(path, "cached weights file")  # a FIFO would block the hash and the load
    else:
        problem = "HF_HUB_OFFLINE=1: nothing is downloaded" if hub_offline() else None
        if problem is None and (reason := unreachable(url)) is not None:
            problem = f"{urllib.parse.urlsplit(url).hostname} cannot be reached: {reason}"
        if problem is not None:
            raise UserInputError(
                f"no pretrained weights for --backbone {backbone}: {path} is not in the torch hub "
                f"cache ({problem}); download {url} there (or set TORCH_HOME) {NO_WEIGHTS_HINT}"
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
