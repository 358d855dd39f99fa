"""Outputs and faults (issue 26): an ``--out`` file never replaces an input or another tool's file,
outputs honour the umask, and every OS error (disk full, file too large) is one ``error:`` line
naming the file and what to do."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from imagenet_zsl import atomic
from imagenet_zsl.atomic import atomic_write_text
from imagenet_zsl.cli import describe_os_error, main, one_line
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.safe_output import atomic_directory, check_out_file


# ----------------------------------------------------------------------------- check_out_file
def test_out_equal_to_an_input_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("x")
    with pytest.raises(UserInputError, match=r"--out .*in\.txt is the input"):
        check_out_file(source, [source], replaces=lambda p: True)


def test_out_inside_an_input_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    with pytest.raises(UserInputError, match="lies inside the input"):
        check_out_file(tmp_path / "store" / "new.tsv", [tmp_path / "store"])


def test_a_symlink_to_an_input_is_the_input(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("x")
    (tmp_path / "link.txt").symlink_to(source)
    with pytest.raises(UserInputError, match="is the input"):
        check_out_file(tmp_path / "link.txt", [source], replaces=lambda p: True)


def test_existing_file_is_replaced_only_when_it_is_ours(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours.tsv", tmp_path / "theirs.tsv"
    ours.write_text("OURS\n")
    theirs.write_text("notes\n")
    is_ours = lambda p: p.read_text().startswith("OURS")  # noqa: E731
    assert check_out_file(ours, replaces=is_ours) == ours.resolve()
    with pytest.raises(UserInputError, match="exists and is not a counts table"):
        check_out_file(theirs, replaces=is_ours, what="a counts table")
    with pytest.raises(UserInputError, match="exists and is not an output of this command"):
        check_out_file(ours)  # no recogniser: an existing file is never replaced
    assert theirs.read_text() == "notes\n" and ours.read_text() == "OURS\n"


def test_existing_symlink_or_special_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target.tsv"
    target.write_text("OURS\n")
    (tmp_path / "link.tsv").symlink_to(target)
    with pytest.raises(UserInputError, match="symbolic link"):
        check_out_file(tmp_path / "link.tsv", replaces=lambda p: True)
    (tmp_path / "dangling.tsv").symlink_to(tmp_path / "gone")
    with pytest.raises(UserInputError, match="symbolic link"):
        check_out_file(tmp_path / "dangling.tsv", replaces=lambda p: True)
    os.mkfifo(tmp_path / "fifo.tsv")
    with pytest.raises(UserInputError, match="not a regular file"):
        check_out_file(tmp_path / "fifo.tsv", replaces=lambda p: True)


def test_a_recogniser_that_fails_means_not_ours(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    path.write_bytes(b"PK\x03\x04 truncated")

    def broken(p: Path) -> bool:
        raise ValueError("unreadable")

    with pytest.raises(UserInputError, match="exists and is not"):
        check_out_file(path, replaces=broken)


# ----------------------------------------------------------------------------- umask (issue 23 §9)
@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_outputs_honour_the_umask(tmp_path: Path, umask: int, file_mode: int, dir_mode: int) -> None:
    old = os.umask(umask)
    try:
        assert atomic.current_umask() == umask
        written = atomic_write_text(tmp_path / "a.txt", "x")
        with atomic_directory(tmp_path / "run", tool="imagenet-zsl test") as tmp:
            atomic_write_text(tmp / "inner.txt", "y")
    finally:
        os.umask(old)
    assert stat.S_IMODE(written.stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == dir_mode
    assert stat.S_IMODE((tmp_path / "run" / "inner.txt").stat().st_mode) == file_mode


# ----------------------------------------------------------------------------- OS errors
def test_a_write_error_without_a_file_name_gets_the_file_being_written(tmp_path: Path) -> None:
    """write() raises ENOSPC/EFBIG with no file name; the atomic writer adds the file's path."""
    target = tmp_path / "out.txt"
    with pytest.raises(OSError) as caught, atomic.atomic_file(target):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []  # the temp file is gone, nothing half-written


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        (errno.ENOSPC, "free space"),
        (errno.EFBIG, "ulimit -f"),
        (errno.EACCES, "permissions"),
        (errno.EXDEV, "check the path"),  # no specific advice: still one line, still the file
    ],
)
def test_os_errors_through_the_cli_name_the_file_and_what_to_do(
    tmp_path: Path, capsys, monkeypatch, code: int, advice: str
) -> None:
    """Raised from inside a command, after its --out was checked, with no file name (as write()
    raises ENOSPC/EFBIG): the line names the --out and the remedy; exit 2, no traceback."""
    from imagenet_zsl.images import commands as images_commands  # where the handler looks it up

    store = tmp_path / "store" / "n01440764"
    store.mkdir(parents=True)
    (store / "a.JPEG").write_bytes(b"x")
    out = tmp_path / "counts.tsv"

    def fail(counts, path=None):
        raise OSError(code, os.strerror(code))

    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(images_commands, "write_counts_tsv", fail)
    capsys.readouterr()
    assert main(["images", "count", "--store", str(tmp_path / "store"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert os.strerror(code) in line and str(out) in line and advice in line
    assert "(?)" not in line


def test_describe_os_error_prefers_the_errors_own_file() -> None:
    err = OSError(errno.EFBIG, "File too large", "/data/x.npy")
    text = describe_os_error(err)
    assert text.startswith("File too large (/data/x.npy): ") and "ulimit -f" in text


def test_error_lines_are_one_line_and_bounded() -> None:
    assert one_line("a\n  b\n\nc") == "a | b | c"
    long = one_line("x" * 5000, limit=100)
    assert long == "x" * 100 + "... (4,900 more characters)"


def test_a_real_file_size_limit_is_one_error_line(tmp_path: Path) -> None:
    """`ulimit -f`: Python ignores SIGXFSZ, so write() fails with EFBIG (it gave a traceback)."""
    store = tmp_path / "store"
    for wnid in ("n01440764", "n01443537"):
        (store / wnid).mkdir(parents=True)
        (store / wnid / f"{wnid}_1.JPEG").write_bytes(b"x")
    out = tmp_path / "counts.tsv"
    script = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_FSIZE, (20, 20))
        from imagenet_zsl.cli import main
        sys.exit(main(["images", "count", "--store", {str(store)!r}, "--out", {str(out)!r}]))
        """
    )
    env = {**os.environ, "IMAGENET_ZSL_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert "File too large" in line and str(out) in line and "ulimit -f" in line
    assert not out.exists()
