from imagenet_zsl.cli import main
from imagenet_zsl.data import fall11_counts
from imagenet_zsl.features.synthetic_store import make_store
from imagenet_zsl.images.commands import split_coverage


def test_split_coverage_counts_missing_classes_and_images():
    reference = {"a": 10, "b": 5, "c": 3}
    cov = split_coverage({"a": 10, "b": 2, "x": 4}, ["a", "b", "c"], reference)
    assert cov["classes_missing"] == 1 and cov["missing_classes"] == ["c"]
    assert cov["images_fall11"] == 18 and cov["images_held"] == 12 and cov["images_missing"] == 6
    assert cov["short_classes"] == ["b"]


def test_images_coverage_cli_reports_each_split(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IMAGENET_ZSL_CACHE", str(tmp_path / "cache"))
    generated = make_store(tmp_path / "s", "tars", {"n01440764": 3}, oddities=False)
    split = tmp_path / "split.txt"
    split.write_text("n01440764\nn01443537\n")
    assert main(["images", "coverage", "--store", str(generated.root), "--split", str(split)]) == 0
    out, err = capsys.readouterr()
    row = out.splitlines()[1].split("\t")
    fall11 = fall11_counts()
    expected = fall11["n01440764"] + fall11["n01443537"]
    assert row[:6] == [str(split), "2", "1", str(expected), "3", str(expected - 3)]
    assert "n01443537" in err
