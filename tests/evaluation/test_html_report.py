"""``report --html`` (#48 §4): per test class, its hit@K and the classes it is most often taken
for, counted from the run's stored top-k lists, with their is-a distance on the run's class
graph; the page's directory written whole with a verified manifest, its assets packaged. (The page
in headless Chromium, on the demo's run: tests/batch/test_demo_report.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.evaluation.class_confusions import FAR, pair_distances, read_class_view, top_confusions
from imagenet_zsl.evaluation.html_report import ASSETS, HTML_FORMAT, PAGE
from imagenet_zsl.manifests import read_manifest_verified
from tests.evaluation.test_report import run_cli


def test_top_confusions_by_hand():
    # class 0: 4 images, taken twice for 2, once for 1, once right; class 1: always right;
    # class 2: taken once each for 0 and 1 (a tie in count: the lower class first), once no list
    labels = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2])
    top1 = np.array([2, 1, 2, 0, 1, 1, 1, 0, -1])
    assert top_confusions(labels, top1, 3) == {0: [(2, 2), (1, 1)], 2: [(0, 1), (1, 1)]}
    assert top_confusions(labels, top1, 3, top=1) == {0: [(2, 2)], 2: [(0, 1)]}


def test_pair_distances_on_a_hand_graph(graph):
    """The conftest graph: root → n1 → n0 → n2, root → n3 → {n4, n5}."""
    pairs = [
        ("n00000000", "n00000001"),  # parent: 1 hop
        ("n00000000", "n00000002"),  # child: 1 hop
        ("n00000002", "n00000001"),  # grandparent: 2 hops
        ("n00000004", "n00000005"),  # siblings: 2 hops
        ("n00000000", "n00000004"),  # n0 → n1 → root → n3 → n4: 4 hops
        ("n00000000", "n99999999"),  # outside the graph
    ]
    assert pair_distances(graph, pairs) == [1, 1, 2, 2, 4, FAR]
    assert pair_distances(graph, pairs, limit=3) == [1, 1, 2, 2, FAR, FAR]
    # every ordered pair of the graph's nodes against one search per pair (ClassGraph.distance)
    every = [(a, b) for a in graph.wnids for b in graph.wnids if a != b]
    assert pair_distances(graph, every) == [int(graph.distance(a, b)) for a, b in every]


def _edges(graph, path: Path) -> Path:
    pairs = zip(graph.edge_parents, graph.edge_children, strict=True)
    rows = [f"{graph.wnids[p]}\t{graph.wnids[c]}" for p, c in pairs]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_class_view_of_an_evaluate_run(bench, graph, tmp_path):
    """The bench: 3 images per test class, one-hot features; image 0 of n00000000 looks like its
    parent n00000001, so n00000000 is taken once for n00000001 (1 hop), the others never."""
    edges = _edges(graph, tmp_path / "edges.tsv")
    run_cli(bench, tmp_path / "run", bench["protos"], "--graph", str(edges))
    view = read_class_view(tmp_path / "run", graph)
    assert view.ks == [1, 2]
    rows = {view.wnids[i]: (images, hits, mistaken) for i, images, hits, mistaken in view.rows}
    assert sorted(rows) == [f"n0000000{i}" for i in range(6)]
    images, hits, mistaken = rows["n00000000"]
    # hit@2: image 0 scores 0 for its class and 4 others (tie-fair credit 1/5 at K = 2)
    assert images == 3 and hits == pytest.approx([2 / 3, (2 + 1 / 5) / 3], abs=1e-6)
    assert [(view.wnids[j], count, hops) for j, count, hops in mistaken] == [("n00000001", 1, 1)]
    assert all(not rows[w][2] for w in rows if w != "n00000000")
    no_graph = read_class_view(tmp_path / "run", None)
    assert [m for *_, m in no_graph.rows if m] == [[(view.wnids.index("n00000001"), 1, FAR)]]


def test_report_html_writes_a_verified_directory_with_its_assets(bench, graph, tmp_path, capsys, monkeypatch):
    # the run records its graph file by the name it was given: report finds it from the same place
    monkeypatch.chdir(tmp_path)
    _edges(graph, tmp_path / "edges.tsv")
    run_cli(bench, tmp_path / "run", bench["protos"], "--graph", "edges.tsv")
    page = tmp_path / "page"
    assert main(["report", str(tmp_path / "run"), "--html", str(page)]) == 0
    assert f"wrote {page / PAGE}" in capsys.readouterr().out
    manifest = read_manifest_verified(page, HTML_FORMAT)
    assert manifest["tool"] == "imagenet-zsl report" and manifest["parameters"]["published"] is False
    listed = {entry["path"] for entry in manifest["files"]}
    assert {PAGE, *ASSETS, "classes/row0.js"} <= listed
    html = (page / PAGE).read_text()
    assert '<table class="sortable" id="results-table">' in html and "<svg" in html  # the table, a curve
    assert 'data-cell="row0"' in html and '<option value="row0">protos on split</option>' in html
    assert "https://" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    data = (page / "classes" / "row0.js").read_text()
    assert data.startswith('ZSL_CELL("row0",') and data.rstrip().endswith(");")
    view = json.loads(data[len('ZSL_CELL("row0",') : -3])
    first = view["rows"][0]
    assert view["wnids"][first[0]] == "n00000000" and first[3] == [[view["wnids"].index("n00000001"), 1, 1]]
    # written again over itself; never over or inside an input; --out or --html needed
    assert main(["report", str(tmp_path / "run"), "--html", str(page)]) == 0
    assert main(["report", str(tmp_path / "run"), "--html", str(tmp_path / "run" / "page")]) == 2
    assert main(["report", str(tmp_path / "run")]) == 2
    assert "give --out OUT (the tables), --html DIR (a page), or both" in capsys.readouterr().err
