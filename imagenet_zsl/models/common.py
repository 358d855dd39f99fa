"""Small pieces every baseline shares: input checks, feature/semantic normalisation, torch set-up.

Kept apart from the models so that each model module reads as its paper's equations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.models.base import BLOCK_ROWS, SeenData, read_rows
from imagenet_zsl.models.params import FeatureMode, SemanticNorm
from imagenet_zsl.scoring.vectors import l2_normalize

if TYPE_CHECKING:
    import torch

    from imagenet_zsl.hierarchy.graph import ClassGraph
    from imagenet_zsl.semantics.class_vectors import ClassVectors

#: the choices of the ``features`` and ``semantic_norm`` hyper-parameters (declared once, in params)
FEATURE_MODES = get_args(FeatureMode)
#: rows per block of the full-batch L-BFGS trainers (loss and gradient summed over blocks). Up to one
#: block of prepared rows is kept between iterations (256 MB at D = 2048); more are re-read from the
#: row source at every evaluation. Every attribute dataset (AWA2: 23.5K training images) is one
#: block, so its fits are the full-batch ones, operation for operation.
LBFGS_BLOCK_ROWS = 32768
SEMANTIC_MODES = get_args(SemanticNorm)


def check_seen_data(
    model: str, data: SeenData, images_optional: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Validated (features (N, D) row source, labels int64 (N,)); every seen class needs an image,
    unless ``images_optional`` (a stored backbone head stands in for them: N may be 0).

    The features are returned as given when they are a row source (a float32 or float16 array,
    memory-mapped or not, or a ShardRows): never copied, read block by block
    (:func:`~imagenet_zsl.models.base.read_rows`); anything else becomes a float32 array."""
    features = data.features
    if not hasattr(features, "shape") or (
        isinstance(features, np.ndarray) and features.dtype not in (np.float32, np.float16)
    ):
        features = np.asarray(features, dtype=np.float32)
    labels = np.asarray(data.labels, dtype=np.int64)
    if images_optional and features.size == 0 and data.head is not None:
        features = np.zeros((0, data.head.dim), np.float32)
    if features.ndim != 2 or labels.shape != (features.shape[0],):
        raise UserInputError(f"{model}: features {features.shape} and labels {labels.shape} disagree")
    if len(labels) == 0 and not images_optional:
        raise UserInputError(
            f"{model}: no training images; it learns from images of the seen classes: give a feature "
            "directory that holds them"
        )
    num_seen = len(data.seen_wnids)
    if len(labels) and (labels.min() < 0 or labels.max() >= num_seen):
        raise UserInputError(f"{model}: labels must index the {num_seen} seen classes")
    empty = np.flatnonzero(np.bincount(labels, minlength=num_seen) == 0)
    if len(empty) and not images_optional:
        raise UserInputError(
            f"{model}: {len(empty)} seen classes have no training image: "
            f"{preview(data.seen_wnids[i] for i in empty)}; drop them from seen_wnids"
        )
    for start in range(0, len(features), BLOCK_ROWS):  # blockwise: no (N, D) temporary
        if not np.isfinite(read_rows(features, slice(start, start + BLOCK_ROWS))).all():
            raise UserInputError(f"{model}: training features contain NaN or Inf")
    if data.logits is not None and len(data.logits) != len(labels):
        raise UserInputError(f"{model}: logits have {len(data.logits)} rows for {len(labels)} images")
    return features, labels


def check_features(model: str, features: np.ndarray, dim: int) -> np.ndarray:
    features = np.asarray(features, dtype=np.float32)
    if features.ndim != 2 or features.shape[1] != dim:
        raise UserInputError(f"{model}: features have shape {features.shape}, model expects (N, {dim})")
    return features


def require_graph(model: str, graph: ClassGraph | None) -> ClassGraph:
    if graph is None:
        raise UserInputError(
            f"{model}: needs the class graph (fit(..., graph=load_class_graph())); it has no "
            "meaning on datasets without a hierarchy"
        )
    return graph


def softmax(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    probabilities = np.exp(shifted)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    return probabilities


class FeaturePrep:
    """Image-feature normalisation learnt on training images: "none", "l2" (per image) or
    "standard" (per dimension z-score). Stored with the model so test images get the same map.

    Fitted: ``dim_`` (D), ``mean_`` and ``scale_`` ((D,) float32; empty unless "standard")."""

    def __init__(self, mode: str = "none"):
        if mode not in FEATURE_MODES:
            raise ValueError(f"feature normalisation must be one of {FEATURE_MODES}, got {mode!r}")
        self.mode = mode

    def fit(self, features: np.ndarray) -> FeaturePrep:
        self.dim_ = int(features.shape[1])
        self.mean_ = np.zeros(0, np.float32)
        self.scale_ = np.zeros(0, np.float32)
        if self.mode == "standard":
            total = np.zeros(self.dim_)
            squares = np.zeros(self.dim_)
            for start in range(0, len(features), BLOCK_ROWS):
                block = features[start : start + BLOCK_ROWS].astype(np.float64)
                total += block.sum(axis=0)
                squares += (block**2).sum(axis=0)
            mean = total / len(features)
            variance = np.maximum(squares / len(features) - mean**2, 0.0)
            self.mean_ = mean.astype(np.float32)
            self.scale_ = np.maximum(np.sqrt(variance), 1e-6).astype(np.float32)
        return self

    def __call__(self, features: np.ndarray) -> np.ndarray:
        if self.mode == "l2":
            return l2_normalize(features)
        if self.mode == "standard":
            return ((features - self.mean_) / self.scale_).astype(np.float32)
        return np.asarray(features, dtype=np.float32)


def feature_statistics(
    prep: FeaturePrep, features: np.ndarray, labels: np.ndarray, num_classes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sufficient statistics of the prepared features, streamed in blocks with float64 sums:
    XᵀX (D, D), per-class sums (Z, D) and per-class counts (Z,). Every closed-form model needs only
    these, so 1.28M x 2048 training images never get a float64 copy."""
    import scipy.sparse as sp  # deferred: 0.1 s to import; `evaluate` imports this module, trains nothing

    dim = prep.dim_
    gram = np.zeros((dim, dim))
    sums = np.zeros((num_classes, dim))
    for start in range(0, len(features), BLOCK_ROWS):
        block = prep(features[start : start + BLOCK_ROWS]).astype(np.float64)
        rows = labels[start : start + BLOCK_ROWS]
        gram += block.T @ block
        onehot = sp.csr_matrix(
            (np.ones(len(rows)), (rows, np.arange(len(rows)))), shape=(num_classes, len(rows))
        )
        sums += onehot @ block
    return gram, sums, np.bincount(labels, minlength=num_classes).astype(np.float64)


def semantic_matrix(semantics: ClassVectors, wnids: Sequence[str], mode: str) -> np.ndarray:
    """(C, E) float32 semantic vectors of ``wnids``; "l2" normalises each row."""
    if mode not in SEMANTIC_MODES:
        raise ValueError(f"semantic normalisation must be one of {SEMANTIC_MODES}, got {mode!r}")
    matrix = semantics.get(list(wnids)).astype(np.float32)
    return l2_normalize(matrix) if mode == "l2" else matrix


# ----------------------------------------------------------------------------- torch
@contextlib.contextmanager
def seeded_torch(seed: int, device: torch.device) -> Iterator[None]:
    """Seed torch's RNGs inside the block only, so a fit is reproducible without touching the
    caller's random state."""
    import torch  # deferred: the closed-form models share this module and never load torch

    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        yield


@dataclass(frozen=True)
class LBFGSSettings:
    """How :func:`fit_linear_lbfgs` trains: L2 penalty ``reg`` · |W|² (the bias is free), at most
    ``max_iter`` iterations, torch's stopping tolerances, device and seed."""

    reg: float
    max_iter: int
    tolerance_grad: float = 1e-7
    tolerance_change: float = 1e-10
    device: str = "cpu"
    seed: int = 0


def column_moments(rows: Any, block_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mean (D,), standard deviation (D,)) float32 of the columns of an (N, D) row source.

    Up to ``block_rows`` rows: numpy's ``mean``/``std`` of the float32 rows (the full-batch
    values, bit for bit). More: two passes over the blocks with float64 sums (the mean, then the
    squared deviations from it), so no (N, D) copy is made."""
    n = len(rows)
    block_rows = block_rows or LBFGS_BLOCK_ROWS
    if n <= block_rows:
        x = read_rows(rows, slice(None))
        return x.mean(axis=0), x.std(axis=0)
    total = np.zeros(rows.shape[1])
    for start in range(0, n, block_rows):
        total += read_rows(rows, slice(start, start + block_rows)).sum(axis=0, dtype=np.float64)
    mean = total / n
    squares = np.zeros_like(mean)
    for start in range(0, n, block_rows):
        squares += ((read_rows(rows, slice(start, start + block_rows)) - mean) ** 2).sum(axis=0)
    return mean.astype(np.float32), np.sqrt(squares / n).astype(np.float32)


class LabelRows:
    """``table[labels]`` as an (N, K) float32 row source read on demand: per-image targets that
    are a class's row (DAP's attribute signatures) without an (N, K) copy."""

    ndim = 2

    def __init__(self, table: np.ndarray, labels: np.ndarray):
        self.table = np.asarray(table, dtype=np.float32)  # (Z, K)
        self.labels = np.asarray(labels, dtype=np.int64)  # (N,)
        self.shape = (len(self.labels), self.table.shape[1])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: slice | np.ndarray) -> np.ndarray:
        return self.table[self.labels[key]]


def tensor_blocks(
    features: Any,
    targets: Any,
    transform: Callable[[np.ndarray], np.ndarray],
    device: torch.device,
    block_rows: int | None = None,
) -> Callable[[], Iterable[tuple[torch.Tensor, torch.Tensor]]]:
    """A function giving the (x, y) tensor blocks of a full-batch objective on ``device``: x the
    ``transform``-ed float32 rows of ``features`` (N, D), y the same rows of ``targets`` (N,) or
    (N, K) as stored (int64 labels, float32 targets). Up to ``block_rows`` (default
    ``LBFGS_BLOCK_ROWS``) rows are one block, prepared once and kept; more are re-read and
    prepared at every call (memory: one block)."""
    import torch  # deferred: the closed-form models share this module and never load torch

    n = len(targets)
    block_rows = block_rows or LBFGS_BLOCK_ROWS

    def read(start: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = np.ascontiguousarray(transform(read_rows(features, slice(start, start + block_rows))), np.float32)
        y = np.ascontiguousarray(targets[start : start + block_rows])
        return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)

    if n <= block_rows:
        held = [read(0)] if n else []
        return lambda: held
    return lambda: (read(start) for start in range(0, n, block_rows))


def blocked_loss(
    blocks: Callable[[], Iterable[tuple[torch.Tensor, ...]]],
    rows: int,
    data_term: Callable[..., torch.Tensor],
    penalty: Callable[[], torch.Tensor],
    backward: bool = True,
) -> torch.Tensor:
    """Σ_b (n_b / rows) · data_term(*block_b) + penalty(): a full-batch objective whose data term
    is a mean over ``rows`` images, evaluated block by block; with ``backward`` the gradient is
    accumulated block by block (call ``zero_grad`` first). Returns the detached value. One block
    computes data_term(block) + penalty() and one backward: the full-batch operations exactly."""
    total = None
    for block in blocks():
        value = data_term(*block)
        if len(block[0]) != rows:
            value = value * (len(block[0]) / rows)
        if total is None:
            value = value + penalty()
        if backward:
            value.backward()
        total = value.detach() if total is None else total + value.detach()
        del block, value  # unbound before the next block is read: one block in memory at a time
    if total is None:  # no rows: the penalty alone
        value = penalty()
        if backward:
            value.backward()
        total = value.detach()
    return total


def fit_linear_lbfgs(
    features: Any,
    targets: Any,
    settings: LBFGSSettings,
    loss: str = "ce",
    num_classes: int = 0,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One linear layer from zero weights by full-batch L-BFGS (strong Wolfe line search, history
    20): the one such trainer of the toolkit (the seen-class softmax, DAP, IAP).

    ``loss`` "ce": softmax cross-entropy, targets (N,) ids among ``num_classes``; "bce": one
    logistic regression per output column (their losses summed), targets (N, K) in [0, 1] (an
    array or a row source such as :class:`LabelRows`). features (N, D): a row source, each block
    passed through ``transform`` (e.g. standardisation) when read. The loss and its gradient are
    sums over blocks of ``LBFGS_BLOCK_ROWS`` rows (:func:`blocked_loss`), so no (N, D) float32
    copy is made; up to one block, the computation is the plain full-batch one.
    Returns weights (D, K) and bias (K,), float32 numpy arrays."""
    import torch  # deferred: the closed-form models share this module and never load torch
    from torch.nn import functional  # deferred: as above

    device = resolve_device(settings.device)
    if loss == "bce":
        targets = _FloatRows(targets)
        outputs = int(targets.shape[1])
    elif loss == "ce":
        targets = np.asarray(targets, dtype=np.int64)
        outputs = int(num_classes)
    else:
        raise ValueError(f"bug: unknown loss {loss!r}")
    blocks = tensor_blocks(features, targets, transform or (lambda x: x), device)
    dim = int(features.shape[1])
    with seeded_torch(settings.seed, device):
        weight = torch.zeros(dim, outputs, dtype=torch.float32, device=device, requires_grad=True)
        bias = torch.zeros(outputs, dtype=torch.float32, device=device, requires_grad=True)
        optimiser = torch.optim.LBFGS(
            [weight, bias],
            lr=1.0,
            max_iter=settings.max_iter,
            history_size=20,
            line_search_fn="strong_wolfe",
            tolerance_grad=settings.tolerance_grad,
            tolerance_change=settings.tolerance_change,
        )

        def data_term(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            logits = x @ weight + bias
            if loss == "bce":  # summed over outputs: each one is its own regression
                return functional.binary_cross_entropy_with_logits(logits, y) * outputs
            return functional.cross_entropy(logits, y)

        def closure() -> torch.Tensor:
            optimiser.zero_grad()
            return blocked_loss(
                blocks, len(targets), data_term, lambda: settings.reg * (weight * weight).sum()
            )

        optimiser.step(closure)
    return weight.detach().cpu().numpy().copy(), bias.detach().cpu().numpy().copy()


class _FloatRows:
    """A (N, K) target row source read as float32 blocks."""

    def __init__(self, rows: Any):
        self.rows = rows
        self.shape = tuple(np.shape(rows))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        return np.asarray(self.rows[key], dtype=np.float32)


#: floating-point operations (forward + backward) of one training step per torch CPU thread. Below
#: this, thread start-up and synchronisation cost more than they save, and far more on a loaded
#: machine. Measured on 2 shared cores: DeViSE's demo step (batch 1024, 986 classes, 0.3 GFLOP)
#: 0.025 s on one thread, 0.2 s on two; SGCN's demo epoch (0.8 GFLOP) 0.05 s against 0.15 s.
#: Deterministic (no load measurement), so a re-run computes with the same thread count.
FLOPS_PER_THREAD = 1e9


@contextlib.contextmanager
def torch_threads(step_flops: float) -> Iterator[int]:
    """Run the block with one torch CPU thread per ``FLOPS_PER_THREAD`` of a training step (at least
    one, at most torch's default), then restore the caller's setting. Why: the toolkit's small
    problems (attribute datasets, the demo) run thousands of tiny steps where intra-op threads only
    add overhead — and on a loaded machine much more; large steps keep every thread. Yields the
    thread count. Results are the same up to float summation order."""
    import torch  # deferred: the closed-form models share this module and never load torch

    before = torch.get_num_threads()
    threads = _threads_for(step_flops, before)
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


def _threads_for(flops: float, available: int) -> int:
    return int(max(1, min(available, flops // FLOPS_PER_THREAD)))


@contextlib.contextmanager
def blas_threads(flops: float) -> Iterator[int]:
    """Run the block with one BLAS thread (numpy/scipy's OpenBLAS or MKL) per ``FLOPS_PER_THREAD``
    of its largest operation, at least one, at most the library's default; restored afterwards.
    Why: a grid search on a small problem does hundreds of tiny solves and products, and on a loaded
    machine each multi-threaded one waits for a descheduled peer (a 50 x 50 solve: 0.3 ms on one
    thread, 34 ms on two). Yields the thread count."""
    available = max(
        [int(pool["num_threads"]) for pool in threadpool_info() if pool["user_api"] == "blas"] or [1]
    )
    threads = _threads_for(flops, available)
    with threadpool_limits(limits=threads, user_api="blas"):
        yield threads


def gram_flops(data: SeenData) -> float:
    """2·N·D², the cost of XᵀX: the largest dense operation of fitting on ``data`` (for
    :func:`blas_threads`)."""
    n, d = np.shape(data.features)[:2] if np.ndim(data.features) == 2 else (0, 0)
    return 2.0 * n * d * d


def minibatches(n: int, batch_size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Seeded shuffled index blocks of one epoch."""
    order = rng.permutation(n)
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


class LossHistory:
    """Per-epoch training losses kept on the training device, read by the host once at the end.

    Why: ``float(loss)`` after every step makes the host wait for the device (a GPU sync per
    mini-batch or epoch). :meth:`add` only queues device work; :meth:`values` reads the whole
    history (one transfer). Bit-identical to the former host accumulation ``total += float(loss) *
    weight``: each step's float32 loss is widened to float64 exactly, multiplied and added in
    float64, in the same order, starting from 0.0. No model stops early on the loss, so no value is
    needed before the end of training.
    """

    def __init__(self, epochs: int, device: torch.device):
        import torch  # deferred: the closed-form models share this module and never load torch

        self._sums = torch.zeros(max(int(epochs), 0), dtype=torch.float64, device=device)  # (epochs,)

    def add(self, epoch: int, loss: torch.Tensor, weight: int = 1) -> None:
        """Add ``weight · loss`` (a 0-d tensor, detached here) to epoch ``epoch``'s sum."""
        self._sums[epoch] += loss.detach().double() * weight

    def values(self) -> list[float]:
        """The per-epoch sums as Python floats: the one host read of training."""
        return self._sums.tolist()
