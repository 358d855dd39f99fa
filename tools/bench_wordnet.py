"""First use of WordNet after installation: CPU, peak memory and cache size, against nltk's floor.

    .venv/bin/python tools/bench_wordnet.py                 # median of 3, interleaved
    .venv/bin/python tools/bench_wordnet.py --verify        # also: nltk's full walk equals our reading

Each run is a fresh process with an empty cache folder (``IMAGENET_ZSL_CACHE``), so it pays what a
user's first command pays: finding WordNet, reading ``data.noun``/``index.noun``/``cntlist.rev`` and
writing the noun-graph cache. Beside it, in the same run and interleaved:

- the warm load (the cache just written: what every later command pays);
- the floor: nltk's own load of the noun hypernym edges (its reader, then every noun synset's
  hypernyms and instance hypernyms; the nltk copy of the dict files is made before timing);
- Python reading ``data.noun`` and splitting it into lines (the I/O floor).

CPU is user + sys of the child (``os.wait4``), peak memory its maximum resident set.
``--verify`` walks nltk's objects over the whole of WordNet (``read_with_nltk``, ~20 s) and
compares every column with the direct reading (``read_noun_files``).
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


def run_child(code: str, cache: Path, *args: str) -> dict[str, float]:
    """CPU seconds (user + sys) and peak RSS (MB) of ``python -c code`` with ``cache`` as the cache."""
    env = {**os.environ, "IMAGENET_ZSL_CACHE": str(cache)}
    child = subprocess.Popen([sys.executable, "-c", code, *args], env=env)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"bench child failed ({child.returncode}): {code[:80]}")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def measure(repeats: int, skip_nltk: bool) -> dict[str, dict]:
    """Interleaved runs of every line; each line's median and its runs."""
    rows: dict[str, list[dict]] = {"first use": [], "warm": [], "nltk floor": [], "read floor": []}
    data_noun = str(locate_wordnet() / "data.noun")
    with tempfile.TemporaryDirectory(prefix="bench-wordnet-") as tmp:
        nltk_cache = Path(tmp) / "nltk-cache"
        if not skip_nltk:
            os.environ["IMAGENET_ZSL_CACHE"] = str(nltk_cache)
            nltk_corpus_dir()  # the floor's copy of the dict files, made before any timing
            del os.environ["IMAGENET_ZSL_CACHE"]
        for _ in range(repeats):
            cache = Path(tmp) / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
            first = run_child(FIRST_USE, cache)
            first["cache_mb"] = folder_mb(cache)
            rows["first use"].append(first)
            rows["warm"].append(run_child(FIRST_USE, cache))
            if not skip_nltk:
                rows["nltk floor"].append(run_child(NLTK_FLOOR, nltk_cache))
            rows["read floor"].append(run_child(READ_FLOOR, cache, data_noun))
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
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-nltk", action="store_true", help="leave out nltk's floor (~10 s a run)")
    parser.add_argument("--verify", action="store_true", help="compare with nltk's full walk (~20 s)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    summary = measure(args.repeats, args.skip_nltk)
    print(f"WordNet first use, fresh processes, median of {args.repeats}, load {load:.1f}:")
    for name, row in summary.items():
        cache = f", cache {row['cache_mb']:.1f} MB" if "cache_mb" in row else ""
        print(f"  {name:<11} {row['cpu_s']:6.2f} s CPU, peak {row['peak_mb']:6.0f} MB{cache}")
    if "nltk floor" in summary:
        ratio = summary["first use"]["cpu_s"] / summary["nltk floor"]["cpu_s"]
        print(f"  first use / nltk floor: {ratio:.2f}x CPU")
    same = verify() if args.verify else True
    if args.json:
        args.json.write_text(json.dumps({"load": load, **summary}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
