"""jaxknock: GPU-accelerated knockoffs, FDR-controlled feature selection and
the convex solvers behind them, in JAX."""

from jaxknock._solution import RESULTS, Solution
from jaxknock.covariance import FactorModel

__version__ = "0.1.0"

__all__ = [
    "RESULTS",
    "Solution",
    "FactorModel",
]
