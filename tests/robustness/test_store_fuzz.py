"""Issue 44 §3: every reader of an untrusted file of an image store, fed random and mutated bytes
(hypothesis, derandomized: the same examples every run), gives a result or one `UserInputError`,
never another exception, and within a few seconds (each example's deadline).

Readers: a tar's member listing (fall11 tar and webdataset shard), a sample's ``.json`` and
``.cls``, the class-index file, a parquet file (its columns and ``huggingface`` metadata) and the
dataset card (``README.md``). A ledger that comes back adds up."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.images.layouts import ParquetLayout
from imagenet_zsl.images.ledger import ledger_problem
from imagenet_zsl.images.metadata import read_class_index_file, read_dataset_card
from imagenet_zsl.images.parquet_files import scan_parquet
from imagenet_zsl.images.scan import scan_tar
from imagenet_zsl.images.wds import parse_cls, parse_sample_json, scan_shard

W0, W1 = "n01440764", "n01443537"
FUZZ = settings(
    max_examples=60,
    deadline=2000,  # ms per example: "never more than a few seconds"
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def _valid_shard() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for key, wnid, cls in (("a1", W0, 0), ("a2", W1, 1), ("a3", W0, 0)):
            meta = json.dumps({"class_name": wnid, "label": cls}).encode()
            for name, data in ((f"{key}.jpg", b"\xff\xd8" + b"x" * 700), (f"{key}.cls", str(cls).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            info = tarfile.TarInfo(f"{key}.json")
            info.size = len(meta)
            tar.addfile(info, io.BytesIO(meta))
    return buffer.getvalue()


SHARD = _valid_shard()


def _mutated(original: bytes, hot: list[int] | None = None) -> st.SearchStrategy[bytes]:
    """``original`` with a few bytes changed (anywhere, or in ``hot``) and possibly cut short, or
    random bytes."""
    positions = st.sampled_from(range(len(original)))  # uniform: integers() favours small ones
    if hot is not None:
        positions = st.one_of(positions, st.sampled_from(hot))
    flips = st.lists(st.tuples(positions, st.integers(0, 255)), max_size=8)
    cut = st.one_of(st.just(len(original)), positions, st.sampled_from(range(0, len(original), 512)))

    def apply(changes: list[tuple[int, int]], end: int) -> bytes:
        data = bytearray(original)
        for position, value in changes:
            data[position] = value
        return bytes(data[:end])

    return st.one_of(st.builds(apply, flips, cut), st.binary(max_size=3000))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _adds_up(scan) -> None:
    assert ledger_problem(scan.ledger) is None
    assert scan.ledger["images"] == len(scan.members) == len(scan.offsets)


#: the end of each member's data in the valid shard: a cut before the last one's loses data
with tarfile.open(fileobj=io.BytesIO(SHARD)) as _tar:
    DATA_END = {m.name: m.offset_data + m.size for m in _tar.getmembers()}
LAST_DATA_END = max(DATA_END.values())
END_BLOCKS = -(-LAST_DATA_END // 512) * 512  # where the end-of-archive blocks start


#: the bytes of the shard's member headers (name, size, type, checksum: where damage bites)
with tarfile.open(fileobj=io.BytesIO(SHARD)) as _tar:
    HEADERS = [m.offset + i for m in _tar.getmembers() for i in range(512)]


@FUZZ
@given(data=_mutated(SHARD, HEADERS))
def test_a_tar_listing_of_mutated_bytes_is_a_result_or_one_user_error(folder, data):
    path = folder / "n01440764.tar"
    path.write_bytes(data)
    for scan in (scan_tar, scan_shard):
        try:
            found = scan(folder, "n01440764.tar")
        except UserInputError as err:
            assert "\n" not in str(err)
            continue
        _adds_up(found)
        assert all(o + z <= len(data) for o, z in zip(found.offsets, found.sizes, strict=True))


@FUZZ
@given(cut=st.one_of(st.sampled_from(range(len(SHARD))), st.sampled_from(range(0, len(SHARD), 512))))
def test_a_shard_cut_anywhere_before_its_end_blocks_is_recorded_as_damaged(folder, cut):
    """A partial download: every prefix of a shard short of its end-of-archive blocks is damage;
    every image (fall11 tar) or whole sample (webdataset) before the cut is indexed, no other."""
    (folder / "s-0000.tar").write_bytes(SHARD[:cut])
    images = sum(1 for name, end in DATA_END.items() if name.endswith(".jpg") and end <= cut)
    samples = sum(1 for key in ("a1", "a2", "a3") if DATA_END[f"{key}.json"] <= cut)  # whole
    for scan, indexed in ((scan_tar, images), (scan_shard, samples)):
        found = scan(folder, "s-0000.tar")
        _adds_up(found)
        assert found.ledger["images"] == indexed
        if cut <= END_BLOCKS:  # data lost, or (past the last member) the end-of-archive blocks
            assert [p["kind"] for p in found.problems if p["kind"].endswith("-tar")], cut
            assert found.ledger["damage"]
        else:
            assert not found.ledger["damage"]


_JSON = json.dumps({"class_name": W0, "wnid": W0, "label": 3, "x": [1, {"y": None}]}).encode()


_DEEP = st.sampled_from([1, 50, 900, 5_000, 100_000]).map(
    lambda n: b'{"class_name": ' + b"[" * n + b"]" * n + b"}"
)


@FUZZ
@given(data=st.one_of(_mutated(_JSON), _DEEP))
def test_a_sample_json_of_mutated_bytes_is_a_result_or_one_user_error(data):
    try:
        wnid, label = parse_sample_json("s.tar", "k", data)
    except UserInputError as err:
        assert "\n" not in str(err) and "s.tar: sample k" in str(err)
        return
    assert wnid is None or wnid == W0 or len(wnid) == 9
    assert label is None or (isinstance(label, int) and label >= 0)


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=40),
        st.from_regex(rb"\s*[0-9]{1,12}\s*", fullmatch=True),
        st.integers(1, 6000).map(lambda n: b"7" * n),
    )
)
def test_a_cls_of_random_bytes_is_a_class_index_or_one_user_error(data):
    try:
        value = parse_cls("s.tar", "k", data)
    except UserInputError as err:
        assert "\n" not in str(err)
        return
    assert 0 <= value < 10**9 and int(data.strip()) == value


_INDEX = f"{W0}\n{W1}\nn01484850\n".encode()


_SEPARATED = st.lists(st.sampled_from([W0, W1, "n01484850", "n02084071"]), min_size=1, max_size=6).flatmap(
    lambda wnids: st.lists(
        st.sampled_from(["\n", "\r\n", " ", "\t", ",", "\n\n"]), min_size=len(wnids), max_size=len(wnids)
    ).map(lambda seps: "".join(w + s for w, s in zip(wnids, seps, strict=True)).encode())
)


@FUZZ
@given(data=st.one_of(_mutated(_INDEX), _SEPARATED))
def test_a_class_index_file_of_mutated_bytes_is_a_list_or_one_user_error(folder, data):
    """Accepted only as one wnid a line, each once: line i is class i."""
    path = folder / "imagenet22k_synsets.txt"
    path.write_bytes(data)
    try:
        wnids = read_class_index_file(path)
    except UserInputError as err:
        assert "\n" not in str(err) and str(path) in str(err)
        return
    lines = [line.strip() for line in data.decode("utf-8-sig").splitlines()]
    assert wnids == [line for line in lines if line] == lines[: len(wnids)]
    assert len(set(wnids)) == len(wnids) and all(len(w) == 9 for w in wnids)


_CARD = (
    "---\ndataset_info:\n  features:\n  - name: label\n    dtype:\n      class_label:\n        names:\n"
    f"          '0': {W0}\n          '1': {W1}\n"
    "  splits:\n  - name: train\n    num_examples: 2\n---\n# card\n"
).encode()


@FUZZ
@given(data=st.one_of(_mutated(_CARD), st.text(max_size=400).map(lambda t: ("---\n" + t).encode())))
def test_a_dataset_card_of_mutated_bytes_is_a_mapping_or_one_user_error(folder, data):
    (folder / "README.md").write_bytes(data)
    try:
        front, _ = read_dataset_card(folder)
    except UserInputError as err:
        assert "\n" not in str(err) and "README.md" in str(err)
        return
    assert front is None or isinstance(front, dict)


def _parquet_bytes(labels: list, metadata: bytes) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    image = pa.array([{"bytes": b"\xff\xd8" + bytes([i]), "path": f"x{i}.jpg"} for i in range(len(labels))])
    table = pa.table({"image": image, "label": pa.array(labels)}).replace_schema_metadata(
        {"huggingface": metadata}
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


_META = json.dumps({"info": {"features": {"label": {"names": [W0, W1]}}}}).encode()
_PARQUET = _parquet_bytes([0, 1, 1, 0], _META)
#: label columns of any type, and huggingface metadata from JSON-ish text (deep nesting included)
_LABELS = st.one_of(
    st.lists(st.integers(-2, 3), min_size=1, max_size=4),
    st.lists(st.floats(-1, 3, allow_nan=False), min_size=1, max_size=4),
    st.lists(st.booleans(), min_size=1, max_size=4),
    st.lists(st.sampled_from(["0", "1", W0]), min_size=1, max_size=4),
)
_METADATA = st.one_of(
    st.just(_META),
    _mutated(_META),
    st.sampled_from([1, 50, 900, 5_000, 100_000]).map(lambda n: b'{"info": ' + b"[" * n + b"]" * n + b"}"),
)


def _read_parquet(store: Path, payload: bytes) -> tuple[list[str], list] | None:
    """(wnids, labels) of a one-file parquet store holding ``payload``; None on a user error."""
    (store / "train.parquet").write_bytes(payload)
    try:
        found = scan_parquet(store, "train.parquet")
        _adds_up(found)
        return ParquetLayout(store).wnids(store, found), found.labels or []
    except UserInputError as err:
        assert "\n" not in str(err)
        return None


@FUZZ
@given(data=_mutated(_PARQUET))
def test_a_parquet_file_of_mutated_bytes_is_a_result_or_one_user_error(folder, data):
    store = folder / "pq"
    store.mkdir(exist_ok=True)
    result = _read_parquet(store, data)
    if result is not None:
        assert set(result[0]) <= {W0, W1}


@FUZZ
@given(labels=_LABELS, metadata=_METADATA)
def test_parquet_labels_and_metadata_are_read_as_written_or_refused(folder, labels, metadata):
    """Accepted only as integer labels naming their class exactly: never rounded, never a bool."""
    store = folder / "pq-labels"
    store.mkdir(exist_ok=True)
    result = _read_parquet(store, _parquet_bytes(labels, metadata))
    if result is not None:
        wnids, read = result
        assert all(type(label) is int for label in labels) and read == labels
        assert wnids == [[W0, W1][label] for label in labels]
