"""``jaxknock bench``: run the scripts in ``benchmarks/`` (small sizes by default)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from jaxknock.cli.common import CLIError
from jaxknock.cli.progress import Progress, Ticker, progress_enabled
from jaxknock.cli.report import print_table

__all__ = ["run_bench"]

# the repository root (benchmarks/ sits next to the jaxknock package in a clone)
_REPO_ROOT = Path(__file__).resolve().parents[2]


def _find_bench_dir(arg):
    if arg:
        d = Path(arg)
        if not d.is_dir():
            raise CLIError(f"benchmark folder {arg!r} does not exist")
        return d
    for cand in (_REPO_ROOT / "benchmarks", Path.cwd() / "benchmarks"):
        if cand.is_dir() and any(cand.glob("bench_*.py")):
            return cand
    raise CLIError(
        "no benchmarks/ folder found (it ships with the source tree, not the wheel); "
        "run from a clone of the repository or pass --bench-dir"
    )


def run_bench(args) -> int:
    bench_dir = _find_bench_dir(args.bench_dir)
    scripts = sorted(bench_dir.glob("bench_*.py"))
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        known = {s.stem.removeprefix("bench_"): s for s in scripts}
        missing = [w for w in wanted if w not in known]
        if missing:
            raise CLIError(f"unknown benchmark(s) {missing}; available: {sorted(known)}")
        scripts = [known[w] for w in wanted]
    if not scripts:
        raise CLIError(f"no bench_*.py scripts in {bench_dir}")
    extra = [] if args.full else ["--small"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    rows, failed = [], []
    bar = Progress(len(scripts), "benchmarks", enabled=progress_enabled(sys.stderr, args.quiet))
    with bar, Ticker(bar):
        for script in scripts:
            bar.set_description(script.name)
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, str(script), *extra], capture_output=True, text=True, env=env, cwd=bench_dir.parent
            )
            dt = time.perf_counter() - t0
            bar.update()
            if not args.quiet:
                bar.close() if bar.enabled else None
                print(f"\n===== {script.name} {' '.join(extra)} ({dt:.1f}s, exit {proc.returncode}) =====")
                print(proc.stdout.rstrip())
            if proc.returncode != 0:
                failed.append(script.name)
                tail = proc.stderr.strip().splitlines()[-1:] or ["(no message)"]
                print(f"{script.name} failed: {tail[0]}", file=sys.stderr)
            rows.append([script.name, f"{dt:.1f}", "ok" if proc.returncode == 0 else f"FAILED ({proc.returncode})"])
    print()
    print_table(rows, ["script", "time[s]", "status"])
    if failed:
        raise CLIError(f"{len(failed)} benchmark(s) failed: {', '.join(failed)} (output above)")
    return 0
