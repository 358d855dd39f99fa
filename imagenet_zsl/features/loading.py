"""Reading images from a store for a network: work lists, the decoding dataset and its batches.

Used by feature extraction (:mod:`imagenet_zsl.features.extract`) and by the ambiguous-image
filter's fine-tuning (:mod:`imagenet_zsl.features.finetune`), so both see exactly the same
pixels: bytes read straight from the tars, decoded with PIL (or passed through raw for nvJPEG),
resized and centre-cropped to uint8 (3, crop, crop) by :class:`~imagenet_zsl.features.transforms.
Preprocessing` in DataLoader workers; normalisation happens later, on the model's device.

torch is imported inside the functions that need it: the command line, batch plans and the
features' readers import this module (through :mod:`~imagenet_zsl.features.extract_setup`) without
loading torch, and ``extract`` sets ``OMP_WAIT_POLICY`` before torch first loads.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imagenet_zsl.features.transforms import Preprocessing
from imagenet_zsl.images.decode import DecodeFailure, decode_rgb, is_plain_ycbcr_jpeg
from imagenet_zsl.images.store import ImageStore, StoreReader


@dataclass
class WorkList:
    """The images to read, in work order (store order: sequential reads of each tar).

    n images: ``labels`` (n,) int32 into ``classes``; ``source``/``member``/``offset``/``size``
    (n,) locate the bytes; :meth:`ids` gives "<wnid>/<member>". Fixed-width numpy arrays (not
    Python objects), so forked DataLoader workers share them without copy-on-write growth.
    ``missing_classes``: wnids of ``classes`` the store holds no image of.
    """

    classes: list[str]
    labels: np.ndarray
    source: np.ndarray
    member: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    missing_classes: list[str]

    @classmethod
    def from_store_rows(
        cls,
        store: ImageStore,
        rows: np.ndarray,
        classes: list[str],
        labels: np.ndarray,
        missing_classes: list[str] | None = None,
    ) -> WorkList:
        """The images at ``rows`` (n,) of ``store``, labelled ``labels`` (n,) into ``classes``."""
        return cls(
            classes=list(classes),
            labels=np.asarray(labels).astype(np.int32),
            source=store.source_index[rows].astype(np.int32),
            member=store.member[rows].astype(np.str_),
            offset=store.offset[rows].astype(np.int64),
            size=store.size[rows].astype(np.int64),
            missing_classes=list(missing_classes or []),
        )

    def __len__(self) -> int:
        return len(self.labels)

    def ids(self, positions: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Image ids ``"<wnid>/<member>"`` of the given work positions (unicode array)."""
        wnids = np.asarray(self.classes, dtype=np.str_)[self.labels[positions]]
        return np.char.add(np.char.add(wnids, "/"), self.member[positions])

    def digest(self) -> str:
        """sha256 over ids and labels: identifies the work list in run.json."""
        digest = hashlib.sha256()
        for start in range(0, len(self), 1 << 18):
            chunk = self.ids(slice(start, start + (1 << 18)))
            digest.update("\n".join(chunk.tolist()).encode())
            digest.update(b"\n")
        digest.update(np.ascontiguousarray(self.labels, dtype="<i4").tobytes())
        return digest.hexdigest()


#: one dataset item: (work position, uint8 crop (3, c, c) or None, raw JPEG bytes or None, reason
#: the image was skipped or None)
Item = tuple[int, "np.ndarray | None", "bytes | None", "str | None"]


class ImageDataset:
    """Map-style dataset over work positions [lo, hi): ``dataset[pos]`` → :data:`Item`.

    ``raw`` carries undecoded JPEG bytes when ``device_decode`` (nvJPEG) is on; everything the
    device decoder cannot take (CMYK, grey, PNG, truncated) is decoded here with PIL. Unreadable or
    undecodable images are skipped with a reason, never raised.
    """

    def __init__(
        self,
        work: WorkList,
        lo: int,
        hi: int,
        reader: StoreReader,
        pre: Preprocessing,
        device_decode: bool = False,
    ):
        self.lo = lo
        self.source = work.source[lo:hi]
        self.member = work.member[lo:hi]
        self.offset = work.offset[lo:hi]
        self.size = work.size[lo:hi]
        self.reader = reader
        self.pre = pre
        self.device_decode = device_decode

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, pos: int) -> Item:
        i = pos - self.lo
        size = int(self.size[i])
        try:
            data = self.reader.read(int(self.source[i]), str(self.member[i]), int(self.offset[i]), size)
        except OSError as err:
            return pos, None, None, f"read error: {err.strerror or err}"
        if self.offset[i] >= 0 and len(data) < size:
            return pos, None, None, f"truncated: tar ends {size - len(data)} bytes into the member"
        if self.device_decode and is_plain_ycbcr_jpeg(data):
            return pos, None, data, None
        try:
            image = decode_rgb(data, self.pre.decode_min_side)
        except DecodeFailure as err:
            return pos, None, None, str(err)
        try:
            return pos, self.pre.crop_pil(image), None, None
        except Exception as err:  # noqa: BLE001 - e.g. absurd aspect ratios: skip, never crash
            return pos, None, None, f"preprocessing error: {type(err).__name__}: {str(err)[:120]}"


class Collate:
    """Batch of :data:`Item` → dict: ``pos`` (b,) int64 and ``images`` (b, 3, c, c) uint8 of the
    decoded crops ((b, 10, 3, c, c) with ten-crop); the undecoded JPEGs as ``raw_pos`` (list),
    ``raw`` (all their bytes, concatenated: one uint8 tensor) and ``raw_sizes`` (k,) int64
    (:func:`split_raw` cuts them apart); ``skipped`` ((pos, reason) pairs) passed through.
    Picklable for worker processes.

    A worker's tensors reach the main process in shared memory, one file descriptor per tensor
    while the batch is in flight (torch's ``file_descriptor`` strategy): one tensor per JPEG meant
    thousands of open files with nvJPEG batches (EMFILE under a low ``ulimit -n``); packed, a batch
    is four tensors whatever its size."""

    def __init__(self, crop: int, views: int = 1):
        self.crop = crop
        self.views = views  # crops per image: 10 with ten-crop, stacked as (b, 10, 3, c, c)

    def __call__(self, items: Sequence[Item]) -> dict[str, Any]:
        import torch  # deferred: torch loads only when images are read (see the module docstring)

        crops = [(p, c) for p, c, _, _ in items if c is not None]
        raws = [(p, r) for p, _, r, _ in items if r is not None]
        skipped = [(p, reason) for p, c, r, reason in items if c is None and r is None]
        per_image = (3, self.crop, self.crop) if self.views == 1 else (self.views, 3, self.crop, self.crop)
        shape = (len(crops), *per_image)
        in_worker = torch.utils.data.get_worker_info() is not None
        # a worker's batch travels to the main process in shared memory: stack straight into it
        # (as torch's default_collate does) rather than stacking, then copying it there
        images = _uint8_tensor(shape, shared=in_worker and bool(crops))
        if crops:
            np.stack([c for _, c in crops], out=images.numpy())
        sizes = [len(r) for _, r in raws]
        raw = _uint8_tensor((sum(sizes),), shared=in_worker and bool(raws))
        packed = raw.numpy()
        start = 0
        for (_, data), size in zip(raws, sizes, strict=True):
            packed[start : start + size] = np.frombuffer(data, dtype=np.uint8)
            start += size
        return {
            "pos": torch.tensor([p for p, _ in crops], dtype=torch.int64),
            "images": images,
            "raw_pos": [p for p, _ in raws],
            "raw": raw,
            "raw_sizes": torch.tensor(sizes, dtype=torch.int64),
            "skipped": skipped,
        }


def _uint8_tensor(shape: tuple[int, ...], shared: bool) -> Any:
    """An uninitialised uint8 tensor of ``shape``; in shared memory if ``shared``."""
    import torch  # deferred: torch loads only when images are read (see the module docstring)

    if not shared:
        return torch.empty(shape, dtype=torch.uint8)
    storage = torch.UntypedStorage._new_shared(math.prod(shape))
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape)


def split_raw(batch: dict[str, Any]) -> list[Any]:
    """The undecoded JPEGs of a :class:`Collate` batch: one 1-D uint8 view of ``raw`` per image."""
    sizes = batch["raw_sizes"].tolist()
    return list(batch["raw"].split(sizes)) if sizes else []


def image_loader(
    dataset: ImageDataset, batches: Sequence[Sequence[int]], *, workers: int, pin_memory: bool
) -> Any:
    """A DataLoader over ``dataset`` yielding :class:`Collate` dicts, one per list of work
    positions in ``batches``; ``workers`` decode processes keep 2 batches each in flight."""
    from torch.utils.data import DataLoader  # deferred: torch loads only when images are read

    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=workers,
        collate_fn=Collate(dataset.pre.crop, dataset.pre.views),
        pin_memory=pin_memory,
        prefetch_factor=2 if workers else None,  # in flight: workers x 2 batches of uint8 crops
    )
