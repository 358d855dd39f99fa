"""The search cache's shard keys: the same bytes as the original per-shard formula, with each label
space's prototype matrix hashed once per evaluation rather than once per shard."""

import hashlib
import json
from types import SimpleNamespace

import numpy as np

from imagenet_zsl.evaluation import search as search_module
from imagenet_zsl.evaluation.run import EvaluationConfig, evaluate
from imagenet_zsl.evaluation.run import cache as cache_module
from imagenet_zsl.evaluation.run.cache import CACHE_VERSION, SetKey, shard_key
from imagenet_zsl.evaluation.search import TopKSearcher


def _original_key(name, shard, lookup, spaces, source, kept_ids) -> str:
    """The key as ``_shard_key`` computed it before the digests were shared (every matrix hashed
    on every call); cache directories written then must still be recognised."""
    space_key = {s: hashlib.sha256(sp.prototypes.tobytes()).hexdigest() for s, sp in spaces.items()}
    return hashlib.sha256(
        json.dumps(
            [
                CACHE_VERSION,
                name,
                source.digest,
                space_key,
                sorted(spaces),
                shard.get("sha256", {}),
                int(shard["rows"]),
                {s: sp.k for s, sp in spaces.items()},
                int(lookup.sum()),
                hashlib.sha256(lookup.tobytes()).hexdigest(),
                None if kept_ids is None else hashlib.sha256(kept_ids.tobytes()).hexdigest(),
            ],
            sort_keys=True,
        ).encode()
    ).hexdigest()


def test_shard_key_bytes_are_unchanged():
    rng = np.random.default_rng(0)
    spaces = {
        "unseen": TopKSearcher(rng.standard_normal((5, 3), dtype=np.float32), 4, device="cpu"),
        "seen": TopKSearcher(rng.standard_normal((2, 3), dtype=np.float32), 4, device="cpu"),
    }
    source = SimpleNamespace(digest="model-digest")
    lookup = np.array([0, -1, 1, 2, 3, 4], np.int64)
    shards = [
        {"name": "s0", "rows": 7, "sha256": {"features": "aa", "labels": "bb"}},
        {"name": "s1", "rows": 3, "sha256": {"features": "cc", "labels": "dd"}},
    ]
    for kept in (None, np.array(["n00000000/1.JPEG", "n00000002/5.JPEG"], dtype=np.str_)):
        set_key = SetKey.of("test", lookup, spaces, source, kept)
        keys = [shard_key(set_key, shard) for shard in shards]
        assert keys == [_original_key("test", s, lookup, spaces, source, kept) for s in shards]
        assert keys[0] != keys[1]
    # the key still depends on the set it belongs to
    assert shard_key(SetKey.of("seen", lookup, spaces, source, None), shards[0]) != _original_key(
        "test", shards[0], lookup, spaces, source, None
    )


def test_each_label_space_is_hashed_once_per_evaluation(bench, tmp_path, monkeypatch):
    """GZSL with a validation split: three label spaces (unseen, seen, val_unseen) searched over
    four image sets of several shards each; each prototype matrix is hashed exactly once."""
    real = search_module.prototypes_digest
    hashed: list[bytes] = []
    keys: list[str] = []

    def counting(prototypes: np.ndarray) -> str:
        hashed.append(prototypes.tobytes())
        return real(prototypes)

    real_key = cache_module.shard_key

    def counting_key(set_key, shard):
        keys.append(shard["name"])
        return real_key(set_key, shard)

    monkeypatch.setattr(search_module, "prototypes_digest", counting)
    monkeypatch.setattr(cache_module, "shard_key", counting_key)
    cfg = EvaluationConfig(
        features=bench["features"],
        split=bench["split"],
        out=tmp_path / "run",
        prototypes=bench["protos"],
        ks=[1, 2, 5],
        label_frequency=False,
        gzsl=True,
        seen_features=bench["seen"],
        val_split=bench["val"],
    )
    evaluate(cfg, graph="none", progress=False)
    shards = sum(
        len(json.loads((bench[d] / "manifest.json").read_text())["shards"]) for d in ("features", "seen")
    )
    # test, seen and val sets: every shard keyed (the val images are read from the test directory)
    assert len(keys) >= shards > 3
    assert len(hashed) == 3  # unseen (6 classes), seen (2) and val_unseen (2)
    assert len(set(hashed)) == 3
