"""Which S-vector method :func:`~jaxknock.knockoff_filter` runs: the names it takes, their solvers, and ``"auto"``.

One concept split out of :mod:`jaxknock.pipeline` (which re-exports every name here): the method tables of the
plain, factor-model, grouped and multi-knockoff paths, the dense methods allowed at ``p >= n``, and
:func:`resolve_s_method`, the rule behind ``s_method="auto"`` with the simulations it rests on.
"""

from __future__ import annotations

from jaxknock import _checks
from jaxknock.svector import asdp, equicorrelated, maxent, mvr, mvr_factor, sdp, sdp_factor

__all__ = [
    "DENSE_MULTI_MAX_P",
    "FACTOR_SOLVERS",
    "GROUP_S_METHODS",
    "MULTI_S_SOLVERS",
    "S_METHODS",
    "WIDE_DENSE_SOLVERS",
    "resolve_s_method",
]

S_METHODS = (
    "auto",
    "sdp",
    "sdp_factor",
    "mvr_factor",
    "asdp",
    "equicorrelated",
    "mvr",
    "maxent",
)  # "auto": resolve_s_method
# the methods that fit a rank-`rank` factor model to the data (never p x p), and their solvers
FACTOR_SOLVERS = {"mvr_factor": mvr_factor, "sdp_factor": sdp_factor}
# with groups=: the group_s_matrix method of each s_method ("asdp" runs the group SDP)
GROUP_S_METHODS = {"equicorrelated": "equicorrelated", "sdp": "sdp", "asdp": "sdp", "maxent": "maxent", "mvr": "mvr"}
# with num_knockoffs = m > 1 and no groups: the per-feature solvers, called with num_knockoffs=m
MULTI_S_SOLVERS = {"equicorrelated": equicorrelated, "sdp": sdp, "asdp": asdp, "mvr": mvr, "maxent": maxent}

#: up to this many features, ``num_knockoffs > 1`` at ``p >= n`` runs the dense MVR (a ``p x p`` estimate)
DENSE_MULTI_MAX_P = 2000


def resolve_s_method(
    s_method: str, shape, *, known: bool | str = False, groups=None, rank=None, num_knockoffs: int = 1
) -> str:
    """The S-vector method :func:`knockoff_filter` runs for ``s_method`` on a design of ``shape`` ``(n, p)``.

    ``"auto"`` resolves to ``"mvr_factor"`` when ``p >= n`` or a factor ``rank``
    is given (with neither a known ``Sigma`` nor ``groups``, which need a dense
    ``p x p`` law): a rank-``k`` factor model of the data is well posed where
    the dense estimate of a ``p x p`` correlation from ``n <= p`` rows is
    singular up to its shrinkage, and the MVR ``s`` (smaller than the SDP's on
    strongly correlated designs) keeps the FDR near its target under that
    estimated law where the SDP ``s`` did not: AR(1) 0.9, ``n = 150``,
    ``p = 200``, ``fdr = 0.1``, 100 data sets: FDR 0.09 +- 0.01 (power 0.63)
    against 0.16 +- 0.01 with ``"sdp_factor"`` (knockpy's default 0.09, power
    0.46; ``benchmarks/measured/NOTES.md``, session 32). With ``groups`` at
    ``p >= n``: the group MVR on the Ledoit-Wolf estimate, ``"mvr"`` (pairs of
    AR(1) 0.9 features, the same design: group FDR 0.05 +- 0.01, session 33).
    With ``num_knockoffs > 1`` at ``p >= n`` (and no ``rank``): the dense
    ``"mvr"`` on the Ledoit-Wolf estimate up to ``p = DENSE_MULTI_MAX_P``
    (2000) features, where the factor model's ``s`` went over the target
    (``m = 2``, the same design, 300 data sets: ``"mvr_factor"`` FDR
    0.111 +- 0.006, dense ``"mvr"`` 0.084 +- 0.006, power 0.84 / 0.78);
    ``"mvr_factor"`` above it.

    A known ``Sigma`` given as a factor model (``known="factor"``, no
    ``groups``): ``"mvr_factor"``, the same MVR optimum in ``O(p k^2)`` per step
    and ``O(p k)`` memory, without forming the ``p x p`` matrix.

    Otherwise (``n > p``, a known dense ``Sigma``, or ``groups`` at ``n > p``):
    ``"mvr"``, the dense MVR, knockpy's default. Until session 35 it was
    ``"sdp"``. The SDP's larger ``s`` leans harder on an estimated law, and
    its FDR went over the target: AR(1) 0.5, ``p = 200``, 20 signals,
    ``fdr = 0.1``, the same data sets and keys, ``"sdp"`` against ``"mvr"``:
    0.112 +- 0.008 against 0.075 +- 0.007 at ``n = 300`` (200 data sets),
    0.110 +- 0.009 against 0.074 +- 0.007 at ``n = 600`` (150). With the true
    ``Sigma`` the SDP keeps the FDR but can lose nearly all power (Spector &
    Janson 2022): blocks of 20 correlated 0.5, ``n = 3000``: power 0.19
    against the MVR's 0.84, because ``s = 1`` there makes ``[X, X~]``
    singular. ``s_method="sdp"`` stays available.
    Any other value is returned as given (validated by the caller).

    Example:
        >>> resolve_s_method("auto", (600, 200)), resolve_s_method("auto", (300, 1000))
        ('mvr', 'mvr_factor')
        >>> resolve_s_method("auto", (300, 1000), known=True), resolve_s_method("sdp", (600, 200))
        ('mvr', 'sdp')
        >>> resolve_s_method("auto", (600, 200), known="factor")
        'mvr_factor'
        >>> wide = (300, 1000)
        >>> resolve_s_method("auto", wide, groups=[0, 0, 1]), resolve_s_method("auto", wide, num_knockoffs=2)
        ('mvr', 'mvr')
        >>> resolve_s_method("mvr", (300, 1000))
        'mvr'
    """
    if s_method != "auto":
        return s_method
    wide = len(shape) == 2 and shape[1] >= shape[0]
    if known == "factor" and groups is None:
        return "mvr_factor"
    if known or groups is not None:
        return "mvr"
    multi = _checks.is_int(num_knockoffs) and num_knockoffs > 1  # a bad value is named by the filter's check
    if wide and rank is None and multi and shape[1] <= DENSE_MULTI_MAX_P:
        return "mvr"
    return "mvr_factor" if wide or rank is not None else "mvr"


#: the dense methods knockoff_filter runs on a Ledoit-Wolf estimate at ``p >= n`` (their ``s`` kept the FDR
#: there in simulation; the SDP's and the equicorrelated ``s`` did not): benchmarks/bench_fdr_pn.py
WIDE_DENSE_SOLVERS = ("mvr", "maxent")
