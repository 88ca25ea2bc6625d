"""Functions of one env runner for ``foreach_env_runner`` tests: top-level, so remote runners resolve them."""

from __future__ import annotations

from cairn.rl.env.env_runner import EnvRunner


def worker_and_steps(runner: EnvRunner) -> tuple[int, int]:
    """The runner's worker index and its lifetime env steps (plain data, back through Ray)."""
    return runner.worker_index, runner.num_env_steps_sampled_lifetime
