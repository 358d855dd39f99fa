"""A researcher's first day (issue 47 §1), as a new user meets it.

- Every page that shows an ``imagenet-zsl`` command says, before the first one, how to reach it in
  a new shell (``source .venv/bin/activate``): the first pasted command used to fail with
  ``imagenet-zsl: command not found``.
- The docs' first lines, run in a fresh shell (``env -i bash --noprofile --norc``) from the root of
  the clone, work.
- ``imagenet-zsl setup`` (for those who ``pip install`` into an environment of their own) finds
  WordNet, fetches it with nltk's downloader when it is missing, and offline says in one line what
  to run.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nltk
import pytest

from imagenet_zsl.cli import main
from imagenet_zsl.hierarchy import wordnet
from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns
from tests.test_readme_commands import _command_words, pages

REPO = Path(__file__).resolve().parents[1]
ACTIVATE = "source .venv/bin/activate"


def first_command_at(text: str) -> int | None:
    """Where the first ``imagenet-zsl`` command shown in a code block of a page starts, or None."""
    for block in re.finditer(r"```[^\n]*\n(.*?)```", text, flags=re.S):
        at = block.start(1)
        for line in block.group(1).splitlines(keepends=True):
            if _command_words(line.rstrip().removesuffix("\\")):  # a continued line: its first part
                return at
            at += len(line)
    return None


def pages_without_activation(paths: list[Path]) -> list[str]:
    """The pages that show a command with no ``source .venv/bin/activate`` before it."""
    missing = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        at = first_command_at(text)
        if at is not None and not 0 <= text.find(ACTIVATE) < at:
            missing.append(path.name)
    return missing


def test_the_checker_finds_a_page_that_does_not_say_how_to_activate(tmp_path):
    fine = "# A\n\nFirst `source .venv/bin/activate`.\n\n```\nimagenet-zsl run r.yaml --out o\n```\n"
    block = "# E\n\n```\nsource .venv/bin/activate\nimagenet-zsl --help\n```\n"
    late = "# B\n\n```bash\nimagenet-zsl run r.yaml --out o\n```\n\nThen `source .venv/bin/activate`.\n"
    none = "# C\n\n```\nmake demo\nimagenet-zsl --help\n```\n"
    prose = "# D\n\nThe command `imagenet-zsl run` in prose is no pasted command.\n"
    for name, text in {
        "fine.md": fine,
        "block.md": block,
        "late.md": late,
        "none.md": none,
        "prose.md": prose,
    }.items():
        (tmp_path / name).write_text(text)
    assert pages_without_activation(sorted(tmp_path.glob("*.md"))) == ["late.md", "none.md"]


def test_every_page_that_shows_a_command_says_how_to_activate_the_environment_first():
    shown = [p for p in pages() if first_command_at(p.read_text(encoding="utf-8")) is not None]
    assert REPO / "README.md" in shown and len(shown) >= 15  # the checker sees the pages
    assert pages_without_activation(pages()) == []


def _first_lines() -> str:
    """The README's block that starts a new shell: activation, then the first command."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S) if ACTIVATE in b)
    lines = [line.split(" #", 1)[0].strip() for line in block.splitlines()]
    assert lines[0] == ACTIVATE and lines[1] == "imagenet-zsl --help", lines
    return " && ".join(line for line in lines if line)


def test_the_first_lines_of_the_docs_work_in_a_fresh_shell():
    """As pasted into a new terminal at the root of the clone: no PYTHONPATH, no inherited PATH."""
    if not (REPO / ".venv" / "bin" / "activate").is_file():
        pytest.skip("no .venv here: this checkout was not set up by `make` (CI's `make test` is)")
    done = subprocess.run(
        ["env", "-i", f"HOME={Path.home()}", "bash", "--noprofile", "--norc", "-c", _first_lines()],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: imagenet-zsl") and "splits" in done.stdout


# ----------------------------------------------------------------------------- imagenet-zsl setup
@pytest.fixture(scope="module")
def real_wordnet() -> Path:
    """This machine's WordNet (what the simulated download copies)."""
    return wordnet.locate_wordnet()


@pytest.fixture()
def no_wordnet(tmp_path, monkeypatch) -> Path:
    """A machine without WordNet: no override, no nltk corpus, no Debian package; returns the
    nltk data folder a download would fill."""
    data = tmp_path / "nltk_data"
    monkeypatch.delenv("IMAGENET_ZSL_WORDNET_DIR", raising=False)
    monkeypatch.setattr(wordnet, "DEBIAN_WORDNET", tmp_path / "no-debian")
    monkeypatch.setattr(wordnet, "_nltk_search_paths", lambda: [data])
    load_wordnet_nouns.cache_clear()
    yield data
    load_wordnet_nouns.cache_clear()


def test_setup_reports_the_wordnet_it_finds(capsys):
    load_wordnet_nouns.cache_clear()
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert f"WordNet 3.0: {wordnet.locate_wordnet()} (" in out
    assert "82,115 synsets, 75,850 hypernym and 8,577 instance-hypernym edges, 117,798 lemmas" in out
    assert re.search(r"cache: \S+wordnet-nouns-v3-\w{16}\.npz \(\d+\.\d MB\)", out)


def test_setup_fetches_a_missing_wordnet_with_nltks_downloader(real_wordnet, no_wordnet, monkeypatch, capsys):
    asked = []

    def download(package, **_kwargs):  # what nltk.download("wordnet") leaves: corpora/wordnet/
        asked.append(package)
        target = no_wordnet / "corpora" / "wordnet"
        target.mkdir(parents=True)
        for name in wordnet.WORDNET_FILES:
            (target / name).symlink_to(real_wordnet / name)
        return True

    monkeypatch.setattr(nltk, "download", download)
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert asked == ["wordnet"]
    assert "fetching it with nltk's downloader" in out
    assert f"WordNet 3.0: {no_wordnet / 'corpora' / 'wordnet'} (nltk's wordnet corpus)" in out
    assert "82,115 synsets" in out


def test_setup_offline_says_in_one_line_what_to_run(no_wordnet, monkeypatch, capsys):
    def offline(package, **_kwargs):
        print("[nltk_data] Error loading wordnet: <urlopen error [Errno -3] name resolution>")
        raise ValueError(
            "Error loading wordnet: <urlopen error [Errno -3] Temporary failure in name resolution>"
        )

    monkeypatch.setattr(nltk, "download", offline)
    assert main(["setup"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: WordNet 3.0 not found and nltk's downloader could not fetch it (")
    assert "Temporary failure in name resolution" in line
    assert "`sudo apt-get install wordnet-base`" in line and "`python -m nltk.downloader wordnet`" in line
    assert "[nltk_data]" not in captured.out + captured.err  # nltk's own chatter stays off the terminal


def test_setup_without_download_never_calls_the_downloader(no_wordnet, monkeypatch, capsys):
    monkeypatch.setattr(nltk, "download", lambda *a, **k: pytest.fail("the downloader was called"))
    assert main(["setup", "--no-download"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: WordNet 3.0 not found.") and "apt-get install wordnet-base" in line
