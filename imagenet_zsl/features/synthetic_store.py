"""Generated image stores in every layout, with ImageNet's odd files planted on purpose.

Layouts: ``tars``, ``tree``, ``flat`` (ILSVRC val), ``wds`` (webdataset shards as timm's hub
datasets: KEY.jpg|webp + KEY.cls + KEY.json), ``parquet`` (as timm/imagenet-w21-p: image struct +
label, class names in the ``huggingface`` schema metadata) and ``in21k-p`` (ImageNet-21K-P's
train/val/small_classes folders). The same arguments give the same image bytes in every layout.

Used by the tests, ``tools/bench_extract.py`` and ``make demo`` (no ImageNet needed). Images are
smooth random colour fields plus mild noise, so JPEG sizes and decode costs resemble photos. The
first class can receive the archive's oddities: a CMYK JPEG, a grayscale JPEG, a PNG named
``.JPEG`` (all convertible), and a truncated JPEG, a JPEG with garbage in its data, a zero-byte
file and an HTML error page named ``.JPEG`` (all skipped). Everything is seeded: same arguments → same bytes.

Run ``python -m imagenet_zsl.features.synthetic_store OUT`` for a small demo store.
"""

from __future__ import annotations

import argparse
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from imagenet_zsl.cli_types import seed as seed_type
from imagenet_zsl.data import ilsvrc2012_wnids

CONVERTIBLE = ("cmyk", "gray", "png")
BROKEN = {
    "truncated": "truncated image",
    "corrupt": "decode error",
    "empty": "empty file (0 bytes)",
    "html": "not an image",
}


def smooth_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """uint8 (H, W, 3): bilinear-upsampled coarse colour field + noise (photo-like JPEG size)."""
    coarse = (rng.random((max(2, height // 24), max(2, width // 24), 3)) * 255).astype(np.uint8)
    field_ = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BILINEAR), dtype=np.int16)
    noise = rng.integers(-12, 13, size=(height, width, 3), dtype=np.int16)
    return np.clip(field_ + noise, 0, 255).astype(np.uint8)


def encode(array: np.ndarray, kind: str = "jpeg", quality: int = 90) -> bytes:
    """Encode as a plain RGB JPEG or WEBP or an oddity (cmyk, gray, png, truncated, corrupt, empty,
    html)."""
    buffer = io.BytesIO()
    image = Image.fromarray(array)
    if kind == "webp":
        image.save(buffer, "WEBP", quality=quality)
    elif kind in ("jpeg", "truncated", "corrupt"):
        image.save(buffer, "JPEG", quality=quality)
    elif kind == "cmyk":
        image.convert("CMYK").save(buffer, "JPEG", quality=quality)
    elif kind == "gray":
        image.convert("L").save(buffer, "JPEG", quality=quality)
    elif kind == "png":
        image.save(buffer, "PNG")
    elif kind == "empty":
        return b""
    elif kind == "html":
        return b"<html><body>This photo is no longer available</body></html>\n"
    else:
        raise ValueError(f"unknown image kind {kind!r}")
    data = buffer.getvalue()
    if kind == "truncated":
        return data[: len(data) // 2]
    if kind == "corrupt":  # complete file, garbage in the middle of the entropy-coded data
        middle = len(data) // 2
        return data[:middle] + b"\xff" * 64 + data[middle + 64 :]
    return data


@dataclass
class SyntheticStore:
    """What was generated: ``root`` (pass as --store), ``labels`` (flat layout), and image ids."""

    root: Path
    layout: str
    classes: list[str]
    ids: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # id → kind (jpeg, cmyk, ..., html)
    labels: Path | None = None

    @property
    def broken_ids(self) -> list[str]:
        return sorted(i for i, k in self.kinds.items() if k in BROKEN)

    @property
    def good_ids(self) -> list[str]:
        return sorted(i for i, k in self.kinds.items() if k not in BROKEN)


def make_store(
    root: str | Path,
    layout: str,
    images_per_class: dict[str, int],
    size: tuple[int, int] = (96, 72),
    seed: int = 0,
    oddities: bool = True,
    labels_format: str = "tsv",
    image_format: str = "jpeg",
) -> SyntheticStore:
    """Write a store at ``root`` (tars: <wnid>.tar files; tree: <wnid>/ folders; flat: one folder
    of ILSVRC2012_val_<i:08d>.JPEG files plus ``labels.txt``, ``labels_format`` "tsv" or "devkit",
    the latter needing ILSVRC-2012 wnids; wds, parquet, in21k-p: see the module). ``size`` is
    (width, height); sizes vary ±25% per image. ``image_format``: the plain images as ``jpeg``
    (named .JPEG; .jpg in ``wds``), ``jpg`` (JPEG named .jpg) or ``webp`` (named .webp).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    classes = list(images_per_class)
    store = SyntheticStore(root, layout, classes)
    payloads: dict[str, list[tuple[str, bytes]]] = {w: [] for w in classes}
    special = [*CONVERTIBLE, *BROKEN] if oddities else []
    suffix = {"jpeg": ".JPEG", "jpg": ".jpg", "webp": ".webp"}[image_format]
    if layout == "wds" and image_format == "jpeg":
        suffix = ".jpg"
    plain = "webp" if image_format == "webp" else "jpeg"
    counter = 0
    for c, wnid in enumerate(classes):
        for k in range(images_per_class[wnid]):
            counter += 1
            kind = special[k] if c == 0 and k < len(special) else plain
            width = int(size[0] * rng.uniform(0.75, 1.25))
            height = int(size[1] * rng.uniform(0.75, 1.25))
            data = encode(smooth_image(rng, height, width), kind)
            name = f"ILSVRC2012_val_{counter:08d}.JPEG" if layout == "flat" else f"{wnid}_{k + 1}{suffix}"
            payloads[wnid].append((name, data))
            store.ids.append(f"{wnid}/{name}")
            store.kinds[f"{wnid}/{name}"] = kind
    if layout in _WRITERS:
        _WRITERS[layout](root, payloads, seed)
    elif layout == "tars":
        for wnid, items in payloads.items():
            with tarfile.open(root / f"{wnid}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
                for name, data in items:
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))
    elif layout == "tree":
        for wnid, items in payloads.items():
            (root / wnid).mkdir(exist_ok=True)
            for name, data in items:
                (root / wnid / name).write_bytes(data)
    elif layout == "flat":
        images = root / "images"
        images.mkdir(exist_ok=True)
        lines = []
        for wnid, items in payloads.items():
            for name, data in items:
                (images / name).write_bytes(data)
                lines.append((name, wnid))
        lines.sort()
        if labels_format == "devkit":
            ids = {w: i + 1 for i, w in enumerate(ilsvrc2012_wnids())}
            text = "".join(f"{ids[w]}\n" for _, w in lines)
        else:
            text = "".join(f"{n}\t{w}\n" for n, w in lines)
        store.labels = root / "labels.txt"
        store.labels.write_text(text)
        store.root = images
    else:
        raise ValueError(f"unknown layout {layout!r}")
    return store


def _shuffled(payloads: dict[str, list[tuple[str, bytes]]], seed: int) -> list[tuple[int, str, str, bytes]]:
    """(class index into the sorted wnids, wnid, name, bytes) of every image, shuffled as the hub's
    shards are."""
    index = {w: i for i, w in enumerate(sorted(payloads))}
    items = [(index[w], w, name, data) for w, pairs in payloads.items() for name, data in pairs]
    order = np.random.default_rng([seed, 7]).permutation(len(items))
    return [items[i] for i in order]


def _write_wds(root: Path, payloads: dict[str, list[tuple[str, bytes]]], seed: int) -> None:
    """Two shards ``imagenet22k-train-000{0,1}.tar``: KEY.<ext>, KEY.cls, KEY.json per sample."""
    items = _shuffled(payloads, seed)
    half = (len(items) + 1) // 2
    for shard, part in enumerate((items[:half], items[half:])):
        path = root / f"imagenet22k-train-{shard:04d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for label, wnid, name, data in part:
                key = name.rsplit(".", 1)[0]
                meta = json.dumps({"filename": name, "label": label, "class_name": wnid}).encode()
                members = ((name, data), (f"{key}.cls", str(label).encode()), (f"{key}.json", meta))
                for member, payload in members:
                    info = tarfile.TarInfo(member)
                    info.size, info.mtime, info.mode = len(payload), 0, 0o644
                    tar.addfile(info, io.BytesIO(payload))


def _write_parquet(root: Path, payloads: dict[str, list[tuple[str, bytes]]], seed: int) -> None:
    """``data/train-0000{0,1}-of-00002.parquet``: image {bytes, path} + label, row groups of 4, the
    label names in the ``huggingface`` schema metadata (as ``datasets`` writes them)."""
    import pyarrow as pa  # deferred: optional, only a parquet store needs it
    import pyarrow.parquet as pq  # deferred: as pyarrow above

    items = _shuffled(payloads, seed)
    names = sorted(payloads)
    features = {"image": {"_type": "Image"}, "label": {"names": names, "_type": "ClassLabel"}}
    metadata = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    (root / "data").mkdir(exist_ok=True)
    half = (len(items) + 1) // 2
    for part, rows in enumerate((items[:half], items[half:])):
        image = pa.array(
            [{"bytes": data, "path": name} for _, _, name, data in rows],
            pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
        )
        table = pa.table({"image": image, "label": pa.array([r[0] for r in rows], pa.int64())})
        table = table.replace_schema_metadata(metadata)
        pq.write_table(table, root / "data" / f"train-{part:05d}-of-00002.parquet", row_group_size=4)


def _write_in21k_p(root: Path, payloads: dict[str, list[tuple[str, bytes]]], seed: int) -> None:
    """``imagenet21k_{train,val,small_classes}/<wnid>/``: every 4th image of a class in val, the last
    class in small_classes."""
    last = list(payloads)[-1]
    for wnid, pairs in payloads.items():
        for k, (name, data) in enumerate(pairs):
            part = "small_classes" if wnid == last else ("val" if k % 4 == 3 else "train")
            folder = root / f"imagenet21k_{part}" / wnid
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)


_WRITERS = {"wds": _write_wds, "parquet": _write_parquet, "in21k-p": _write_in21k_p}


@dataclass(frozen=True)
class SyntheticStoreOptions:
    """``python -m imagenet_zsl.features.synthetic_store``: one field per flag."""

    out: Path
    layout: str = "tars"
    classes: int = 4
    per_class: int = 12
    width: int = 160
    height: int = 120
    seed: int = 0


def write_synthetic_store(cfg: SyntheticStoreOptions) -> int:
    """Write the store and its ``classes.txt`` (the first ``cfg.classes`` ILSVRC-2012 wnids)."""
    wnids = sorted(ilsvrc2012_wnids())[: cfg.classes]
    store = make_store(
        cfg.out,
        cfg.layout,
        dict.fromkeys(wnids, cfg.per_class),
        size=(cfg.width, cfg.height),
        seed=cfg.seed,
    )
    (cfg.out / "classes.txt").write_text("".join(f"{w}\n" for w in wnids))
    print(
        f"wrote {len(store.ids)} images ({len(store.broken_ids)} broken on purpose) "
        f"in {cfg.classes} classes to {store.root}; classes list {cfg.out / 'classes.txt'}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """The script: its flags by ``dest`` become :class:`SyntheticStoreOptions` (a flag left off
    takes the field's default)."""
    parser = argparse.ArgumentParser(
        description="Write a small synthetic image store.", argument_default=argparse.SUPPRESS
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--layout", choices=["tars", "tree", "flat", *_WRITERS])
    parser.add_argument("--classes", type=int)
    parser.add_argument("--per-class", type=int)
    parser.add_argument("--width", type=int)
    parser.add_argument("--height", type=int)
    parser.add_argument("--seed", type=seed_type)
    return write_synthetic_store(SyntheticStoreOptions(**vars(parser.parse_args(argv))))


if __name__ == "__main__":
    raise SystemExit(main())
