"""The backbone as the extraction loop calls it: on its device, channels_last, under the run's
autocast, and with ``--compile`` compiled by inductor with frozen weights. torch is imported when
a backbone runs, not at import (see :mod:`imagenet_zsl.features.extract`)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from imagenet_zsl.errors import UserInputError
from imagenet_zsl.features.extract_setup import ExtractionSetup, ExtractResult

log = logging.getLogger(__name__)


def autocast(setup: ExtractionSetup) -> Any:
    """The forward pass's autocast context (re-entrant: entered once per batch), or a null one."""
    import torch  # deferred: importing extraction loads no torch (see the module docstring)

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(setup.precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(setup.device.type, dtype=dtype)


def prepare_net(setup: ExtractionSetup, result: ExtractResult) -> Callable[[Any], tuple[Any, Any]]:
    """The backbone on its device (channels_last), as ``x -> (features, logits)``.

    With ``--compile`` it is compiled here, by one warm-up forward pass on a zero batch of exactly
    the loop's shape, dtype, layout, grad and autocast mode (so the loop reuses that graph); the
    time goes into ``result.compile_seconds``. A compiler that is missing or fails is a
    UserInputError naming ``--compile``; any other error propagates unchanged.
    """
    import torch  # deferred: importing extraction loads no torch (see the module docstring)

    # cudnn.benchmark (fast mode) is set by the caller's torch_numerics: one input shape per run
    net = setup.net.to(setup.device, memory_format=torch.channels_last)
    if not setup.cfg.compile:
        return net
    start = time.perf_counter()
    forward = _compile(net)
    from torch._dynamo.exc import TorchDynamoException, TorchRuntimeError  # deferred: as torch above

    crop = setup.pre.crop
    with torch.inference_mode():
        x = torch.zeros((setup.batch_size * setup.pre.views, 3, crop, crop), device=setup.device)
        x = x.contiguous(memory_format=torch.channels_last)
        try:
            with autocast(setup):
                forward(x)
        except TorchDynamoException as err:
            if isinstance(err, TorchRuntimeError):
                raise  # the model itself fails on this input: not a compiler problem
            raise UserInputError(_compile_failure(err)) from err
    if setup.device.type == "cuda":
        torch.cuda.synchronize(setup.device)
    result.compile_seconds = time.perf_counter() - start
    log.info(
        "--compile: compiled %s for batch %d in %.1f s",
        setup.cfg.backbone,
        setup.batch_size,
        result.compile_seconds,
    )
    return forward


def _compile(net: Any) -> Callable[[Any], tuple[Any, Any]]:
    """``torch.compile`` (inductor, static shapes) of ``net`` with inductor's freezing on.

    Freezing turns the weights into constants: BatchNorm folds into the convolutions and, on CPU,
    the convolution weights are prepacked for oneDNN, which is most of the gain (ResNet-50 on 2
    CPU cores: 12 -> 18 img/s over eager channels_last). Inductor reads the flag when it compiles,
    i.e. inside a call, so each call is wrapped in ``config.patch``: the global config is restored
    after it and no other compilation in the process sees it (``torch.compile(options=...)`` does
    not reach freezing in torch 2.14: it silently compiles unfrozen).
    """
    import torch  # deferred: importing extraction loads no torch (see the module docstring)
    from torch._inductor import config as inductor_config  # deferred: as torch above

    try:
        compiled = torch.compile(net, backend="inductor", dynamic=False)
    except RuntimeError as err:  # e.g. a Python version or platform torch.compile does not support
        raise UserInputError(_compile_failure(err)) from err

    def forward(x: Any) -> tuple[Any, Any]:
        with inductor_config.patch(freezing=True):
            return compiled(x)

    return forward


def _compile_failure(err: BaseException) -> str:
    """One line for a failed ``torch.compile``: the underlying error's type and first line."""
    inner = getattr(err, "inner_exception", None) or err
    lines = [line.strip() for line in str(inner).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    cause = first if first.startswith(type(inner).__name__) else f"{type(inner).__name__}: {first}"
    if len(cause) > 240:
        cause = cause[:237] + "..."
    return (
        f"--compile: torch.compile failed ({cause}); it needs a working C++ compiler on CPU "
        "(Triton on CUDA): install one or run without --compile"
    )
