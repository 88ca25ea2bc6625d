"""How the ported examples print a training iteration: one aligned line, not RLlib's whole result dict.

    iteration   2  env steps    8000  return   21.48  (p0 20.10, p1 22.86)

The return is the env runners' mean episode return (``env_runners/episode_return_mean``),
each module's after it in a multi-agent run; ``-`` while no episode has ended yet. The whole
result stays what ``algo.train()`` returned, for the code that reads it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _number(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def print_iteration(result: Mapping[str, Any]) -> None:
    """Print one line for ``result`` (what ``algo.train()`` returned): iteration, env steps, mean return(s)."""
    runners = result.get("env_runners", {})
    line = (
        f"iteration {result.get('training_iteration', 0):>3}  "
        f"env steps {result.get('num_env_steps_sampled_lifetime', 0):>7}  "
        f"return {_number(runners.get('episode_return_mean')):>7}"
    )
    modules = runners.get("module_episode_returns_mean", {})
    if len(modules) > 1 or (modules and "default_policy" not in modules):
        line += "  (" + ", ".join(f"{m} {_number(v)}" for m, v in sorted(modules.items())) + ")"
    print(line, flush=True)
