r"""Lasso and l1-penalised logistic regression in JAX (was ``jaxknock.lasso``).

The engine reads in data-flow order:

* :mod:`~jaxknock.l1.settings` -- :class:`L1Settings`, the one frozen settings
  object (loss, intercept, solver, screening, tolerance, step budget);
* :mod:`~jaxknock.l1.problem` -- problem precomputation (centring, Lipschitz
  constants, stopping scale) and the penalty grid (:func:`lambda_max`,
  :func:`lambda_grid`);
* :mod:`~jaxknock.l1.cd`, :mod:`~jaxknock.l1.fista` -- the two solvers' iterations;
* :mod:`~jaxknock.l1.screening` -- duality gap and GAP safe screening;
* :mod:`~jaxknock.l1.solvers` -- init / step / solve at one penalty
  (:func:`lasso`, :func:`lasso_init`, :func:`lasso_step`, :class:`LassoState`);
* :mod:`~jaxknock.l1.path` -- warm-started paths (:func:`lasso_path`);
* :mod:`~jaxknock.l1.folds` -- the folds (:func:`kfold_ids`, stratified by class for the logistic loss);
* :mod:`~jaxknock.l1.cv` -- K-fold cross-validation (:func:`lasso_cv`); the working-set engine
  (:mod:`~jaxknock.l1.working_set`) is its default for the whole path.
"""

from jaxknock.l1.cv import lasso_cv
from jaxknock.l1.folds import kfold_ids
from jaxknock.l1.path import lasso_path
from jaxknock.l1.problem import lambda_grid, lambda_max
from jaxknock.l1.settings import L1Settings, make_settings
from jaxknock.l1.solvers import LassoState, lasso, lasso_init, lasso_step

__all__ = [
    "L1Settings",
    "LassoState",
    "kfold_ids",
    "lambda_grid",
    "lambda_max",
    "lasso",
    "lasso_cv",
    "lasso_init",
    "lasso_path",
    "lasso_step",
    "make_settings",
]
