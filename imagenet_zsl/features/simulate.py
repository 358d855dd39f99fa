"""Simulated ImageNet features over the real WordNet graph — a test bed, NOT image features.

Class means follow a Gaussian random walk down the real is-a DAG (a root draws N(0, root_scale²·I),
a child is the average of its parents plus N(0, step²·I)), plus a fixed random linear image of the
class's real word vector (weight ``semantic_weight``), so semantic models have something to transfer.
Images are noisy draws around their class mean (N(0, noise²·I)). Finally, like a backbone's
normalised features, everything is centred on the mean of the training-class means and divided by
their RMS norm (the manifest records the scale; logits are unchanged by it). Optional logits are the Bayes
posterior of the 1,000 training classes under that model, i.e. a perfect linear "backbone head":
logit_t(x) = (m_t·x - |m_t|²/2) / noise².

Because children sit near their parents, a class one hop from a training class is recognised by the
seen-class classifier alone: the trivial baseline scores far above chance on ``hop1`` and falls
toward chance on splits far from the training classes — the structural bias Hascoet et al. expose,
visible here without ImageNet. Every manifest says loudly that the features are simulated.

Output (``--out DIR``), each a feature directory in the extraction format:

    DIR/train/       training classes, ``train.images_per_class`` images each
    DIR/seen_test/   held-out images of the training classes (GZSL seen test set)
    DIR/test/        the test classes (union of ``test.classes``), ``test.images_per_class`` each
    DIR/manifest.json   what was simulated, with the WARNING
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from imagenet_zsl.config import MAX_SEED, Config, Seed, read_yaml, validate_config
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.shard_files import known_digests, shard_name, write_manifest, write_shard
from imagenet_zsl.hierarchy.universe import candidate_wnids, load_class_graph, training_wnids
from imagenet_zsl.manifests import write_manifest as write_directory_manifest
from imagenet_zsl.safe_output import atomic_directory
from imagenet_zsl.semantics.class_vectors import ClassVectors
from imagenet_zsl.semantics.lemma_vectors import load_class_vectors
from imagenet_zsl.splits.io import read_wnid_list

log = logging.getLogger(__name__)

#: v2: written by manifests.write_manifest (``files`` lists every file of every part, ``command``)
SIMULATION_FORMAT = "imagenet-zsl/simulation-v2"
TOOL = "imagenet-zsl simulate"
WARNING = (
    "SIMULATED FEATURES: these vectors were NOT extracted from images. Class means are a Gaussian "
    "random walk down the WordNet graph plus a projection of word vectors; results on them say "
    "nothing about real ImageNet performance."
)
CLASS_KEYWORDS = ("training", "candidates")
#: which parts get logits: all three, only train (the head is then recovered from it), none
LOGIT_CHOICES = ("all", "train", "none")
#: the largest root_scale, step, semantic_weight and noise: only their ratios matter (the
#: features are normalised), and a step of 1e308 overflowed the class means to infinity
MAX_SCALE = 1e6
#: the widest simulated feature (a backbone's features have 512-4096 dimensions)
MAX_DIM = 65536
#: largest magnitude a shard stores (features and logits are written as float16)
FLOAT16_MAX = float(np.finfo(np.float16).max)


@dataclass
class PartConfig:
    classes: list[str] = field(default_factory=list)
    images_per_class: int = 10


@dataclass
class SimulationConfig:
    """Parameters of a simulation (configs/simulate.yaml documents each one)."""

    seed: int = 0
    dim: int = 64
    graph: str = "wordnet"
    semantics: str = "glove-6b-50d"
    root_scale: float = 1.0
    step: float = 1.0
    semantic_weight: float = 1.0
    noise: float = 1.0
    logits: str = "train"
    shard_rows: int = 65536
    train: PartConfig = field(default_factory=lambda: PartConfig(["training"], 20))
    seen_test: PartConfig = field(default_factory=lambda: PartConfig([], 5))
    test: PartConfig = field(default_factory=lambda: PartConfig(["splits/hop1.txt"], 10))

    def check(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise UserInputError(
                f"simulate: seed (--seed) must be an integer in 0..{MAX_SEED}, got {str(self.seed)[:40]}"
            )
        if self.dim < 1:
            raise UserInputError(f"simulate: dim must be >= 1, got {self.dim}")
        for name in ("root_scale", "step", "semantic_weight", "noise"):
            value = float(getattr(self, name))
            if not math.isfinite(value) or value < 0 or value > MAX_SCALE:
                raise UserInputError(
                    f"simulate: {name} must be a number in [0, {MAX_SCALE:g}], got {value!r}"
                )
        if self.logits not in LOGIT_CHOICES:
            raise UserInputError(f"simulate: logits must be one of {LOGIT_CHOICES}, got {self.logits!r}")
        if self.noise <= 0 and self.logits != "none":
            raise UserInputError("simulate: noise must be > 0 to write logits")
        for part in ("train", "seen_test", "test"):
            if getattr(self, part).images_per_class < 0:
                raise UserInputError(f"simulate: {part}.images_per_class must be >= 0")
        if self.train.images_per_class < 1 or not self.train.classes:
            raise UserInputError("simulate: train needs classes and images_per_class >= 1")
        if self.test.classes and self.test.images_per_class < 1:
            raise UserInputError(
                "simulate: test.images_per_class must be >= 1 (0 would write no test images); "
                "for no test part give test: {classes: []}"
            )


class _PartRecipe(Config):
    """A part of the simulation: which classes, how many images each."""

    classes: list[str] | str | None = None
    images_per_class: Annotated[int, Field(ge=0)] | None = None


class SimulationRecipe(Config):
    """The typed form of ``configs/simulate.yaml``: unknown keys, wrong types and ranges are
    one-line errors naming the file and key (see :mod:`imagenet_zsl.config`)."""

    seed: Seed = 0
    dim: Annotated[int, Field(ge=1, le=MAX_DIM)] = 64
    graph: str = "wordnet"
    semantics: str = "glove-6b-50d"
    root_scale: Annotated[float, Field(ge=0, le=MAX_SCALE, allow_inf_nan=False)] = 1.0
    step: Annotated[float, Field(ge=0, le=MAX_SCALE, allow_inf_nan=False)] = 1.0
    semantic_weight: Annotated[float, Field(ge=0, le=MAX_SCALE, allow_inf_nan=False)] = 1.0
    noise: Annotated[float, Field(ge=0, le=MAX_SCALE, allow_inf_nan=False)] = 1.0
    logits: Literal["all", "train", "none"] | bool = "train"
    shard_rows: Annotated[int, Field(ge=1)] = 65536
    train: _PartRecipe | None = None
    seen_test: _PartRecipe | None = None
    test: _PartRecipe | None = None


def load_simulation_config(path: str | Path) -> SimulationConfig:
    """Read a simulation YAML through the typed config layer (typos never pass silently)."""
    return simulation_config_from_dict(read_yaml(path) or {}, str(path))


def simulation_config_from_dict(raw: dict[str, Any], where: str = "simulation config") -> SimulationConfig:
    """A :class:`SimulationConfig` from parsed YAML, validated by :class:`SimulationRecipe`."""
    recipe = validate_config(raw, SimulationRecipe, where)
    config = SimulationConfig()
    for key in (
        "seed",
        "dim",
        "graph",
        "semantics",
        "root_scale",
        "step",
        "semantic_weight",
        "noise",
        "shard_rows",
    ):
        if key in raw:
            setattr(config, key, getattr(recipe, key))
    if "logits" in raw:
        logits = recipe.logits
        config.logits = ("all" if logits else "none") if isinstance(logits, bool) else logits
    for key in ("train", "seen_test", "test"):
        part = getattr(recipe, key)
        if part is not None:
            default = getattr(config, key)
            classes = default.classes if part.classes is None else part.classes
            classes = [classes] if isinstance(classes, str) else list(classes)
            images = default.images_per_class if part.images_per_class is None else part.images_per_class
            setattr(config, key, PartConfig(classes, images))
    config.check()
    return config


# ----------------------------------------------------------------------------- classes
def resolve_classes(specs: list[str], base_dir: Path | None = None) -> list[str]:
    """Class lists from keywords ('training', 'candidates') or split files, de-duplicated in order."""
    wnids: dict[str, None] = {}
    for spec in specs:
        if spec == "training":
            found = training_wnids()
        elif spec == "candidates":
            found = candidate_wnids()
        else:
            path = Path(spec)
            if not path.exists() and base_dir is not None and (base_dir / spec).exists():
                path = base_dir / spec
            if not path.exists():
                raise UserInputError(
                    f"{spec}: class list not found; build the split files with 'imagenet-zsl splits "
                    f"build' or use one of {CLASS_KEYWORDS}"
                )
            found = read_wnid_list(path)
        wnids.update(dict.fromkeys(found))
    return list(wnids)


def resolve_class_vectors(spec: str) -> ClassVectors:
    """Class semantics by name (the semantics stage's word-vector sets) or an npz path."""
    if str(spec).endswith(".npz") or Path(str(spec)).is_file():
        return ClassVectors.load(spec)
    return load_class_vectors(spec)


# ----------------------------------------------------------------------------- class means
def topological_levels(child_to_parent: sp.csr_matrix) -> np.ndarray:
    """(n,) longest-path depth of each node (roots 0): every parent's level is below its child's."""
    coo = child_to_parent.tocoo()
    children, parents = coo.row, coo.col
    level = np.zeros(child_to_parent.shape[0], np.int64)
    for _ in range(child_to_parent.shape[0] + 1):
        updated = level.copy()
        np.maximum.at(updated, children, level[parents] + 1)
        if np.array_equal(updated, level):
            return level
        level = updated
    raise UserInputError("class graph has a cycle")  # pragma: no cover


def class_means(graph, vectors, config: SimulationConfig, rng: np.random.Generator) -> np.ndarray:  # noqa: ANN001
    """(len(graph), dim) float64 means: random walk down the DAG + projected word vectors."""
    n, dim = len(graph), config.dim
    innovations = rng.standard_normal((n, dim))
    projection = rng.standard_normal((vectors.dim, dim))
    parents = graph.child_to_parent.astype(np.float64)
    counts = np.asarray(parents.sum(axis=1)).ravel()
    average = sp.diags(np.divide(1.0, counts, out=np.zeros(n), where=counts > 0)) @ parents
    average = average.tocsr()
    levels = topological_levels(graph.child_to_parent)
    walk = np.zeros((n, dim))
    roots = levels == 0
    walk[roots] = config.root_scale * innovations[roots]
    for level in range(1, int(levels.max()) + 1):
        rows = np.flatnonzero(levels == level)
        walk[rows] = average[rows] @ walk + config.step * innovations[rows]
    semantic = np.zeros((n, dim))
    have = np.fromiter((w in vectors for w in graph.wnids), bool, count=n)
    if have.any():
        unit = vectors.get([w for w, h in zip(graph.wnids, have, strict=True) if h]).astype(np.float64)
        unit /= np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)
        semantic[have] = unit @ projection
    return walk + config.semantic_weight * semantic


# ----------------------------------------------------------------------------- writing
@dataclass(frozen=True)
class _Part:
    """One simulated feature directory: ``role`` (train, seen_test or test) names it; C ``wnids``
    with class ``means`` (C, D), ``images`` per class; ``head`` = (W (D, K), b (K,)) of the
    simulated logits over the K training classes, or None."""

    role: str
    wnids: list[str]
    means: np.ndarray
    images: int
    head: tuple[np.ndarray, np.ndarray] | None


def _write_part(
    out: Path,
    part: _Part,
    noise: float,
    config: SimulationConfig,
    rng: np.random.Generator,
    logit_classes: list[str],
) -> dict[str, Any]:
    """Write ``part`` as a feature directory at ``out``; its record for the top manifest."""
    role, wnids, images, head = part.role, part.wnids, part.images, part.head
    out.mkdir(parents=True, exist_ok=True)
    labels = np.repeat(np.arange(len(wnids), dtype=np.int64), images)
    within = np.tile(np.arange(images), len(wnids))
    features = part.means[labels] + noise * rng.standard_normal((len(labels), config.dim))
    features = features.astype(np.float32)
    _check_storable(features, "features", "noise, step or root_scale")
    records = []
    for index, start in enumerate(range(0, max(len(labels), 1), config.shard_rows)):
        rows = slice(start, start + config.shard_rows)
        ids = [
            f"{wnids[c]}/simulated_{role}_{k:05d}" for c, k in zip(labels[rows], within[rows], strict=True)
        ]
        logits = None
        if head is not None:
            weights, bias = head
            logits = features[rows].astype(np.float64) @ weights + bias
            _check_storable(logits, "logits", "noise too small for them; raise noise or set logits: none")
        records.append(write_shard(out, shard_name(0, index), features[rows], labels[rows], ids, logits))
    manifest: dict[str, Any] = {
        "tool": TOOL,
        "classes": wnids,
        "dim": config.dim,
        "shards": records,
        "simulated": True,
        "WARNING": WARNING,
        "role": role,
        "images_per_class": images,
        "simulation": asdict(config),
    }
    if head is not None:
        manifest["logits"] = {
            "classes": logit_classes,
            "source": "simulated Bayes head of the training classes",
        }
    write_manifest(out, manifest)
    digests = known_digests(manifest)
    return {"path": role, "classes": len(wnids), "images": int(len(labels)), "sha256": digests}


def _check_storable(values: np.ndarray, what: str, advice: str) -> None:
    """Refuse simulated values that float16 shards cannot hold (they would be stored as ±inf)."""
    largest = float(np.max(np.abs(values))) if values.size else 0.0
    if not largest <= FLOAT16_MAX:  # also NaN
        raise UserInputError(
            f"simulate: the simulated {what} reach {largest:.3g}, beyond the {FLOAT16_MAX:g} a "
            f"float16 shard holds ({advice})"
        )


def simulate(config: SimulationConfig, out_dir: str | Path, base_dir: Path | None = None) -> Path:
    """Write the simulated train / seen_test / test feature directories under ``out_dir``."""
    config.check()  # again: the command line may have overridden the seed after loading
    train = resolve_classes(config.train.classes, base_dir)
    requested = resolve_classes(config.test.classes, base_dir)
    test = sorted(set(requested) - set(train))
    if len(test) < len(requested):
        log.warning(
            "simulate: %d test classes are training classes; they are left out of test/",
            len(requested) - len(test),
        )
    graph = load_class_graph(config.graph)
    graph.indices(train + test, "simulated classes")
    vectors = resolve_class_vectors(config.semantics)
    rng = np.random.default_rng(config.seed)
    means = class_means(graph, vectors, config, rng)
    index = graph.index
    # like a backbone's normalised features: centred on the training classes, unit RMS class mean
    train_rows = [index[w] for w in train]
    centre = means[train_rows].mean(axis=0)
    scale = float(np.sqrt(np.mean(np.sum((means[train_rows] - centre) ** 2, axis=1)))) or 1.0
    means = (means - centre) / scale
    noise = config.noise / scale
    train_means = means[train_rows]
    head = None
    if config.logits != "none":
        variance = noise**2
        head = (train_means.T / variance, -0.5 * np.sum(train_means**2, axis=1) / variance)
    missing = [w for w in train + test if w not in vectors]
    out_dir = Path(out_dir)
    parts = {}
    with atomic_directory(out_dir, tool=TOOL) as tmp:
        # one generator stream per part, so changing one part's size leaves the others' images unchanged
        streams = rng.spawn(3)
        part = _Part("train", train, train_means, config.train.images_per_class, head)
        parts["train"] = _write_part(tmp / "train", part, noise, config, streams[0], train)
        test_head = head if config.logits == "all" else None
        if config.seen_test.images_per_class:
            part = _Part("seen_test", train, train_means, config.seen_test.images_per_class, test_head)
            parts["seen_test"] = _write_part(tmp / "seen_test", part, noise, config, streams[1], train)
        if test and config.test.images_per_class:
            part = _Part(
                "test", test, means[[index[w] for w in test]], config.test.images_per_class, test_head
            )
            parts["test"] = _write_part(tmp / "test", part, noise, config, streams[2], train)
        # the parts' shard digests were just computed: the top manifest does not hash them again
        known = {
            f"{role}/{path}": digest
            for role, part in parts.items()
            for path, digest in part.pop("sha256").items()
        }
        write_directory_manifest(
            tmp,
            format=SIMULATION_FORMAT,
            tool=TOOL,
            parameters=asdict(config),
            fields={
                "simulated": True,
                "WARNING": WARNING,
                "graph": graph.source,
                "feature_scale": scale,
                "semantics": vectors.source,
                "classes_without_word_vector": {"count": len(missing), "examples": missing[:20]},
                "parts": parts,
            },
            known_sha256=known,
        )
    log.warning("%s", WARNING)
    return out_dir
