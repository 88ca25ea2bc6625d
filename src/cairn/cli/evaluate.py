"""``cairn evaluate``: run episodes with one module of a checkpoint and print the mean return.

It loads the module, gymnasium and the verified reader, and nothing of training
(no algorithm, learner or env runner: ``tests/rl/test_rl_cli_startup.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import posixpath
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from cairn._display import safe_text
from cairn.cli.command import Command, require_folder
from cairn.cli.loading import checkpoint_metadata
from cairn.rl.algorithms.catalog import ALGORITHMS

if TYPE_CHECKING:
    from cairn.rl.connectors.connectors import ConnectorPipeline
    from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["COMMAND", "cmd_evaluate", "evaluate_module"]

MODULE_PATH = ("learner_group", "learner", "rl_module")
"""Where an algorithm checkpoint keeps its modules, one folder per module id below."""


class _Evaluated(NamedTuple):
    module_folder: str
    algo_root: str | None
    algo_metadata: dict[str, Any] | None
    module: RLModule


def _join(base: str, *parts: str) -> str:
    if "://" in base:
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def _load_for_evaluation(checkpoint: str, module_id: str) -> _Evaluated:
    """The module ``cairn evaluate CKPT`` runs, with where it came from.

    CKPT is an algorithm checkpoint, a module folder, a MultiRLModule folder, or a manager's
    root: there the newest checkpoint that loads is used, as ``--resume`` does (damaged ones are
    skipped with a warning).
    """
    from cairn.errors import CheckpointNotFoundError
    from cairn.manager import CheckpointManager

    metadata = checkpoint_metadata(checkpoint)
    if metadata is not None:
        with _single_threaded():
            return _load_module(checkpoint.rstrip("/"), metadata, module_id)
    with _single_threaded():
        found = CheckpointManager(checkpoint).load_latest(lambda info: _load_module(info.path, None, module_id))
    if found is None:
        raise CheckpointNotFoundError(
            f"No checkpoint at {checkpoint}: expected an algorithm checkpoint, a module folder, "
            "or a checkpoint manager's root with step_* checkpoints."
        )
    return found[1]


@contextlib.contextmanager
def _single_threaded() -> Iterator[None]:
    """Run the block with one torch intra-op thread, then restore the caller's setting.

    Building a module initialises weights that the restore then overwrites, and that
    initialisation (an orthogonal init's QR decomposition) is the first parallel call:
    it starts the OpenMP/MKL thread team, 0.2-0.5 s of wall time on a busy 2-core machine,
    for nothing. One thread computes it in a millisecond. The module's forward passes then
    run with the user's thread count; batch-of-one inference on small networks never starts
    the team, and a network large enough to use it starts it on its first forward as before.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _load_module(root: str, metadata: dict[str, Any] | None, module_id: str) -> _Evaluated:
    """Load module ``module_id`` of the checkpoint at ``root`` (whose metadata is read when None)."""
    from cairn._reader import open_checkpoint
    from cairn.errors import CheckpointNotFoundError
    from cairn.rl.core.rl_module.rl_module import RLModule

    # A checkpoint names its module's class, and only classes of imported modules load (SPEC 8):
    # every shipped algorithm's default module (PPO's also under its 0.1 path), and MultiRLModule.
    for entry in ALGORITHMS.values():
        importlib.import_module(entry.default_module_module)
    importlib.import_module("cairn.rl.core.rl_module.multi_rl_module")
    if metadata is None:
        metadata = open_checkpoint(root, None).metadata
    if "rllib_class" in metadata:  # written by cairn.integrations.rllib (RLlib's classes, not cairn's)
        raise ValueError(
            f"{root} holds RLlib's {metadata['rllib_class']!s:.200} (saved through cairn's RLlib bridge); "
            "cairn evaluate runs cairn's own modules. Evaluate it with RLlib: "
            "algo = cairn.integrations.rllib.from_checkpoint(PATH, config=your_config); algo.evaluate() "
            "(docs/integrations.md)."
        )
    cls = str(metadata.get("class", ""))
    algo_root: str | None = None
    algo_metadata: dict[str, Any] | None = None
    if "num_parameters" in metadata:  # RLModule.get_metadata's key: a module of any class
        # A module folder; its algorithm (for the env and the observation filter) may be above.
        module_folder = root
        parts = root.split("/")
        if len(parts) > 4 and tuple(parts[-4:-1]) == MODULE_PATH:
            algo_root = "/".join(parts[:-4])
            algo_metadata = checkpoint_metadata(algo_root)
            algo_root = algo_root if algo_metadata is not None else None
    elif cls.endswith(":MultiRLModule"):
        module_folder = f"{root}/{module_id}"
    else:
        module_folder = "/".join([root, *MODULE_PATH, module_id])
        algo_root, algo_metadata = root, metadata
        if checkpoint_metadata(module_folder) is None:
            multi = checkpoint_metadata("/".join([root, *MODULE_PATH]))
            modules = (multi or metadata).get("module_ids")
            raise CheckpointNotFoundError(
                f"The checkpoint {root} has no module {module_id!r}"
                + (f"; its modules are {modules}." if modules else ".")
            )
    # cmd_evaluate runs the algorithm's connectors before the module when it knows the algorithm.
    module = RLModule.from_checkpoint(module_folder, note_connectors=algo_root is None)
    return _Evaluated(module_folder, algo_root, algo_metadata, module)


def _load_filter(algo_root: str | None) -> ConnectorPipeline | None:
    """The observation filter the algorithm at ``algo_root`` trained with, or None."""
    if algo_root is None:
        return None
    from cairn.errors import CheckpointNotFoundError
    from cairn.rl.connectors.connectors import ConnectorPipeline

    try:
        return ConnectorPipeline.from_checkpoint(_join(algo_root, "env_runner", "env_to_module_connector"))
    except CheckpointNotFoundError:
        return None


def evaluate_module(
    module: RLModule,
    env_id: str,
    *,
    episodes: int,
    seed: int,
    obs_filter: ConnectorPipeline | None = None,
) -> list[float]:
    """Run ``episodes`` greedy episodes of ``module`` on ``env_id``; returns their returns."""
    import gymnasium as gym
    import numpy as np
    import torch

    from cairn.rl.env.multi_agent_env import check_env_id, make_env

    check_env_id(env_id)  # the id may come from a checkpoint's metadata: never import what it names
    env = make_env(env_id, {})
    returns: list[float] = []
    try:
        _check_spaces(module, env, env_id, obs_filter)
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done, steps = 0.0, False, 0
            while not done:
                batch = np.asarray(obs)[None]
                if obs_filter is not None:
                    # Filters stay frozen (update=False); frame stacks advance within the episode.
                    starts = np.array([steps == 0], dtype=np.bool_)
                    batch = obs_filter(
                        rl_module=module,
                        batch={"obs": batch},
                        episodes=None,
                        explore=False,
                        update=False,
                        advance=True,
                        slots=np.zeros(1),
                        episode_starts=starts,
                    )["obs"]
                steps += 1
                action = module.forward_inference({"obs": torch.as_tensor(batch)})["actions"][0]
                env_action: Any = action.numpy()
                if isinstance(env.action_space, gym.spaces.Box):
                    env_action = np.clip(env_action, env.action_space.low, env.action_space.high)
                else:
                    env_action = int(env_action)
                obs, reward, terminated, truncated, _ = env.step(env_action)
                total += float(reward)
                done = bool(terminated or truncated)
            returns.append(total)
    finally:
        env.close()
    return returns


def _fits(module_space: Any, env_space: Any) -> bool:
    """Whether the env's space has the kind and size the module was built for (bounds may differ)."""
    import gymnasium as gym

    if module_space is None:  # a module that does not record its spaces: nothing to check against
        return True
    if type(module_space) is not type(env_space):
        return False
    if isinstance(module_space, gym.spaces.Discrete):
        return bool(module_space.n == env_space.n)
    return getattr(module_space, "shape", None) == getattr(env_space, "shape", None)


def _describe(space: Any) -> str:
    """A space in a few words: ``Discrete(2)``, ``Box (4,) float32`` (bounds left out: they do not decide a fit)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Box):
        return f"Box {space.shape} {space.dtype}"
    return str(space)


def _module_input_space(env: Any, obs_filter: ConnectorPipeline | None) -> Any:
    """The observation space the module sees: the env's, through the saved pipeline (a frame stack widens it).

    Works on a copy: the pieces take their input spaces, and the pipeline the episodes run through
    must stay as it was loaded. None when the pipeline refuses the env's space.
    """
    import copy

    space = env.observation_space
    if obs_filter is None:
        return space
    try:
        for piece in copy.deepcopy(obs_filter).connectors:
            space = piece.set_input_spaces(space, env.action_space)
    except ValueError:
        return None
    return space


def _check_spaces(module: RLModule, env: Any, env_id: str, obs_filter: ConnectorPipeline | None = None) -> None:
    """Raise ValueError naming both sides when ``env``'s spaces (through the saved pipeline) do not fit ``module``'s."""
    obs, act = getattr(module, "observation_space", None), getattr(module, "action_space", None)
    seen = _module_input_space(env, obs_filter)
    if seen is not None and _fits(obs, seen) and _fits(act, env.action_space):
        return
    through = "" if obs_filter is None or seen is None else f" ({_describe(seen)} after the saved connectors)"
    raise ValueError(
        f"{env_id} does not fit the module: the module reads observations {_describe(obs)} and acts in "
        f"{_describe(act)}; {env_id} gives observations {_describe(env.observation_space)}{through} and takes "
        f"actions {_describe(env.action_space)}. "
        "Evaluate it on the environment it was trained on (leave --env out to use the checkpoint's)."
    )


def _refuse_an_unrecorded_env(algo_root: str, algo_metadata: dict[str, Any], env_id: Any) -> None:
    """Refuse the checkpoint's env when a creator function built it: the checkpoint could not record
    the creator (a lambda, a closure, a ``register_env`` creator; issue 39), and a command line holds no code.

    Only an env id gymnasium does not know is looked at (the recorded config is read then, never
    for a gymnasium id or a ``"module:Class"``), so the usual evaluation loads nothing of training.

    Raises:
        cairn.errors.MissingCallableError: The recorded config holds the creator's record, naming it,
            with the two ways on: ``--env`` with an env the policy fits, or a script that passes the creator.
    """
    import gymnasium as gym

    if not isinstance(env_id, str) or ":" in env_id or env_id in gym.registry:
        return
    from cairn.errors import MissingCallableError
    from cairn.rl.algorithms.algorithm import recorded_config
    from cairn.rl.algorithms.catalog import algorithm_of_class

    entry = algorithm_of_class(str(algo_metadata.get("class", "")))
    if entry is None:  # not one of cairn's algorithms: its config class is not ours to import
        return
    importlib.import_module(entry.module)  # registers its config class, which the recorded config names
    creator = getattr(recorded_config(algo_root), "env_creator", None)
    if creator is None or creator.fn is not None:
        return
    algo = entry.algorithm
    raise MissingCallableError(
        f"{safe_text(algo_root)}: its env {safe_text(env_id)!r} was built by a creator function the checkpoint "
        f"could not record ({creator.field_name}: {safe_text(creator.qualname)!r} of module "
        f"{safe_text(creator.module)!r}; cairn never records code), and cairn evaluate takes no code. Pass --env "
        f"with a gymnasium id or 'module:Class' the policy fits (e.g. --env CartPole-v1), or evaluate from your "
        f"script, which passes the creator again: algo = {algo}.from_checkpoint(path, env=creator); algo.evaluate()."
    )


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Handler of ``cairn evaluate``; returns the exit status."""
    if args.episodes < 1:
        raise ValueError("--episodes must be at least 1.")
    require_folder(args.checkpoint)
    module_folder, algo_root, algo_metadata, module = _load_for_evaluation(args.checkpoint, args.module)
    env_id = args.env
    if env_id is None and algo_metadata is not None:
        env_id = algo_metadata.get("env")
        if algo_root is not None:
            _refuse_an_unrecorded_env(algo_root, algo_metadata, env_id)
    if env_id is None:
        raise ValueError(
            f"{module_folder} is a module checkpoint without its algorithm; pass --env to say "
            "which environment to run it in."
        )
    obs_filter = _load_filter(algo_root)
    returns = evaluate_module(module, str(env_id), episodes=args.episodes, seed=args.seed, obs_filter=obs_filter)
    mean = sum(returns) / len(returns)
    print(
        f"cairn evaluate: {safe_text(module_folder)} on {safe_text(env_id)}"
        + (" (with the checkpoint's observation filter)" if obs_filter is not None else ""),
        file=sys.stderr,
    )
    print(f"mean return over {len(returns)} episodes: {mean:.2f}")
    return 0


def _evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "checkpoint",
        help="an algorithm checkpoint, a module folder, or a run folder (its newest sound checkpoint), "
        "e.g. runs/cartpole",
    )
    p.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to run, e.g. --episodes 5")
    p.add_argument("--module", default="default_policy", metavar="ID", help="the module id to run, e.g. --module p0")
    p.add_argument(
        "--env",
        default=None,
        metavar="ID",
        help="the environment, e.g. --env CartPole-v1 (default: the checkpoint's)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode (the next get +1, +2, ...)")


COMMAND = Command(
    "evaluate",
    "run episodes with a checkpoint's policy",
    _evaluate_arguments,
    cmd_evaluate,
    description=(
        "Load one module of a checkpoint (an algorithm checkpoint, a module folder, or a "
        "checkpoint manager's root, whose latest checkpoint is used), run episodes with "
        "greedy actions and print the mean return."
    ),
    examples=(
        "cairn evaluate runs/cartpole --episodes 5",
        "cairn evaluate runs/cartpole/step_000000040 --seed 100",
        "cairn evaluate policy_folder --env CartPole-v1",
    ),
)
"""The ``evaluate`` command."""
