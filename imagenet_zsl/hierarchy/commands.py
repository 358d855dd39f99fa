"""The handler of ``imagenet-zsl setup`` (flags in :mod:`imagenet_zsl.hierarchy.cli`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.hierarchy.nouns import cache_path, load_wordnet_nouns
from imagenet_zsl.hierarchy.wordnet import fetch_wordnet, locate_wordnet, wordnet_source


@dataclass(frozen=True)
class SetupOptions:
    """The flags of ``imagenet-zsl setup``."""

    #: call nltk's downloader when WordNet is missing (``--no-download``: one error line instead)
    download: bool = True


def setup(cfg: SetupOptions) -> int:
    """Find (or fetch) WordNet 3.0, build the noun-graph cache, and print what was found: the one
    code path of ``make`` (its ``wordnet`` target) and of a researcher's own ``pip install``."""
    try:
        root = locate_wordnet()
    except UserInputError:
        if not cfg.download or os.environ.get("IMAGENET_ZSL_WORDNET_DIR"):
            raise  # the error says what to run; a folder the user named is never replaced by a download
        print("WordNet 3.0 not found: fetching it with nltk's downloader (python -m nltk.downloader wordnet)")
        fetch_wordnet()
        root = locate_wordnet()
    nouns = load_wordnet_nouns()
    path = cache_path(nouns.digest)
    print(f"WordNet 3.0: {root} ({wordnet_source(root)})")
    print(
        f"noun graph: {len(nouns.wnids):,} synsets, {len(nouns.hypernym_edges):,} hypernym and "
        f"{len(nouns.instance_edges):,} instance-hypernym edges, {len(nouns.sense_lemmas):,} lemmas"
    )
    print(f"cache: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0
