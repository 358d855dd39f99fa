"""Generated image stores in all three layouts, with ImageNet's odd files planted on purpose.

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
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

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
    """Encode as a plain RGB JPEG or an oddity (cmyk, gray, png, truncated, corrupt, empty, html)."""
    buffer = io.BytesIO()
    image = Image.fromarray(array)
    if kind in ("jpeg", "truncated", "corrupt"):
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
    quality: int = 90,
    labels_format: str = "tsv",
) -> SyntheticStore:
    """Write a store at ``root`` (tars: <wnid>.tar files; tree: <wnid>/ folders; flat: one folder
    of ILSVRC2012_val_<i:08d>.JPEG files plus ``labels.txt``, ``labels_format`` "tsv" or "devkit",
    the latter needing ILSVRC-2012 wnids). ``size`` is (width, height); sizes vary ±25% per image.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    classes = list(images_per_class)
    store = SyntheticStore(root, layout, classes)
    payloads: dict[str, list[tuple[str, bytes]]] = {w: [] for w in classes}
    special = [*CONVERTIBLE, *BROKEN] if oddities else []
    counter = 0
    for c, wnid in enumerate(classes):
        for k in range(images_per_class[wnid]):
            counter += 1
            kind = special[k] if c == 0 and k < len(special) else "jpeg"
            width = int(size[0] * rng.uniform(0.75, 1.25))
            height = int(size[1] * rng.uniform(0.75, 1.25))
            data = encode(smooth_image(rng, height, width), kind, quality)
            name = f"ILSVRC2012_val_{counter:08d}.JPEG" if layout == "flat" else f"{wnid}_{k + 1}.JPEG"
            payloads[wnid].append((name, data))
            store.ids.append(f"{wnid}/{name}")
            store.kinds[f"{wnid}/{name}"] = kind
    if layout == "tars":
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a small synthetic image store.")
    parser.add_argument("out")
    parser.add_argument("--layout", default="tars", choices=["tars", "tree", "flat"])
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--per-class", type=int, default=12)
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--height", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    wnids = sorted(ilsvrc2012_wnids())[: args.classes]
    store = make_store(
        args.out,
        args.layout,
        dict.fromkeys(wnids, args.per_class),
        size=(args.width, args.height),
        seed=args.seed,
    )
    (Path(args.out) / "classes.txt").write_text("".join(f"{w}\n" for w in wnids))
    print(
        f"wrote {len(store.ids)} images ({len(store.broken_ids)} broken on purpose) "
        f"in {args.classes} classes to {store.root}; classes list {Path(args.out) / 'classes.txt'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
