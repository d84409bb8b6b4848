"""jaxknock: GPU-accelerated knockoffs, FDR-controlled feature selection and
the convex solvers behind them, in JAX."""

from jaxknock._solution import RESULTS, Solution
from jaxknock.covariance import (
    FactorModel,
    empirical_covariance,
    estimate_factor_model,
    factor_model_from_data,
    ledoit_wolf,
    to_correlation,
)
from jaxknock.sdp import asdp, equicorrelated, scale_to_feasible, sdp, sdp_dual_gap, sdp_factor, sdp_init, sdp_step

__version__ = "0.1.0"

__all__ = [
    "RESULTS",
    "Solution",
    # covariance
    "FactorModel",
    "empirical_covariance",
    "ledoit_wolf",
    "to_correlation",
    "estimate_factor_model",
    "factor_model_from_data",
    # S-vector solvers
    "equicorrelated",
    "sdp",
    "sdp_factor",
    "asdp",
    "scale_to_feasible",
    "sdp_dual_gap",
    "sdp_init",
    "sdp_step",
]
