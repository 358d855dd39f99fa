"""The image filter's tables as other commands read them (issue 44 §3): ``classes.csv`` (the
``image_quality`` pool filter) and ``kept.csv`` (``evaluate --kept-images``, ``analyze ladder``).
Latin-1 bytes, an unbalanced quote, a short row, a malformed wnid or verdict and a class listed
twice are one line naming ``file:line``; a FIFO is refused before it is opened; any bytes at all
give a result or one such line, within a few seconds."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.shard_checks import class_name_problem
from imagenet_zsl.image_filter.filtered import class_verdicts, kept_image_ids
from imagenet_zsl.image_filter.pool_filters import image_quality
from tests.robustness.test_prompts_file import PROPERTY, check_reader, mutated

HEADER = "wnid,images_before,images_after,heldout_accuracy,kept,reason\n"
CLASSES = (
    HEADER
    + "n02084071,40,38,0.912500,true,\n"
    + 'n02121808,40,3,0.210000,false,"too few images after filtering (3 < 10)"\n'
).encode()
KEPT = b'image_id,wnid\nn02084071/n02084071_1.JPEG,n02084071\n"n02084071/a,b.JPEG",n02084071\n'


@pytest.mark.parametrize(
    ("content", "culprit"),
    [
        ((HEADER + "n02084071,40,38,0.9,true,r\xe9sum\xe9\n").encode("latin-1"), "classes.csv:2"),
        (
            (HEADER + 'n02084071,40,38,0.9,true,"too few\nn02121808,4,4,0.1,false,\n').encode(),
            "classes.csv:2",
        ),
        ((HEADER + "n02084071,40,38,0.9,true\n").encode(), "classes.csv:2"),
        ((HEADER + "n02084071,40,38,0.9,yes,\n").encode(), "classes.csv:2"),
        ((HEADER + "n0208407,40,38,0.9,true,\n").encode(), "classes.csv:2"),
        ((HEADER + "n02084071,4,4,0.9,true,\nn02084071,4,0,0.1,false,\n").encode(), "classes.csv:3"),
        (b"wnid,kept,kept\nn02084071,true,false\n", "'kept' appears twice"),
        (b"", "empty"),
    ],
    ids=[
        "latin-1",
        "unbalanced-quote",
        "short-row",
        "bad-verdict",
        "bad-wnid",
        "listed-twice",
        "column-twice",
        "empty",
    ],
)
def test_classes_csv_mistakes_name_the_line(tmp_path: Path, content: bytes, culprit: str) -> None:
    path = tmp_path / "classes.csv"
    path.write_bytes(content)
    with pytest.raises(UserInputError, match=culprit.replace(".", r"\.")) as caught:
        image_quality(["n02084071"], None, str(path))
    assert "\n" not in str(caught.value)


def _pool_filter(path: Path) -> list[str]:
    return image_quality(["n02084071"], None, str(path))  # a recipe's {filter: image_quality, path: ...}


@pytest.mark.parametrize("reader", [_pool_filter, kept_image_ids], ids=["image_quality path", "kept.csv"])
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, reader) -> None:
    fifo = tmp_path / "table.csv"
    os.mkfifo(fifo)

    def blocked(*_):
        raise AssertionError("blocked: the FIFO was opened")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(10)
    try:
        with pytest.raises(UserInputError, match="FIFO"):
            reader(fifo)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_the_tables_read_as_written(tmp_path: Path) -> None:
    # a quoted reason holding a comma, a quoted image id holding one, a BOM, CRLF and a blank line
    assert check_reader(class_verdicts, tmp_path / "classes.csv", CLASSES) == {
        "n02084071": True,
        "n02121808": False,
    }
    crlf = b"\xef\xbb\xbf" + KEPT.replace(b"\n", b"\r\n") + b"\r\n"
    assert check_reader(kept_image_ids, tmp_path / "kept.csv", crlf) == {
        "n02084071/n02084071_1.JPEG",
        "n02084071/a,b.JPEG",
    }
    assert image_quality(["n02084071", "n02121808", "n01440764"], None, str(tmp_path / "classes.csv")) == [
        "n02084071"
    ]


@PROPERTY
@given(data=st.one_of(st.binary(max_size=400), mutated(CLASSES)))
def test_any_classes_csv_gives_verdicts_or_one_line(tmp_path: Path, data: bytes) -> None:
    result = check_reader(class_verdicts, tmp_path / "classes.csv", data)
    if result is not None:
        assert all(class_name_problem(w) is None for w in result)
        assert all(isinstance(kept, bool) for kept in result.values())


@PROPERTY
@given(data=st.one_of(st.binary(max_size=400), mutated(KEPT)))
def test_any_kept_csv_gives_image_ids_or_one_line(tmp_path: Path, data: bytes) -> None:
    result = check_reader(kept_image_ids, tmp_path / "kept.csv", data)
    if result is not None:
        assert all(isinstance(i, str) and i for i in result)
