"""The process the crash test kills: saves checkpoints of step-dependent values in a loop.

Usage: ``python storage_crash_child.py ROOT START_STEP N``

Each step ``s`` gives an :class:`storage_components.Agent` of size ``N`` the
values of step ``s`` (distinct for every step, the same every time), then

1. ``CheckpointManager(ROOT/run, keep_last=3).save(agent, s)`` (incremental:
   the frozen component is hard-linked or copied, the rest written), and
2. ``agent.save_to_path(ROOT/fixed)`` over the same path every step,

and only then prints ``s`` on stdout: a printed step is acknowledged, so both
checkpoints of it (or of a later step) must survive a kill. ROOT may be a
local path or an fsspec URI (``s3://...``; the endpoint comes from the env).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storage_components import Agent

import cairn


def main() -> None:
    """Save forever (until killed)."""
    root, start, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sep = "/" if "://" in root else os.sep
    agent = Agent(n)
    mgr = cairn.CheckpointManager(f"{root}{sep}run", keep_last=3)
    print("ready", flush=True)
    step = start
    while True:
        agent.set_step(step)
        mgr.save(agent, step)
        agent.save_to_path(f"{root}{sep}fixed")
        print(step, flush=True)
        step += 1


if __name__ == "__main__":
    main()
