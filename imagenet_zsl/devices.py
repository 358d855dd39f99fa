"""The one device resolver (a user's ``--device`` choice → a ``torch.device``, with clear errors),
and the CPU-sharing setting of the commands that decode images in worker processes."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from imagenet_zsl.errors import UserInputError

if TYPE_CHECKING:
    import torch


#: the help text of every ``--device`` option
DEVICE_HELP = (
    "where to compute: auto (a CUDA GPU when torch sees one, else the CPU; default), cpu, cuda or cuda:N"
)


def cuda_available() -> bool:
    """True when torch is installed and sees a CUDA GPU."""
    try:
        import torch  # deferred: a bottom module; a CPU command never loads torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


#: device nodes of a GPU driver (NVIDIA, AMD ROCm, WSL's GPU paravirtualisation)
_GPU_NODES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def gpu_possible() -> bool:
    """Whether torch could see a GPU, decided without importing torch (a CPU ``evaluate`` of stored
    features then never imports it): False on Linux when ``CUDA_VISIBLE_DEVICES`` hides every GPU
    or no GPU driver node exists; True otherwise (torch decides)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(node) for node in _GPU_NODES)


def resolve_device(requested: str, local_rank: int | None = None) -> torch.device:
    """``auto`` → the GPU when torch sees one, else the CPU; ``cuda`` → GPU ``local_rank`` (mod the
    number of GPUs; by default torchrun's ``LOCAL_RANK``, so each rank of a job on one machine
    takes its own GPU); ``cuda:N`` and ``cpu`` as given. A CUDA choice without a visible GPU, or
    any other string, is a user error."""
    import torch  # deferred: a bottom module; a CPU command never loads torch

    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)

    name = str(requested)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UserInputError(f"--device {requested}: no CUDA GPU is visible; use --device cpu")
        if name == "cuda":
            name = f"cuda:{local_rank % torch.cuda.device_count()}"
        try:
            return torch.device(name)
        except RuntimeError as err:
            raise UserInputError(f"--device {requested}: {err}") from err
    raise UserInputError(f"--device {requested!r}: use cuda, cuda:N, cpu or auto")


#: cuBLAS needs a fixed workspace per stream for reproducible GEMMs (read when cuBLAS starts)
CUBLAS_WORKSPACE_CONFIG = ":4096:8"
#: what ``deterministic=True`` of :func:`torch_numerics` turns off, for help texts and reports
DETERMINISTIC_COST = (
    "cuDNN autotuning (cudnn.benchmark), TF32 in convolutions and matrix products, and kernels "
    "without a deterministic implementation (torch.use_deterministic_algorithms)"
)


def request_deterministic_cublas() -> None:
    """Ask cuBLAS for its deterministic workspace setting; call before CUDA starts (a value the
    user set is kept). Harmless on the CPU."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG)


@contextlib.contextmanager
def torch_numerics(deterministic: bool) -> Iterator[None]:
    """torch's process-wide numeric settings for one computation, the caller's restored after.

    ``deterministic``: cuDNN autotuner off and deterministic cuDNN kernels, no TF32 (convolutions
    and matrix products in full fp32), and ``torch.use_deterministic_algorithms(True,
    warn_only=True)`` (an op with no deterministic kernel warns instead of failing), so that two
    runs on the same machine give the same bits and GPU results equal CPU ones to fp32 rounding.
    Otherwise the fast settings: cuDNN autotuning on (one input shape per run pays one tuning).
    The flags matter on CUDA only; on the CPU both run the same code.
    """
    import torch  # deferred: a bottom module; a CPU command never loads torch

    cudnn = torch.backends.cudnn
    saved = (
        cudnn.benchmark,
        cudnn.deterministic,
        cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    if deterministic:
        request_deterministic_cublas()
        cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = False, True, False
        torch.set_float32_matmul_precision("highest")
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        cudnn.benchmark = True
    try:
        yield
    finally:
        cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = saved[:3]
        torch.set_float32_matmul_precision(saved[3])
        torch.use_deterministic_algorithms(saved[4], warn_only=saved[5])


#: the OpenMP policy :func:`tune_process_for_image_pipeline` sets
OPENMP_WAIT_POLICY = "PASSIVE"
#: glibc ``mallopt`` parameters (malloc.h) and the values set: blocks up to 32 MiB (the largest
#: threshold glibc accepts) come from the heap, and up to 1 GiB of freed heap stays mapped
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30


def tune_process_for_image_pipeline() -> dict[str, str]:
    """Process-wide settings for a command that decodes images in DataLoader worker processes
    while its main process runs a network on the same CPUs; call before torch is imported.

    Both change scheduling and memory reuse only, never a computed value. Returns what is in force:
    ``{"openmp_wait_policy": ..., "malloc": ...}`` (see the two helpers). Measured on 2 cores:
    decode-bound extraction (tiny network, 1024x768 JPEGs) 255-262 images/s with neither, 303-306
    with the OpenMP policy; with both, the main process's CPU time per image fell from 1.5 to
    1.1 ms (296-308 images/s where the policy alone gave 281-288). ResNet-50, forward-bound: the
    OpenMP policy changes nothing (12.1 against 11.7 images/s), the memory setting lifts it to
    14.4-14.8.
    """
    return {"openmp_wait_policy": _passive_openmp_waits(), "malloc": _keep_freed_memory()}


def _passive_openmp_waits() -> str:
    """Let torch's OpenMP threads sleep instead of spin while they wait.

    GNU OpenMP's default lets a thread that has finished its part of an operation spin at the
    barrier; with decoders on the other cores a thread is often descheduled mid-operation, and the
    others spin until it returns: CPU time the decoders needed. ``OMP_WAIT_POLICY=PASSIVE`` makes
    waiting threads sleep. libgomp reads the variable once, when torch loads it, so this works
    only before the process's first ``import torch`` (the command line imports torch lazily). A
    policy the user set is kept. Returns the policy in force: "PASSIVE" when set here, the user's
    value, or "default" when torch was already loaded (nothing can change it then).
    """
    if "OMP_WAIT_POLICY" in os.environ:
        return os.environ["OMP_WAIT_POLICY"]
    if "torch" in sys.modules:
        return "default"
    os.environ["OMP_WAIT_POLICY"] = OPENMP_WAIT_POLICY
    return OPENMP_WAIT_POLICY


def _keep_freed_memory() -> str:
    """Make glibc reuse freed memory instead of returning it to the system after every batch.

    By default glibc serves large blocks with fresh ``mmap`` pages and trims the heap when the
    top is free, so each batch's activations (tens of MB) are page-faulted and zeroed anew: half
    the main process's CPU time in the tiny-network extraction was the kernel doing that. With
    blocks up to 32 MiB served from the heap and 1 GiB of freed heap kept, a steady loop reuses
    its memory (peak memory is unchanged; it is simply not given back until the process ends).
    DataLoader workers forked later inherit it. Returns "kept" when set, "unchanged" where the C
    library is not glibc.
    """
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it (musl, macOS: leave malloc alone)
        mallopt = libc.mallopt
    except (AttributeError, OSError):
        return "unchanged"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "unchanged"
    return "kept"
