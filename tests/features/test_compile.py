"""``imagenet-zsl extract --compile``: same features as eager, recorded, resumable only with the same
setting, one graph for the whole run, and compiler failures as one-line user errors.

Only the module fixture compiles (the tiny test net, a few seconds); the failure paths replace
``torch.compile`` with fakes.
"""

import types
import warnings

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from imagenet_zsl.cli import main
from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.feature_dir import FeatureDir
from imagenet_zsl.features.synthetic_store import make_store

# 15 images, 4 of them unreadable; shards of 6 in batches of 4 (the fx.extract defaults) give
# batches of 4, 2, 4, 2, 3 images before the skips: plenty of short batches to pad
CLASSES = {"n01440764": 8, "n01443537": 3, "n01484850": 4}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, fx):
    """The same extraction eager and with --compile, the compiled one counting its graphs and
    failing on any recompile. The only real compilation in this file."""
    root = tmp_path_factory.mktemp("compile")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IMAGENET_ZSL_CACHE", str(root / "index-cache"))
        store = make_store(root / "store", "tars", CLASSES)
        classes = fx.write_classes(root / "c.txt", list(CLASSES))
        fx.extract(store, classes, root / "eager")
        torch._dynamo.reset()  # earlier tests in this process may have compiled FeatureNet.forward
        counters.clear()
        # no on-disk cache hits: the inductor counters below must come from a real compilation
        with (
            torch._dynamo.config.patch(error_on_recompile=True),
            torch._inductor.config.patch(force_disable_caches=True),
            warnings.catch_warnings(),
        ):
            warnings.filterwarnings("ignore", "dynamo_pgo force disabled")
            result = fx.extract(store, classes, root / "compiled", compile=True)
        graphs = counters["stats"]["unique_graphs"]
        folded = counters["inductor"]["binary_folding_conv"]
    return types.SimpleNamespace(
        store=store,
        classes=classes,
        eager=root / "eager",
        compiled=root / "compiled",
        result=result,
        graphs=graphs,
        folded=folded,
    )


def test_compiled_features_equal_eager_ones_within_fp16_storage(runs):
    eager, compiled = FeatureDir(runs.eager).load(with_logits=False), FeatureDir(runs.compiled).load()
    assert compiled.ids.tolist() == eager.ids.tolist() and len(eager.ids) == 11
    assert compiled.labels.tolist() == eager.labels.tolist()
    # Both are stored as fp16 (relative step 2^-11 ~ 5e-4). Freezing folds BatchNorm into the
    # convolutions and reorders fp32 sums (~1e-6 relative), which can flip a value to the next
    # fp16 step: allow a few steps relative to the feature scale, as the eager-vs-reference tests do.
    scale = float(np.abs(eager.features).max())
    assert scale > 0
    np.testing.assert_allclose(compiled.features, eager.features, rtol=2e-3, atol=2e-3 * scale)


def test_manifest_records_compile_and_the_weights_were_frozen(runs):
    assert FeatureDir(runs.compiled).manifest["parameters"]["compile"] is True
    assert FeatureDir(runs.eager).manifest["parameters"]["compile"] is False
    assert runs.result.compile_seconds > 0 and runs.result.images == 11
    # freezing folds each BatchNorm into its convolution (torch.compile(options={"freezing": ...})
    # silently does not, hence this check); the flag is patched only around the compiled calls
    assert runs.folded > 0
    assert torch._inductor.config.freezing is False


def test_one_graph_serves_the_whole_run_short_batches_included(runs, tmp_path, fx):
    # error_on_recompile was on during the run: a recompile for a short batch would have raised
    assert runs.graphs == 1
    with pytest.raises(UserInputError, match="--compile pads every batch"):
        fx.extract(runs.store, runs.classes, tmp_path / "out", compile=True, pad_batches=False)


def test_a_different_compile_setting_is_refused_like_a_different_precision(
    runs, tmp_path, monkeypatch, capsys, fx
):
    def no_compiling(*args, **kwargs):
        raise AssertionError("a refused run must not compile")

    monkeypatch.setattr(torch, "compile", no_compiling)
    with pytest.raises(UserInputError, match=r"holds a different extraction \(precision differ\)"):
        fx.extract(runs.store, runs.classes, runs.eager, precision="bf16")
    with pytest.raises(UserInputError, match=r"holds a different extraction \(compile differ\)"):
        fx.extract(runs.store, runs.classes, runs.eager, compile=True)
    capsys.readouterr()
    assert main(fx.extract_argv(runs.store, runs.classes, runs.compiled)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "(compile differ)" in err and err.count("\n") == 1
    # the same setting resumes; a finished run has nothing to extract, so nothing is compiled
    result = fx.extract(runs.store, runs.classes, runs.compiled, compile=True)
    assert result.verified and result.shards_written == 0 and result.compile_seconds == 0


def _failing_compile(error: Exception):
    """A ``torch.compile`` stand-in whose compiled net raises ``error`` at its first call, as
    inductor does when it cannot build its kernels."""

    def fake_compile(net, **kwargs):
        def compiled(x):
            raise error

        return compiled

    return fake_compile


def test_compiler_failure_is_a_one_line_cli_error_that_leaves_out_reusable(tmp_path, monkeypatch, capsys, fx):
    from torch._inductor.exc import InductorError, InvalidCxxCompiler

    store = make_store(tmp_path / "store", "tars", {"n01440764": 3}, oddities=False)
    classes = fx.write_classes(tmp_path / "c.txt", ["n01440764"])
    out = tmp_path / "out"
    failure = InductorError(InvalidCxxCompiler(), None)
    monkeypatch.setattr(torch, "compile", _failing_compile(failure))
    assert main([*fx.extract_argv(store, classes, out), "--compile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("error: --compile: torch.compile failed (InvalidCxxCompiler: No working C++")
    assert "run without --compile" in err
    # compiling comes before the run record: the same --out works without --compile
    assert not (out / "run.json").exists()
    assert main(fx.extract_argv(store, classes, out)) == 0


def test_torch_compile_unavailable_is_a_user_error(tmp_path, monkeypatch, fx):
    store = make_store(tmp_path / "store", "tars", {"n01440764": 2}, oddities=False)
    classes = fx.write_classes(tmp_path / "c.txt", ["n01440764"])

    def unsupported(net, **kwargs):
        raise RuntimeError("torch.compile is not supported on this platform\nmore detail")

    monkeypatch.setattr(torch, "compile", unsupported)
    with pytest.raises(UserInputError, match=r"^--compile: torch.compile failed \(RuntimeError: torch"):
        fx.extract(store, classes, tmp_path / "out", compile=True)


@pytest.mark.parametrize(
    "error",
    [ValueError("a bug, not a compiler problem"), torch._dynamo.exc.TorchRuntimeError("model fails")],
)
def test_errors_that_are_not_compile_failures_propagate(tmp_path, monkeypatch, fx, error):
    store = make_store(tmp_path / "store", "tars", {"n01440764": 2}, oddities=False)
    classes = fx.write_classes(tmp_path / "c.txt", ["n01440764"])
    monkeypatch.setattr(torch, "compile", _failing_compile(error))
    with pytest.raises(type(error)):
        fx.extract(store, classes, tmp_path / "out", compile=True)


def test_runs_recorded_before_the_compile_setting_existed_still_resume(tmp_path, fx):
    import json

    store = make_store(tmp_path / "store", "tars", {"n01440764": 2}, oddities=False)
    classes = fx.write_classes(tmp_path / "c.txt", ["n01440764"])
    out = tmp_path / "out"
    fx.extract(store, classes, out)
    run = json.loads((out / "run.json").read_text())
    del run["identity"]["compile"]  # as written before --compile existed
    (out / "run.json").write_text(json.dumps(run))
    assert fx.extract(store, classes, out).verified
    with pytest.raises(UserInputError, match=r"\(compile differ\)"):
        fx.extract(store, classes, out, compile=True)
