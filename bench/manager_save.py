"""What a ``CheckpointManager.save`` costs over a plain ``save_to_path`` of the same state.

Both read back what they wrote before committing (the engine's check). The manager's
save adds: listing the root for the previous checkpoint, the check that the step folder
still holds the root manifest it committed (issue 33, F3/F15), the root's pointer file
(issue 40), and retention (``keep_last=1``: one delete). A state of 8 arrays
(``--mb`` MB in all, default 256) changes before every save, so every byte is written
and read back (the worst case: an incremental save reads back only what it wrote).
Both are timed interleaved, in one process, on the same disk; the line printed is the
median of each and their ratio.

Run: ``python -m bench.manager_save [--mb 256] [--reps 7] [--dir /tmp]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np

import cairn


class State(cairn.Checkpointable):
    """Eight float64 arrays."""

    def __init__(self, nbytes: int) -> None:
        self.arrays = {f"a{i}": np.zeros(nbytes // 64, dtype=np.float64) for i in range(8)}

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return dict(self.arrays)

    def set_state(self, state: dict[str, Any]) -> None:
        self.arrays = dict(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


def main() -> None:
    """Time both saves, interleaved; print the medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="cairn-bench-", dir=args.dir)
    try:
        state = State(args.mb * 1_000_000)
        mgr = cairn.CheckpointManager(f"{base}/run", keep_last=1)
        plain: list[float] = []
        managed: list[float] = []
        for rep in range(args.reps + 1):  # the first round is a warm-up, not counted
            for arr in state.arrays.values():
                arr += 1.0
            t0 = time.perf_counter()
            state.save_to_path(f"{base}/plain_{rep % 2}")
            t1 = time.perf_counter()
            mgr.save(state, rep)
            t2 = time.perf_counter()
            shutil.rmtree(f"{base}/plain_{(rep + 1) % 2}", ignore_errors=True)
            if rep:
                plain.append(t1 - t0)
                managed.append(t2 - t1)
        p, m = statistics.median(plain), statistics.median(managed)
        print(f"{args.mb} MB, all written: save_to_path {p:.3f} s, CheckpointManager.save {m:.3f} s, ratio {m / p:.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
