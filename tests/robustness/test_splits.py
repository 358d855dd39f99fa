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


# ----------------------------------------------------------------------------- issue 26: recipes
def _alias_bomb(levels: int) -> str:
    """The "billion laughs" recipe: each level lists the one before 10 times (10**levels values)."""
    text = 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels):
        text += f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n"
    return text + f"splits: *a{levels - 1}\n"


RECIPE_CASES = {
    # PyYAML keeps the last of two equal keys: a second `train:` or `k:` silently won
    "duplicate top-level key": (
        "train: ilsvrc2012\nsplits:\n" + GOOD_SPLIT + "train: ilsvrc2012\n",
        ["duplicate key 'train'", "lines 1 and 4"],
    ),
    "duplicate key in a split": (
        "splits:\n  - name: hop\n    kind: hops\n    k: 1\n    k: 3\n",
        ["duplicate key 'k'", "lines 4 and 5"],
    ),
    "alias bomb": (_alias_bomb(7), ["aliases", "100,000"]),
    "recursive alias": ("splits: &s [*s]\n", ["recursive"]),
    # an explicit key (`? KEY`) may be longer than YAML's 1024-character simple keys
    "huge unknown key": (
        "? " + "x" * 100_000 + "\n: 1\nsplits:\n" + GOOD_SPLIT,
        ["unknown key", "more characters"],
    ),
    "huge bad value": (
        "splits:\n  - {name: p, kind: population, n: '" + "9" * 100_000 + "'}\n",
        ["splits[0].n", "999..."],
    ),
}


@pytest.mark.parametrize("case", sorted(RECIPE_CASES))
def test_recipe_yaml_abuse(tmp_path, cli_error, case):
    text, culprits = RECIPE_CASES[case]
    config = _config(tmp_path, text)
    out = tmp_path / "out"
    line = cli_error(
        ["splits", "build", config, "--out", out, "--no-progress"],
        culprit=[str(config), *culprits],
        inputs=[config],
        not_created=[out],
    )
    assert len(line) < 1500  # a 527-byte bomb gave a 5.8 MB error line


def test_alias_bomb_is_refused_before_it_is_built(tmp_path):
    """Ten more values per level: 10**9 values must fail in well under a second and a few MB."""
    import resource
    import time

    from imagenet_zsl.config import read_yaml
    from imagenet_zsl.errors import UserInputError

    config = _config(tmp_path, _alias_bomb(9))
    assert len(config.read_bytes()) < 600
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    # as written: the root mapping, 10 keys, a0 (1 + 10 scalars) and a1..a8 (one node each) = 30
    # expanded: E0 = 11, Ei = 1 + 10 E(i-1) (E8 = 1,111,111,111); 1 + 10 + sum(E0..E8) + E8 (the
    # `splits: *a8` value) = 11 + 1,234,567,899 + 1,111,111,111; minus the 30 written
    with pytest.raises(UserInputError, match="expand it by 2,345,678,991 values"):
        read_yaml(config)
    assert time.perf_counter() - start < 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB


def test_anchors_used_as_in_the_default_recipe_still_work(tmp_path):
    from imagenet_zsl.config import read_yaml

    config = _config(
        tmp_path,
        "base: &pool\n  - {filter: not_training}\n"
        "splits:\n  - {name: a, kind: benchmark, size: 5, pool: *pool}\n"
        "defaults: &d {kind: hops, k: 1}\nmore:\n  <<: *d\n  k: 2\n",
    )
    data = read_yaml(config)
    assert data["splits"][0]["pool"] == [{"filter": "not_training"}]
    assert data["more"] == {"kind": "hops", "k": 2}  # a merged key may be overridden


def _show_cases(tmp_path: Path) -> dict[str, tuple[list, list[str]]]:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "dgp-2hops.txt").write_text("n00005787\n")  # a different list under a published name
    (tmp_path / "bad.txt").write_bytes(b"n00005787\ncat\n")
    return {
        "unknown name": (["dgp-4hops", "--splits-dir", tmp_path], ["'dgp-4hops' not found", "dgp-2hops"]),
        "missing path": ([tmp_path / "none.txt"], ["none.txt not found"]),
        "shadowed published name": (["dgp-2hops", "--splits-dir", shadow], ["ambiguous", "dgp-2hops.txt"]),
        "bad wnid list": ([tmp_path / "bad.txt"], ["bad.txt:2", "'cat'"]),
    }


@pytest.mark.parametrize("case", ["unknown name", "missing path", "shadowed published name", "bad wnid list"])
def test_bad_splits_show(tmp_path, cli_error, case):
    args, culprit = _show_cases(tmp_path)[case]
    cli_error(["splits", "show", *args], culprit=culprit, inputs=[tmp_path / "shadow" / "dgp-2hops.txt"])
