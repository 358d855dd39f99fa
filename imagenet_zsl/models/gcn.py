"""Graph convolutional models that predict a classifier for every node of the class graph.

The input of each node is its (normalised) word vector — zero for nodes without one, e.g. inner
WordNet synsets — and the regression targets are the seen-class classifier weights ([W; b], L2-
normalised, see :mod:`imagenet_zsl.models.seen_classifier`). After training, a class's prototype is
its predicted classifier and an image is embedded as [x, 1], so the score is the classifier's logit.

* GCNZ (Wang, Ye & Gupta, CVPR 2018): a 6-layer GCN on the undirected is-a graph with the
  symmetric normalisation D^-1/2 (A + I) D^-1/2, LeakyReLU(0.2). Defaults follow the reference
  code as run (JudyYe/zero-shot-gcn, ``train_gcn.py``): no bias; its loss ``mask_mse_loss`` scales
  the 0/1 seen-class mask by its mean before ``tf.nn.l2_loss``, so the data term is
  ½ (N/N_seen)² Σ_seen |ŵ_c − w_c|² (N: graph nodes) beside the weight decay wd·½|Θ|² —
  ``loss: mask_mean``; and no dropout: the model wires dropout before its last two layers, but
  ``construct_feed_dict`` never feeds the ``dropout`` placeholder, whose default is 0, so the
  reference trains without it (``dropout: 0.0``; ``dropout: 0.5`` with the default
  ``dropout_layers: 2`` is the code's evident intent). N is the node count of the graph given to
  ``fit``: the reference's graph holds the ImageNet-21K classes and their ancestors (about 32K
  nodes); the toolkit's full WordNet noun graph is larger, so the factor — recorded as
  ``loss_scale`` in the fit summary — is larger too (give a smaller graph to match it). Epochs:
  350 full-batch Adam steps, ``train_gcn.py``'s ``epochs`` flag (the README's training command
  and ``train_deploy.sh`` keep it; its ``save_epochs = [300, 3000]`` is from longer runs). One
  deviation: the reference writes the classifiers only at epochs 0 and 300 (``epoch % 500``
  and ``save_epochs``), so the last file it writes, the one its test script reads, holds them
  after 301 steps; the toolkit keeps the model at the end of training (``epochs: 301`` gives
  that file's classifiers).
* SGCN (Kampffmeyer et al., CVPR 2019, their single-hop baseline): a 2-layer GCN with the row
  normalisation D^-1 (A + I).
* DGP (Kampffmeyer et al., CVPR 2019): a 2-layer GCN on the *dense* graph where every node is linked
  to all its ancestors and descendants. Edges are grouped by hop distance k (k = 0 is the node
  itself); each group is row-normalised and weighted by learnt attention α = softmax(a):
  H = σ(Σ_k α^a_k A^a_k σ(Σ_k α^d_k A^d_k X Θ_d) Θ_a) — descendants first, then ancestors. As the
  reference (``lim = 4``), hops >= 4 share one group (``max_hops``, default 4).
  (DGP's second stage, fine-tuning the CNN under the predicted classifiers, needs images: it is
  ``imagenet-zsl finetune-dgp``, :mod:`imagenet_zsl.models.dgp_finetune`; here features are fixed.)

Training: Adam, full-batch, loss = ½ mean over seen classes of |ŵ_c - w_c|² with both sides
L2-normalised (``loss: mean``, DGP's ``mask_l2_loss``; ``sum``: ½ the plain sum; ``mask_mean``:
GCNZ's, above), sparse matrix products in plain torch (CPU or GPU). Predicted classifiers for every
graph node are stored with the model, so loading it never needs the graph again.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, field_validator
from tqdm import tqdm

from imagenet_zsl.devices import resolve_device
from imagenet_zsl.errors import UserInputError, preview
from imagenet_zsl.hierarchy.graph import ClassGraph
from imagenet_zsl.models.base import MODELS, SeenData, ZSLModel
from imagenet_zsl.models.common import (
    LossHistory,
    check_features,
    require_graph,
    seeded_torch,
    semantic_matrix,
    torch_threads,
)
from imagenet_zsl.models.params import (
    ClassifierParams,
    NonNegative,
    Positive,
    PositiveInt,
    SemanticNorm,
)
from imagenet_zsl.models.seen_classifier import augment
from imagenet_zsl.models.trivial import fit_seen_classifier, seen_classifier_data
from imagenet_zsl.scoring.vectors import l2_normalize
from imagenet_zsl.semantics.class_vectors import ClassVectors


# ----------------------------------------------------------------------------- graph operators
def normalized_adjacency(adjacency: sp.spmatrix, method: str) -> sp.csr_matrix:
    """A + I normalised: "sym" D^-1/2 (A+I) D^-1/2 (Kipf & Welling), "row" D^-1 (A+I)."""
    a = (sp.csr_matrix(adjacency, dtype=np.float64) != 0).astype(np.float64)
    a = (a + sp.identity(a.shape[0], format="csr")).tocsr()
    degree = np.asarray(a.sum(axis=1)).ravel()
    if method == "sym":
        scale = sp.diags(1.0 / np.sqrt(degree))
        return (scale @ a @ scale).tocsr()
    if method == "row":
        return (sp.diags(1.0 / degree) @ a).tocsr()
    raise ValueError(f"unknown normalisation {method!r}")


def row_normalize(matrix: sp.spmatrix) -> sp.csr_matrix:
    matrix = sp.csr_matrix(matrix, dtype=np.float64)
    degree = np.asarray(matrix.sum(axis=1)).ravel()
    inverse = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    return (sp.diags(inverse) @ matrix).tocsr()


def ancestor_hops(graph: ClassGraph, max_hops: int = 0) -> list[sp.csr_matrix]:
    """[H_1, H_2, ...] bool csr: H_k[i, j] iff j is an ancestor of i whose shortest upward path has
    k edges; with ``max_hops`` > 0 the hops >= max_hops are merged into the last matrix."""
    step = (graph.child_to_parent != 0).astype(np.int8).tocsr()
    reached = step.copy()
    levels = [step]
    while True:
        nxt = ((levels[-1] @ step) != 0).astype(np.int8).tocsr()
        nxt = (nxt - nxt.multiply(reached)).tocsr()
        nxt.eliminate_zeros()
        if nxt.nnz == 0:
            break
        reached = (reached + nxt).tocsr()
        levels.append(nxt)
        if len(levels) > len(graph):  # pragma: no cover - cyclic input
            raise ValueError("class graph has a cycle")
    if max_hops and len(levels) > max_hops:
        merged = levels[max_hops - 1]
        for extra in levels[max_hops:]:
            merged = merged + extra
        levels = levels[: max_hops - 1] + [merged.tocsr()]
    return [(level != 0).tocsr() for level in levels]


def _torch_sparse(matrix: sp.spmatrix, device):  # noqa: ANN001, ANN202 - torch objects
    import torch  # deferred: listing the models imports this; CPU evaluate must not load torch

    coo = sp.coo_matrix(matrix, dtype=np.float32)
    indices = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    values = torch.from_numpy(coo.data.astype(np.float32))
    return torch.sparse_coo_tensor(indices, values, coo.shape, check_invariants=False).coalesce().to(device)


def receptive_rows(operators: list[list[sp.csr_matrix]], targets: np.ndarray) -> list[np.ndarray]:
    """The graph nodes each layer must compute for the outputs at ``targets``: [R_in, R_1, ...,
    R_L] (sorted node indices) where R_L = targets and R_(l-1) = the columns that layer l's
    propagation matrices read on the rows R_l. Why: the loss sees the seen classes only, so a
    2-layer GCN trains exactly on their 2-hop neighbourhood (SGCN on WordNet: ~1/10 of the 82K
    nodes); every row it computes is the number the full graph would give it."""
    rows = [np.unique(np.asarray(targets, dtype=np.int64))]
    for groups in reversed(operators):
        needed = rows[0]
        rows.insert(0, np.unique(np.concatenate([g[needed].indices for g in groups]).astype(np.int64)))
    return rows


def _build_network(
    layer_dims: list[int],
    operators: list[list[Any]],
    attention: bool,
    dropout: float,
    negative_slope: float,
    *,
    bias: bool = True,
    dropout_layers: int | None = None,
):  # noqa: ANN202 - torch module
    """A stack of graph convolutions: layer i aggregates with operators[i] (one matrix, or several
    hop groups mixed by learnt softmax attention). ``dropout_layers`` k: dropout before the last k
    layers only (None: every layer); ``bias``: a bias per layer. ``forward(x, operators)`` may pass
    row-restricted operators (:func:`receptive_rows`) in place of the full ones."""
    import torch  # deferred: listing the models imports this; CPU evaluate must not load torch
    from torch import nn  # deferred: as above

    num_layers = len(layer_dims) - 1
    first_dropout = 0 if dropout_layers is None else max(num_layers - int(dropout_layers), 0)

    class GraphConvolution(nn.Module):
        def __init__(self, fan_in: int, fan_out: int, groups: list[Any], rate: float):
            super().__init__()
            self.linear = nn.Linear(fan_in, fan_out, bias=bias)
            self.groups = groups
            self.rate = rate
            self.attention = nn.Parameter(torch.zeros(len(groups))) if attention else None

        def forward(self, h: torch.Tensor, groups: list[Any] | None = None) -> torch.Tensor:
            groups = self.groups if groups is None else groups
            h = self.linear(nn.functional.dropout(h, self.rate, self.training) if self.rate else h)
            if self.attention is None:
                return torch.sparse.mm(groups[0], h)
            alpha = torch.softmax(self.attention, dim=0)
            return sum(alpha[k] * torch.sparse.mm(group, h) for k, group in enumerate(groups))

    class GraphNetwork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(
                GraphConvolution(
                    layer_dims[i], layer_dims[i + 1], operators[i], dropout if i >= first_dropout else 0.0
                )
                for i in range(num_layers)
            )

        def forward(self, x: torch.Tensor, operators: list[list[Any]] | None = None) -> torch.Tensor:
            for i, layer in enumerate(self.layers):
                x = layer(x, None if operators is None else operators[i])
                if i < len(self.layers) - 1:
                    x = nn.functional.leaky_relu(x, negative_slope)
            return nn.functional.normalize(x, dim=1)

    return GraphNetwork()


# ----------------------------------------------------------------------------- models
GraphLoss = Literal["mean", "sum", "mask_mean"]
GRAPH_LOSSES: tuple[str, ...] = typing.get_args(GraphLoss)


def loss_scale(kind: str, nodes: int, seen: int) -> float:
    """The factor on ½ Σ_seen |ŵ_c − w_c|² of each loss ``kind``: 1/N_seen ("mean"), 1 ("sum"),
    (N/N_seen)² ("mask_mean": the reference GCNZ divides its 0/1 mask over the N graph nodes by
    the mask's mean N_seen/N, then squares it inside its L2 loss)."""
    if kind == "mean":
        return 1.0 / seen
    if kind == "sum":
        return 1.0
    if kind == "mask_mean":
        return (nodes / seen) ** 2
    raise ValueError(f"unknown loss {kind!r}")


class GraphParams(ClassifierParams):
    """The GCN models' hyper-parameters (SGCN's defaults), beside the seen classifier's."""

    hidden: list[PositiveInt] = [2048]
    epochs: PositiveInt = 3000
    lr: Positive = 1e-3
    weight_decay: NonNegative = 5e-4
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.5
    negative_slope: NonNegative = 0.2
    semantic_norm: SemanticNorm = "l2"
    #: dropout before every layer ("all") or before the last k layers only (k)
    dropout_layers: Literal["all"] | Annotated[int, Field(ge=0)] = "all"
    bias: bool = True
    #: "mean": ½ mean over seen classes of |ŵ_c - w_c|² (DGP's mask_l2_loss); "sum": ½ the sum;
    #: "mask_mean": ½ (N/N_seen)² times the sum, N the graph's nodes (GCNZ's mask_mse_loss)
    loss: GraphLoss = "mean"


class _GraphClassifierRegression(ZSLModel):
    """Shared training loop: word vectors of all graph nodes in, seen classifiers as targets."""

    needs_graph: ClassVar[bool] = True
    uses_training_logits: ClassVar[bool] = True  # the seen classifier's head source
    #: seen classes without a word vector still get a target (their input row is zero)
    seen_need_vectors: ClassVar[bool] = False
    Params: ClassVar[type[GraphParams]] = GraphParams
    grid: ClassVar[dict[str, list[Any]]] = {"weight_decay": [0.0, 5e-4, 5e-3], "dropout": [0.0, 0.5]}
    attention: ClassVar[bool] = False

    def _operators(self, graph: ClassGraph, layers: int) -> list[list[sp.csr_matrix]]:
        """One list of propagation matrices per layer."""
        raise NotImplementedError

    def _node_inputs(self, graph: ClassGraph, semantics: ClassVectors) -> tuple[np.ndarray, int]:
        have = np.fromiter((w in semantics for w in graph.wnids), bool, count=len(graph))
        inputs = np.zeros((len(graph), semantics.dim), np.float32)
        if have.any():
            wnids = [w for w, h in zip(graph.wnids, have, strict=True) if h]
            inputs[have] = semantic_matrix(semantics, wnids, self.params["semantic_norm"])
        return inputs, int((~have).sum())

    def fit(
        self, data: SeenData, semantics: ClassVectors, graph: ClassGraph | None = None
    ) -> _GraphClassifierRegression:
        import torch  # deferred: listing the models imports this; CPU evaluate must not load torch

        graph = require_graph(self.name, graph)
        seen_idx = graph.indices(data.seen_wnids, "seen classes")
        features, labels = seen_classifier_data(self, data)
        classifier = fit_seen_classifier(self, data, features, labels)
        targets = l2_normalize(classifier.weights_.T)  # (S, D + 1)
        inputs, without_vector = self._node_inputs(graph, semantics)
        layer_dims = [inputs.shape[1], *self.params["hidden"], targets.shape[1]]
        device = resolve_device(self.params["device"])
        full = self._operators(graph, len(layer_dims) - 1)
        rows = receptive_rows(full, seen_idx)  # train on the seen classes' receptive field only
        operators = [[_torch_sparse(m, device) for m in group] for group in full]
        restricted = [
            [_torch_sparse(m[rows[i + 1]][:, rows[i]], device) for m in group] for i, group in enumerate(full)
        ]
        x = torch.from_numpy(inputs).to(device)
        x_train = torch.from_numpy(inputs[rows[0]]).to(device)
        y = torch.from_numpy(targets).to(device)
        seen = torch.from_numpy(np.searchsorted(rows[-1], seen_idx)).to(device)
        scale = loss_scale(self.params["loss"], len(graph), len(seen_idx))
        step_flops = 6.0 * sum(len(rows[i]) * layer_dims[i] * layer_dims[i + 1] for i in range(len(full)))
        threads = torch_threads(step_flops) if device.type == "cpu" else contextlib.nullcontext()
        epochs = int(self.params["epochs"])
        history = LossHistory(epochs, device)  # read once at the end: no device sync per epoch
        dropout_layers = self.params["dropout_layers"]
        with seeded_torch(int(self.params["seed"]), device), threads:
            network = _build_network(
                layer_dims,
                operators,
                self.attention,
                float(self.params["dropout"]),
                float(self.params["negative_slope"]),
                bias=bool(self.params["bias"]),
                dropout_layers=None if dropout_layers == "all" else int(dropout_layers),
            ).to(device)
            optimiser = torch.optim.Adam(
                network.parameters(),
                lr=float(self.params["lr"]),
                weight_decay=float(self.params["weight_decay"]),
            )
            network.train()
            for epoch in tqdm(range(epochs), desc=f"{self.name} epochs", disable=None, leave=False):
                optimiser.zero_grad()
                output = network(x_train, restricted)
                errors_t = ((output[seen] - y) ** 2).sum(dim=1)
                # "mean" stays torch's mean (the bit-exact loss of before), the others scale a sum
                loss = 0.5 * (errors_t.mean() if self.params["loss"] == "mean" else scale * errors_t.sum())
                loss.backward()
                optimiser.step()
                history.add(epoch, loss)
            losses = history.values()
            network.eval()
            with torch.no_grad():
                outputs = network(x).cpu().numpy().astype(np.float32)
                errors = 0.5 * ((outputs[seen_idx] - targets) ** 2).sum(axis=1)
                final = float(scale * errors.astype(np.float64).sum())
        self.dim_ = features.shape[1]
        self.node_wnids_ = np.asarray(graph.wnids, dtype=np.str_)
        self.node_outputs_ = outputs
        self.fit_info_ = {
            **classifier.info(),
            "graph": graph.source,
            "nodes": len(graph),
            "nodes_without_vector": without_vector,
            "loss_first_epoch": losses[0] if losses else None,
            "loss_last_epoch": losses[-1] if losses else None,
            "loss_eval": final,
            "loss_scale": scale,
        }
        if self.attention:
            self.fit_info_["attention"] = [
                torch.softmax(layer.attention.detach(), 0).cpu().numpy().round(4).tolist()
                for layer in network.layers
            ]
        return self

    def embed_images(self, features: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        return augment(check_features(self.name, features, self.dim_))

    def class_prototypes(self, wnids: Sequence[str]) -> np.ndarray:
        index = getattr(self, "_cache_index", None)
        if index is None:
            index = {str(w): i for i, w in enumerate(self.node_wnids_)}
            self._cache_index = index
        wnids = list(wnids)
        absent = [w for w in wnids if w not in index]
        if absent:
            raise UserInputError(
                f"{self.name}: {len(absent)} classes are not nodes of the graph it was trained on: "
                f"{preview(absent)}"
            )
        return self.node_outputs_[[index[w] for w in wnids]]


@MODELS.register
class GCNZ(_GraphClassifierRegression):
    """GCNZ: 6-layer GCN on the is-a graph regressing the seen classifiers (Wang et al. 2018)."""

    name: ClassVar[str] = "gcnz"

    #: as the reference as run (Wang et al.'s zero-shot-gcn, see the module docstring): 350
    #: epochs, no bias, the mask-mean-scaled summed loss, no dropout (its placeholder is never
    #: fed); dropout, when set, goes before the last two layers only as the reference wires it.
    #: ``dropout_layers: all, bias: true, loss: mean, dropout: 0.5`` are SGCN's choices
    class Params(GraphParams):
        hidden: list[PositiveInt] = [2048, 2048, 1024, 1024, 512]
        #: train_gcn.py's epochs flag (module docstring: its last saved output is at epoch 300)
        epochs: PositiveInt = 350
        dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
        dropout_layers: Literal["all"] | Annotated[int, Field(ge=0)] = 2
        bias: bool = False
        loss: GraphLoss = "mask_mean"

    def _operators(self, graph: ClassGraph, layers: int) -> list[list[sp.csr_matrix]]:
        return [[normalized_adjacency(graph.adjacency, "sym")]] * layers


@MODELS.register
class SGCN(_GraphClassifierRegression):
    """SGCN: 2-layer GCN with row-normalised is-a adjacency (Kampffmeyer et al. 2019)."""

    name: ClassVar[str] = "sgcn"

    def _operators(self, graph: ClassGraph, layers: int) -> list[list[sp.csr_matrix]]:
        return [[normalized_adjacency(graph.adjacency, "row")]] * layers


@MODELS.register
class DGP(_GraphClassifierRegression):
    """DGP: dense ancestor/descendant propagation with hop-distance attention (Kampffmeyer 2019)."""

    name: ClassVar[str] = "dgp"
    attention: ClassVar[bool] = True

    #: max_hops 4: the reference (train_gcn_dense_att.py, ``lim = 4``) merges every hop >= 4 into one
    #: attention group; 0 keeps one group per hop distance
    class Params(GraphParams):
        max_hops: Annotated[int, Field(ge=0)] = 4

        @field_validator("hidden")
        @classmethod
        def _two_layers(cls, hidden: list[int]) -> list[int]:
            if len(hidden) != 1:
                raise ValueError("DGP has two layers: give one hidden size")
            return hidden

    def _operators(self, graph: ClassGraph, layers: int) -> list[list[sp.csr_matrix]]:
        identity = sp.identity(len(graph), format="csr")
        ancestors = ancestor_hops(graph, int(self.params["max_hops"]))
        from_ancestors = [identity] + [row_normalize(h) for h in ancestors]
        from_descendants = [identity] + [row_normalize(h.T) for h in ancestors]
        return [from_descendants, from_ancestors]
