r"""Lifted and Fenchel lifted neural networks trained by block-coordinate descent.

A feed-forward ReLU network with ``L`` hidden layers (rows are samples,
``X_0 = X`` is ``N x p_0``)

.. math::

    X_{l+1} = \mathrm{relu}(X_l W_l + 1 b_l^T), \quad l = 0..L-1, \qquad
    \hat Y = X_L W_L + 1 b_L^T

is trained here without back-propagation: the layer outputs ``X_1..X_L`` are
kept as variables and the recursion is replaced by a penalty, so that every
block of variables solves a convex problem that is parallel across samples (the
X-blocks) or layers (the W-blocks). All objectives are per-sample means; with
``U_l = X_l W_l + 1 b_l^T``:

**Fenchel lifted network** (``model="fenchel"``, thesis chapter 3, eq. 3.9):

.. math::

    \min_{W, X \ge 0}\; \frac1N \mathcal L(Y, U_L)
      + \frac{\lambda}{N}\sum_{l<L} B(X_{l+1}, U_l) + \sum_l \rho_l \|W_l\|_F^2,
    \qquad B(v, u) = \tfrac12 v^2 + \tfrac12 \mathrm{relu}(u)^2 - uv \;(v\ge0)

``B`` is the Fenchel-Young gap of the ReLU (eq. 3.5): ``B >= 0`` with equality
iff ``v = relu(u)``, so for any weights the objective at the feed-forward ``X``
equals the standard training loss and its minimum is a lower bound of the
standard training problem (eq. 3.7-3.9). By the rescaling of section 3.6 a single
penalty weight ``lam`` suffices.

**Lifted network** (``model="lifted"``, thesis chapter 2, eq. 2.5 / 2.11 / 2.15):
the ReLU is the arg-min of a non-negative least squares, giving

.. math::

    \min_{W, X \ge 0}\; \frac1N \ell_{out}
      + \frac{\lambda}{N}\sum_{l<L} \|X_{l+1} - U_l\|_F^2 + \sum_l \rho_l\|W_l\|_F^2

with ``ell_out = 1/2 ||Y - U_L||^2`` for ``loss="mse"`` (eq. 2.5) and, for
``loss="cross_entropy"``, an output variable ``Z`` on the probability simplex
(the Euclidean simplex projection as last activation, eq. 2.14-2.15):
``ell_out = -Tr(Y^T log Z) + lam ||Z - U_L||^2``.

Block-coordinate descent (thesis Algorithm 1; :func:`lifted_bcd_step`) updates
the X-blocks backwards from ``X_L`` to ``X_1`` and then all W-blocks:

* X-steps: per-sample strongly convex problems over ``Z >= 0`` solved by
  accelerated projected gradient with adaptive restart (eq. 2.13, 3.14, 3.15,
  3.16), the stopping and restart tests made every third step (each test is a
  loop iteration and full-array reductions); the lifted cross-entropy output
  step is the exact dual bisection of thesis section 2.8
  (:func:`solve_simplex_cross_entropy`).
* W-steps: ridge regressions in closed form (lifted model, MSE last layer), or
  iterations whose every step is a ridge regression with a fixed Gram matrix:
  for Fenchel hidden layers (eq. 3.17) the majorise-minimise step is used as a
  preconditioned gradient in a nonlinear conjugate-gradient method with an
  exact line search per output unit (the penalty is a sum over units); for the
  cross-entropy last layer, majorise-minimise with Bohning's curvature bound
  accelerated by Nesterov momentum with restart (conjugate gradient needs
  fewer steps for the same objective gap on the hidden layers).
  The Gram/Cholesky factor is computed once per W-step, in the primal
  ``(p+1) x (p+1)`` form or, for batches smaller than the layer width, in the
  ``N x N`` kernel (Woodbury) form (whose iterates carry their kernel
  coefficients: one ``N x N`` product per step); with ``fixed_batches`` the
  first layer's factor is computed once per batch for the whole training.

Every inexact block solve is safeguarded (a block is only accepted when it does
not increase its subproblem objective), so a non-batched pass never increases
the training objective. The batched variant (thesis Algorithm 2,
:func:`lifted_batch_step`) re-initialises X by a forward pass for each batch and
adds the proximal term ``gamma_l ||Theta_l - Theta_l^0||^2`` (weights and bias)
to the W-steps (eq. 3.13, 3.19, 3.20).

Networks train in the dtype of ``X``: float32 is fine for MNIST-sized problems
(every matrix product of the block solvers runs at ``Precision.HIGHEST``,
``_common.mm``, so a GPU does not round them through TF32 against inner
tolerances of 1e-4; the plain MLP of :mod:`~jaxknock.lifted.mlp` keeps the
default precision); tests use float64.

Modules: :mod:`~jaxknock.lifted.spec` (specification, hyper-parameters, state),
:mod:`~jaxknock.lifted.objective` (losses, penalties, objective),
:mod:`~jaxknock.lifted.inner` (inner solvers, simplex bisection),
:mod:`~jaxknock.lifted.ridge` (W-block ridge systems),
:mod:`~jaxknock.lifted.blocks` (X- and W-block steps),
:mod:`~jaxknock.lifted.bcd` (BCD pass, batch step, epoch),
:mod:`~jaxknock.lifted.train` (training drivers),
:mod:`~jaxknock.lifted.predict` (prediction) and
:mod:`~jaxknock.lifted.mlp` (the standard network, optax training).
Measured timings behind the design choices: ``benchmarks/measured/NOTES.md``.

Main entry points: :class:`LiftedSpec`, :func:`fit_lifted`,
:func:`tune_lifted` (``vmap`` over penalty weight / ridge),
:func:`predict_lifted` (feed-forward or lifted prediction, eq. 3.12),
:func:`lifted_to_mlp` and :func:`train_mlp` (optax fine-tuning, Table 2.1).
"""

from jaxknock.lifted.bcd import init_lifted_state, lifted_batch_step, lifted_bcd_step
from jaxknock.lifted.blocks import fenchel_relu_regression
from jaxknock.lifted.inner import solve_simplex_cross_entropy
from jaxknock.lifted.mlp import lifted_to_mlp, mlp_apply, mlp_init, mlp_loss, train_mlp
from jaxknock.lifted.objective import fenchel_penalty, lifted_objective
from jaxknock.lifted.predict import predict_lifted
from jaxknock.lifted.spec import LOSSES, MODELS, LiftedHyper, LiftedSpec, LiftedState
from jaxknock.lifted.train import fit_lifted, tune_lifted

__all__ = [
    "LOSSES",
    "MODELS",
    "LiftedSpec",
    "LiftedHyper",
    "LiftedState",
    "fenchel_penalty",
    "fenchel_relu_regression",
    "solve_simplex_cross_entropy",
    "init_lifted_state",
    "lifted_objective",
    "lifted_bcd_step",
    "lifted_batch_step",
    "fit_lifted",
    "tune_lifted",
    "predict_lifted",
    "lifted_to_mlp",
    "mlp_init",
    "mlp_apply",
    "mlp_loss",
    "train_mlp",
]
