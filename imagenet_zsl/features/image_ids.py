"""A set of image ids kept beside a result, so that a later check does not depend on a feature
directory's later state: ``train`` writes the ids of the features a model was fitted on into the
model directory (:data:`TRAINING_IDS_FILE`), and GZSL's held-out seen check
(``evaluation.run.inputs.check_held_out_seen``) compares the seen images' ids against them, however
the training directory was re-extracted, moved or deleted since.

Format: the sorted distinct ids as one JSON list, gzip-compressed with no timestamp (the same ids
give the same bytes). ImageNet-1K's 1.28M ids take about 4 MB (20-40 MB as text); exact, unlike a
hash set, so a refusal names a real shared id.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from imagenet_zsl.errors import UserInputError

#: the file of a model directory that holds its training features' image ids
TRAINING_IDS_FILE = "training_image_ids.json.gz"


def id_set_bytes(ids: np.ndarray) -> tuple[bytes, int]:
    """(the file's bytes, how many distinct ids) for ``ids`` ((n,) str, any order, repeats
    allowed): sorted, distinct."""
    distinct = _distinct(ids)
    text = json.dumps(distinct.tolist(), ensure_ascii=False).encode()
    return gzip.compress(text, compresslevel=6, mtime=0), len(distinct)  # 9: 6x the time, 7% smaller


def read_id_set(path: str | Path) -> np.ndarray:
    """The (n,) str ids of a file written from :func:`id_set_bytes`, sorted; a damaged file is one
    line naming it."""
    try:
        ids = json.loads(gzip.decompress(Path(path).read_bytes()))
    except (OSError, EOFError, ValueError) as err:
        raise UserInputError(f"{path}: unreadable image-id list ({err})") from err
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise UserInputError(f"{path}: not a JSON list of image ids")
    array = np.asarray(ids, dtype=np.str_)
    if len(array) > 1 and not bool(np.all(array[1:] > array[:-1])):
        array = _distinct(array)  # written by hand: the search below needs sorted ids
    return array


def shared_ids(recorded: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The distinct ids of ``ids`` that ``recorded`` ((n,) str, sorted, as :func:`read_id_set`
    returns) holds, sorted: a binary search per id, no sort of the large side."""
    ids = _distinct(ids)
    if not len(recorded) or not len(ids):
        return ids[:0]
    place = np.minimum(np.searchsorted(recorded, ids), len(recorded) - 1)
    return ids[recorded[place] == ids]


def _distinct(ids: np.ndarray) -> np.ndarray:
    """(n,) str sorted and distinct: a sort and a neighbour comparison (numpy's ``unique`` takes
    7x as long on 1.28M ImageNet ids)."""
    ordered = np.sort(np.asarray(ids, dtype=np.str_))
    if len(ordered) < 2:
        return ordered
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]]
