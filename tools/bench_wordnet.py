"""The first day's costs: WordNet's first use after installation (CPU, peak memory, cache size)
against nltk's floor, and ``imagenet-zsl --help`` against Python's own start-up.

    .venv/bin/python tools/bench_wordnet.py                 # median of 3, interleaved
    .venv/bin/python tools/bench_wordnet.py --verify        # also: nltk's full walk equals our reading

Each WordNet run is a fresh process with an empty cache folder (``IMAGENET_ZSL_CACHE``), so it pays
what a user's first command pays: finding WordNet, reading ``data.noun``/``index.noun``/
``cntlist.rev`` and writing the noun-graph cache. Beside it, in the same run and interleaved:

- the warm load (the cache just written: what every later command pays);
- the floor: nltk's own load of the noun hypernym edges (its reader, then every noun synset's
  hypernyms and instance hypernyms; the nltk copy of the dict files is made before timing);
- Python reading ``data.noun`` and splitting it into lines (the I/O floor);
- ``imagenet-zsl --help`` and its floor, ``python -c pass`` (``--help-repeats`` runs each).

CPU is user + sys of the child (``os.wait4``), peak memory its maximum resident set. Every child
runs once untimed first, with bytecode writing allowed, so no timed run compiles Python source (as
after ``pip install``). ``--verify`` walks nltk's objects over the whole of WordNet
(``read_with_nltk``, ~20 s) and compares every column with the direct reading (``read_noun_files``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from imagenet_zsl.hierarchy.nouns import STRING_COLUMNS, content_digest, read_noun_files, read_with_nltk
from imagenet_zsl.hierarchy.wordnet import get_wordnet, locate_wordnet, nltk_corpus_dir, wordnet_digest

FIRST_USE = "from imagenet_zsl.hierarchy.nouns import load_wordnet_nouns; load_wordnet_nouns()"
NLTK_FLOOR = (
    "from imagenet_zsl.hierarchy.wordnet import get_wordnet\n"
    "wn = get_wordnet()\n"
    "edges = [(h.offset(), s.offset()) for s in wn.all_synsets('n')"
    " for h in s.hypernyms() + s.instance_hypernyms()]\n"
    "assert len(edges) > 80000, len(edges)\n"
)
READ_FLOOR = "import sys; lines = open(sys.argv[1], 'rb').read().decode('utf-8').split('\\n')"


def run_argv(argv: list[str], cache: Path) -> dict[str, float]:
    """CPU seconds (user + sys) and peak RSS (MB) of a child with ``cache`` as the cache folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["IMAGENET_ZSL_CACHE"] = str(cache)
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"bench child failed ({code}): {' '.join(argv)[:100]}")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def run_child(code: str, cache: Path, *args: str) -> dict[str, float]:
    """:func:`run_argv` of ``python -c code``."""
    return run_argv([sys.executable, "-c", code, *args], cache)


def command_path() -> str:
    """The ``imagenet-zsl`` launcher of this interpreter's environment."""
    beside = Path(sys.executable).parent / "imagenet-zsl"
    found = str(beside) if beside.is_file() else shutil.which("imagenet-zsl")
    if found is None:
        raise SystemExit("no imagenet-zsl launcher beside this Python: install the package first")
    return found


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def measure(repeats: int, help_repeats: int, skip_nltk: bool) -> dict[str, dict]:
    """Interleaved runs of every line; each line's median and its runs."""
    lines = ("first use", "warm", "nltk floor", "read floor", "--help", "python floor")
    rows: dict[str, list[dict]] = {name: [] for name in lines}
    data_noun = str(locate_wordnet() / "data.noun")
    helps = {"--help": [command_path(), "--help"], "python floor": [sys.executable, "-c", "pass"]}
    with tempfile.TemporaryDirectory(prefix="bench-wordnet-") as tmp:
        nltk_cache, cache = Path(tmp) / "nltk-cache", Path(tmp) / "cache"
        if not skip_nltk:
            os.environ["IMAGENET_ZSL_CACHE"] = str(nltk_cache)
            nltk_corpus_dir()  # the floor's copy of the dict files, made before any timing
            del os.environ["IMAGENET_ZSL_CACHE"]
        for argv in helps.values():  # untimed: bytecode written, as after an installation
            run_argv(argv, cache)
        run_child(FIRST_USE, cache)
        for i in range(max(repeats, help_repeats)):
            if i < repeats:
                shutil.rmtree(cache, ignore_errors=True)
                cache.mkdir()
                first = run_child(FIRST_USE, cache)
                first["cache_mb"] = folder_mb(cache)
                rows["first use"].append(first)
                rows["warm"].append(run_child(FIRST_USE, cache))
                if not skip_nltk:
                    rows["nltk floor"].append(run_child(NLTK_FLOOR, nltk_cache))
                rows["read floor"].append(run_child(READ_FLOOR, cache, data_noun))
            if i < help_repeats:
                for name, argv in helps.items():
                    rows[name].append(run_argv(argv, cache))
    summary = {}
    for name, runs in rows.items():
        if runs:
            keys = runs[0].keys()
            summary[name] = {k: statistics.median(r[k] for r in runs) for k in keys} | {"runs": runs}
    return summary


def verify() -> bool:
    """nltk's full walk against the direct reading, column by column."""
    root = locate_wordnet()
    digest = wordnet_digest(root)
    ours = read_noun_files(root, digest)
    reference = read_with_nltk(get_wordnet(), digest)
    same = True
    for column in STRING_COLUMNS:
        if getattr(ours, column) != getattr(reference, column):
            print(f"  DIFFERENT: {column}")
            same = False
    for column in ("hypernym_edges", "instance_edges"):
        if not np.array_equal(getattr(ours, column), getattr(reference, column)):
            print(f"  DIFFERENT: {column}")
            same = False
    print(f"verify: nltk's walk {content_digest(reference)}, direct reading {content_digest(ours)}")
    print(f"verify: {'identical' if same else 'DIFFERENT'} ({len(ours.wnids):,} synsets)")
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="WordNet runs (each line)")
    parser.add_argument("--help-repeats", type=int, default=15, help="--help runs (and of its floor)")
    parser.add_argument("--skip-nltk", action="store_true", help="leave out nltk's floor (~10 s a run)")
    parser.add_argument("--verify", action="store_true", help="compare with nltk's full walk (~20 s)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    summary = measure(args.repeats, args.help_repeats, args.skip_nltk)
    runs = f"{args.repeats} WordNet runs, {args.help_repeats} --help runs"
    print(f"fresh processes, medians ({runs}), load {load:.1f}:")
    for name, row in summary.items():
        cache = f", cache {row['cache_mb']:.1f} MB" if "cache_mb" in row else ""
        print(f"  {name:<12} {row['cpu_s']:6.3f} s CPU, peak {row['peak_mb']:6.0f} MB{cache}")
    if "nltk floor" in summary:
        ratio = summary["first use"]["cpu_s"] / summary["nltk floor"]["cpu_s"]
        print(f"  first use / nltk floor: {ratio:.2f}x CPU")
    if "--help" in summary:
        above = summary["--help"]["cpu_s"] - summary["python floor"]["cpu_s"]
        print(f"  --help: {above:.3f} s CPU above Python's own start-up")
    same = verify() if args.verify else True
    if args.json:
        args.json.write_text(
            json.dumps({"load": load, "load_after": os.getloadavg()[0], **summary}, indent=1)
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
