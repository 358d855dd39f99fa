"""The documentation site builds with ``mkdocs build --strict`` and renders in a real browser.

One build per module (about 10 s). ``--strict`` makes a broken link, a missing page or an
unresolved API reference an error. The generated reference pages must list every command, every
recipe key and every model, so they cannot fall behind the code. Then headless Chromium (Debian's
``chromium``, installed by ``make test`` as root) loads the start page and the command reference
over HTTP: both must render their content with no console message (a JavaScript error, a resource
that fails to load); the detector itself is checked on a page with a planted error.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.browser import chromium, console_messages

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return out


def test_every_page_of_the_nav_is_built(site):
    import yaml

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())

    def pages(nav):
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from pages(value) if isinstance(value, list) else [value]

    listed = list(pages(config["nav"]))
    assert len(listed) >= 25
    for page in listed:
        html = "index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html"
        assert (site / html).is_file(), page
    written = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert written == set(listed), "a page in docs/ is missing from the nav, or the other way round"


def test_the_command_reference_lists_every_command_and_flag(site):
    from imagenet_zsl.cli import build_parser

    html = (site / "reference" / "cli" / "index.html").read_text()
    parser = build_parser()

    def walk(parser, words):
        subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs:
            yield words, parser
        for sub in subs:
            for name, child in sub.choices.items():
                yield from walk(child, [*words, name])

    commands = list(walk(parser, []))
    assert len(commands) > 25
    for words, command in commands:
        assert f"imagenet-zsl {' '.join(words)}</code>" in html, words
        for action in command._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"<code>{option}</code>" in html, (words, option)


def test_the_schema_and_model_references_are_complete(site):
    from imagenet_zsl.batch.recipe import Recipe
    from imagenet_zsl.models.base import MODELS

    configs = (site / "reference" / "configs" / "index.html").read_text()
    for key in Recipe.model_fields:
        assert f"<code>{key}</code>" in configs, key
    models = (site / "reference" / "models" / "index.html").read_text()
    for name in MODELS:
        assert f"<code>{name}</code>" in models, name
    api = (site / "reference" / "python-api" / "index.html").read_text()
    import imagenet_zsl

    for name in imagenet_zsl.__all__:
        if name not in ("__version__", "UserInputError"):
            assert f'id="imagenet_zsl.api.{name}"' in api, name


# ------------------------------------------------------------------------------- the browser
def browse(url: str, tmp_path: Path) -> tuple[str, list[str], Path]:
    """(the rendered DOM, console messages, a screenshot) of ``url`` in headless Chromium."""
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    base += ["--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--window-size=1280,1000"]
    base += [f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp_path / "screenshot.png"
    taken = subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    return dom.stdout, console_messages(dom.stderr), shot


def _colours(path: Path) -> int:
    from PIL import Image

    with Image.open(path) as image:
        return len(image.convert("RGB").getcolors(maxcolors=1 << 20) or [])


def test_the_console_detector_catches_a_planted_error(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<p>x</p><script>console.error("planted"); notDefined();</script>')
    _, messages, _ = browse(page.as_uri(), tmp_path)
    assert any("planted" in m for m in messages)
    assert any("notDefined is not defined" in m for m in messages)


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on a free local port, as a reader's browser gets it."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", ["imagenet-zsl", "Where to go", "Getting started", "Tie-fair hit@K"]),
        ("/reference/cli/", ["Commands and flags", "imagenet-zsl splits build", "--label-space"]),
    ],
)
def test_pages_render_in_a_browser_without_console_errors(served, tmp_path, path, expected):
    dom, messages, shot = browse(served + path, tmp_path)
    assert messages == []
    text = re.sub(r"<[^>]+>", " ", dom)
    for words in expected:
        assert words in text, words
    assert 'class="md-nav' in dom  # the theme's navigation was rendered
    assert _colours(shot) > 50  # a rendered page, not a blank one
