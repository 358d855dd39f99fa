"""Planning a run: the recipe and every name, file and class set it names checked before any work,
the run's lock, and its feature directories (SIMULATED ones written once into ``OUT/features``)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from imagenet_zsl.atomic import atomic_write_json, atomic_write_text, canonical_json
from imagenet_zsl.batch.head_only import HEAD_ONLY_DIR, check_head_only, write_head_only
from imagenet_zsl.batch.recipe import (
    RUN_TOOL,
    FeatureDirs,
    ModelSpec,
    Recipe,
    calibration_classes,
    check_data_parallel,
    check_features,
    check_model_splits,
    check_resources,
    input_paths,
    load_recipe,
    model_specs,
    split_paths,
)
from imagenet_zsl.batch.scored_test_images import TEST_IMAGES_DIR, TestImages
from imagenet_zsl.checksums import sha256_file
from imagenet_zsl.errors import UserInputError, overwriting, preview
from imagenet_zsl.features.extract import HeldBegun, begin_extraction
from imagenet_zsl.features.extract_setup import ExtractConfig
from imagenet_zsl.features.head import HEAD_FILE
from imagenet_zsl.features.scored_dir import write_planned
from imagenet_zsl.features.simulate import load_simulation_config, simulate
from imagenet_zsl.manifests import MANIFEST_NAME, read_manifest
from imagenet_zsl.safe_output import check_out_dir
from imagenet_zsl.splits.io import read_wnid_list
from imagenet_zsl.splits.label_space import NAMED_LABEL_SPACES

#: the recipe a run built from the command line's flags, written into its directory
RECIPE_FILE = "recipe.yaml"
#: what errors name as the recipe's source when it was built from flags
COMMAND_LINE = "command line"
#: the directory of the models that choose the carved GZSL γ (one per trained model)
CALIBRATION_DIR = "calibration"


@dataclass(frozen=True)
class ScoredTest:
    """Test images scored while extracted (the recipe's ``test: {store: ..., backbone: ...}``):
    the extraction, its planned directory (what ``Features.test`` points at until the cells run)
    and its scored directory (labels, ids and manifest, no features: what the cells evaluate)."""

    spec: TestImages
    config: ExtractConfig
    planned: Path
    scored: Path
    #: the extraction's run record digest: the cells' key for their test images
    key: str
    #: the extraction as planning began it (this process only), for the fused pass to go on from
    held: HeldBegun = field(default_factory=HeldBegun, compare=False, repr=False)


@dataclass
class Features:
    """The feature directories of a run: training, test per split, held-out seen (GZSL); with
    test images scored while extracted, ``scored`` (and ``test`` is its planned directory)."""

    train: Path
    test: dict[str, Path]
    seen: Path | None = None
    scored: ScoredTest | None = None

    def evaluated(self, split: str) -> Path:
        """The directory a cell of ``split`` evaluates on."""
        return self.scored.scored if self.scored is not None else self.test[split]


@dataclass
class Plan:
    """A validated recipe with everything resolved, before any work."""

    recipe: Recipe
    recipe_path: Path
    out: Path
    splits: dict[str, Path]
    split_wnids: dict[str, list[str]]
    models: list[ModelSpec]
    #: the recipe's listed validation classes (None: none listed)
    val_wnids: list[str] | None = None
    allow_feature_mismatch: bool = False
    #: ``--columns``: the summary's printed columns (None: the paper table; every column in the CSV)
    columns: str | None = None
    #: ``--published``: the published rows of the same splits beside the run's in the summary
    published: bool = False
    #: the recipe's name of this plan's feature set (several backbones: one plan each, in
    #: ``OUT/backbones/NAME``); None for a recipe with one feature set
    backbone: str | None = None
    #: the recipe was built from the command line's flags: the run writes it to ``recipe_path``
    #: (``OUT/recipe.yaml``), from which ``imagenet-zsl run OUT/recipe.yaml`` runs it again
    written: bool = False


@dataclass
class RunResult:
    """What one ``run`` did: the models it trained, the cells it evaluated, skipped and lost (over
    every rank under torchrun; the table and files are rank 0's, ``primary``)."""

    out: Path
    primary: bool = True
    trained: list[str] = field(default_factory=list)
    evaluated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    #: cell name -> its one-line error (in cell order)
    errors: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    table: str = ""
    #: every cell's record (plan order) and the legend's notes, once summarised (rank 0)
    records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def digest(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def cell_name(model: str, split: str) -> str:
    """Directory name of the (model, split) cell."""
    return f"{model}__{split}"


# ----------------------------------------------------------------------------- planning


def plan_run(
    recipe_path: str | Path | None,
    out: str | Path,
    allow_feature_mismatch: bool = False,
    recipe: Recipe | None = None,
) -> Plan:
    """Validate the recipe and every name, file and class set it names; nothing is written.

    ``recipe``: a recipe built from the command line's flags (:mod:`~imagenet_zsl.batch.flags`)
    instead of the file ``recipe_path``; errors then name the command line's keys, and the run
    writes it to ``OUT/recipe.yaml`` (:data:`RECIPE_FILE`)."""
    written = recipe is not None
    if recipe is None:
        assert recipe_path is not None
        recipe_path = Path(recipe_path)
        recipe, where = load_recipe(recipe_path), str(recipe_path)
    else:
        recipe_path, where = Path(out) / RECIPE_FILE, COMMAND_LINE
    splits = split_paths(recipe, where)
    models = model_specs(recipe, where)
    check_model_splits(models, splits, where)
    check_data_parallel(recipe, splits, where)
    check_resources(recipe, models, where)
    check_features(recipe, splits, where)
    check_head_only(recipe, models, where)
    split_wnids = {}
    for name, path in splits.items():
        split_wnids[name] = read_wnid_list(path)
        if not split_wnids[name]:
            raise UserInputError(f"{path}: split {name!r} is empty; it needs one class wnid per line")
    val_wnids = calibration_classes(recipe, split_wnids, where)
    _check_label_space_file(recipe.label_space, split_wnids, where)
    plan = Plan(recipe, recipe_path, Path(out), splits, split_wnids, models, val_wnids)
    plan.allow_feature_mismatch = allow_feature_mismatch
    inputs = input_paths(recipe, recipe_path, splits, models)
    plan.out = check_out_dir(out, RUN_TOOL, inputs[1:] if written else inputs)
    if written:
        plan.recipe_path, plan.written = plan.out / RECIPE_FILE, True
    return plan


#: where each backbone's own run lives when a recipe has several feature sets
BACKBONES_DIR = "backbones"


def backbone_plans(plan: Plan) -> list[Plan]:
    """One plan per feature set of the recipe: the plan itself for one set; for several
    (``features: {NAME: ...}``), a plan per backbone NAME with that set alone, writing its own
    run (models trained once per backbone, its cells, its summary) to ``OUT/backbones/NAME``."""
    sets = plan.recipe.features
    if not isinstance(sets, dict):
        return [plan]
    plans = []
    for name, features in sets.items():
        recipe = plan.recipe.model_copy(update={"features": features})
        plans.append(replace(plan, recipe=recipe, out=plan.out / BACKBONES_DIR / name, backbone=name))
    return plans


def _check_label_space_file(spec: str, split_wnids: dict[str, list[str]], where: str) -> None:
    """A label-space FILE holds every class of every split (a test class outside it could never
    be predicted); checked before any work."""
    if spec in NAMED_LABEL_SPACES:
        return
    listed = set(read_wnid_list(spec))
    for split, wnids in split_wnids.items():
        missing = sorted(set(wnids) - listed)
        if missing:
            raise UserInputError(
                f"{spec}: the label space lacks {len(missing)} classes of split {split!r} "
                f"({where}: label_space): {preview(missing)}; a label space must hold every test class"
            )


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[Path]:
    """Hold ``.NAME.lock`` next to ``out`` for the whole run; a second ``run`` on it refuses.

    The lock file goes when the run ends, done or failed: it is unlinked while still locked, so a
    process that opened it just before and locks it just after holds a lock on a removed file,
    which :func:`_take_lock` sees (the name no longer gives its inode) and so takes the name's new
    file instead (filelock keeps its Unix lock files because of that race). A run killed with
    ``kill -9`` leaves the file unlocked: the next run takes it and removes it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.parent / f".{out.name}.lock"
    fd = _take_lock(path)
    if fd is None:
        raise UserInputError(
            f"{out} is being written by another 'imagenet-zsl run' (lock {path}): wait for it to "
            "finish, or give another --out"
        )
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)  # while still locked: see above
        os.close(fd)  # releases the lock


def _take_lock(path: Path, tries: int = 3) -> int | None:
    """A descriptor of the file ``path`` names, holding its exclusive ``flock``; None when another
    process holds it. A file removed between the open and the lock (by a run that just ended) is
    not the lock any more: the name is opened again."""
    for _ in range(tries):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _names(path, fd):
                return fd
        except BlockingIOError:  # held by another process
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    return None


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed or replaced since)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def resolve_features(plan: Plan) -> Features:
    """The feature directories; SIMULATED ones are written to ``OUT/features`` once (cached); with
    test features only, the models' training directory is ``OUT/head-only`` (their head)."""
    features = plan.recipe.features
    if isinstance(features, FeatureDirs) and isinstance(features.test, TestImages):
        seen = Path(features.seen) if features.seen else None
        scored = _scored_test(plan, features.test)
        train = _training_dir(plan, features, scored.planned)
        return Features(train, {s: scored.planned for s in plan.splits}, seen, scored)
    if isinstance(features, FeatureDirs):
        test = features.test
        tests = {s: Path(test[s] if isinstance(test, dict) else test) for s in plan.splits}
        train = _training_dir(plan, features, tests[next(iter(plan.splits))])
        return Features(train, tests, Path(features.seen) if features.seen else None)
    path = Path(features.simulate)
    config = load_simulation_config(path)
    target = plan.out / "features"
    key_path = plan.out / "features.key.json"
    key = _simulation_key(config, path.parent)
    if read_manifest(target) is None or not key_path.is_file() or json.loads(key_path.read_text()) != key:
        key_path.unlink(missing_ok=True)
        with overwriting():  # the run's own features, simulated again since their key changed
            simulate(config, target, base_dir=path.parent)
        atomic_write_json(key_path, key)
    seen = target / "seen_test"
    if plan.recipe.gzsl and not (seen / MANIFEST_NAME).is_file():
        raise UserInputError(
            f"gzsl needs held-out seen images ({path}: seen_test.images_per_class): set it above 0"
        )
    return Features(target / "train", {s: target / "test" for s in plan.splits}, seen)


def _training_dir(plan: Plan, features: FeatureDirs, test: Path) -> Path:
    """The recipe's training features, or (test features only) ``OUT/head-only``: the head and
    identity of the test features ``test``, no image."""
    if features.train is not None:
        return Path(features.train)
    return write_head_only(test, plan.out / HEAD_ONLY_DIR)


def _scored_test(plan: Plan, spec: TestImages) -> ScoredTest:
    """Begin the extraction of every split's test classes into ``OUT/test-images/scored`` (a
    different one there is replaced: it is the run's) and write its planned directory."""
    root = plan.out / TEST_IMAGES_DIR
    root.mkdir(parents=True, exist_ok=True)
    wnids = sorted({w for split in plan.splits for w in plan.split_wnids[split]})
    classes = write_classes(root / "classes.txt", wnids)
    config = spec.extract_config(classes, root / "scored")
    begun = begin_extraction(config, replace_other=True)
    planned = write_planned(begun, root / "planned")
    # the backbone built once: kept until the fused pass extracts (with several backbones, built
    # again then, so that the run does not hold every backbone through its training)
    held = HeldBegun(begun, planned / HEAD_FILE) if plan.backbone is None else HeldBegun()
    return ScoredTest(spec, config, planned, root / "scored", digest(begun.record), held)


def _simulation_key(config: Any, base_dir: Path) -> dict[str, Any]:
    """What the simulated features depend on: the config and the content of its class lists."""
    lists = {}
    for spec in [*config.train.classes, *config.test.classes]:
        path = Path(spec) if Path(spec).is_file() else base_dir / spec
        lists[spec] = sha256_file(path) if path.is_file() else spec
    return {"config": asdict(config), "class_lists": lists}


def write_classes(path: Path, wnids: list[str]) -> Path:
    """A class list (one wnid a line) under ``OUT/classes``, written atomically."""
    return atomic_write_text(path, "".join(f"{w}\n" for w in wnids))


def write_recipe(plan: Plan) -> Path | None:
    """``OUT/recipe.yaml``: the recipe a run built from its flags, every key it set, so that
    ``imagenet-zsl run OUT/recipe.yaml --out OUT2`` runs it again (the same config, so the same
    cells). Written atomically before any work; the run's manifest lists it. A run from a recipe
    file removes the one an earlier run from flags left in ``OUT``: it no longer says what ran."""
    if not plan.written:
        (plan.out / RECIPE_FILE).unlink(missing_ok=True)
        return None
    data = plan.recipe.model_dump(mode="json", exclude_unset=True)
    header = (
        "# written by 'imagenet-zsl run' from its flags (the run's manifest.json has the command line)\n"
        f"# run it again: imagenet-zsl run {plan.recipe_path} --out OTHER_DIR\n"
    )
    return atomic_write_text(plan.recipe_path, header + yaml.safe_dump(data, sort_keys=False))
