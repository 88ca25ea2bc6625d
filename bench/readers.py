"""A/B of the restore's reader threads: one against two, in the same rounds, cold cache each time.

    PYTHONPATH=src python -m bench.readers [--size-gb 1.2] [--rounds 4]

Three restores of a model+Adam state (the ``restore`` case's workload): a plain
component (fresh arrays, then ``set_state`` copies), ``from_checkpoint`` (one
pass into the new object) and ``restore_from_path`` into live buffers (two
passes). Each round runs every restore with two readers and with one
(``bench.util.one_reader``), alternating which goes first; medians are printed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench import util
from bench.workload import ModelAdamState, PlainModelAdamState, model_spec


def main() -> None:
    """Run the A/B and print one line per restore and reader count."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gb", type=float, default=1.2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()
    warm = np.ones(int(3 * args.size_gb * 1e9), np.uint8)  # first touches of fresh memory are slow on VMs
    del warm
    spec = model_spec(int(args.size_gb * 1e9 / 12))  # params + two Adam moments, float32
    live = ModelAdamState(spec, fill="fast")
    plain = PlainModelAdamState(spec, fill="fast")
    tmp = tempfile.mkdtemp(prefix="cairn-readers-", dir=args.tmp)
    path = live.save_to_path(f"{tmp}/ckpt")
    times: dict[str, list[float]] = {}

    def run(name: str, fn: Callable[[], Any], one: bool) -> None:
        util.drop_cache([path])
        t = time.perf_counter()
        if one:
            with util.one_reader():
                out = fn()
        else:
            out = fn()
        times.setdefault(f"{name}, {'one reader' if one else 'two readers'}", []).append(time.perf_counter() - t)
        del out

    try:
        for r in range(args.rounds):
            for one in (False, True) if r % 2 == 0 else (True, False):
                run("plain component restore_from_path", lambda: plain.restore_from_path(path), one)
                run("from_checkpoint", lambda: ModelAdamState.from_checkpoint(path), one)
                run("restore_from_path (live buffers)", lambda: live.restore_from_path(path), one)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for name in sorted(times):
        runs = " ".join(f"{t:.3f}" for t in times[name])
        print(f"{name:50s} median {statistics.median(times[name]):.3f} s   ({runs})")
    print(f"load average {util.load_average()[0]:.2f}")


if __name__ == "__main__":
    main()
