"""What a config read from a checkpoint may build: bounds before anything is built (SPEC 8).

:func:`modules_problem` bounds the modules and the sampling a recorded config asks for by the
checkpoint's size (the algorithm's ``ctor_args_problem`` hook); :func:`machine_problem` bounds
its process, thread and env counts by the machine that loads it (``ctor_machine_problem``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

from cairn._ctor_bounds import FolderSizes, alloc_limit
from cairn.rl.algorithms.evaluation import wants_evaluation_runners
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.rl_module.rl_module import layers_parameter_bytes

__all__ = ["MACHINE_FIELDS", "machine_problem", "modules_problem", "sampling_problem"]


def modules_problem(config: AlgorithmConfig, folder: FolderSizes) -> str | None:
    """Why the modules and sampling a recorded config builds cannot belong to its checkpoint, or None.

    Building the algorithm builds a module per policy (and copies of it: target
    networks, env runners' inference copies); the hidden-to-hidden weights their
    ``hidden_sizes`` ask for (a lower bound) must fit what the whole checkpoint
    folder holds, or the file is hostile (``hidden_sizes=[6144] * 4`` is 1.3 GB; the same for
    an LSTM's ``lstm_cell_size`` and the heads' ``head_fcnet_hiddens``).
    """
    default = config.model_config
    specs = getattr(config.rl_module_spec, "rl_module_specs", None)
    configs: dict[str, Any] = {}
    for module_id in config.policies:
        # A MultiRLModuleSpec's dict, or its one shared spec; else the config's own RLModuleSpec.
        spec = specs.get(module_id) if isinstance(specs, Mapping) else (specs or config.rl_module_spec)
        own = getattr(spec, "model_config", None)
        configs[module_id] = own if isinstance(own, Mapping) else default
    total = 0
    for model_config in configs.values():
        total += layers_parameter_bytes(model_config)  # hidden layers, an LSTM, the heads' layers
    if total > alloc_limit(folder.tree_bytes):
        return (
            f"the modules of its config ({len(configs)}) make at least {total} bytes of parameters, and the "
            f"checkpoint holds {folder.tree_bytes} bytes"
        )
    return sampling_problem(config, alloc_limit(folder.tree_bytes))


MACHINE_FIELDS = ("num_env_runners", "evaluation_num_env_runners", "num_learners", "num_torch_threads", "env_config")
"""The config fields :func:`machine_problem` bounds when they come from a checkpoint."""


def machine_problem(config: AlgorithmConfig, *, overridden: Collection[str] = ()) -> str | None:
    """Why a recorded config starts more processes, threads or env work than this machine allows, or None.

    Counts read from a checkpoint start Ray actors (``num_env_runners``,
    ``evaluation_num_env_runners``, ``num_learners``), threads (``num_torch_threads``)
    and env construction (``env_config`` goes to ``gymnasium.make``). Each is bounded
    by the caller's machine (:func:`os.cpu_count`) before use; the caller overrides a
    bound by passing its own config (``PPO.from_checkpoint(path, config=config)``),
    which is not checked, or by naming the fields it set itself in ``overridden``
    (``cairn train --resume --num-env-runners 64``: the rest stays bounded).
    """
    cpus = os.cpu_count() or 1
    fix = (
        "If you mean it, pass your own config: from_checkpoint(path, config=config) (it is not bounded); "
        "cairn train --resume: give the field (--num-env-runners, --num-learners, --set FIELD=VALUE)"
    )
    try:
        counts = {
            "num_env_runners": int(config.num_env_runners),
            "evaluation_num_env_runners": int(config.evaluation_num_env_runners),
            "num_learners": int(config.num_learners),
            "num_torch_threads": int(config.num_torch_threads or 0),
        }
    except (TypeError, ValueError, OverflowError):
        return None  # not numbers: the config's own validation names the field
    limits = {
        "num_env_runners": MAX_ACTORS_PER_CPU * cpus,
        "evaluation_num_env_runners": MAX_ACTORS_PER_CPU * cpus,
        "num_learners": cpus,
        "num_torch_threads": cpus,
    }
    for name, value in counts.items():
        if name not in overridden and value > limits[name]:
            return (
                f"its config records {name}={value}, more than this machine allows from a checkpoint "
                f"({limits[name]} for {cpus} CPUs). {fix}"
            )
    size = None if "env_config" in overridden else _env_config_problem(config.env_config)
    return f"its config records env_config with {size}. {fix}" if size else None


MAX_ACTORS_PER_CPU = 4
"""Ray actors (env runners) a recorded config may start per CPU of the machine that loads it."""

MAX_ENV_CONFIG_ITEMS = 256
"""Most values (all nested levels counted) a recorded ``env_config`` may give ``gymnasium.make``."""

MAX_ENV_CONFIG_INT = 1 << 16
"""Largest int a recorded ``env_config`` may give ``gymnasium.make`` (a grid's size, a map's rows...)."""

MAX_ENV_CONFIG_STR = 1024
"""Longest str a recorded ``env_config`` may give ``gymnasium.make``."""


def _env_config_problem(env_config: Any) -> str | None:
    """Why a recorded ``env_config`` may make an environment allocate or loop without bound, or None.

    The env's arguments are the env's own (a FrozenLake map, a grid size), so no
    checkpoint size bounds what they cost: a 129 KB map cost 1.4 GB and 57 s.
    """
    items, stack = 0, [env_config]
    while stack:
        value = stack.pop()
        items += 1
        if items > MAX_ENV_CONFIG_ITEMS:
            return f"more than {MAX_ENV_CONFIG_ITEMS} values"
        if isinstance(value, Mapping):
            stack.extend(value.values())
            stack.extend(value.keys())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_ENV_CONFIG_INT:
            return f"the int {value} (more than {MAX_ENV_CONFIG_INT})"
        elif isinstance(value, str | bytes) and len(value) > MAX_ENV_CONFIG_STR:
            return f"a string of {len(value)} characters (more than {MAX_ENV_CONFIG_STR})"
    return None


ENV_BYTES = 1 << 10
"""A lower bound of what one sub-environment costs to build (its Python objects, its spaces)."""

STEP_BYTES = 1
"""A lower bound of what one env step of a rollout costs a sample (a float64 reward alone is 8)."""


def sampling_problem(config: AlgorithmConfig, limit: int) -> str | None:
    """Why a recorded config's env counts and rollout length cannot belong to its checkpoint, or None.

    Building the algorithm builds every env runner's sub-environments, and its first sample fills
    ``rollout_length`` steps of each: a config recording ``num_envs_per_env_runner=10**9`` would
    make a small file take the machine's memory before any check. The bound refuses only absurd
    values: with no checkpoint bytes at all, 65,536 sub-environments or 64 million env steps per
    sampling round pass, and the allowance grows with what the checkpoint holds.
    """
    try:
        per_runner = int(config.num_envs_per_env_runner)
        runners = int(config.num_env_runners) + 1
        if wants_evaluation_runners(config):
            runners += int(config.evaluation_num_env_runners) + 1
        rollout = int(config.rollout_length)
    except (TypeError, ValueError, OverflowError):
        return None  # not numbers: the config's own validation names the field
    envs = max(per_runner, 0) * max(runners, 0)
    needed = envs * ENV_BYTES + envs * max(rollout, 0) * STEP_BYTES
    if needed > limit:
        return (
            f"its config builds {envs} sub-environments ({per_runner} per env runner, {runners} env runners) "
            f"sampling {rollout} steps each, at least {needed} bytes, and the checkpoint holds only enough for "
            f"{limit} bytes of construction"
        )
    return None
