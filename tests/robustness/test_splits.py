"""Bad split inputs through the CLI: exit 2, one `error:` line naming the culprit, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

GOOD_SPLIT = "  - {name: hop1, kind: hops, k: 1}\n"


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return path


CONFIG_CASES = {
    "top-level typo": ("trian: ilsvrc2012\nsplits:\n" + GOOD_SPLIT, ["trian", "did you mean 'train'"]),
    "graph typo": ("grpah: {source: wordnet}\nsplits:\n" + GOOD_SPLIT, ["grpah"]),
    "hop key typo": ("splits:\n  - {name: hop2, kind: hops, kk: 2}\n", ["splits[0].kk", "did you mean 'k'"]),
    "negative n": ("splits:\n  - {name: p, kind: population, n: -5}\n", ["splits[0].n"]),
    "n not a number": ("splits:\n  - {name: p, kind: population, n: lots}\n", ["splits[0].n"]),
    "n missing": ("splits:\n  - {name: p, kind: population}\n", ["splits[0].n"]),
    "list without path": ("splits:\n  - {name: l, kind: list}\n", ["splits[0].path"]),
    "unknown kind": ("splits:\n  - {name: l, kind: lists}\n", ["splits[0].kind"]),
    "name is a path": ("splits:\n  - {name: ../../x, kind: all}\n", ["splits[0].name"]),
    "duplicate names": ("splits:\n  - {name: a, kind: all}\n  - {name: a, kind: all}\n", ["splits[1].name"]),
    "unknown pool filter": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, pool: [{filter: min_imagse}]}\n",
        ["splits[0].pool[0].filter", "min_imagse"],
    ),
    "unknown filter parameter": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, pool: [{filter: min_images, minimum: 3}]}\n",
        ["splits[0].pool[0].minimum"],
    ),
    "unknown optimizer": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, optimizer: greedy}\n",
        ["splits[0].optimizer"],
    ),
    "branch share above 1": (
        "splits:\n  - {name: b, kind: benchmark, size: 5, max_branch_share: 1.5}\n",
        ["splits[0].max_branch_share"],
    ),
    "bad YAML": ("splits: [\n", ["invalid YAML"]),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_split_config(tmp_path, cli_error, case):
    text, culprits = CONFIG_CASES[case]
    config = _config(tmp_path, text)
    out = tmp_path / "out"
    cli_error(
        ["splits", "build", config, "--out", out, "--no-progress"],
        culprit=[str(config), *culprits],
        inputs=[config],
        not_created=[out],
    )


LIST_CASES = {
    "plain word": (b"n01443537\ndog\n", ":2"),
    "upper-case N": (b"N01443537\n", ":1"),
    "duplicate": (b"n01443537\nn01443537\n", ":2"),
    "invalid UTF-8": (b"n01443537\n\xff\xfe\n", ":2"),
}


@pytest.mark.parametrize("case", sorted(LIST_CASES))
def test_bad_wnid_list_in_stats(tmp_path, cli_error, case):
    data, line = LIST_CASES[case]
    path = tmp_path / "list.txt"
    path.write_bytes(data)
    cli_error(["splits", "stats", path, "--no-optimum"], culprit=[f"{path}{line}"], inputs=[path])


def test_bad_wnid_list_in_a_list_split(tmp_path, cli_error):
    listed = tmp_path / "mine.txt"
    listed.write_bytes(b"n01443537\nn0144\n")
    config = _config(tmp_path, f"splits:\n  - {{name: mine, kind: list, path: {listed}}}\n")
    out = tmp_path / "out"
    cli_error(
        ["splits", "build", config, "--out", out, "--no-progress"],
        culprit=[f"{listed}:2"],
        inputs=[config, listed],
        not_created=[out],
    )


def test_out_inside_an_input_is_refused(tmp_path, cli_error):
    folder = tmp_path / "inputs"
    folder.mkdir()
    config = folder / "recipe.yaml"
    config.write_text("splits:\n" + GOOD_SPLIT)
    cli_error(
        ["splits", "build", config, "--out", tmp_path, "--no-progress"],
        culprit=["--out"],
        inputs=[folder],
    )


def test_out_not_written_by_splits_build_is_refused(tmp_path, cli_error):
    config = _config(tmp_path, "splits:\n" + GOOD_SPLIT)
    out = tmp_path / "precious"
    out.mkdir()
    (out / "data.txt").write_text("keep me")
    cli_error(
        ["splits", "build", config, "--out", out, "--no-progress"],
        culprit=[str(out)],
        inputs=[config, out],
    )


def test_unknown_pretraining_set(tmp_path, cli_error):
    path = tmp_path / "list.txt"
    path.write_text("n01443537\n")
    cli_error(["splits", "leakage", path, "--pretraining", "in99k"], culprit=["in99k"], inputs=[path])


def test_frontier_share_out_of_range(tmp_path, cli_error):
    config = _config(tmp_path, "splits:\n" + GOOD_SPLIT)
    out = tmp_path / "f"
    cli_error(
        ["splits", "frontier", config, "--out", out, "--shares", "0,2"],
        culprit=["--shares"],
        inputs=[config],
        not_created=[out],
    )


def test_frontier_without_a_benchmark_split(tmp_path, cli_error):
    config = _config(tmp_path, "splits:\n" + GOOD_SPLIT)
    out = tmp_path / "f"
    cli_error(
        ["splits", "frontier", config, "--out", out],
        culprit=[str(config)],
        inputs=[config],
        not_created=[out],
    )
