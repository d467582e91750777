"""``python -m tests.simulation``: run seeds for a while (``make simulate SECONDS=600``).

Seeds run in worker processes (``--jobs``, the machine's cores by default), starting at
``--first`` (or a random place), until ``--seconds`` of wall time have passed or ``--seeds``
have run. Each failing seed prints its report (the violation, the fault schedule, the last
broker log lines); at the end: seeds run, steps and fault schedules explored, violations.
``--seed N --verbose`` replays one seed with every log and trace line.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import replace

from tests.simulation.mixes import MIXES
from tests.simulation.world import run_seed


def _config(mix: str, overrides: list[str]):
    """The mix's SimConfig with ``field=value`` overrides (Python literals)."""
    changes = {}
    for item in overrides:
        name, _, value = item.partition("=")
        changes[name] = ast.literal_eval(value)
    return replace(MIXES[mix], **changes)


def _run(seed: int, mix: str, overrides: list[str]):
    return run_seed(seed, _config(mix, overrides))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seeds", type=int, default=0, help="stop after this many seeds (0: by time only)")
    parser.add_argument("--first", type=int, default=None, help="the first seed (default: from the time)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--mix", action="append", choices=sorted(MIXES),
                        help="fault mixes to cycle through (default: all)")
    parser.add_argument("--seed", type=int, help="run this one seed and print its report")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a SimConfig field of the mix, e.g. --set check_min_insync=False")
    args = parser.parse_args(argv)
    mixes = args.mix or sorted(MIXES)
    if args.seed is not None:
        result = run_seed(args.seed, _config(mixes[0], args.set), verbose=args.verbose)
        print(result.report())
        return 1 if result.violations else 0
    first = args.first if args.first is not None else int(time.time()) % 1_000_000 * 1000
    started = time.monotonic()
    seeds = steps = failed = 0
    faults: dict[str, int] = {}
    broken: dict[str, list[int]] = {}  # invariant kind -> seeds that broke it
    next_seed = first
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        pending = {}

        def submit() -> None:
            nonlocal next_seed
            mix = mixes[next_seed % len(mixes)]
            pending[pool.submit(_run, next_seed, mix, args.set)] = (next_seed, mix)
            next_seed += 1

        for _ in range(args.jobs):
            submit()
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                seed, mix = pending.pop(future)
                result = future.result()
                seeds += 1
                steps += result.steps
                for kind, count in result.fault_counts.items():
                    faults[kind] = faults.get(kind, 0) + count
                for kind in result.kinds:
                    broken.setdefault(kind, []).append(seed)
                if result.violations:
                    failed += 1
                    print(f"[mix {mix}] {result.report()}\n", flush=True)
                more = time.monotonic() - started < args.seconds and (not args.seeds or next_seed - first < args.seeds)
                if more:
                    submit()
    elapsed = time.monotonic() - started
    print(f"simulation: {seeds} seeds (from {first}, mixes {', '.join(mixes)}) in {elapsed:.0f} s, "
          f"{steps} steps, {seeds} fault schedules with {sum(faults.values())} fault events "
          f"({', '.join(f'{k} {v}' for k, v in sorted(faults.items()))}); "
          f"{failed} seed(s) with invariant violations")
    for kind, seeds_broken in sorted(broken.items()):
        print(f"  {kind}: {len(seeds_broken)} seed(s), e.g. {sorted(seeds_broken)[:8]}")
    return 1 if failed else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        # A seed's run depends on the order sets of strings iterate in: the same interpreter
        # hash seed everywhere (make simulate, the tests' run_seed_isolated, a replay).
        os.execve(sys.executable, [sys.executable, "-m", "tests.simulation", *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    sys.exit(main())
