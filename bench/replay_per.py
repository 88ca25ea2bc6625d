"""Prioritized replay's checkpoints: what the priorities add to an incremental save, against a uniform buffer.

Two buffers of CartPole rows (49 bytes each: the worst case for the priorities'
share, 8 bytes a row) of 1,000,000 rows (200,000 with ``--quick``), filled alike, one
uniform (:class:`ReplayBuffer`), one prioritized (:class:`PrioritizedReplayBuffer`,
pages of 65,536 rows). Each is saved by its own ``CheckpointManager``; then, round by
round, new rows are added to both, the prioritized one also gets the priority updates
of the gradient steps a DQN takes over those env steps (one per 5 env steps, 32 rows
each, spread over the whole buffer), and both are saved again. The ratio is bytes
written (and save time) of the prioritized save over the uniform one.

Scenarios (new rows and gradient steps between two saves):

* ``rare``: 50,000 new rows (5%), 10,000 gradient steps: 320,000 row updates, about 27%
  of the rows change: every page is written again (each changed in more than an eighth);
* ``frequent``: 1,000 new rows, 200 gradient steps (6,400 row updates): the changed rows
  go into the overlay, a page is written again once an eighth of it changed (20 rounds,
  so that the overlay grows and pages get written again, as in a long run).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from bench.util import MB

COLUMNS = {
    "obs": ((4,), "float32"),
    "actions": ((), "int64"),
    "rewards": ((), "float32"),
    "next_obs": ((4,), "float32"),
    "terminateds": ((), "bool"),
    "discounts": ((), "float32"),
}
NEW_FRACTION = 0.05


def _rows(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "obs": rng.standard_normal((n, 4), dtype=np.float32),
        "actions": rng.integers(0, 2, n),
        "rewards": rng.standard_normal(n, dtype=np.float32),
        "next_obs": rng.standard_normal((n, 4), dtype=np.float32),
        "terminateds": rng.random(n) < 0.01,
        "discounts": np.full(n, 0.99**3, np.float32),
    }


def _train(buf: Any, steps: int, rng: np.random.Generator) -> None:
    """``steps`` gradient steps' worth of sampling and priority updates (TD errors: random)."""
    for _ in range(steps):
        batch = buf.sample(32)
        buf.update_priorities(batch["batch_indexes"], rng.standard_normal(32))


def case_replay_per(ctx: Any) -> None:
    """Prioritized replay: bytes and time of an incremental save over a uniform buffer's."""
    import cairn
    from bench.suite import Row
    from cairn.rl.utils.replay_buffers import PrioritizedReplayBuffer, ReplayBuffer

    capacity = 200_000 if ctx.quick else 1_000_000
    uniform = ReplayBuffer(capacity, COLUMNS, seed=0)
    per = PrioritizedReplayBuffer(capacity, COLUMNS, seed=0)
    rng = np.random.default_rng(0)
    first = _rows(capacity, rng)
    uniform.add(first)
    per.add(first)
    _train(per, 2_000, rng)
    rare_new = int(capacity * NEW_FRACTION)
    ctx.log(f"    {capacity} rows of {uniform.nbytes // capacity} bytes ({uniform.nbytes / MB:,.0f} MB), data chunks "
            f"of {uniform.chunk_rows} rows, priority pages of {per.priority_page_rows} rows")  # fmt: skip

    for scenario, new, rounds in (("rare", rare_new, ctx.reps), ("frequent", 1_000, max(ctx.reps, 20))):
        steps = new // 5
        mgr_u = cairn.CheckpointManager(ctx.path("replay_per", f"uniform_{scenario}"), keep_last=2)
        mgr_p = cairn.CheckpointManager(ctx.path("replay_per", f"per_{scenario}"), keep_last=2)
        mgr_u.save(uniform, 0)
        mgr_p.save(per, 0)
        times: dict[str, list[float]] = {"uniform": [], "per": []}
        written: dict[str, list[int]] = {"uniform": [], "per": []}
        for r in range(1 + rounds):  # one untimed round, then the timed ones
            batch = _rows(new, rng)
            uniform.add(batch)
            per.add(batch)
            t0 = time.perf_counter()
            _train(per, steps, rng)
            ctx.log(f"    {scenario}: {steps} gradient steps of priority updates in {time.perf_counter() - t0:.1f} s")
            order = [("uniform", mgr_u, uniform), ("per", mgr_p, per)]
            for name, mgr, buf in order if r % 2 else order[::-1]:  # alternate which saves first
                t0 = time.perf_counter()
                mgr.save(buf, r + 1)
                dt = time.perf_counter() - t0
                ctx.log(f"    {'warmup' if r == 0 else f'round {r}'}: {name} save {dt:.3f} s, "
                        f"{mgr.last_stats.bytes_written / MB:,.1f} MB written")  # fmt: skip
                if r:
                    times[name].append(dt)
                    written[name].append(mgr.last_stats.bytes_written)
        mgr_u.close()
        mgr_p.close()
        wu, wp = statistics.median(written["uniform"]), statistics.median(written["per"])
        priority_bytes = 8 * len(per)
        ctx.add(
            Row("replay_per", f"save after {new} new rows + {steps} gradient steps ({scenario}): bytes written",
                f"{wp / MB:,.1f} MB", f"uniform buffer {wu / MB:,.1f} MB", wp / wu,
                data={"uniform": written["uniform"], "per": written["per"], "all_priorities": priority_bytes,
                      "buffer_bytes": uniform.nbytes})
        )  # fmt: skip
        ctx.add(
            Row("replay_per", f"time of that save ({scenario})", f"{statistics.median(times['per']):.3f} s",
                f"uniform buffer {statistics.median(times['uniform']):.3f} s",
                statistics.median(times["per"]) / statistics.median(times["uniform"]),
                best=min(times["per"]) / min(times["uniform"]))
        )  # fmt: skip
    ctx.raw["replay_per"] = {"capacity": capacity, "row_bytes": uniform.nbytes // capacity}
