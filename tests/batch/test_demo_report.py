"""#48 §2, §4 on the demo's run (the reduced demo of conftest, shared with the other batch tests):
``report --published`` prints the literature rows of hop1 with their sources and protocol
columns, cites them in the .tex with a .bib of those entries; ``run --published`` puts them in the
summary; ``report --html`` renders in headless Chromium (Debian's ``chromium``, as the docs site is
tested) with the published rows, sorts the table when a header is clicked, and shows a class with
the classes it is taken for and their WordNet distances, with no console message."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

from imagenet_zsl.cli import main
from tests.browser import chromium, console_messages

#: the packaged figures on hop1's paper splits (GBU's "2 H", Chao et al.'s "2-hop", Hascoet et al.'s
#: "1-hop") that the demo's table has columns for: 10 GBU per-class top-1, 3 Chao AUSUC at K = 1,
#: Hascoet's trivial and GCN hit@1 and the linear model's GZSL U
HOP1_ROWS = 16


def test_report_published_on_the_demo_run(demo_run, tmp_path, capsys):
    out = tmp_path / "table"
    assert main(["report", str(demo_run), "--published", "--out", str(out)]) == 0
    assert f"wrote {tmp_path / 'table.bib'}" in capsys.readouterr().out
    md = (tmp_path / "table.md").read_text()
    header = md.splitlines()[1]
    assert header.startswith("| backbone | model | split | label space | hit@1 [95% CI] |")
    assert header.endswith("| source | comparable | differences |") and "| per-class hit@1 |" in header
    with (tmp_path / "table.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    published = [r for r in rows if r["status"] == "published"]
    assert len(published) == HOP1_ROWS and {r["split"] for r in published} == {"hop1"}
    sync = next(r for r in published if r["model"] == "SYNC")
    assert sync["source"] == "xian2018zero Table 5" and sync["per-class hit@1"] == "9.26"
    assert sync["label space"] == "2 H 1,509" and sync["comparable"] == "no"
    # hop1 of the demo: 15 classes, 3 without a GloVe vector; a list built by GBU's rule, not theirs
    assert sync["differences"].startswith(
        "label space 1,509 vs 12; list: the same rule, not the same classes"
    )
    assert "pretraining ImageNet-1K vs none (simulated features)" in sync["differences"]
    # hop1's rows sorted by hit@1 (a row without one by its per-class hit@1), the user's among them
    hop1 = [r for r in rows if r["split"] == "hop1"]
    keys = [
        float(r["hit@1"] or r["per-class hit@1"] or "-1") for r in hop1 if r["hit@1"] or r["per-class hit@1"]
    ]
    assert keys == sorted(keys, reverse=True)
    assert "hop1 stands for Xian et al. 2019's '2 H' (same-rule:" in md
    tex = (tmp_path / "table.tex").read_text()
    assert r"\cite{xian2018zero}, Table 5" in tex and r"\cite{hascoet2019zero}, \S{}4.1" in tex
    assert "cite keys of table.bib" in tex.splitlines()[1]
    cited = set(re.findall(r"\\cite\{([^}]+)\}", tex))
    bib = (tmp_path / "table.bib").read_text()
    assert (
        set(re.findall(r"^@\w+\{([^,]+),", bib, re.M))
        == cited
        == {
            "xian2018zero",
            "chao2016empirical",
            "hascoet2019zero",
        }
    )  # the cited entries only (not kampffmeyer2018rethinking)


def test_run_published_puts_the_literature_in_the_summary(demo_inputs, demo_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(demo_run, out)  # every cell finished: only the summary is written again
    argv = ["run", str(demo_inputs.recipe), "--out", str(out), "--no-progress"]
    assert main([*argv, "--published"]) == 0
    printed = capsys.readouterr().out
    assert "| xian2018zero Table 5 | no |" in printed and "| source | comparable | differences |" in printed
    assert (out / "summary.bib").read_text().startswith("% imagenet-zsl references of the published rows")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["published"] is True
    assert "summary.bib" in {entry["path"] for entry in manifest["files"]}
    assert any(n == "your copy of hop1: 15 of 15 classes held, 45 test images" for n in manifest["notes"])
    assert main(argv) == 0  # without --published: the table of before, no .bib left behind
    assert not (out / "summary.bib").exists()
    assert (out / "summary.csv").read_text() == (demo_run / "summary.csv").read_text()


# ------------------------------------------------------------------------------- the browser
def _dom(page: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """(the DOM after the page's scripts ran, the console's messages) of a page from disk."""
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    argv += ["--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--window-size=1400,1000"]
    argv += [f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, console_messages(done.stderr)


#: appended to a copy of the page: click the hit@1 header twice, noting the models' order each time
CLICKS = """<script>
window.addEventListener("load", function () {
  var table = document.getElementById("results-table");
  var header = Array.prototype.find.call(table.tHead.rows[0].cells, function (th) {
    return th.textContent === "hit@1 [95% CI]";
  });
  function order() {
    return Array.prototype.map.call(table.tBodies[0].rows, function (tr) {
      return tr.cells[header.cellIndex].getAttribute("data-value");
    }).join(" ");
  }
  header.click();
  document.body.setAttribute("data-first", order() + "|" + header.getAttribute("aria-sort"));
  header.click();
  document.body.setAttribute("data-second", order() + "|" + header.getAttribute("aria-sort"));
});
</script>
</body>"""


def _values(text: str) -> tuple[list[float | None], str]:
    values, direction = text.split("|")
    return [float(v) if v else None for v in values.split(" ")], direction


def test_the_demo_page_renders_sorts_and_shows_where_a_model_fails(demo_run, tmp_path):
    page = tmp_path / "page"
    assert main(["report", str(demo_run), "--published", "--html", str(page)]) == 0
    dom, messages = _dom(page / "index.html", tmp_path)
    assert messages == []
    assert dom.count('<tr class="published') == HOP1_ROWS and "xian2018zero Table 5" in dom
    assert dom.count("<svg") >= 4  # a hit@K curve per split
    # the per-class view of the first row with top-k lists: its classes, their confusions, hops
    body = re.search(r'<table class="sortable" id="class-table">.*?<tbody>(.*?)</tbody>', dom, re.S)
    assert body is not None
    rows = re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)
    assert len(rows) == 15  # the first row is conse on benchmark: its 15 test classes
    assert re.search(
        r'class="wnid">n\d{8}</span><span> \d+% · </span><span class="hops">\d+ hops?</span>', dom
    )
    assert re.search(r'id="class-status"[^>]*>conse on benchmark: 15 of 15 classes shown<', dom)
    # sorting: a copy of the page with two clicks on the hit@1 header
    (page / "clicks.html").write_text((page / "index.html").read_text().replace("</body>", CLICKS))
    dom, messages = _dom(page / "clicks.html", tmp_path)
    assert messages == []
    first = re.search(r'data-first="([^"]*)"', dom)
    second = re.search(r'data-second="([^"]*)"', dom)
    assert first and second
    values, direction = _values(first.group(1))
    known = [v for v in values if v is not None]
    assert direction == "descending" and known == sorted(known, reverse=True) and len(known) >= 12
    assert values[len(known) :] == [None] * (len(values) - len(known))  # rows without a hit@1 last
    values, direction = _values(second.group(1))
    known = [v for v in values if v is not None]
    assert direction == "ascending" and known == sorted(known) and values[-1] is None
