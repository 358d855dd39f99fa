"""How much of a split the image store you hold covers: classes and images, and whether it is complete.

Why: the fall11 release the splits (and DGP's published lists) were built from is no longer
distributed; winter21 lacks some of its synsets and images, ImageNet-21K-P keeps only classes with
at least 501 fall11 images, a partial download lacks more. A number measured on a store that lacks
some of a split's classes is a number on another split: ``splits coverage`` (alias
``images coverage``) says per split how many classes and images the store holds and whether every
class is held, and ``run`` marks such a row with :func:`coverage_of`.

:func:`coverage_of` is the one computation (pure: counts in, a record out); the rest lays its
records out as the printed table and as a coverage directory (``--out``: the table, the store's
counts, the missing classes, a verified manifest) that :func:`read_coverage` reads back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.checksums import sha256_bytes
from imagenet_zsl.data import fall11_counts, read_wnid_counts
from imagenet_zsl.images.store import ImageStore, write_counts_tsv
from imagenet_zsl.manifests import read_manifest_verified, write_manifest
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.splits.named import PUBLISHED_SPLITS

COVERAGE_TOOL = "imagenet-zsl splits coverage"
#: manifest format of a coverage directory (``splits coverage --out``)
COVERAGE_FORMAT = "imagenet-zsl/coverage-v1"
TABLE_NAME = "coverage.tsv"
COUNTS_NAME = "store_counts.tsv"
MISSING_NAME = "missing.tsv"
#: the committed lists ``splits coverage`` reads by default, besides the published ones (those of
#: them that ``--splits-dir`` holds): the hop lists and the benchmarks
DEFAULT_COMMITTED = ("hop1", "hop2", "hop3", "benchmark", "benchmark1k", "benchmark_in12k")
TABLE_COLUMNS = (
    "split",
    "classes",
    "held",
    "complete",
    "images_held",
    "images_fall11",
    "images_missing",
    "share_missing",
)


def coverage_of(
    store_counts: Mapping[str, int], wnids: Sequence[str], reference: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """Coverage of one split by a store whose per-class image counts are ``store_counts``.

    Returns ``total`` (classes in the split), ``held`` (classes with at least one image in the
    store), ``images_held`` (the store's images of the split's classes), ``complete`` (every class
    held), and against ``reference`` (default: the fall11 counts the splits were built from)
    ``images_fall11`` (the images expected), ``images_missing`` (the sum over classes of the
    fall11 count minus the store's, where positive), ``missing`` (wnids with no image, in split
    order) and ``short`` (wnids held with fewer images than fall11).
    """
    reference = fall11_counts() if reference is None else reference
    classes = list(dict.fromkeys(wnids))
    held = {w: int(store_counts.get(w, 0)) for w in classes}
    missing = [w for w in classes if held[w] <= 0]
    return {
        "total": len(classes),
        "held": len(classes) - len(missing),
        "images_held": sum(held.values()),
        "complete": not missing,
        "images_fall11": sum(reference.get(w, 0) for w in classes),
        "images_missing": sum(max(reference.get(w, 0) - held[w], 0) for w in classes),
        "missing": missing,
        "short": [w for w in classes if 0 < held[w] < reference.get(w, 0)],
    }


@dataclass(frozen=True)
class SplitCoverage:
    """One row of the coverage table: the split as named, its wnid file, its classes, its coverage."""

    name: str
    path: Path
    wnids: list[str]
    coverage: dict[str, Any]

    @property
    def source(self) -> str:
        """``published`` (a packaged list, e.g. dgp-2hops) or ``file``."""
        return "published" if self.name in PUBLISHED_SPLITS else "file"


def default_split_names(splits_dir: str | Path | None) -> list[str]:
    """The published lists, then the committed hop and benchmark lists ``splits_dir`` holds."""
    committed = (
        []
        if splits_dir is None
        else [n for n in DEFAULT_COMMITTED if (Path(splits_dir) / f"{n}.txt").is_file()]
    )
    return [*PUBLISHED_SPLITS, *committed]


def _table_row(row: SplitCoverage) -> list[str]:
    c = row.coverage
    share = c["images_missing"] / c["images_fall11"] if c["images_fall11"] else 0.0
    return [
        row.name,
        str(c["total"]),
        str(c["held"]),
        "yes" if c["complete"] else "no",
        str(c["images_held"]),
        str(c["images_fall11"]),
        str(c["images_missing"]),
        f"{share:.2%}",
    ]


def coverage_table(rows: Sequence[SplitCoverage]) -> str:
    """The TSV the command prints and ``coverage.tsv`` holds: a header, one line per split."""
    lines = ["\t".join(TABLE_COLUMNS), *("\t".join(_table_row(r)) for r in rows)]
    return "\n".join(lines) + "\n"


def missing_lines(rows: Sequence[SplitCoverage], show: int) -> list[str]:
    """Per incomplete split, the first ``show`` classes the store lacks (printed on stderr)."""
    lines = []
    for row in rows:
        missing = row.coverage["missing"]
        if missing:
            more = len(missing) - show
            shown = ", ".join(missing[:show]) + (f" (+{more} more)" if more > 0 else "")
            lines.append(
                f"{row.name}: {len(missing):,} of {row.coverage['total']:,} classes missing: {shown}"
            )
    return lines


def _missing_tsv(rows: Sequence[SplitCoverage], store_counts: Mapping[str, int]) -> str:
    """``split<TAB>wnid<TAB>images_held<TAB>images_fall11`` for every class missing or short."""
    reference = fall11_counts()
    lines = ["split\twnid\timages_held\timages_fall11"]
    for row in rows:
        for wnid in sorted({*row.coverage["missing"], *row.coverage["short"]}):
            lines.append(f"{row.name}\t{wnid}\t{store_counts.get(wnid, 0)}\t{reference.get(wnid, 0)}")
    return "\n".join(lines) + "\n"


def _split_record(row: SplitCoverage) -> dict[str, Any]:
    c = row.coverage
    return {
        "source": row.source,
        "sha256": sha256_bytes("".join(f"{w}\n" for w in sorted(row.wnids)).encode()),
        **{k: c[k] for k in ("total", "held", "complete", "images_held", "images_fall11", "images_missing")},
        "short": len(c["short"]),
    }


def write_coverage(
    out: str | Path,
    rows: Sequence[SplitCoverage],
    store: ImageStore,
    inputs: Sequence[str | Path | None],
    parameters: Mapping[str, Any],
) -> Path:
    """The coverage directory (atomic): ``coverage.tsv``, ``store_counts.tsv`` (the store's counts,
    as ``images count`` writes them, so a later step can compute the coverage of any list, or
    ``splits build --store-counts`` restrict a recipe to it), ``missing.tsv`` and the manifest
    (``coverage-v1``: per split its counts and the sha256 of its classes; the store's ledger)."""
    counts = store.counts()
    with atomic_directory(out, tool=COVERAGE_TOOL, inputs=inputs) as tmp:
        atomic_write_text(tmp / TABLE_NAME, coverage_table(rows))
        write_counts_tsv(counts, tmp / COUNTS_NAME)
        atomic_write_text(tmp / MISSING_NAME, _missing_tsv(rows, counts))
        write_manifest(
            tmp,
            format=COVERAGE_FORMAT,
            tool=COVERAGE_TOOL,
            inputs={
                "store": {"root": str(store.root), "layout": store.layout, "index_key": store.key},
                "split_files": [str(r.path) for r in rows if r.source == "file"],
            },
            parameters=parameters,
            fields={
                "store": {"classes": len(counts), "images": sum(counts.values()), "ledger": store.summary()},
                "splits": {r.name: _split_record(r) for r in rows},
            },
        )
    return Path(out)


def read_coverage(directory: str | Path) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """A coverage directory, verified: the store's per-class counts (give them to
    :func:`coverage_of` with any wnid list) and the manifest's record of each split it covered."""
    rerun = "re-run 'imagenet-zsl splits coverage --out'"
    manifest = read_manifest_verified(directory, COVERAGE_FORMAT, rerun=rerun)
    counts = read_wnid_counts(Path(directory) / COUNTS_NAME)
    return counts, dict(manifest["splits"])
