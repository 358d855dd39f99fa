"""Issue 44 §2-3: labels mean what the file says, and no reader of a store's metadata ends in an
internal error or a hang. Each case was silently wrong (a shifted class, a second class, a label
rounded) or an internal error (RecursionError, int()) or a hang before; now each is one `error:`
line, exit 2, naming the file, shard, key or line."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from imagenet_zsl.images.store import open_store

JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 60
W0, W1, W2 = "n01440764", "n01443537", "n01484850"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))


def _shard(path: Path, samples: list[tuple[str, bytes | None, bytes | None]]) -> Path:
    """A webdataset shard: per sample (key, .cls bytes or None, .json bytes or None)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, cls, meta in samples:
            members = [(f"{key}.jpg", JPEG)]
            members += [(f"{key}.cls", cls)] if cls is not None else []
            members += [(f"{key}.json", meta)] if meta is not None else []
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path.parent


def _json(**fields) -> bytes:
    return json.dumps(fields).encode()


def _count(root: Path) -> list:
    return ["images", "count", "--store", root]


# ----------------------------------------------------------------------------- webdataset


def test_a_class_index_line_holding_two_wnids_is_an_error_not_a_shift(tmp_path, cli_error):
    """Read with .split(), line 1 'n01440764 n01443537' made class 1 n01443537 (every later class
    shifted by one): the sample below was counted under the wrong wnid."""
    root = _shard(tmp_path / "wds" / "s-0000.tar", [("a1", b"1", None)])
    (root / "imagenet22k_synsets.txt").write_text(f"{W0} {W1}\n{W2}\n")
    cli_error(_count(root), "imagenet22k_synsets.txt:1", inputs=[root])
    (root / "imagenet22k_synsets.txt").write_text(f"{W0}\n{W2}\n")
    assert open_store(root, progress=False).counts() == {W2: 1}


def test_a_class_index_listing_a_wnid_twice_is_an_error(tmp_path, cli_error):
    root = _shard(tmp_path / "wds" / "s-0000.tar", [("a1", b"0", None), ("a2", b"1", None)])
    (root / "classes.txt").write_text(f"{W0}\n{W0}\n{W1}\n")
    line = cli_error(_count(root), "classes.txt:2", inputs=[root])
    assert "first on line 1" in line


def test_a_wnid_with_a_trailing_newline_is_not_a_wnid(tmp_path, cli_error):
    root = _shard(tmp_path / "wds" / "s-0000.tar", [("a1", b"0", _json(class_name=f"{W0}\n"))])
    cli_error(_count(root), ["s-0000.tar", "sample a1", "class_name"], inputs=[root])


def test_a_json_naming_two_wnids_is_an_error_not_its_first_field(tmp_path, cli_error):
    meta = _json(class_name=W0, wnid=W1)
    root = _shard(tmp_path / "wds" / "s-0000.tar", [("a1", None, meta)])
    line = cli_error(_count(root), ["s-0000.tar", "sample a1"], inputs=[root])
    assert W0 in line and W1 in line


def test_a_5000_digit_cls_is_one_error_line(tmp_path, cli_error):
    root = _shard(tmp_path / "wds" / "s-0000.tar", [("a1", b"7" * 5000, _json(class_name=W0))])
    cli_error(_count(root), ["s-0000.tar", "sample a1", ".cls"], inputs=[root])


def test_a_json_nested_100000_deep_is_one_error_line(tmp_path, cli_error):
    deep = b"[" * 100_000 + b"]" * 100_000
    root = _shard(tmp_path / "wds" / "s-0000.tar", [("a1", b"0", deep)])
    cli_error(_count(root), ["s-0000.tar", "sample a1", "nested too deeply"], inputs=[root])


# ----------------------------------------------------------------------------- parquet


def _parquet(path: Path, labels, names=None, label_type=None, metadata: bytes | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    image = pa.array([{"bytes": JPEG + bytes([i]), "path": f"x{i}.jpg"} for i in range(len(labels))])
    table = pa.table({"image": image, "label": pa.array(labels, label_type)})
    if names is not None:
        metadata = json.dumps({"info": {"features": {"label": {"names": names}}}}).encode()
    if metadata is not None:
        table = table.replace_schema_metadata({"huggingface": metadata})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path.parent


@pytest.mark.parametrize(
    ("labels", "kind"),
    [
        ([0.0, 1.7, 2.2, 0.9], "double"),  # were truncated to 0, 1, 2, 0
        ([True, False, True], "bool"),  # were read as 1, 0, 1
        (["0", "1", "1"], "string"),  # int() errors
        ([[0], [1], [1]], "list<"),
    ],
    ids=["float", "bool", "string", "list"],
)
def test_a_label_column_that_is_not_integers_is_an_error(tmp_path, cli_error, labels, kind):
    root = _parquet(tmp_path / "pq" / "train.parquet", labels, [W0, W1, W2])
    line = cli_error(_count(root), ["train.parquet", "'label' column", kind], inputs=[root])
    assert "not integers" in line


def test_a_wnid_with_a_newline_in_the_parquet_names_is_an_error(tmp_path, cli_error):
    root = _parquet(tmp_path / "pq" / "train.parquet", [0, 1], [W0, f"{W1}\n"])
    cli_error(_count(root), ["train.parquet", "label names must be wnids"], inputs=[root])


def test_duplicate_parquet_class_names_are_an_error(tmp_path, cli_error):
    root = _parquet(tmp_path / "pq" / "train.parquet", [0, 1], [W0, W1, W0])
    cli_error(_count(root), ["train.parquet", "labels 0 and 2 are both named"], inputs=[root])


CARD = (
    "---\ndataset_info:\n  features:\n  - name: label\n    dtype:\n      class_label:\n"
    "        names:\n{names}---\n"
)


@pytest.mark.parametrize(
    ("names", "culprit"),
    [
        (f"          '0': {W0}\n          '2': {W2}\n", "label 1 has no name"),  # label 1 became W2
        (f"          'a': {W0}\n", "'a' is not a label number"),  # int('a')
        (f"          '0': {W0}\n          '1': {W0}\n", "labels 0 and 1 are both named"),
    ],
    ids=["gap", "word-key", "duplicate"],
)
def test_card_class_names_with_a_gap_a_word_or_a_repeat_are_an_error(tmp_path, cli_error, names, culprit):
    root = _parquet(tmp_path / "pq" / "train.parquet", [0, 0])
    (root / "README.md").write_text(CARD.format(names=names))
    cli_error(_count(root), ["README.md", culprit], inputs=[root])


def test_card_names_that_disagree_with_the_files_metadata_are_an_error(tmp_path, cli_error):
    root = _parquet(tmp_path / "pq" / "train.parquet", [0, 1], [W0, W1])
    (root / "README.md").write_text(CARD.format(names=f"          '0': {W1}\n          '1': {W0}\n"))
    cli_error(_count(root), ["train.parquet", "README.md", "differ"], inputs=[root])


def test_deep_hugging_face_metadata_is_one_error_line(tmp_path, cli_error):
    deep = b'{"info": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    root = _parquet(tmp_path / "pq" / "train.parquet", [0, 1], metadata=deep)
    cli_error(
        _count(root), ["train.parquet", "huggingface schema metadata", "nested too deeply"], inputs=[root]
    )


def test_a_dataset_card_nested_50000_deep_is_one_error_line(tmp_path, cli_error):
    root = _parquet(tmp_path / "pq" / "train.parquet", [0, 1], [W0, W1])
    (root / "README.md").write_text("---\ndataset_info: " + "[" * 50_000 + "]" * 50_000 + "\n---\n")
    cli_error(_count(root), ["README.md", "nested too deeply (over 100 levels)"], inputs=[root])


def test_a_dataset_card_alias_bomb_is_refused_at_once(tmp_path, cli_error):
    """9 levels of 9 aliases as the label names: 387 million values once expanded; reading them
    never ended."""
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    card = (
        "\n".join(levels)
        + "\n"
        + CARD.format(names="").removeprefix("---\n").replace("names:\n", "names: *a8\n")
    )
    root = _parquet(tmp_path / "pq" / "train.parquet", [0, 1])
    (root / "README.md").write_text("---\n" + card)
    cli_error(_count(root), ["README.md", "aliases"], inputs=[root])
