"""Bad inputs of ``attributes run``: exit 2, one ``error:`` line naming the culprit, no traceback,
nothing written, inputs byte-identical. A 0-image or 0-dimensional feature matrix is an error, never
a ZSL accuracy of 0.0."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from imagenet_zsl.attributes.dataset import packaged_dir

#: nine aliases each expanding the last nine times: 9**9 values from a few hundred bytes
_ALIAS_BOMB = (
    "{"
    + ", ".join(["a0: &a0 [x]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)])
    + "}"
)

CASES = ("zero-byte", "text", "no-labels", "zero-images", "zero-dim", "nan", "labels-zero-based")


def _write_bad(path: Path, case: str) -> str:
    """Write a broken res101.mat; returns the culprit the error must name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if case == "zero-byte":
        path.write_bytes(b"")
    elif case == "text":
        path.write_text("these are not MATLAB bytes\n")
    elif case == "no-labels":
        scipy.io.savemat(path, {"features": np.ones((4, 3))})
        return "labels"
    elif case == "zero-images":
        scipy.io.savemat(path, {"features": np.zeros((4, 0)), "labels": np.zeros((0, 1))})
        return "labels"
    elif case == "zero-dim":
        scipy.io.savemat(path, {"features": np.zeros((0, 3)), "labels": np.ones((3, 1))})
        return "features"
    elif case == "nan":
        scipy.io.savemat(path, {"features": np.full((4, 3), np.nan), "labels": np.ones((3, 1))})
        return "NaN"
    else:
        scipy.io.savemat(path, {"features": np.ones((4, 3)), "labels": np.zeros((3, 1))})
        return "1-based"
    return "res101.mat"


@pytest.mark.parametrize("case", CASES)
def test_attributes_run_bad_res101(cli_error, tmp_path, case):
    mat = tmp_path / "APY" / "res101.mat"
    culprit = _write_bad(mat, case)
    out = tmp_path / "run"
    cli_error(
        ["attributes", "run", "--dataset", "APY", "--root", tmp_path, "--model", "eszsl", "--out", out],
        [culprit, str(mat)] if culprit != str(mat) else culprit,
        inputs=[mat, packaged_dir("APY")],
        not_created=[out],
    )


def test_attributes_run_missing_res101(cli_error, tmp_path):
    out = tmp_path / "run"
    cli_error(
        ["attributes", "run", "--dataset", "APY", "--root", tmp_path, "--model", "eszsl", "--out", out],
        "res101.mat",
        not_created=[out],
    )


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        (["--model", "nosuch"], "nosuch"),
        (["--param", "x"], "--param"),
        (["--model", "dap", "--semantics", "visual"], "--semantics visual"),
        # YAML 1.1 read 010 as 8 and 1:30 as 90: a recipe value is decimal or an error
        (["--param", "lam=010"], "--param 'lam=010'"),
        (["--grid", "lam=1,1:30"], "'1:30'"),
        (["--param", "lam=[" + "a," * 5000], "--param 'lam=[a,a,"),  # long: shortened, reason kept
        (["--param", "lam=" + "[" * 20_000], "nested too deeply"),
        (["--param", "lam=" + _ALIAS_BOMB], "aliases"),
    ],
    ids=[
        *("unknown-model", "no-equals", "dap-visual", "octal"),
        *("sexagesimal-grid", "long-unclosed", "deep", "alias-bomb"),
    ],
)
def test_attributes_run_bad_option(cli_error, tmp_path, extra, culprit):
    from tests.attributes.conftest import make_root

    make_root(tmp_path, "APY")
    out = tmp_path / "run"
    argv = ["attributes", "run", "--dataset", "APY", "--root", tmp_path, "--out", out]
    argv += extra if "--model" in extra else ["--model", "eszsl", *extra]
    cli_error(argv, culprit, inputs=[tmp_path / "APY"], not_created=[out])


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        (["--test-dataset", "APY"], "--test-dataset APY"),  # other classes
        (["--test-dataset", "AWA2"], "--test-dataset AWA2"),  # the training dataset itself
        (["--test-root", "elsewhere"], "--test-root"),  # without --test-dataset
    ],
)
def test_attributes_run_bad_cross_dataset(cli_error, tmp_path, extra, culprit):
    from tests.attributes.conftest import make_root

    make_root(tmp_path, "AWA2")
    make_root(tmp_path, "APY")
    out = tmp_path / "run"
    argv = ["attributes", "run", "--dataset", "AWA2", "--root", tmp_path, "--model", "eszsl", "--out", out]
    cli_error([*argv, *extra], culprit, inputs=[tmp_path / "AWA2", tmp_path / "APY"], not_created=[out])


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        (["--method", "proportion"], "--prop"),
        (["--method", "proportion", "--seen-share", "1.5"], "--seen-share"),
        (["--method", "gcs", "--seen-share", "0.5"], "--seen-share"),
        (["--method", "gcs", "--prop", "1"], "--prop"),
        (["--method", "proportion", "--prop", "1", "--seen-share", "0.5"], "--prop and --seen-share"),
        (["--method", "pas", "--mas-attributes", "continuous"], "--mas-attributes"),
    ],
)
def test_attributes_split_bad_proportion(cli_error, tmp_path, extra, culprit):
    from tests.attributes.conftest import make_root

    root = make_root(tmp_path / "xlsa17", "APY")
    out = tmp_path / "split"
    argv = ["attributes", "split", "--dataset", "APY", "--root", root, "--out", out, *extra]
    cli_error(argv, culprit, inputs=[root], not_created=[out])


@pytest.mark.parametrize("where", ["root", "dataset folder"])
def test_attributes_split_out_inside_the_input_root(cli_error, tmp_path, where):
    """Issue 26: an --out inside the input root is refused before anything is read or written."""
    from tests.attributes.conftest import make_root

    root = make_root(tmp_path / "xlsa17", "APY")
    out = root / "mysplit" if where == "root" else root / "APY" / "mysplit"
    argv = ["attributes", "split", "--dataset", "APY", "--root", root, "--method", "gcs", "--out", out]
    cli_error(argv, ["--out", "overlaps the input"], inputs=[root], not_created=[out])


def test_attributes_demo_unknown_model_leaves_nothing(cli_error, tmp_path):
    """Issue 26: the models are checked before any data is generated (no out/data/ left)."""
    out = tmp_path / "demo"
    cli_error(
        ["attributes", "demo", "--out", out, "--models", "nosuchmodel"], "nosuchmodel", not_created=[out]
    )
    cli_error(["attributes", "demo", "--out", out, "--models", "eszsl", "gcnz"], "gcnz", not_created=[out])


@pytest.mark.parametrize("dim", ["0", "-3"])
def test_attributes_demo_bad_dim(cli_error, tmp_path, dim):
    """Issue 26: --dim 0 was a ZeroDivisionError."""
    out = tmp_path / "demo"
    cli_error(["attributes", "demo", "--out", out, "--dim", dim], f"--dim {dim}", not_created=[out])


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [(["--reg", "-1"], "--reg"), (["--max-iter", "0"], "--max-iter"), (["--reg", "nan"], "--reg")],
)
def test_attributes_upper_bound_bad_option(cli_error, tmp_path, extra, culprit):
    from tests.attributes.conftest import make_root

    make_root(tmp_path, "APY")
    out = tmp_path / "bound"
    argv = ["attributes", "upper-bound", "--dataset", "APY", "--root", tmp_path, "--out", out, *extra]
    cli_error(argv, culprit, inputs=[tmp_path / "APY"], not_created=[out])


def test_attributes_upper_bound_missing_res101(cli_error, tmp_path):
    out = tmp_path / "bound"
    cli_error(
        ["attributes", "upper-bound", "--dataset", "APY", "--root", tmp_path, "--out", out],
        "res101.mat",
        not_created=[out],
    )


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--model", "eszsl", "--out", "o"],
        ["upper-bound", "--out", "o"],
        ["split", "--method", "gcs", "--out", "o"],
        ["info"],
    ],
    ids=lambda c: c[0],
)
def test_att_splits_that_is_a_fifo_is_a_usage_error(cli_error, tmp_path, command):
    fifo = tmp_path / "att_splits.mat"
    os.mkfifo(fifo)  # was 'MATLAB file not found'
    name, *rest = command
    out = tmp_path / "out"
    rest = [out if arg == "o" else arg for arg in rest]
    argv = ["attributes", name, "--dataset", "APY", "--att-splits", fifo, *rest]
    argv += [] if name == "info" else ["--root", tmp_path]
    cli_error(argv, culprit=["argument --att-splits", str(fifo), "FIFO"], not_created=[out])


def test_res101_that_is_a_fifo_is_named_as_such(cli_error, tmp_path):
    """A FIFO in res101.mat's place is refused unopened and named (was 'not found'); nothing blocks."""
    fifo = tmp_path / "APY" / "res101.mat"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    out = tmp_path / "run"
    argv = ["attributes", "run", "--dataset", "APY", "--root", tmp_path, "--model", "eszsl", "--out", out]
    cli_error(argv, culprit=[str(fifo), "FIFO"], not_created=[out])
