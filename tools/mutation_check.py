"""Mutation check: plant known one-line bugs, one at a time, and report which ones no test catches.

How to run: ``.venv/bin/python tools/mutation_check.py`` (all mutations, about a minute of CPU
on two cores), ``--only NAME`` (repeatable) for some, ``--list`` to see them, ``--rev HEAD`` to check a
commit instead of the working tree. Each mutation edits a temporary copy of the repository (the
working tree's tracked and untracked-but-not-ignored files; /work/main's own files are never
touched), runs only the tests it lists there with ``python -m pytest`` (the copy first on
``PYTHONPATH``, so the copy's package is imported, not the editable install), and counts as
caught when a test fails. Exit status 1 when a mutation survived, its snippet is not found exactly
once, or the unmutated tests do not pass. Not run in CI. When to update :data:`MUTATIONS`: when a
listed snippet is refactored away (the check then fails with "snippet not found": rewrite the
snippet to the new code, same bug), when a listed test file moves, and whenever a planted bug is
found that survives the suite: add it here together with the test that now catches it. List no
sha256 snapshot test (tests/evaluation/test_golden.py): the point is a test that states the rule.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: tests that compare bytes with a recorded sha256: they catch any change, so they prove no rule
SNAPSHOT_TESTS = ("tests/evaluation/test_golden.py",)


@dataclass(frozen=True)
class Mutation:
    """One planted bug: replace ``old`` (found exactly once in ``path``) by ``new``."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    description: str


#: the planted bugs (issue #37 §4 first, then further rules worth guarding)
MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "ratio-keeps-infinite",
        "imagenet_zsl/splits/structure.py",
        "ratios[np.isfinite(ratios)]",
        "ratios[~np.isnan(ratios)]",
        ("tests/splits/test_structural_ratio_by_hand.py",),
        "R averages r(c) = inf of a test class with no path to a training class (disconnected graph)",
    ),
    Mutation(
        "choose-gamma-farthest-tie",
        "imagenet_zsl/scoring/gzsl.py",
        "gamma = min(gammas, key=lambda g: (abs(g), g))",
        "gamma = max(gammas, key=lambda g: (abs(g), g))",
        ("tests/test_gzsl_rules_by_hand.py", "tests/test_scoring.py"),
        "choose_gamma takes the tied best interval farthest from 0",
    ),
    Mutation(
        "imagenet-std-bgr",
        "imagenet_zsl/features/transforms.py",
        "IMAGENET_STD = (0.229, 0.224, 0.225)",
        "IMAGENET_STD = (0.225, 0.224, 0.229)",
        ("tests/features/test_normalisation_by_hand.py",),
        "the ImageNet standard deviations in BGR order",
    ),
    Mutation(
        "ausuc-left-area-dropped",
        "imagenet_zsl/scoring/gzsl.py",
        "x = np.r_[0.0, self.unseen]\n        y = np.r_[self.seen[0], self.seen]",
        "x = self.unseen\n        y = self.seen",
        ("tests/test_gzsl_rules_by_hand.py", "tests/test_scoring.py"),
        "AUSUC without the area left of the curve's first point (unseen accuracy > 0 at every γ)",
    ),
    Mutation(
        "leakage-images-all-classes",
        "imagenet_zsl/splits/leakage.py",
        "n_images=sum(counts.get(w, 0) for w in wnids)",
        "n_images=sum(counts.values())",
        ("tests/splits/test_leakage_by_hand.py",),
        "leakage's test images summed over every counted class, not the split's",
    ),
    Mutation(
        "leakage-seen-images-all-labels",
        "imagenet_zsl/splits/leakage.py",
        "seen_images=sum(counts.get(w, 0) for w in hit)",
        "seen_images=sum(n for w, n in counts.items() if w in seen)",
        ("tests/splits/test_leakage_by_hand.py",),
        "leakage's leaked images summed over every label-set class, not the split's",
    ),
    Mutation(
        "imagenet-mean-bgr",
        "imagenet_zsl/features/transforms.py",
        "IMAGENET_MEAN = (0.485, 0.456, 0.406)",
        "IMAGENET_MEAN = (0.406, 0.456, 0.485)",
        ("tests/features/test_normalisation_by_hand.py",),
        "the ImageNet means in BGR order",
    ),
    Mutation(
        "ratio-inverted",
        "imagenet_zsl/splits/structure.py",
        "return to_train / to_test",
        "return to_test / to_train",
        ("tests/splits/test_structural_ratio_by_hand.py",),
        "r(c) as d(c, other test classes) / d(c, training classes)",
    ),
    Mutation(
        "choose-gamma-ignores-zero",
        "imagenet_zsl/scoring/gzsl.py",
        "if lo < 0 < hi:",
        "if lo < 0 < hi < lo:",
        ("tests/test_gzsl_rules_by_hand.py", "tests/test_scoring.py"),
        "choose_gamma takes the best interval's midpoint even when 0 lies inside it",
    ),
    Mutation(
        "harmonic-without-2",
        "imagenet_zsl/scoring/gzsl.py",
        "2 * self.seen * self.unseen / total",
        "self.seen * self.unseen / total",
        ("tests/test_gzsl_rules_by_hand.py", "tests/test_scoring.py"),
        "the harmonic mean of the seen-unseen curve without its factor 2",
    ),
    Mutation(
        "per-class-weights-flat",
        "imagenet_zsl/scoring/gzsl.py",
        "table[present] = 1.0 / (counts[present] * np.count_nonzero(present))",
        "table[present] = 1.0 / counts[present].sum()",
        ("tests/test_scoring.py",),
        "per-class GZSL accuracy weighs images flat (1/n) instead of 1/(n_class · classes)",
    ),
    Mutation(
        "strict-rule-off-by-one",
        "imagenet_zsl/scoring/ranks.py",
        "(self.strict < k).astype(np.float64)",
        "(self.strict <= k).astype(np.float64)",
        ("tests/test_scoring.py",),
        "the strict tie rule counts rank k as a hit@k",
    ),
    # issue #45 §3: rules a one-line change to which survived the whole suite
    Mutation(
        "tie-break-float-tolerance",
        "imagenet_zsl/splits/benchmark.py",
        "if exact_ratio_sum(problem.graph, wnids, problem.train) >= total:",
        "if ratio >= best.ratio - 1e-3:",
        ("tests/splits/test_milp.py::test_the_tie_rule_accepts_only_a_set_of_exactly_the_optimal_ratio",),
        "the tie rule accepts a set whose float R is within 1e-3 of R* (a worse set published as optimal)",
    ),
    Mutation(
        "proven-gap-loose",
        "imagenet_zsl/splits/problem.py",
        "PROVEN_GAP = 1e-6",
        "PROVEN_GAP = 1e-3",
        ("tests/splits/test_milp.py",),
        "a gap of up to 1e-3 between R and its proven bound is certified optimal",
    ),
    Mutation(
        "exact-ratio-lone-class-left-out",
        "imagenet_zsl/splits/structure.py",
        "        if math.isfinite(a)\n    ]",
        "        if math.isfinite(a) and math.isfinite(b)\n    ]",
        ("tests/splits/test_structural_ratio_by_hand.py",),
        "exact_ratio_sum leaves out a class with no other test class reachable (its r = 0 is kept in R)",
    ),
    Mutation(
        "published-name-by-length",
        "imagenet_zsl/splits/named.py",
        "if set(read_wnid_list(path)) != packaged:",
        "if len(read_wnid_list(path)) != len(packaged):",
        ("tests/splits/test_named.py",),
        "a published split name wins over a file of the same length, not only of the same classes",
    ),
    Mutation(
        "carved-gamma-per-class-h",
        "imagenet_zsl/evaluation/run/calibrate.py",
        'per_class=calibration.h_averaging == "per_class"',
        "per_class=True",
        ("tests/evaluation/test_run.py::test_the_carved_gamma_maximises_flat_h_as_metrics_say",),
        "the carved γ maximises per-class H@1 while metrics.json says flat",
    ),
    Mutation(
        "tail-ties-always-added",
        "imagenet_zsl/scoring/ranks.py",
        "at_end = scores[:, -1] == true_score",
        "at_end = np.ones(len(scores), bool)",
        ("tests/test_scoring.py", "tests/evaluation/test_gzsl_joint_ties.py"),
        "true_ranks adds a list's tail ties to a true class that does not tie the list's last score",
    ),
)


@dataclass(frozen=True)
class Outcome:
    """The result of one mutation: ``status`` caught / survived / not found / error / timeout."""

    mutation: Mutation
    status: str
    detail: str
    seconds: float

    @property
    def ok(self) -> bool:
        """Only a caught mutation is fine: survived, stale and broken runs all fail the check."""
        return self.status == "caught"


def copy_repository(dest: Path, rev: str | None) -> None:
    """The files the tests see into ``dest``: the working tree's tracked and untracked, not ignored
    files (as they are now, edits included), or the tree of commit ``rev``. Copies only: the
    mutations are never planted in the repository itself."""
    if rev is not None:
        dest.mkdir(parents=True)
        archive = subprocess.Popen(
            ["git", "-C", str(ROOT), "archive", "--format=tar", rev], stdout=subprocess.PIPE
        )
        subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"error: git archive {rev} failed")
        return
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    for name in sorted(set(listed.decode().split("\0")) - {""}):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():  # deleted but still tracked: skipped
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run_environment(copy: Path) -> dict[str, str]:
    """Environment of a test run in ``copy``: its root first on the import path (ahead of the
    editable install of /work/main) and no bytecode written, so a file restored within the same
    second as its mutation is never read from a stale .pyc."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_imports_copy(copy: Path, python: str) -> None:
    """Fail loudly unless ``imagenet_zsl`` imports from ``copy``: otherwise every mutation would
    "survive" because the tests ran the unmutated package."""
    code = "import imagenet_zsl; print(imagenet_zsl.__file__)"
    done = subprocess.run(
        [python, "-c", code], cwd=copy, env=run_environment(copy), capture_output=True, text=True
    )
    where = Path(done.stdout.strip()).resolve() if done.returncode == 0 else None
    if where is None or copy.resolve() not in where.parents:
        raise SystemExit(f"error: the copy's package is not the one imported ({where}): {done.stderr[-500:]}")


def run_tests(copy: Path, tests: Sequence[str], python: str, timeout: float) -> tuple[int, str]:
    """pytest on ``tests`` inside ``copy``, stopping at the first failure → (exit status, output);
    exit status -1 when it ran past ``timeout`` seconds."""
    argv = [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfE", *tests]
    try:
        done = subprocess.run(
            argv, cwd=copy, env=run_environment(copy), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return -1, ""
    return done.returncode, done.stdout + done.stderr


def first_failure(output: str) -> str:
    """The first ``FAILED``/``ERROR`` test id of pytest's summary (empty if none)."""
    found = re.search(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.MULTILINE)
    return found.group(1) if found else ""


def plant(copy: Path, mutation: Mutation) -> str | None:
    """Apply ``mutation`` in ``copy`` → the original text to restore, or None when its snippet is
    not in the file exactly once (the list is stale)."""
    path = copy / mutation.path
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if text.count(mutation.old) != 1:
        return None
    planted = text.replace(mutation.old, mutation.new)
    compile(planted, str(path), "exec")  # a mutation that does not compile would be 'caught' by any test
    path.write_text(planted, encoding="utf-8")
    return text


def check_mutation(copy: Path, mutation: Mutation, python: str, timeout: float) -> Outcome:
    """Plant one mutation, run its tests, restore the file."""
    start = time.perf_counter()
    original = plant(copy, mutation)
    if original is None:
        return Outcome(mutation, "not found", f"snippet not exactly once in {mutation.path}", 0.0)
    try:
        rc, output = run_tests(copy, mutation.tests, python, timeout)
    finally:
        (copy / mutation.path).write_text(original, encoding="utf-8")
    seconds = time.perf_counter() - start
    if rc == 1:
        return Outcome(mutation, "caught", first_failure(output), seconds)
    if rc == 0:
        return Outcome(mutation, "survived", "every listed test passed", seconds)
    if rc == -1:
        return Outcome(mutation, "timeout", f"tests ran past {timeout:.0f} s", seconds)
    tail = output.strip().splitlines()[-1:] or [""]
    return Outcome(mutation, "error", f"pytest exit {rc}: {tail[0][:80]}", seconds)


def check_list(mutations: Sequence[Mutation]) -> None:
    """The list itself: unique names, and each names tests, none of them a sha256 snapshot."""
    names = [m.name for m in mutations]
    if len(set(names)) != len(names):
        raise SystemExit("error: duplicate mutation names")
    for m in mutations:
        snapshots = [t for t in m.tests if t.split("::")[0] in SNAPSHOT_TESTS]
        if snapshots or not m.tests:
            raise SystemExit(f"error: {m.name}: list tests that state the rule, not {snapshots or 'none'}")


def table(outcomes: Sequence[Outcome]) -> str:
    """The report: one row per mutation."""
    rows = [("mutation", "file", "result", "s", "caught by / why")]
    rows += [
        (
            o.mutation.name,
            o.mutation.path.removeprefix("imagenet_zsl/"),
            o.status,
            f"{o.seconds:.1f}",
            o.detail,
        )
        for o in outcomes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4]
        for row in rows
    )


def select(names: Sequence[str] | None) -> list[Mutation]:
    """The mutations named by ``--only`` (all without it); an unknown name is an error."""
    if not names:
        return list(MUTATIONS)
    known = {m.name: m for m in MUTATIONS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"error: unknown mutation {', '.join(unknown)} (see --list)")
    return [known[n] for n in names]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (``argv`` None: sys.argv)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run this mutation (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--rev", help="check this commit (git archive) instead of the working tree")
    parser.add_argument("--python", default=sys.executable, help="interpreter for pytest (default: this one)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per test run (default 900)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected mutations; 0 when every one was caught, else 1."""
    args = parse_args(argv)
    check_list(MUTATIONS)
    mutations = select(args.only)
    if args.list:
        for m in mutations:
            print(f"{m.name:32} {m.path}\n{'':32} {m.description}\n{'':32} tests: {' '.join(m.tests)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="mutation-check-") as tmp:
        copy = Path(tmp) / "repo"
        copy_repository(copy, args.rev)
        check_imports_copy(copy, args.python)
        if not args.no_baseline:
            tests = list(dict.fromkeys(t for m in mutations for t in m.tests))
            rc, output = run_tests(copy, tests, args.python, args.timeout)
            if rc != 0:
                print(output[-3000:])
                print(f"error: the listed tests fail (exit {rc}) before any mutation: fix them first")
                return 1
        outcomes = []
        for m in mutations:
            outcomes.append(check_mutation(copy, m, args.python, args.timeout))
            print(f"{m.name}: {outcomes[-1].status}", file=sys.stderr, flush=True)
    print(table(outcomes))
    bad = [o for o in outcomes if not o.ok]
    print(f"\n{len(outcomes) - len(bad)} of {len(outcomes)} mutations caught", end="")
    print(f"; not caught: {', '.join(o.mutation.name for o in bad)}" if bad else "")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
