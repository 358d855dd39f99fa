"""``imagenet-zsl setup``: the flags; the handler is :mod:`imagenet_zsl.hierarchy.commands`.

Start-up imports nothing of the stage: the command names its handler by dotted target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imagenet_zsl.cli_types import CommandTree

SETUP_HELP = "find or fetch WordNet 3.0 and build its noun-graph cache (once, after installing)"


def register(tree: CommandTree) -> None:
    """Add this stage's commands to the `imagenet-zsl` command line."""
    setup = tree.command(
        "setup",
        SETUP_HELP,
        epilog="WordNet 3.0 is looked for in IMAGENET_ZSL_WORDNET_DIR, then an nltk 'wordnet' corpus, "
        "then Debian's wordnet-base (/usr/share/wordnet); when none is there, nltk's downloader "
        "fetches it into ~/nltk_data. Offline, one line says what to run instead. `make demo` and "
        "`make test` run this command.",
    )
    setup.add_argument(
        "--no-download",
        dest="download",
        action="store_false",
        help="never call nltk's downloader: a missing WordNet is one error line saying what to run",
    )
    setup.set_defaults(func="imagenet_zsl.hierarchy.commands:setup")
