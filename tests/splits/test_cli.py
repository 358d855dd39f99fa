"""The splits CLI: stats output, and bad input → one clear line, exit 2, nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagenet_zsl import cli
from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import read_manifest_verified
from imagenet_zsl.registry import load_target
from imagenet_zsl.splits import commands
from imagenet_zsl.splits.frontier import DEFAULT_SHARES
from imagenet_zsl.splits.io import read_wnid_list

REPO = Path(__file__).resolve().parents[2]


def test_stats_json_on_the_committed_benchmark(capsys):
    assert main(["splits", "stats", str(REPO / "splits" / "benchmark.txt"), "--json", "--no-optimum"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert set(stats) == {
        "n_classes",
        "n_images",
        "structural_ratio",
        "pairs_within",
        "pairs_with_train",
        "consistent",
    }
    assert stats["n_classes"] == 500 and stats["consistent"] is True


def test_stats_counts_flaws_of_a_flawed_list(tmp_path, capsys):
    # dog (n02084071) is an ancestor of many ILSVRC classes; hound (n02087551) is a dog
    wnids = tmp_path / "flawed.txt"
    wnids.write_text("n02084071\nn02087551\n")
    assert main(["splits", "stats", str(wnids), "--json", "--no-optimum"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["pairs_within"] == 1 and stats["pairs_with_train"] > 100
    assert stats["consistent"] is False


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("n02084071\ndog\n", "bad.txt:2: 'dog' is not a wnid"),
        ("n99999999\n", "not WordNet 3.0 noun synsets: n99999999"),
        ("n01440764\n", "are training classes: n01440764"),
        ("n02087551\nn02087551\n", "bad.txt:2: n02087551 already listed on line 1"),
        ("", "empty"),
    ],
)
def test_stats_bad_input(tmp_path, capsys, content, message):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    assert main(["splits", "stats", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_build_with_empty_pool_fails_cleanly(tmp_path, capsys):
    config = tmp_path / "empty.yaml"
    config.write_text(
        "splits:\n"
        "  - {name: hop1, kind: hops, k: 1}\n"
        "  - name: benchmark\n    kind: benchmark\n    size: 10\n"
        "    pool: [{filter: min_images, min: 100000}]\n"
    )
    out = tmp_path / "out"
    assert main(["splits", "build", str(config), "--out", str(out), "--no-progress"]) == 2
    assert "candidate pool is empty" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == [config]


def test_build_with_unknown_filter_names_it(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("splits:\n  - {name: b, kind: benchmark, size: 5, pool: [{filter: nope}]}\n")
    assert main(["splits", "build", str(config), "--out", str(tmp_path / "o")]) == 2
    assert "unknown pool filter 'nope'" in capsys.readouterr().err


def test_build_small_config_writes_files_and_manifest(tmp_path, capsys):
    config = tmp_path / "small.yaml"
    config.write_text(
        "splits:\n  - {name: hop1, kind: hops, k: 1}\n"
        "  - {name: lp500, kind: population, n: 500, most: false}\n"
    )
    out = tmp_path / "out"
    assert main(["splits", "build", str(config), "--out", str(out), "--no-progress"]) == 0
    assert "| hop1 |" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [
        "hop1.txt",
        "lp500.txt",
        "manifest.json",
        "report.md",
        "structural_ratios.png",
    ]
    lines = (out / "hop1.txt").read_text().splitlines()
    assert lines == sorted(lines) and len(lines) == 1_548
    # the manifest hashes every other file, the report and the plot included
    manifest = read_manifest_verified(out, "imagenet-zsl/splits-v2")
    assert [f["path"] for f in manifest["files"]] == [
        "hop1.txt",
        "lp500.txt",
        "report.md",
        "structural_ratios.png",
    ]
    assert (
        manifest["inputs"]["config"]["path"] == "small.yaml"
        and manifest["splits"]["hop1"]["n_classes"] == 1_548
    )
    assert manifest["parameters"]["splits"][0] == {"name": "hop1", "kind": "hops", "k": 1}
    (out / "report.md").write_text("edited\n")
    with pytest.raises(UserInputError, match="report.md: changed since it was written"):
        read_manifest_verified(out, "imagenet-zsl/splits-v2")


def test_frontier_on_a_small_pool_writes_sets_table_plot_and_manifest(tmp_path, capsys):
    config = tmp_path / "small.yaml"
    config.write_text(
        "splits:\n"
        "  - name: bench\n    kind: benchmark\n    size: 8\n"
        "    pool: [{filter: not_training}, {filter: min_images, min: 1900}, {filter: connected},"
        " {filter: not_related_to_training}]\n"
    )
    out = tmp_path / "front"
    argv = ["splits", "frontier", str(config), "--out", str(out), "--shares", "1,0.5,0.25"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| max share | R |" in printed and "wrote 3 sets (all proven optimal)" in printed
    assert sorted(p.name for p in out.iterdir()) == [
        "frontier.csv",
        "frontier.md",
        "frontier.png",
        "manifest.json",
        "share-0.25.txt",
        "share-0.50.txt",
        "share-1.00.txt",
    ]
    manifest = read_manifest_verified(out, "imagenet-zsl/frontier-v2")
    assert manifest["tool"] == "imagenet-zsl splits frontier"
    assert manifest["parameters"] == {"split": "bench", "shares": [1.0, 0.5, 0.25]}
    assert {f["path"] for f in manifest["files"]} == {p.name for p in out.iterdir()} - {"manifest.json"}
    rows = manifest["rows"]
    assert [r["max_branch_share"] for r in rows] == [1.0, 0.5, 0.25]
    for row in rows:
        assert row["gap"] <= 1e-6 and row["largest_share"] <= row["max_branch_share"] + 1e-9
        assert sum(row["branches"].values()) == 8 and row["status"] == "optimal"
        assert len(read_wnid_list(out / row["file"])) == 8
    # a tighter cap can only cost structural ratio
    ratios = [r["ratio"] for r in rows]
    assert ratios == sorted(ratios, reverse=True)
    assert (out / "frontier.csv").read_text().splitlines()[0].startswith("max_branch_share,ratio,")
    # the same inputs give the same bytes (sets, table, plot)
    again = tmp_path / "again"
    assert main([*argv[:3], "--out", str(again), *argv[5:]]) == 0
    for name in ("share-0.25.txt", "frontier.csv", "frontier.png", "manifest.json"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name


def test_the_flags_become_the_options():
    """Each flag lands in its field of the handler's options; a flag left off takes the field's default."""

    def options(*argv: str) -> object:
        args = cli.build_parser().parse_args(["splits", *argv])
        return cli.handler_config(load_target(args.func), args)

    built = options("build", "cfg.yaml", "--out", "o", "--no-progress")
    assert built == commands.BuildOptions(config="cfg.yaml", out="o", progress=False)
    assert options("build", "cfg.yaml", "--out", "o").progress is True
    stats = options("stats", "list.txt", "--no-optimum", "--graph", "imagenet")
    assert stats == commands.StatsOptions(file="list.txt", graph="imagenet", optimum=False)
    assert options("frontier", "cfg.yaml", "--out", "o").shares == DEFAULT_SHARES
    assert options("frontier", "cfg.yaml", "--out", "o", "--shares", "1,0.5").shares == (1.0, 0.5)
    assert options("show", "dgp-2hops") == commands.ShowOptions(name="dgp-2hops", splits_dir="splits")
