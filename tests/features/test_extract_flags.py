"""``extract`` flags that contradict each other (issue 35): one error line, exit 2, nothing written."""

from __future__ import annotations

import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.extract_setup import check_out_outside_store


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def test_merge_takes_no_extraction_flags(tmp_path, capsys):
    argv = ["extract", "--merge", str(tmp_path / "run"), "--store", str(tmp_path), "--logits"]
    assert main(argv) == 2
    err = _error(capsys)
    assert "takes no --store, --logits: drop them, or drop --merge" in err


def test_no_verify_needs_merge(tmp_path, capsys):
    argv = ["extract", "--store", str(tmp_path / "s"), "--classes", "c.txt", "--out", str(tmp_path / "o")]
    assert main([*argv, "--no-verify"]) == 2
    assert "--no-verify applies to --merge DIR only" in _error(capsys)
    assert not (tmp_path / "o").exists()


def test_out_inside_the_store_is_refused(tmp_path, capsys):
    store = tmp_path / "store"
    (store / "n01440764").mkdir(parents=True)
    classes = tmp_path / "classes.txt"
    classes.write_text("n01440764\n")
    out = store / "features"
    argv = ["extract", "--store", str(store), "--classes", str(classes), "--out", str(out)]
    assert main([*argv, "--backbone", "tiny-test", "--weights", "random", "--device", "cpu"]) == 2
    assert f"--out {out} lies inside the store {store}" in _error(capsys)
    assert not out.exists()


@pytest.mark.parametrize(("out", "word"), [("store", "is"), ("store/x/y", "lies inside"), (".", "holds")])
def test_out_and_store_overlap_either_way(tmp_path, monkeypatch, out, word):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir()
    with pytest.raises(UserInputError, match=f"--out {out} {word} the store store"):
        check_out_outside_store(out, "store")
    check_out_outside_store("store-features", "store")  # a sibling sharing a prefix is fine
