"""The ``labels encode --prompts`` file (issue 44 §2, §3): a class's prompts are what the file says
(a key given twice is refused, never the last one kept; a wnid is n + 8 ASCII digits), and any
bytes at all give prompts or one ``error:`` line naming the file, within a few seconds."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.semantics.prompts import read_prompt_file

DOG, CAT = "n02084071", "n02121808"
#: one class a line, so that a mutation repeating a line gives a key twice
VALID = f'{{\n"{DOG}": ["a photo of a dog.", "a dog."],\n"{CAT}": ["a cat."]\n}}\n'.encode()


def test_a_key_given_twice_is_refused_through_the_command_line(cli_error, tmp_path: Path) -> None:
    classes = tmp_path / "classes.txt"
    classes.write_text(f"{DOG}\n")
    prompts = tmp_path / "cupl.json"
    prompts.write_text(f'{{"{DOG}": ["a dog."],\n "{DOG}": ["a cat."]}}\n')  # json.loads keeps the cat
    out = tmp_path / "cv.npz"
    argv = ["labels", "encode", "--encoder", "sentence:x", "--classes", classes, "--prompts", prompts]
    line = cli_error([*argv, "--out", out], ["cupl.json", DOG, "twice"], [classes, prompts], [out])
    assert "'a cat.'" not in line
    prompts.write_bytes(VALID)  # once each class is given once, its prompts are the file's
    assert read_prompt_file(prompts) == {DOG: ("a photo of a dog.", "a dog."), CAT: ("a cat.",)}


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ('{"n٠٢٠٨٤٠٧١": ["a dog."]}', "is not a wnid"),  # Arabic-Indic digits: \d matched them
        ('{"n02084071": ["a dog."], "n02121808": [' + "1" * 5000 + "]}", "prompt file"),
        ('{"n02084071": [{"text": "a", "text": "b"}]}', "'text' is given twice"),
    ],
    ids=["non-ascii-digits", "huge-integer", "key-twice-inside"],
)
def test_mistakes_in_a_prompt_file_are_one_line(tmp_path: Path, text: str, culprit: str) -> None:
    path = tmp_path / "cupl.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserInputError, match=culprit) as caught:
        read_prompt_file(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


# ----------------------------------------------------------------------------- property: any bytes


def check_reader(read, path: Path, data: bytes, seconds: float = 3.0):
    """``read(path)`` on ``data``: a result, or a one-line UserInputError naming the file; never
    another exception; at most ``seconds`` of CPU."""
    path.write_bytes(data)
    start = time.process_time()
    try:
        result = read(path)
    except UserInputError as err:
        message = str(err)
        assert "\n" not in message and "\r" not in message, message
        assert str(path) in message and len(message) < 2000, message
        result = None
    assert time.process_time() - start < seconds
    return result


@st.composite
def mutated(draw: st.DrawFn, valid: bytes) -> bytes:
    """``valid`` with a line repeated, then a few bytes replaced, inserted or deleted (quotes,
    separators, line ends, non-UTF-8 and NUL bytes favoured), or cut short."""
    lines = valid.splitlines(keepends=True)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(lines) - 1))
        lines.insert(at, lines[at])
    data = bytearray(b"".join(lines))
    special = st.sampled_from(list(b'"\\,:[]{}\n\r\t\x00\xff\xc3') + [0x80, 0x20])
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["replace", "insert", "delete", "cut"]))
        byte = draw(st.one_of(special, st.integers(0, 255)))
        if kind == "replace" and at < len(data):
            data[at] = byte
        elif kind == "insert":
            data[at:at] = bytes([byte]) * draw(st.integers(1, 3))
        elif kind == "delete":
            del data[at : at + 1]
        else:
            del data[at:]
    return bytes(data)


PROPERTY = settings(
    max_examples=80,
    deadline=None,  # CPU time is bounded in check_reader (wall time is not, on a loaded machine)
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _what_the_file_says(data: bytes) -> list | None:
    """The (key, value) pairs of the file's JSON object, in order, duplicates kept (None: not a
    JSON object)."""
    try:
        pairs = json.loads(data.decode("utf-8-sig"), object_pairs_hook=list)
    except (ValueError, RecursionError):
        return None
    return pairs if isinstance(pairs, list) and all(isinstance(p, tuple) for p in pairs) else None


@PROPERTY
@given(data=st.one_of(st.binary(max_size=400), mutated(VALID)))
def test_any_bytes_give_prompts_or_one_line(tmp_path: Path, data: bytes) -> None:
    result = check_reader(read_prompt_file, tmp_path / "cupl.json", data)
    if result is not None:  # prompts exactly as the file says: each key once, n + 8 ASCII digits
        pairs = _what_the_file_says(data)
        assert pairs is not None and len({k for k, _ in pairs}) == len(pairs)
        assert result == {k: tuple(v) for k, v in pairs}
        assert all(k[0] == "n" and k[1:].isascii() and k[1:].isdigit() and len(k) == 9 for k in result)
