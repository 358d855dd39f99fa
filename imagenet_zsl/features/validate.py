"""``imagenet-zsl validate``: the backbone's own ImageNet-1K top-1 on labelled images, beside the
figure its weights publish, before any zero-shot number is trusted.

Why: a preprocessing mistake (wrong mean/std, resize, channel order, a JPEG decoder that is not
the one the weights were evaluated with) or the wrong weights change every feature and so every
zero-shot number, and nothing downstream shows it. The backbone's ImageNet-1K classifier shows it
at once: on ILSVRC-2012 validation images its top-1 must be close to the figure its weights
publish.

The images are run through ``extract`` itself (:func:`~imagenet_zsl.features.extract.run_extraction`
with ``--logits``, the features scored as they leave the network and never stored), built from
the same pipeline flags (``--decode``, ``--jpeg-draft``, ``--deterministic``/``--fast``,
``--precision``, ``--compile``, ``--resize``, ``--crop``, ``--ten-crop``: one definition,
:func:`imagenet_zsl.features.cli.pipeline_flags`), so what is checked is exactly the pipeline the
features come from. Only images of the 1,000 ILSVRC-2012
classes count (the head predicts no other); images of other classes are left out and counted.

Images: any store ``extract`` reads (e.g. the ILSVRC-2012 val folder with ``--val-labels``), or
``--images FILE``: ``path<TAB>wnid`` lines (paths relative to the file's folder).

The verdict (:func:`verdict`): with a published top-1 P and at least :data:`MIN_IMAGES` images, a
one-sided exact binomial test of "the top-1 is at least P - :data:`MARGIN_POINTS`" against the
hits; rejected at p < :data:`ALPHA` is "FAR BELOW" (exit status 1). Published figures are packaged
in ``data/published_top1.tsv`` with their sources; a figure that could not be sourced is "not
published".
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imagenet_zsl.atomic import atomic_write_json, atomic_write_text
from imagenet_zsl.data import data_path, ilsvrc2012_wnids, read_utf8
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.backbones import get_spec
from imagenet_zsl.features.extract import ExtractConfig, run_extraction
from imagenet_zsl.features.extract_setup import DEFAULT_BACKBONE, extract_config
from imagenet_zsl.features.hub_weights import split_revision
from imagenet_zsl.features.identity import describe_identity, feature_identity
from imagenet_zsl.features.scored_shards import ShardOutputs
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from imagenet_zsl.images.store import open_store
from imagenet_zsl.manifests import file_record, read_manifest, write_manifest
from imagenet_zsl.paths import regular_input_file
from imagenet_zsl.safe_output import atomic_directory, check_out_dir

TOOL = "imagenet-zsl validate"
FORMAT = "imagenet-zsl/validate-v1"
PUBLISHED_FILE = "published_top1.tsv"
#: fewer images than this give no verdict (the figures are printed for inspection)
MIN_IMAGES = 50
#: the verdict tests "top-1 >= published - MARGIN_POINTS" (points of %): subsets of the validation
#: set, float rounding and decoders differ a little; a preprocessing or weights error costs more
MARGIN_POINTS = 2.0
#: the test's level: a backbone that truly scores published - MARGIN_POINTS is called FAR BELOW
#: once in a thousand checks
ALPHA = 1e-3
#: images listed one by one (with their top-5) when there are at most this many
SHOW_IMAGES = 20
_WNID = re.compile(r"n[0-9]{8}")


@dataclass(frozen=True)
class ValidateOptions:
    """The flags of ``validate``: the images (``store`` or ``images``), the report's ``out``, and
    the extraction it runs, whose fields (the :class:`ExtractConfig` fields of the same names,
    the pipeline's included: ``features.cli.pipeline_flags``) default as ``extract``'s do."""

    #: an image store extract reads (one of ``store`` and ``images``)
    store: str | None = None
    #: a file of ``path<TAB>wnid`` lines (paths relative to its folder)
    images: str | None = None
    backbone: str = DEFAULT_BACKBONE
    weights: str | None = ExtractConfig.weights
    per_class: int | None = ExtractConfig.per_class
    seed: int = ExtractConfig.seed
    layout: str = ExtractConfig.layout
    val_labels: str | None = ExtractConfig.val_labels
    allow_incomplete: bool = ExtractConfig.allow_incomplete
    batch_size: int | None = ExtractConfig.batch_size
    device: str = ExtractConfig.device
    workers: int | None = ExtractConfig.workers
    decode: str = ExtractConfig.decode
    jpeg_draft: bool = ExtractConfig.jpeg_draft
    mode: str = ExtractConfig.mode
    precision: str = ExtractConfig.precision
    compile: bool = ExtractConfig.compile
    resize: int | None = ExtractConfig.resize
    crop: int | None = ExtractConfig.crop
    ten_crop: bool = ExtractConfig.ten_crop
    #: also write validate.json, validate.md and manifest.json to this directory (replaced)
    out: str | None = None
    progress: bool = ExtractConfig.progress


@dataclass(frozen=True)
class Published:
    """A published ImageNet-1K figure (percent; None: not published) and where it comes from."""

    key: str
    top1: float | None
    top5: float | None
    evaluated_with: str
    source: str


def read_published(path: Path | None = None) -> dict[str, Published]:
    """The packaged table (``key<TAB>top1<TAB>top5<TAB>evaluated with<TAB>source``, ``#`` comments
    and one header line) by key."""
    path = regular_input_file(path or data_path(PUBLISHED_FILE), "published figures table")
    table = {}
    for line_no, line in enumerate(read_utf8(path, "not UTF-8 (byte {byte})").splitlines(), 1):
        if not line.strip() or line.startswith(("#", "key\t")):
            continue
        parts = line.split("\t")
        if len(parts) != 5:
            raise UserInputError(f"{path}:{line_no}: expected 5 tab-separated columns, got {len(parts)}")
        key, top1, top5, evaluated, source = parts
        table[key] = Published(
            key, float(top1) if top1 else None, float(top5) if top5 else None, evaluated, source
        )
    return table


def published_for(backbone: str, weights: dict[str, Any], table: dict[str, Published]) -> Published | None:
    """The entry of these weights: their tensors' digest first (any file holding them), else the
    name they were fetched by (torchvision's arch/tag from the torch hub, the Hugging Face
    repository); None when neither is listed (a weights file of unknown origin, random weights)."""
    by_tensors = table.get(f"tensors:{weights.get('tensors_sha256')}")
    if by_tensors is not None:
        return by_tensors
    if weights.get("source") == "torch-hub-cache":
        spec = get_spec(backbone)
        return table.get(f"torchvision:{spec.arch}/{spec.weights_tag}")
    if weights.get("source") == "hf-cache" and weights.get("repo"):
        return table.get(f"hf:{split_revision(str(weights['repo']))[0]}")
    return None


@dataclass
class Tally:
    """The sink of the extraction: top-1 and top-5 hits of each shard's stored-precision logits.

    ``columns[label]``: the head output of extraction label ``label`` (the classes are a subset of
    the 1,000, in sorted order, as the head's outputs are)."""

    columns: np.ndarray
    images: int = 0
    top1: int = 0
    top5: int = 0
    #: (image id, true column, top-5 columns, top-5 softmax) of the first SHOW_IMAGES images
    shown: list[tuple[str, int, list[int], list[float]]] = field(default_factory=list)

    def __call__(self, outputs: ShardOutputs) -> None:
        if outputs.logits is None:
            raise ValueError("bug: validate extracts with logits")
        logits = outputs.logits.astype(np.float32)
        truth = self.columns[outputs.labels]
        order = np.argsort(-logits, axis=1, kind="stable")[:, :5]
        self.images += len(truth)
        self.top1 += int((order[:, 0] == truth).sum())
        self.top5 += int((order == truth[:, None]).any(axis=1).sum())
        for k in range(min(len(truth), SHOW_IMAGES - len(self.shown))):
            probs = np.exp(logits[k] - logits[k].max())
            probs /= probs.sum()
            self.shown.append(
                (str(outputs.ids[k]), int(truth[k]), order[k].tolist(), probs[order[k]].tolist())
            )


def read_image_list(path: Path) -> list[tuple[Path, str]]:
    """``--images FILE``: (image path, wnid) per ``path<TAB>wnid`` line (``#`` comments, blank
    lines; paths relative to the file's folder). Each image must be a regular file of an
    ILSVRC-2012 class, listed once: one line naming the file and line otherwise."""
    path = regular_input_file(path, "--images file")
    known = set(ilsvrc2012_wnids())
    pairs: list[tuple[Path, str]] = []
    seen: dict[Path, int] = {}
    for line_no, raw in enumerate(read_utf8(path, "not UTF-8 (byte {byte})").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("\t")]
        where = f"{path}:{line_no}"
        if len(parts) != 2 or not _WNID.fullmatch(parts[1]):
            raise UserInputError(f"{where}: expected 'path<TAB>wnid', got {line[:80]!r}")
        if parts[1] not in known:
            raise UserInputError(
                f"{where}: {parts[1]} is not an ImageNet-1K (ILSVRC-2012) class, which the backbone's "
                "head cannot predict; list only images of the 1,000 classes"
            )
        image = (path.parent / parts[0]).expanduser()
        regular_input_file(image, f"image of line {line_no}")
        if image.resolve() in seen:
            raise UserInputError(f"{where}: {parts[0]} is listed twice (line {seen[image.resolve()]})")
        seen[image.resolve()] = line_no
        pairs.append((image, parts[1]))
    if not pairs:
        raise UserInputError(f"{path}: lists no image ('path<TAB>wnid' lines)")
    return pairs


def link_store(pairs: list[tuple[Path, str]], root: Path) -> dict[str, Path]:
    """A class-folder store of symbolic links to the listed images (``root/<wnid>/<k>-<name>``) →
    {image id: the listed path}."""
    ids = {}
    for k, (image, wnid) in enumerate(pairs):
        (root / wnid).mkdir(parents=True, exist_ok=True)
        name = f"{k:06d}-{image.name}"
        (root / wnid / name).symlink_to(image.resolve())
        ids[f"{wnid}/{name}"] = image
    return ids


@contextlib.contextmanager
def _index_cache(folder: Path | None) -> Iterator[None]:
    """The store index of a throw-away store (``--images``) is cached in ``folder``, not in the
    user's cache (``IMAGENET_ZSL_CACHE``), and not announced (its path is gone when the command
    ends); None: the user's cache."""
    if folder is None:
        yield
        return
    old = os.environ.get("IMAGENET_ZSL_CACHE")
    store_log = logging.getLogger("imagenet_zsl.images.store")
    level = store_log.level
    os.environ["IMAGENET_ZSL_CACHE"] = str(folder)
    store_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        store_log.setLevel(level)
        if old is None:
            os.environ.pop("IMAGENET_ZSL_CACHE", None)
        else:
            os.environ["IMAGENET_ZSL_CACHE"] = old


def exact_interval(hits: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of a proportion, in percent."""
    from scipy.stats import beta  # deferred: scipy.stats costs 0.3 s; only a finished check needs it

    tail = (1 - level) / 2
    low = 0.0 if hits == 0 else float(beta.ppf(tail, hits, n - hits + 1))
    high = 1.0 if hits == n else float(beta.ppf(1 - tail, hits + 1, n - hits))
    return 100 * low, 100 * high


def verdict(hits: int, n: int, published: Published | None) -> tuple[str, float | None]:
    """(verdict line, p-value or None): FAR BELOW when P(X <= hits) < ALPHA for X ~ Binomial(n,
    (top-1 - MARGIN_POINTS) / 100), with at least MIN_IMAGES images and a published top-1."""
    if published is None or published.top1 is None:
        return "none: no published top-1 of these weights to compare with", None
    if n < MIN_IMAGES:
        return f"none: {n} images are too few (a verdict needs {MIN_IMAGES} or more)", None
    from scipy.stats import binom  # deferred: as in exact_interval

    floor = max(0.0, published.top1 - MARGIN_POINTS)
    p = float(binom.cdf(hits, n, floor / 100))
    if p < ALPHA:
        return (
            f"FAR BELOW the published top-1 {published.top1:.2f}%: a backbone scoring {floor:.2f}% or "
            f"more gets {hits} or fewer of {n} right with p = {p:.1e} < {ALPHA:g}; check the "
            "preprocessing (--resize, --crop, --jpeg-draft), the weights and the labels",
            p,
        )
    return (
        f"consistent: not far below the published {published.top1:.2f}% (one-sided binomial test of "
        f"top-1 >= {floor:.2f}%: p = {p:.2g}, rejected only below {ALPHA:g})",
        p,
    )


def _store_classes(cfg: ValidateOptions, store: str) -> tuple[list[str], int]:
    """(the store's ILSVRC-2012 classes, sorted; images of other classes, left out)."""
    index = open_store(
        store,
        cfg.layout,
        cfg.val_labels,
        progress=cfg.progress,
        allow_incomplete=cfg.allow_incomplete,
    )
    known = set(ilsvrc2012_wnids())
    classes = sorted(w for w in index.classes if w in known)
    counts = np.bincount(index.class_index, minlength=len(index.classes))
    left_out = int(sum(c for w, c in zip(index.classes, counts, strict=True) if w not in known))
    if not classes:
        raise UserInputError(
            f"{store}: none of its {len(index.classes)} classes is an ImageNet-1K (ILSVRC-2012) class; "
            "validate needs images of the 1,000 classes the backbone's head predicts"
        )
    return classes, left_out


def _extract_config(cfg: ValidateOptions, store: str, classes_file: Path, work: Path) -> ExtractConfig:
    """The extraction ``validate`` runs: extract's own, built from the same fields
    (:func:`~imagenet_zsl.features.extract_setup.extract_config`), into ``work``, with the logits
    the head predicts."""
    return extract_config(cfg, store=store, classes_file=str(classes_file), out=str(work), logits=True)


def _run(cfg: ValidateOptions, store: str, work: Path) -> tuple[Tally, dict[str, Any], int, int]:
    """Extract with logits into ``work`` (scored, not stored) → (tally, the run's manifest,
    images left out, images that could not be decoded)."""
    classes, left_out = _store_classes(cfg, store)
    classes_file = work / "classes.txt"
    classes_file.write_text("".join(f"{w}\n" for w in classes))
    head_order = {w: i for i, w in enumerate(sorted(ilsvrc2012_wnids()))}
    tally = Tally(np.array([head_order[w] for w in classes], dtype=np.int64))
    extraction = _extract_config(cfg, store, classes_file, work / "run")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # extract's summary names the throw-away run
            result = run_extraction(extraction, sink=tally)
    except UserInputError as err:
        if str(err).startswith("--logits:"):  # the backbone has no ImageNet-1K classifier
            raise UserInputError(
                f"--backbone {cfg.backbone} has no ImageNet-1K classifier: validate compares the "
                "head's predictions with the images' classes, so it needs a 1K head (torchvision "
                "ResNets, timm ImageNet-1K models)"
            ) from None
        raise
    return tally, read_manifest(work / "run") or {}, left_out, result.skipped


def _names() -> Any:
    """wnid → short name (the first lemma), for the lines of single images."""
    nouns = load_wordnet_nouns()
    return lambda wnid: nouns.lemmas[nouns.index[wnid]][0] if wnid in nouns.index else wnid


def summary(tally: Tally, manifest: dict[str, Any], left_out: int, skipped: int) -> dict[str, Any]:
    """The result record: counts, top-1/top-5 (%), the published figure and the verdict."""
    backbone = manifest.get("backbone") or {}
    weights = backbone.get("weights") or {}
    published = published_for(str(backbone.get("name")), weights, read_published())
    n = tally.images
    line, p_value = verdict(tally.top1, n, published)
    return {
        "backbone": backbone.get("name"),
        "label": describe_identity(feature_identity(manifest)),  # as every table names it
        "weights": weights,
        "preprocessing": manifest.get("preprocessing"),
        "images": n,
        "left_out_other_classes": left_out,
        "undecodable": skipped,
        "top1": 100 * tally.top1 / n if n else None,
        "top5": 100 * tally.top5 / n if n else None,
        "top1_hits": tally.top1,
        "top5_hits": tally.top5,
        "top1_interval_95": list(exact_interval(tally.top1, n)) if n else None,
        "published": None if published is None else dataclasses.asdict(published),
        "verdict": line,
        "p_value": p_value,
        "rule": f"one-sided exact binomial test of top-1 >= published - {MARGIN_POINTS:g} points at "
        f"p < {ALPHA:g}, with at least {MIN_IMAGES} images",
    }


def report_lines(record: dict[str, Any], tally: Tally, shown_as: dict[str, Path]) -> list[str]:
    """What the command prints (and ``validate.md`` holds)."""
    n, published = record["images"], record["published"]
    lines = [f"backbone: {record['label']}"]
    lines.append(
        f"images: {n} of ImageNet-1K classes ({record['left_out_other_classes']} of other classes left "
        f"out, {record['undecodable']} undecodable)"
    )
    if n:
        low, high = record["top1_interval_95"]
        lines.append(
            f"top-1: {record['top1']:.2f}% ({record['top1_hits']}/{n}; 95% interval {low:.1f}-{high:.1f}%)"
        )
        lines.append(f"top-5: {record['top5']:.2f}% ({record['top5_hits']}/{n})")
    if published is None or published["top1"] is None:
        source = f" ({published['source']})" if published else ""
        lines.append(f"published top-1: not published{source}")
    else:
        lines.append(
            f"published top-1: {published['top1']:.2f}% (top-5 {published['top5']:.2f}%; "
            f"{published['evaluated_with']}; {published['source']})"
        )
    lines.append(f"verdict: {record['verdict']}")
    if tally.shown and n <= SHOW_IMAGES:
        name = _names()
        heads = sorted(ilsvrc2012_wnids())
        for image_id, truth, top, probs in tally.shown:
            shown = ", ".join(f"{name(heads[c])} {p:.2f}" for c, p in zip(top, probs, strict=True))
            mark = "top-1" if top[0] == truth else "top-5" if truth in top else "miss"
            where = shown_as.get(image_id, image_id)
            lines.append(f"  {where}: {name(heads[truth])} ({heads[truth]}): {mark}; top-5 {shown}")
    return lines


def _inputs_checked(cfg: ValidateOptions) -> None:
    if (cfg.store is None) == (cfg.images is None):
        raise UserInputError("validate needs --store DIR or --images FILE (one of them)")
    if cfg.images is not None and (cfg.layout != "auto" or cfg.val_labels):
        raise UserInputError("--layout and --val-labels describe a --store; --images FILE names its images")
    if cfg.out is not None:
        check_out_dir(cfg.out, TOOL, [cfg.store, cfg.images], own_files=True)


def _write_out(cfg: ValidateOptions, record: dict[str, Any], lines: list[str]) -> None:
    inputs = {"images": file_record(cfg.images)} if cfg.images else {"store": str(cfg.store)}
    parameters = {k: getattr(cfg, k) for k in ("backbone", "weights", "per_class", "seed", "resize", "crop")}
    # the pipeline flags that change a prediction (not where or how fast it runs)
    parameters |= {
        k: getattr(cfg, k) for k in ("jpeg_draft", "decode", "mode", "precision", "ten_crop", "compile")
    }
    with atomic_directory(cfg.out, tool=TOOL, inputs=[cfg.store, cfg.images]) as tmp:
        atomic_write_json(tmp / "validate.json", record)
        atomic_write_text(tmp / "validate.md", "# Backbone check\n\n" + "".join(f"    {x}\n" for x in lines))
        write_manifest(tmp, format=FORMAT, tool=TOOL, inputs=inputs, parameters=parameters)


def validate(cfg: ValidateOptions) -> int:
    """``validate``: print (and with ``--out`` write) the check; exit 1 when FAR BELOW."""
    _inputs_checked(cfg)
    pairs = read_image_list(Path(cfg.images)) if cfg.images else None
    with tempfile.TemporaryDirectory(prefix="imagenet-zsl-validate.") as scratch:
        work = Path(scratch)
        shown_as: dict[str, Path] = {}
        store = str(cfg.store)
        if pairs is not None:
            store = str(work / "images")
            shown_as = link_store(pairs, work / "images")
        with _index_cache(work / "index-cache" if pairs is not None else None):
            tally, manifest, left_out, skipped = _run(cfg, store, work)
    record = summary(tally, manifest, left_out, skipped)
    lines = report_lines(record, tally, shown_as)
    print("\n".join(lines))
    if cfg.out is not None:
        _write_out(cfg, record, lines)
        print(f"wrote {cfg.out}")
    return 1 if record["verdict"].startswith("FAR BELOW") else 0
