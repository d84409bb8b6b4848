"""The folds of K-fold cross-validation: contiguous (scikit-learn's ``KFold``) or stratified by class.

:func:`kfold_ids` and :func:`stratified_kfold_ids` are the host versions;
:func:`binary_stratified_ids` the jittable one for traced binary labels;
:func:`resolve_folds` turns a fold count or given ids into ``(ids, K)`` and
:func:`check_folds_nonempty` checks what the fits need of them. Shared by
:mod:`jaxknock.l1.cv` and the working-set engine (:mod:`jaxknock.l1.working_set`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxknock import _checks, _containers
from jaxknock._solution import RESULTS

__all__ = [
    "binary_stratified_ids",
    "check_folds_nonempty",
    "cv_folds",
    "kfold_ids",
    "refuse_traced_folds",
    "resolve_folds",
    "stratified_kfold_ids",
    "void_single_class_folds",
]


def _check_fold_count(n, folds):
    if not (_checks.is_int(folds) and 2 <= folds <= n):
        raise ValueError(f"folds must be an integer in [2, n_samples={n}], got {folds!r}")


def kfold_ids(n: int, folds: int) -> np.ndarray:
    """Fold index of each row for contiguous K-fold splits.

    Same splits as ``sklearn.model_selection.KFold(folds)`` (no shuffling):
    the first ``n % folds`` folds hold one extra row.

    Example:
        >>> kfold_ids(5, 2)
        array([0, 0, 0, 1, 1], dtype=int32)
    """
    if not (_checks.is_int(n) and n >= 2):  # n=5.0 failed in a slice, n=True was "n_samples=True"
        raise ValueError(f"n must be an integer >= 2 (the number of rows), got {n!r}")
    n = int(n)
    _check_fold_count(n, folds)
    folds = int(folds)
    sizes = np.full(folds, n // folds)
    sizes[: n % folds] += 1
    return np.repeat(np.arange(folds, dtype=np.int32), sizes)


def stratified_kfold_ids(y, folds: int) -> np.ndarray:
    """Fold index of each row for stratified K-fold splits of the labels ``y``.

    Same splits as ``sklearn.model_selection.StratifiedKFold(folds)`` (no
    shuffling): the sorted labels are dealt to the folds in turn, which fixes
    how many rows of each class every fold holds, and each class's rows go,
    in their order, to the folds in contiguous runs of those sizes. Every
    fold's held-out rows then mirror the class proportions, whatever the order
    of the rows (contiguous folds on rows sorted by class hold out one class).
    Classes are numbered in order of first appearance, as scikit-learn does.

    Example:
        >>> stratified_kfold_ids([0, 0, 0, 0, 1, 1], 2)
        array([0, 0, 1, 1, 0, 1], dtype=int32)
    """
    y = np.asarray(y)
    _check_fold_count(y.shape[0], folds)
    folds, n = int(folds), y.shape[0]
    _, first, lexical = np.unique(y, return_index=True, return_inverse=True)
    codes = np.argsort(np.argsort(first))[lexical.reshape(-1)]  # classes numbered by first appearance
    num_classes = first.size
    dealt = np.sort(codes)
    allocation = np.stack([np.bincount(dealt[i::folds], minlength=num_classes) for i in range(folds)])
    ids = np.empty(n, np.int32)
    for c in range(num_classes):
        ids[codes == c] = np.repeat(np.arange(folds, dtype=np.int32), allocation[:, c])
    return ids


def binary_stratified_ids(y, folds: int):
    """:func:`stratified_kfold_ids` for labels in ``{0, 1}`` that may be traced (``jnp``).

    Classes are numbered by first appearance (``y[0]``'s class is class 0). Of
    the sorted labels, fold ``k`` is dealt the positions ``i = k (mod K)``;
    ``#{i < m : i = k (mod K)} = (m - k + K - 1) // K``, which gives every
    fold's share of each class, and a row's rank within its class picks the
    fold whose run of that class holds it.
    """
    K = int(folds)
    code = (y != y[0]).astype(jnp.int32)
    n0 = y.shape[0] - jnp.sum(code)
    k = jnp.arange(K)
    share0 = (n0 - k + K - 1) // K
    share1 = (y.shape[0] - k + K - 1) // K - share0
    rank = jnp.where(code == 0, jnp.cumsum(1 - code), jnp.cumsum(code)) - 1
    ends = jnp.where(code[:, None] == 0, jnp.cumsum(share0)[None, :], jnp.cumsum(share1)[None, :])
    return jnp.sum(rank[:, None] >= ends, axis=1).astype(jnp.int32)


def cv_folds(y, binary: bool, K: int = 5):
    """The folds :func:`~jaxknock.knockoff_filter` cross-validates its lasso statistic on.

    Stratified (:func:`stratified_kfold_ids`, what scikit-learn's
    ``LogisticRegressionCV`` uses) for a binary response; otherwise the
    integer ``K``, i.e. contiguous folds (``KFold``, the default of
    :func:`~jaxknock.lcd`). Contiguous folds on rows sorted by class hold out
    a single class, or leave a training fold without the rarer class.

    Example:
        >>> cv_folds([1, 1, 0, 0, 0, 0], True, K=2), cv_folds([0.5, 1.5, 2.5], False)
        (array([0, 1, 0, 0, 1, 1], dtype=int32), 5)
    """
    return stratified_kfold_ids(np.asarray(y), K) if binary else K


def resolve_folds(n, folds, y=None, loss="squared"):
    """Resolve ``folds`` (int or per-row fold ids) into ``(ids, K)``.

    An integer ``K`` means contiguous folds (:func:`kfold_ids`, scikit-learn's
    ``KFold``) for least squares and stratified folds of the labels ``y``
    (:func:`stratified_kfold_ids`, ``StratifiedKFold`` as in
    ``LogisticRegressionCV``) for the logistic loss; traced labels (``{0, 1}``)
    get the same folds as a traced array.
    """
    refuse_traced_folds(folds)
    if _checks.is_int(folds):
        K = int(folds)
        if loss != "logistic":
            return kfold_ids(n, K), K
        _check_fold_count(n, K)
        if _checks.is_concrete(y):
            return stratified_kfold_ids(np.asarray(y), K), K
        return binary_stratified_ids(y, K), K
    ids = np.asarray(_containers.host_numeric(folds, "folds"))  # a masked fold id is refused, not read
    if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"folds must be an int or an integer array of shape ({n},), got {ids.dtype} array of shape {ids.shape}"
        )
    uniq = np.unique(ids)
    if uniq.size < 2 or uniq[0] != 0 or uniq[-1] != uniq.size - 1:
        raise ValueError(f"fold ids must be 0, 1, ..., K-1 with K >= 2, got {uniq.tolist()[:10]}")
    return ids.astype(np.int32), int(uniq.size)


def void_single_class_folds(sol, fold_ids, K, y, loss):
    """``sol`` with ``RESULTS.nonfinite`` and NaN coefficients (``value``, ``lam``) where a training fold of traced
    labels holds a single class: the traced twin of :func:`check_folds_nonempty`'s ``ValueError``.

    Under ``jit`` the labels cannot be checked on the host; a training fold without the rarer class (one positive
    among 30 rows, 3 folds) came back `successful` with a plausible penalty. Concrete labels: ``sol`` unchanged.
    """
    if loss != "logistic" or (_checks.is_concrete(y) and _checks.is_concrete(fold_ids)):
        return sol
    train = jnp.asarray(fold_ids)[None, :] != jnp.arange(K)[:, None]  # (K, n)
    labels = jnp.asarray(y)[..., None, :]  # (..., 1, n): one flag per row of a batch of labels
    ok = jnp.all(jnp.any(train & (labels > 0), axis=-1) & jnp.any(train & (labels <= 0), axis=-1), axis=-1)
    stats = dict(sol.stats)
    if "lam" in stats:
        stats["lam"] = _checks.poison(ok, stats["lam"])
    result = jnp.where(ok, sol.result, jnp.int32(RESULTS.nonfinite))
    return sol._replace(value=_checks.poison(ok, sol.value), result=result, stats=stats)


def refuse_traced_folds(folds):
    """A ``TypeError`` naming ``folds`` when it is traced (a ``jit`` argument): numpy's conversion of it was
    JAX's ``TracerArrayConversionError`` naming nothing."""
    _checks.refuse_traced(
        folds, "folds", "an int or a concrete array of fold ids", " (the folds fix the fits' row sets on the host)"
    )


def check_folds_nonempty(fold_ids, K, y, loss):
    """Every fold keeps training rows (and, for the logistic loss, both classes)."""
    if not _checks.is_concrete(fold_ids):  # stratified folds of traced labels: K <= n, never empty
        return
    counts = np.bincount(fold_ids, minlength=K)
    if np.any(counts == fold_ids.size):
        raise ValueError("every fold leaves no training rows; use more folds")
    if loss == "logistic" and _checks.is_concrete(y):
        yv = np.asarray(y)
        for k in range(K):
            train = yv[fold_ids != k]
            if np.unique(train).size < 2:
                raise ValueError(
                    f"the training rows of fold {k} hold a single class; use fewer folds or shuffle the fold ids"
                )
