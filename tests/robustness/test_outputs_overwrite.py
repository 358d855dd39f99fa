"""Nothing of the user's lost when a command writes over its own output (issue 44 §4): a file the
manifest lists that was edited since (``report.md``) is refused, naming it, unless
``--overwrite``; a ``--out`` that is a symbolic link is written through, never replaced by a
directory. The rule lives in ``safe_output.check_out_dir``, so every command that replaces a
directory has it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagenet_zsl.cli import build_parser, main
from imagenet_zsl.errors import UserInputError, overwriting
from imagenet_zsl.manifests import write_manifest
from imagenet_zsl.safe_output import atomic_directory, check_out_dir
from tests.robustness.test_evaluate import argv, bench

#: the evaluate bench (tests/robustness/test_evaluate.py), shared with this module
SHARED_FIXTURES = (bench,)

TOOL = "imagenet-zsl evaluate"


def _hit_at_1(out: Path) -> float:
    return json.loads((out / "metrics.json").read_text())["zsl"]["flat"]["1"]


def test_evaluate_refuses_to_replace_an_edited_report(cli_error, bench, tmp_path):
    out = tmp_path / "run"
    assert main(argv(bench, out)) == 0
    report = out / "report.md"
    original = report.read_bytes()
    report.write_text(original.decode() + "\nMy notes on this run.\n")
    edited = report.read_bytes()
    line = cli_error(argv(bench, out), culprit=["report.md", "--overwrite"], inputs=[bench["root"], out])
    assert "edited" in line and report.read_bytes() == edited
    assert main([*argv(bench, out), "--overwrite"]) == 0
    assert report.read_bytes() == original
    # a listed file that is gone was not edited: nothing of it is left to lose
    report.unlink()
    assert main(argv(bench, out)) == 0 and report.read_bytes() == original


def test_an_edit_of_the_same_size_is_found_by_its_sha256(tmp_path):
    out = tmp_path / "out"
    with atomic_directory(out, tool=TOOL) as tmp:
        (tmp / "notes.md").write_text("hit@1 = 0.25\n")
        write_manifest(tmp, format="imagenet-zsl/evaluation-v2", tool=TOOL)
    (out / "notes.md").write_text("hit@1 = 0.99\n")
    with pytest.raises(UserInputError, match=r"notes\.md was edited since 'evaluate' wrote it"):
        check_out_dir(out, TOOL, own_files=True)
    with overwriting():
        assert check_out_dir(out, TOOL, own_files=True) == out.resolve()
    with pytest.raises(UserInputError, match="notes.md"):  # the permission ended with the block
        check_out_dir(out, TOOL, own_files=True)


def test_a_symlink_out_is_written_through(bench, tmp_path):
    real = tmp_path / "runs" / "first"
    assert main(argv(bench, real, "--k", "1")) == 0
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    assert main(argv(bench, link, "--k", "1", "2")) == 0
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert set(json.loads((real / "metrics.json").read_text())["zsl"]["flat"]) == {"1", "2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "latest", "runs"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["first"]
    # through a link the rules are the target's: a directory another command wrote is refused
    precious = tmp_path / "thesis"
    precious.mkdir()
    (precious / "chapter1.tex").write_text("keep me")
    elsewhere = tmp_path / "to-thesis"
    elsewhere.symlink_to(precious, target_is_directory=True)
    assert main(argv(bench, elsewhere)) == 2
    assert elsewhere.is_symlink() and (precious / "chapter1.tex").read_text() == "keep me"


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate"],
        ["train"],
        ["splits", "build"],
        ["splits", "factor"],
        ["labels", "build"],
        ["simulate"],
        ["images", "filter"],
        ["attributes", "run"],
        ["analyze", "ladder"],
    ],
    ids=lambda c: " ".join(c),
)
def test_commands_that_replace_a_directory_take_overwrite(command):
    parser = build_parser()
    for name in command:
        parser = next(a for a in parser._actions if a.dest.endswith("command")).choices[name]
    assert "--overwrite" in parser.format_help()
