"""The processes the crash test kills: they save checkpoints of step-dependent values in a loop.

Each step ``s`` gives an :class:`storage_components.Agent` of size ``N`` the
values of step ``s`` (distinct for every step, the same every time), then

1. ``CheckpointManager(ROOT/run, keep_last=3).save(agent, s)`` (incremental:
   the frozen component is hard-linked or copied, the rest written), and
2. ``agent.save_to_path(ROOT/fixed)`` over the same path every step,

and only then acknowledges ``s`` (one line appended to the ack file with a
single ``write``): an acknowledged step, or a later one, must survive a kill.
ROOT may be a local path or an fsspec URI (``s3://...``; the endpoint comes
from the environment).

Usage: ``python storage_crash_child.py zygote``. The zygote imports everything
once, then reads commands on stdin, so that each killed process costs a
``fork`` rather than an interpreter start:

* ``run ROOT START N ACKFILE`` forks a saver starting at step START; replies its pid;
* ``wait PID`` reaps that saver (after the test sent it SIGKILL); replies its wait status;
* ``quit``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storage_components import Agent

import cairn


def save_loop(root: str, start: int, n: int, ack_path: str) -> None:
    """Save forever (until killed), acknowledging each step in ``ack_path``."""
    sep = "/" if "://" in root else os.sep
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    agent = Agent(n)
    mgr = cairn.CheckpointManager(f"{root}{sep}run", keep_last=3)
    step = start
    while True:
        agent.set_step(step)
        mgr.save(agent, step)
        agent.save_to_path(f"{root}{sep}fixed")
        os.write(ack, f"{step}\n".encode())
        step += 1


def zygote() -> None:
    """Serve ``run`` / ``wait`` / ``quit`` commands (see the module docstring)."""
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "run":
            root, start, n, ack_path = args[0], int(args[1]), int(args[2]), args[3]
            pid = os.fork()
            if pid == 0:
                try:
                    save_loop(root, start, n, ack_path)
                finally:
                    os._exit(1)
            print(pid, flush=True)
        elif cmd == "wait":
            _, status = os.waitpid(int(args[0]), 0)
            print(status, flush=True)
        elif cmd == "quit":
            return


if __name__ == "__main__":
    zygote()
