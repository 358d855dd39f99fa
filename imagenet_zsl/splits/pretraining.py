"""Which ImageNet classes a backbone saw in pretraining: the label sets timm ships, by name or tag.

A "zero-shot" test class that was a label of the backbone's pretraining set is not zero-shot at
all. timm ships the synset lists of its ImageNet subsets in ``timm/data/_info/``; a model's
pretrained tag (``vit_base_patch16_224.augreg_in21k_ft_in1k``) names the datasets it was trained
on. This module maps both to wnid sets, without importing timm (whose import loads torch).

Label sets (``--pretraining NAME``):

=============  ===============================  =======  =====================================
name           timm file                        classes  what
=============  ===============================  =======  =====================================
in1k           imagenet_synsets.txt               1,000  ILSVRC-2012
in12k          imagenet12k_synsets.txt           11,821  timm's 12k subset of fall11
in21k-p        imagenet21k_miil_synsets.txt      11,221  ImageNet-21K-P (MIIL), fall11
in21k-p-w21    imagenet21k_miil_w21_synsets.txt  10,450  ImageNet-21K-P (MIIL), winter21
in21k          imagenet21k_goog_synsets.txt      21,843  Google's ImageNet-21k (fall11 + 2)
in22k          imagenet22k_synsets.txt           21,841  fall11 ("ImageNet-22k")
=============  ===============================  =======  =====================================

Web-scale image-text data (CLIP's ``openai``, ``laion2b``, ``datacomp``, ``webli``, ...) has no
class list: :func:`pretraining_of` says so rather than pretend the model saw nothing.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.splits.io import read_wnid_list

LABEL_SET_FILES = {
    "in1k": "imagenet_synsets.txt",
    "in12k": "imagenet12k_synsets.txt",
    "in21k-p": "imagenet21k_miil_synsets.txt",
    "in21k-p-w21": "imagenet21k_miil_w21_synsets.txt",
    "in21k": "imagenet21k_goog_synsets.txt",
    "in22k": "imagenet22k_synsets.txt",
}
#: tokens of a timm pretrained tag → label set (``augreg_in21k_ft_in1k`` → in21k, in1k)
_TAG_TOKENS = {
    "in1k": "in1k",
    "in12k": "in12k",
    "in21k": "in21k",
    "in22k": "in22k",
    "miil": "in21k-p",
}
#: tokens that mean web-scale image-text pretraining (no class list exists)
_WEB_TOKENS = (
    "openai",
    "laion",
    "datacomp",
    "webli",
    "dfn",
    "merged2b",
    "commonpool",
    "metaclip",
    "cc12m",
    "yfcc",
    "siglip",
    "clip",
)


def _timm_info_dir() -> Path:
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise UserInputError(
            "timm is not installed: the pretraining label sets ship inside it; run 'make install'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "_info"


@functools.cache
def label_set(name: str) -> frozenset[str]:
    """The wnids of a packaged label set (see the module table) or of a wnid-list file."""
    if name in LABEL_SET_FILES:
        path = _timm_info_dir() / LABEL_SET_FILES[name]
        return frozenset(
            line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
        )
    path = Path(name)
    if not path.is_file():
        raise UserInputError(
            f"unknown pretraining label set ({name}): "
            f"use one of {', '.join(LABEL_SET_FILES)} or a wnid-list file"
        )
    return frozenset(read_wnid_list(path))


@dataclass(frozen=True)
class Pretraining:
    """What a backbone saw: the ImageNet label sets its tag names, and whether web data came too.

    With web data the class list is unknown: ``wnids`` is then the known part (the ImageNet
    label sets of a fine-tuning stage, if any) and only a lower bound of what the model saw.
    """

    model: str
    label_sets: tuple[str, ...]
    web_data: bool

    @property
    def wnids(self) -> frozenset[str] | None:
        """Union of the label sets; None when no label set is known."""
        if not self.label_sets:
            return None
        return frozenset().union(*(label_set(name) for name in self.label_sets))

    def describe(self) -> str:
        known = " + ".join(self.label_sets)
        if self.web_data:
            extra = f"; known ImageNet labels: {known} (a lower bound)" if known else ""
            return f"{self.model}: web-scale image-text pretraining, no class list exists{extra}"
        if not known:
            return f"{self.model}: pretraining label set unknown (pass --pretraining-classes FILE)"
        return f"{self.model}: pretrained on {known}"

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "label_sets": list(self.label_sets),
            "web_data": self.web_data,
            "n_classes": None if self.wnids is None else len(self.wnids),
            "note": self.describe(),
        }


def pretraining_of(model: str) -> Pretraining:
    """Label sets named by a timm model name's pretrained tag (after the '.'), or by an open_clip
    ``ARCH/PRETRAINED`` pair (web data); an untagged name gives an unknown set."""
    if "/" in model:
        return Pretraining(model, (), True)
    tag = model.split(".", 1)[1] if "." in model else ""
    tokens = re.split(r"[_\-]", tag.lower())
    web = any(tok.startswith(w) for tok in tokens for w in _WEB_TOKENS)
    sets: list[str] = []
    for token in tokens:
        name = _TAG_TOKENS.get(token)
        if name and name not in sets:
            sets.append(name)
    if "in21k-p" in sets and "in21k" in sets:
        sets.remove("in21k")  # 'miil_in21k': the MIIL processed set, not Google's
    return Pretraining(model, tuple(sets), web)
