"""Find WordNet 3.0, whatever way it was installed, and open it with nltk when asked.

Loader order (first that works wins):
1. ``IMAGENET_ZSL_WORDNET_DIR``: a directory holding WordNet 3.0 dict files (``data.noun`` ...).
2. an nltk ``wordnet`` corpus already installed (e.g. by ``nltk.download('wordnet')``; a
   ``wordnet.zip`` alone is unpacked once into the cache).
3. Debian's ``wordnet-base`` (``/usr/share/wordnet``).
Otherwise a clear error says how to get WordNet (``imagenet-zsl setup`` fetches it).

The toolkit reads the dict files where they are (``hierarchy.nouns.read_noun_files``). nltk's
reader, kept as the reference and for ``imagenet-zsl setup``'s check, needs more: plain files (no
symlinks) and the ``lexnames`` file that Debian omits; :func:`nltk_corpus_dir` copies the files
into ``<cache>/nltk_data/corpora/wordnet/`` once, with the packaged ``lexnames``, when they are not
so already.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import shutil
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

from imagenet_zsl.data import data_path
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import cache_dir

DEBIAN_WORDNET = Path("/usr/share/wordnet")
#: files nltk's reader opens
WORDNET_FILES = (
    "data.noun",
    "data.verb",
    "data.adj",
    "data.adv",
    "index.noun",
    "index.verb",
    "index.adj",
    "index.adv",
    "noun.exc",
    "verb.exc",
    "adj.exc",
    "adv.exc",
    "cntlist.rev",
)
OPTIONAL_FILES = ("index.sense", "lexnames")

HOW_TO_GET_WORDNET = (
    "WordNet 3.0 not found. Get it with one of: `imagenet-zsl setup` (nltk's downloader), "
    "`sudo apt-get install wordnet-base` (Debian/Ubuntu, what `make demo` does), "
    "`python -m nltk.downloader wordnet`, or set IMAGENET_ZSL_WORDNET_DIR to a folder holding "
    "WordNet 3.0's dict files (data.noun, index.noun, ...)"
)
#: what to run when nltk's downloader cannot reach its server (offline)
HOW_TO_GET_WORDNET_OFFLINE = (
    "run `sudo apt-get install wordnet-base` (Debian/Ubuntu), or `python -m nltk.downloader wordnet` "
    "once online, or set IMAGENET_ZSL_WORDNET_DIR to a folder holding WordNet 3.0's dict files"
)


def _is_dict_dir(path: Path) -> bool:
    return all((path / name).is_file() for name in ("data.noun", "index.noun"))


def _nltk_search_paths() -> list[Path]:
    """nltk's default data path, computed without importing nltk (its import costs ~1 s)."""
    paths = [Path(p) for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
    paths.append(Path.home() / "nltk_data")
    paths += [Path(sys.prefix) / sub for sub in ("nltk_data", "share/nltk_data", "lib/nltk_data")]
    paths += [
        Path(p)
        for p in (
            "/usr/share/nltk_data",
            "/usr/local/share/nltk_data",
            "/usr/lib/nltk_data",
            "/usr/local/lib/nltk_data",
        )
    ]
    return paths


def _nltk_installed_wordnet() -> Path | None:
    for base in _nltk_search_paths():
        path = base / "corpora" / "wordnet"
        if _is_dict_dir(path):
            return path
        if (base / "corpora" / "wordnet.zip").is_file():
            return _unpack_zip(base / "corpora" / "wordnet.zip")
    return None


def _unpack_zip(archive: Path) -> Path:
    """nltk.download() may leave only a zip; unpack its dict files once so every reader path is the
    same (plain files, read where they are)."""
    target = cache_dir() / "nltk_zip" / "wordnet"
    if not _is_dict_dir(target):
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                name = Path(member).name
                if name in WORDNET_FILES + OPTIONAL_FILES:
                    (target / name).write_bytes(zf.read(member))
    return target


def _prepare_nltk_copy(source: Path) -> Path:
    """Copy dict files as plain files into an nltk-readable corpus dir; return that dir."""
    target_root = cache_dir() / "nltk_data"
    target = target_root / "corpora" / "wordnet"
    target.mkdir(parents=True, exist_ok=True)
    for name in WORDNET_FILES + OPTIONAL_FILES:
        src = source / name
        if name == "lexnames" and not src.exists():
            src = data_path("lexnames")
        if not src.exists():
            if name in OPTIONAL_FILES:
                continue
            raise UserInputError(f"{source}: WordNet file {name} is missing. {HOW_TO_GET_WORDNET}")
        dst = target / name
        if not dst.exists() or dst.stat().st_size != src.stat().st_size:
            tmp = dst.with_suffix(dst.suffix + ".tmp")
            shutil.copyfile(src.resolve(), tmp)  # resolve: plain copies, never symlinks
            os.replace(tmp, dst)
    return target


def locate_wordnet() -> Path:
    """The directory of WordNet 3.0's dict files, read where they are (see the module docstring
    for the order); one error saying how to get WordNet when there is none."""
    override = os.environ.get("IMAGENET_ZSL_WORDNET_DIR")
    if override:
        path = Path(override)
        if not _is_dict_dir(path):
            raise UserInputError(
                f"IMAGENET_ZSL_WORDNET_DIR={override}: no data.noun/index.noun there. {HOW_TO_GET_WORDNET}"
            )
        return path
    installed = _nltk_installed_wordnet()
    if installed is not None:
        return installed
    if _is_dict_dir(DEBIAN_WORDNET):
        return DEBIAN_WORDNET
    raise UserInputError(HOW_TO_GET_WORDNET)


def nltk_corpus_dir(root: Path | None = None) -> Path:
    """A directory nltk's reader opens: ``root`` (default :func:`locate_wordnet`) itself when it is
    an nltk data folder's ``corpora/wordnet`` with every file plain and ``lexnames``, else a plain
    copy in the cache."""
    root = Path(root or locate_wordnet())
    names = [*WORDNET_FILES, "lexnames"]
    if root.parent.name == "corpora" and all(
        (root / n).is_file() and not (root / n).is_symlink() for n in names
    ):
        return root
    return _prepare_nltk_copy(root)


def wordnet_source(root: Path) -> str:
    """Where :func:`locate_wordnet` found ``root``, in words (``imagenet-zsl setup`` prints it)."""
    if os.environ.get("IMAGENET_ZSL_WORDNET_DIR"):
        return "IMAGENET_ZSL_WORDNET_DIR"
    if Path(root) == DEBIAN_WORDNET:
        return "Debian's wordnet-base"
    return "nltk's wordnet corpus"


def fetch_wordnet() -> None:
    """WordNet 3.0 by nltk's downloader (``nltk.download("wordnet")``, into nltk's default folder,
    ``~/nltk_data`` where it may write); one error line saying what to run when it cannot (offline).
    nltk's own messages and warnings are kept off the terminal."""
    # deferred: nltk is heavy, needed only when WordNet is fetched
    import nltk

    chatter = io.StringIO()
    try:
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fetched = nltk.download("wordnet", quiet=True, raise_on_error=True)
        reason = "" if fetched else chatter.getvalue()
    except (OSError, ValueError) as err:  # offline: nltk raises ValueError("Error loading wordnet: ...")
        reason = str(err)
    if reason or _nltk_installed_wordnet() is None:
        reason = " ".join((reason or "the corpus is not where nltk looks").split())[:300]
        raise UserInputError(
            f"WordNet 3.0 not found and nltk's downloader could not fetch it ({reason}): "
            f"{HOW_TO_GET_WORDNET_OFFLINE}"
        )


def _reader_class():
    # deferred: nltk is heavy, needed only when the WordNet graph is built (it is cached)
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class OfflineWordNetReader(WordNetCorpusReader):
        """nltk's reader without the mapping to Open English WordNet (a download we never need)."""

        def map_wn(self, version: str = "oewn") -> None:  # noqa: ARG002 - nltk's signature
            return None

    return OfflineWordNetReader


@functools.cache
def get_wordnet() -> Any:  # nltk WordNetCorpusReader (nltk is imported lazily)
    """An nltk WordNetCorpusReader over WordNet 3.0 (checked)."""
    # deferred: nltk is heavy, needed only when the WordNet graph is built (it is cached)
    import nltk
    from nltk.data import FileSystemPathPointer  # deferred: as nltk above

    root = nltk_corpus_dir()
    data_root = root.parent.parent  # .../nltk_data/corpora/wordnet -> .../nltk_data
    if str(data_root) not in nltk.data.path:
        nltk.data.path.insert(0, str(data_root))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available"
        reader = _reader_class()(FileSystemPathPointer(str(root)), None)
    version = reader.get_version()
    if version != "3.0":
        raise UserInputError(
            f"{root}: WordNet version {version}; imagenet-zsl needs WordNet 3.0 (ImageNet's wnids "
            "are WordNet 3.0 offsets)"
        )
    return reader


def wordnet_digest(root: Path | None = None) -> str:
    """sha256 over the WordNet files that shape the derived graph (cache key)."""
    root = root or locate_wordnet()
    digest = hashlib.sha256()
    for name in ("data.noun", "index.noun", "cntlist.rev"):
        path = Path(root) / name
        if path.exists():
            digest.update(name.encode())
            with open(path, "rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
    return digest.hexdigest()


def synset_wnid(synset: Any) -> str:
    """ImageNet's id of a noun synset: 'n' + 8-digit WordNet 3.0 offset."""
    return f"{synset.pos()}{synset.offset():08d}"
