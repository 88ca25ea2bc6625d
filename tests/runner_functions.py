"""Functions of one env runner for ``foreach_env_runner`` tests: top-level, so remote runners resolve them."""

from __future__ import annotations

import cairn
from cairn.rl.env.env_runner import EnvRunner


@cairn.register  # named by path in configs and to remote runners (SPEC 8)
def worker_and_steps(runner: EnvRunner) -> tuple[int, int]:
    """The runner's worker index and its lifetime env steps (plain data, back through Ray)."""
    return runner.worker_index, runner.num_env_steps_sampled_lifetime


@cairn.register  # named by path in configs and to remote runners (SPEC 8)
def node_id(runner: EnvRunner) -> str:
    """The Ray node the runner's process runs on."""
    import ray

    return str(ray.get_runtime_context().get_node_id())


recreated: list[tuple[list[int], bool]] = []
"""What ``record_recreated`` saw: ``(env_runner_indices, is_evaluation)`` per call (in the driver)."""


@cairn.register  # named by path in configs and to remote runners (SPEC 8)
def record_recreated(*, env_runner_indices: list[int], is_evaluation: bool, **kwargs: object) -> None:
    """An ``on_env_runners_recreated`` callback function: note the replaced worker indices."""
    recreated.append((list(env_runner_indices), is_evaluation))


@cairn.register  # named by path in configs and to remote runners (SPEC 8)
def resolved_filesystems(runner: EnvRunner) -> int:
    """How many filesystems the runner's process fetched from Ray's object store (a checkpoint's, by reference)."""
    from cairn.rl.distributed import checkpoint

    return len(checkpoint._resolved)
