"""Evaluation: exact top-k search (blocked BLAS matmul), hierarchy-aware error breakdown,
per-class tables, reports and the ``evaluate``/``report``/``predict`` commands.

The search, used by the CLI and by other stages::

    topk_inner_product(queries, prototypes, k)          -> (scores (N,k), ids (N,k))
    TopKSearcher(prototypes, k, device="auto")          -> one search per image block

The metrics (hit@K, tie ranks, GZSL, AUSUC) are :mod:`imagenet_zsl.scoring`, below the models,
which select hyper-parameters with them; import them from there (one name, one place).

The package re-exports nothing: import from its modules (``imagenet_zsl.evaluation.search``,
``.hierarchy_errors``), so importing ``evaluation.cli`` at start-up stays light.
"""
