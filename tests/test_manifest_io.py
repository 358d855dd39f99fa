"""The one manifest writer and its verifying reader (imagenet_zsl.manifests)."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.manifests import MANIFEST_KEYS, read_manifest_verified, write_manifest
from imagenet_zsl.versions import VERSIONED_PACKAGES, package_version, software_versions

FORMAT = "imagenet-zsl/example-v1"


def _written(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "sub" / "b.bin").write_bytes(b"\x00\x01")
    return write_manifest(
        tmp_path, format=FORMAT, tool="imagenet-zsl example", parameters={"k": 3}, fields={"classes": ["x"]}
    )


def test_the_writer_lists_every_file_with_its_digest(tmp_path):
    manifest = _written(tmp_path)
    assert set(MANIFEST_KEYS) <= set(manifest)
    assert [r["path"] for r in manifest["files"]] == ["a.txt", "sub/b.bin"]
    assert manifest["files"][0] == {
        "path": "a.txt",
        "bytes": 5,
        "sha256": "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8",
    }
    assert manifest["classes"] == ["x"] and manifest["parameters"] == {"k": 3}
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest
    assert read_manifest_verified(tmp_path, FORMAT) == manifest


@pytest.mark.parametrize(
    ("fmt", "fields"),
    [("imagenet-zsl/example", None), ("example-v1", None), (FORMAT, {"files": []}), (FORMAT, {"tool": "x"})],
)
def test_the_writer_refuses_unversioned_formats_and_shadowed_keys(tmp_path, fmt, fields):
    with pytest.raises(ValueError, match="bug"):
        write_manifest(tmp_path, format=fmt, tool="imagenet-zsl example", fields=fields)


def test_the_reader_names_the_changed_file(tmp_path):
    _written(tmp_path)
    (tmp_path / "a.txt").write_text("alphA")  # same size, other bytes
    with pytest.raises(UserInputError, match=r"a\.txt: changed since it was written \(sha256"):
        read_manifest_verified(tmp_path, FORMAT, rerun="re-run it")
    # size only: the same-size edit passes; a truncation does not
    read_manifest_verified(tmp_path, FORMAT, hash_files=lambda path: path != "a.txt")
    (tmp_path / "a.txt").write_text("al")
    with pytest.raises(UserInputError, match="size differs"):
        read_manifest_verified(tmp_path, FORMAT, hash_files=False)


def test_the_reader_refuses_missing_files_formats_and_escapes(tmp_path):
    manifest = _written(tmp_path)
    with pytest.raises(UserInputError, match="expected imagenet-zsl/other-v2"):
        read_manifest_verified(tmp_path, "imagenet-zsl/other-v2")
    (tmp_path / "sub" / "b.bin").unlink()
    with pytest.raises(UserInputError, match=r"b\.bin: missing, though the manifest lists it"):
        read_manifest_verified(tmp_path, FORMAT)
    manifest["files"] = [{"path": "../x", "bytes": 1, "sha256": "0"}]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserInputError, match="outside"):
        read_manifest_verified(tmp_path, FORMAT)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(UserInputError, match="not a readable JSON manifest"):
        read_manifest_verified(tmp_path, FORMAT)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(UserInputError, match="manifest.json: missing"):
        read_manifest_verified(tmp_path, FORMAT)


def test_stale_temps_are_only_this_outputs(tmp_path):
    """A killed run's ``.NAME.XXXXXXXX[.old].tmp`` leftovers go; a sibling output whose name extends
    this one (``eszsl.v2``, being written by another rank) and glob characters are left alone."""
    from imagenet_zsl.atomic import remove_stale_temps

    own = [tmp_path / ".eszsl.k3j2ab_9.tmp", tmp_path / ".eszsl.abcdefgh.old.tmp"]
    others = [tmp_path / ".eszsl.v2.k3j2ab_9.tmp", tmp_path / ".run1.abcdefgh.tmp", tmp_path / ".eszsl.tmp"]
    for path in [*own, *others]:
        path.mkdir()
        (path / "weights.npz").write_bytes(b"x")
    (tmp_path / ".run[1].zyxwvuts.tmp").mkdir()
    remove_stale_temps(tmp_path / "eszsl")
    remove_stale_temps(tmp_path / "run[1]")
    assert not any(p.exists() for p in own) and not (tmp_path / ".run[1].zyxwvuts.tmp").exists()
    assert all((p / "weights.npz").exists() for p in others)


def test_a_file_browsers_junk_is_not_the_users_data(tmp_path):
    """.DS_Store, Thumbs.db, desktop.ini and Jupyter's checkpoints do not block a re-run; a real
    file beside them still does."""
    from imagenet_zsl.safe_output import foreign_files

    manifest = {"files": [{"path": "metrics.json"}]}
    (tmp_path / "metrics.json").write_text("{}")
    for junk in (".DS_Store", "Thumbs.db", "desktop.ini"):
        (tmp_path / junk).write_text("")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "x-checkpoint.ipynb").write_text("{}")
    assert foreign_files(tmp_path, manifest) == []
    (tmp_path / "notes.txt").write_text("mine")
    assert foreign_files(tmp_path, manifest) == ["notes.txt"]


def test_package_versions_are_importlib_metadatas():
    # the manifests' versions come from each METADATA's Version header: the same strings as
    # importlib.metadata's full parse, for every installed distribution the manifests list
    installed = [name for name in VERSIONED_PACKAGES if _installed(name)]
    assert "numpy" in installed
    assert {name: package_version(name) for name in installed} == {
        name: metadata.version(name) for name in installed
    }
    versions = software_versions()
    versions["numpy"] = "changed"  # each call hands out its own dict
    assert software_versions()["numpy"] == metadata.version("numpy")


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True
