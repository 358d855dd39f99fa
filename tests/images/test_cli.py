from imagenet_zsl.cli import main
from imagenet_zsl.data import fall11_counts
from imagenet_zsl.features.synthetic_store import make_store


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
    assert row[:7] == [str(split), "2", "1", "no", "3", str(expected), str(expected - 3)]
    assert "n01443537" in err
