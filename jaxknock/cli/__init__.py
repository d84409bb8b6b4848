"""The ``jaxknock`` command line (also ``python -m jaxknock``).

Modules: :mod:`~jaxknock.cli.parser` (argument parser and dispatch),
:mod:`~jaxknock.cli.tables` (CSV / NPZ / NPY loading), one module per
subcommand (:mod:`~jaxknock.cli.demo`, :mod:`~jaxknock.cli.select`,
:mod:`~jaxknock.cli.snb`, :mod:`~jaxknock.cli.bench`),
:mod:`~jaxknock.cli.progress` (progress bar) and :mod:`~jaxknock.cli.report`
(tables and JSON reports).

Subcommands:

* ``jaxknock demo`` runs the main job on built-in synthetic data: covariance
  estimation, every S-vector solver (a table with time, sum(s), feasibility and
  certified gaps), knockoff sampling and FDR-controlled selection; ``--plot
  out.png`` draws the S-vectors and the W statistics (needs matplotlib).
* ``jaxknock select DATA --target COL`` runs the model-X knockoff filter
  (:func:`jaxknock.pipeline.knockoff_filter`) on a CSV / NPZ / NPY table and
  prints the selected columns with their statistics (``--out`` writes a JSON
  report with inputs, settings, versions, device, timings and selections;
  ``--out -`` writes it to standard output, and the other lines to standard error).
* ``jaxknock snb DATA --target COL -k K`` fits sparse naive Bayes
  (:func:`jaxknock.sparse_naive_bayes`) on a CSV or a ``scipy.sparse`` ``.npz``.
* ``jaxknock bench`` runs the scripts in ``benchmarks/`` at their small sizes.

Bad input (missing file, missing column, text in a numeric column, NaN,
constant columns, too few rows) ends with a one-line ``jaxknock: error: ...``
saying what to fix and exit code 2; no traceback. Output piped into a reader that
stops early (``jaxknock select ... | head -3``) is dropped from there on; the
command still finishes and writes its ``--out`` report.
"""

from jaxknock.cli.demo import synthetic_factor_data
from jaxknock.cli.parser import build_parser, main

__all__ = ["build_parser", "main", "synthetic_factor_data"]
