"""jaxknock: GPU-accelerated knockoffs, FDR-controlled feature selection and
the convex solvers behind them, in JAX."""

from jaxknock._solution import RESULTS, Solution, SolverError, reraise_solver_errors
from jaxknock.cache import compilation_cache_dir, enable_compilation_cache
from jaxknock.covariance import (
    FactorFit,
    FactorModel,
    LedoitWolf,
    empirical_covariance,
    estimate_factor_model,
    factor_model_from_data,
    ledoit_wolf,
    to_correlation,
)
from jaxknock.distributed import (
    aggregate_ebh_across_processes,
    device_mesh,
    plan_chunk,
    process_replicates,
    sdp_batch,
    shard_batch,
)
from jaxknock.filter import (
    aggregate_ebh,
    aggregate_frequency,
    benjamini_hochberg,
    benjamini_yekutieli,
    ebh,
    knockoff_evalues,
    knockoff_select,
    knockoff_threshold,
)
from jaxknock.l1 import (
    LassoState,
    kfold_ids,
    lambda_grid,
    lambda_max,
    lasso,
    lasso_cv,
    lasso_init,
    lasso_path,
    lasso_step,
)
from jaxknock.multi import (
    expand_groups,
    group_knockoff_select,
    group_statistics,
    multi_knockoff_select,
    multi_knockoff_statistics,
    multi_knockoff_threshold,
)
from jaxknock.pipeline import Selection, knockoff_filter
from jaxknock.sampling import fixed_x_knockoffs, sample_knockoffs, sample_knockoffs_factor, sample_replicates
from jaxknock.statistics import antisymmetric_combine, lcd, lsm, marginal_correlation, sparse_centroid
from jaxknock.svector import (
    asdp,
    equicorrelated,
    maxent,
    maxent_factor,
    mrc_objective_and_gap,
    mvr,
    mvr_factor,
    newton_init,
    newton_step,
    scale_to_feasible,
    sdp,
    sdp_dual_gap,
    sdp_factor,
    sdp_factor_init,
    sdp_factor_step,
    sdp_init,
    sdp_step,
)
from jaxknock.svector.group import BlockDiagonal, group_s_matrix

__version__ = "0.1.0"


# submodules the knockoff pipeline does not use, imported on first access (import time is part of
# every fresh process's first answer); their names still resolve as attributes of jaxknock
_LAZY = {
    "LiftedHyper": "jaxknock.lifted",
    "LiftedSpec": "jaxknock.lifted",
    "LiftedState": "jaxknock.lifted",
    "fit_lifted": "jaxknock.lifted",
    "lifted_to_mlp": "jaxknock.lifted",
    "predict_lifted": "jaxknock.lifted",
    "train_mlp": "jaxknock.lifted",
    "tune_lifted": "jaxknock.lifted",
    "ClassSums": "jaxknock.naive_bayes",
    "NaiveBayesModel": "jaxknock.naive_bayes",
    "SNBPath": "jaxknock.naive_bayes",
    "class_sums": "jaxknock.naive_bayes",
    "class_sums_dask": "jaxknock.naive_bayes",
    "class_sums_npz": "jaxknock.naive_bayes",
    "iter_npz_blocks": "jaxknock.naive_bayes",
    "sparse_naive_bayes": "jaxknock.naive_bayes",
    "sparse_naive_bayes_path": "jaxknock.naive_bayes",
    "stability_selection": "jaxknock.stability",
    "greedy_kta_selection": "jaxknock.kernels",
    "hsic": "jaxknock.kernels",
    "kernel_target_alignment": "jaxknock.kernels",
    "randsel": "jaxknock.kernels",
}
_LAZY_MODULES = (
    "lifted",
    "naive_bayes",
    "stability",
    "kernels",
)


def __getattr__(name):
    # SparseNaiveBayes lives in jaxknock.sklearn, imported on first use so that
    # `import jaxknock` never imports scikit-learn (it works without it too)
    if name == "SparseNaiveBayes":
        from jaxknock.sklearn import SparseNaiveBayes

        return SparseNaiveBayes
    if name in _LAZY or name in _LAZY_MODULES:
        import importlib

        module = importlib.import_module(_LAZY.get(name, f"{__name__}.{name}"))
        value = module if name in _LAZY_MODULES else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_MODULES))


__all__ = [
    "RESULTS",
    "Solution",
    "SolverError",
    "reraise_solver_errors",
    # persistent compilation cache
    "compilation_cache_dir",
    "enable_compilation_cache",
    # covariance
    "FactorModel",
    "LedoitWolf",
    "FactorFit",
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
    "newton_init",
    "newton_step",
    "sdp_factor_init",
    "sdp_factor_step",
    "mvr",
    "maxent",
    "mvr_factor",
    "maxent_factor",
    "mrc_objective_and_gap",
    # lasso
    "lasso",
    "lasso_path",
    "lasso_cv",
    "lasso_init",
    "lasso_step",
    "LassoState",
    "lambda_max",
    "lambda_grid",
    "kfold_ids",
    # statistics
    "lcd",
    "lsm",
    "marginal_correlation",
    "sparse_centroid",
    "antisymmetric_combine",
    # filters
    "knockoff_threshold",
    "knockoff_select",
    "knockoff_evalues",
    "benjamini_hochberg",
    "benjamini_yekutieli",
    "ebh",
    "aggregate_ebh",
    "aggregate_frequency",
    # pipeline
    "knockoff_filter",
    "Selection",
    # sampling
    "sample_knockoffs",
    "sample_knockoffs_factor",
    "sample_replicates",
    "fixed_x_knockoffs",
    # sparse naive Bayes
    "sparse_naive_bayes",
    "sparse_naive_bayes_path",
    "SparseNaiveBayes",
    "ClassSums",
    "class_sums",
    "NaiveBayesModel",
    "SNBPath",
    # scaling: devices, memory, multi-host, out of core
    "shard_batch",
    "device_mesh",
    "plan_chunk",
    "sdp_batch",
    "process_replicates",
    "aggregate_ebh_across_processes",
    "class_sums_npz",
    "class_sums_dask",
    "iter_npz_blocks",
    # lifted networks (the rest lives in jaxknock.lifted)
    "LiftedSpec",
    "LiftedHyper",
    "LiftedState",
    "fit_lifted",
    "tune_lifted",
    "predict_lifted",
    "lifted_to_mlp",
    "train_mlp",
    # stability selection and kernel selection (issue 21)
    "stability_selection",
    "kernel_target_alignment",
    "hsic",
    "greedy_kta_selection",
    "randsel",
    # multiple and group knockoffs
    "multi_knockoff_statistics",
    "multi_knockoff_threshold",
    "multi_knockoff_select",
    "group_statistics",
    "group_knockoff_select",
    "expand_groups",
    "group_s_matrix",
    "BlockDiagonal",
]
