"""The reduced demo recipe: configs/demo.yaml with small splits, a small simulation and 3 cheap models.

``demo_inputs`` writes the inputs (session-wide), the label-frequency factor splits included (built
with ``splits factor`` on the real graph, as ``make demo`` does, only smaller); ``demo_run`` runs
the recipe once through the command line, as ``make demo`` does, and is shared by the tests that
only read its outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from imagenet_zsl.cli import main
from imagenet_zsl.semantics.lemma_vectors import load_class_vectors
from imagenet_zsl.splits.io import read_wnid_list
from tests.robustness.conftest import cli_error  # noqa: F401 - the shared robustness fixture

REPO = Path(__file__).resolve().parents[2]


@dataclass
class DemoInputs:
    root: Path
    recipe: Path
    data: dict

    def write_recipe(self, name: str, **changes: object) -> Path:
        """A copy of the reduced recipe with top-level keys changed."""
        path = self.root / name
        path.write_text(yaml.safe_dump({**self.data, **changes}, sort_keys=False))
        return path


def _write(path: Path, wnids: list[str]) -> Path:
    path.write_text("".join(f"{w}\n" for w in wnids))
    return path


@pytest.fixture(scope="session")
def demo_inputs(tmp_path_factory: pytest.TempPathFactory) -> DemoInputs:
    root = tmp_path_factory.mktemp("demo_inputs")
    demo = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    vectors = load_class_vectors("glove-6b-50d")
    hop1 = read_wnid_list(REPO / "splits" / "hop1.txt")
    bench = read_wnid_list(REPO / "splits" / "benchmark.txt")
    # 3 hop1 classes without a GloVe vector: dropped by missing_semantics: drop for semantic models
    small_hop1 = sorted([w for w in hop1 if w not in vectors][:3] + [w for w in hop1 if w in vectors][:12])
    _write(root / "hop1.txt", small_hop1)
    _write(root / "benchmark.txt", bench[:15])
    factor = root / "factor-frequency"
    config = str(REPO / "configs" / "default.yaml")
    assert (
        main(
            [
                "splits",
                "factor",
                config,
                "--factor",
                "frequency",
                "--bins",
                "2",
                "--size",
                "4",
                "--out",
                str(factor),
            ]
        )
        == 0
    )
    factor_splits = [str(factor / f"frequency_{b}.txt") for b in (1, 2)]
    sim = yaml.safe_load((REPO / "configs" / "demo-simulate.yaml").read_text())
    sim.update(dim=16, train={"classes": ["training"], "images_per_class": 2})
    sim.update(
        seen_test={"images_per_class": 1},
        test={"classes": ["hop1.txt", "benchmark.txt", *factor_splits], "images_per_class": 3},
    )
    (root / "sim.yaml").write_text(yaml.safe_dump(sim))
    # trivial and eszsl as the demo has them (trivial also on the factor splits); conse inline
    trivial = {**demo["models"]["trivial"], "splits": ["hop1", "benchmark", "frequency_1", "frequency_2"]}
    trivial["config"] = str(REPO / trivial["config"])
    models = {
        "trivial": trivial,
        "eszsl": {"model": "eszsl", "select": {"grid": {"gamma": [1.0], "lam": [0.1, 1.0]}}},
        "conse": {"model": "conse", "params": {"top": 5}, "splits": ["hop1", "benchmark"]},
    }
    data = {**demo, "features": {"simulate": str(root / "sim.yaml")}, "models": models}
    data.update(splits=["hop1", "benchmark", *factor_splits], splits_dir=str(root), label_frequency=False)
    inputs = DemoInputs(root, root / "demo.yaml", data)
    inputs.write_recipe("demo.yaml")
    return inputs


@pytest.fixture(scope="session")
def demo_run(demo_inputs: DemoInputs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo_run") / "run"
    assert main(["run", str(demo_inputs.recipe), "--out", str(out), "--no-progress"]) == 0
    return out
