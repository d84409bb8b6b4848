"""Output of the subcommands: aligned text tables and the JSON reports (versions, device, hashes)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
from pathlib import Path

from jaxknock.cli.common import CLIError

__all__ = ["OUT_HELP", "StdoutReport", "device", "print_table", "sha256", "versions", "write_json"]


OUT_HELP = "write a JSON report ('-': to standard output; the other lines then go to standard error)"


class StdoutReport:
    """``--out -``: the JSON report goes to standard output (``jaxknock select d.csv --target y --out - | jq``).

    The command's own lines (tables, progress, "report written to ...") then go to standard error, so
    that standard output holds the JSON document and nothing else.
    """

    def __init__(self, stream):
        self.stream = stream

    def __str__(self):
        return "standard output"


def print_table(rows, headers, file=None):
    """Right-aligned columns under a header and a rule (``rows``: lists of strings)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    print(line, file=file)
    print("-" * len(line), file=file)
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)), file=file)


def versions():
    import jax
    import numpy as np

    import jaxknock

    out = {
        "jaxknock": jaxknock.__version__,
        "jax": jax.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    try:
        import jaxlib

        out["jaxlib"] = jaxlib.__version__
    except (ImportError, AttributeError):
        pass
    return out


def device():
    import jax

    d = jax.devices()[0]
    return {
        "platform": d.platform,
        "device_kind": getattr(d, "device_kind", str(d)),
        "num_devices": jax.device_count(),
        "x64": bool(jax.config.jax_enable_x64),
        "machine": platform.machine(),
        "system": platform.system(),
    }


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_writable(path, what="the report") -> None:
    """Raise :class:`CLIError` unless ``what`` can be written at ``path`` (its folder exists and is writable)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise CLIError(f"cannot write {what} to {path}: it is a directory")
    if not folder.is_dir():
        raise CLIError(f"cannot write {what} to {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise CLIError(f"cannot write {what} to {path}: permission denied")


def write_json(path, report):
    """Write ``report`` as standard JSON to the file ``path`` (or a :class:`StdoutReport`).

    A non-finite number is written as the string ``"inf"``, ``"-inf"`` or ``"nan"`` (``float()`` reads them
    back). Python's bare ``Infinity`` / ``NaN`` (the thresholds of a selection that selects nothing, an
    ``alpha=0`` log-odds) are not JSON: ``jq``, ``JSON.parse`` and strict parsers refused the whole report."""
    to_stdout = isinstance(path, StdoutReport)
    try:
        with contextlib.nullcontext(path.stream) if to_stdout else open(path, "w") as fh:
            json.dump(_finite(report), fh, indent=2, allow_nan=False)
            fh.write("\n")
    except OSError as err:
        raise CLIError(f"cannot write the report to {path}: {err.strerror or err}") from None


def _finite(obj):
    """``obj`` with NumPy scalars / arrays as Python values and non-finite floats as strings."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (str, bool, int, type(None))):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else ("nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf"))
    return _finite(_json_default(obj))


def _json_default(obj):
    import numpy as np

    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)
