"""The callback of eval_kill_child.py: it stalls one evaluation so that the test can SIGKILL the run there."""

from __future__ import annotations

import time
from typing import Any

import cairn

STALL_AT = 0
"""The training iteration whose evaluation stalls (0: none); set by the child before it trains."""


@cairn.register  # the child's config names it by path: this helper library allows it
def stall(*, algorithm: Any, **kwargs: Any) -> None:
    """on_evaluate_start: at iteration STALL_AT, say so and wait to be killed (the worst moment: mid-train)."""
    if STALL_AT and algorithm.training_iteration == STALL_AT:
        print(f"evaluating {STALL_AT}", flush=True)
        while True:
            time.sleep(1.0)
