"""A trained policy in one call: the module of an algorithm checkpoint with the connectors it was trained behind.

::

    from cairn.rl.inference import Policy

    policy = Policy.from_checkpoint("ckpts/step_000100")        # an algorithm checkpoint (or a zip of one)
    action = policy.compute_single_action(obs)                 # greedy; explore=True samples
    actions = policy.compute_actions(obs_batch)                # [B, ...] in, [B, ...] out

It is RLlib's inference idiom (``EnvToModulePipeline`` -> ``forward_inference`` /
``forward_exploration`` -> ``ModuleToEnvPipeline``, docs/deploy.md) packed into one
object, so that its actions are the ones that idiom and ``cairn evaluate`` give: the
checkpoint's observation filter normalises with its saved statistics (which do not
change), and actions are what the environment receives (``ClipActions`` for a Box
space). :meth:`Policy.compute_single_action` follows one stream of observations (an
episode): a recurrent module's state and a frame stack carry over from call to call
until :meth:`Policy.reset` (call it when an episode ends). :meth:`Policy.compute_actions`
maps independent observations and refuses a policy that keeps state between steps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from cairn.errors import CheckpointNotFoundError
from cairn.rl.connectors.env_to_module.env_to_module_pipeline import EnvToModulePipeline
from cairn.rl.connectors.module_to_env.module_to_env_pipeline import ModuleToEnvPipeline
from cairn.rl.core import DEFAULT_MODULE_ID
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.env.single_agent_episode import SingleAgentEpisode
from cairn.rl.utils.companions import MODULE_FOLDER, PIPELINE_FOLDER
from cairn.rl.utils.nested import leading_rows, map_leaves, stack_rows, take_rows

__all__ = ["Policy", "module_ids_of"]

MODULE_TO_ENV_FOLDER = "env_runner/module_to_env_connector"
"""Where an algorithm checkpoint holds its env runner's module-to-env pipeline."""


class Policy:
    """A module with its env-to-module and module-to-env connectors: raw observations in, actions out.

    Args:
        module: The trained module.
        env_to_module: Its env-to-module connectors (an observation filter), or None.
        module_to_env: Its module-to-env connectors (action clipping), or None.
    """

    def __init__(
        self,
        module: RLModule,
        env_to_module: EnvToModulePipeline | None = None,
        module_to_env: ModuleToEnvPipeline | None = None,
    ) -> None:
        self.module = module
        self.env_to_module = env_to_module if env_to_module is not None else EnvToModulePipeline()
        self.module_to_env = module_to_env if module_to_env is not None else ModuleToEnvPipeline()
        self._episode: SingleAgentEpisode | None = None
        self._last: tuple[Any, dict[str, Any]] | None = None  # the last action and its extra model outputs

    @classmethod
    def from_checkpoint(
        cls, path: str | os.PathLike[str], *, module_id: str | None = None, device: str | torch.device | None = None
    ) -> Policy:
        """The policy of module ``module_id`` of the algorithm checkpoint at ``path``, with its connectors.

        Args:
            path: An algorithm checkpoint (a folder, or ``zip://::<file>.zip`` / a ``.zip`` file of one).
            module_id: The module; may be left out when the checkpoint has one module.
            device: Where the module runs (``"cpu"``, ``"cuda:0"``); connectors run on numpy.

        Raises:
            CheckpointNotFoundError: No module ``module_id`` in the checkpoint (the message lists them).
            cairn.CheckpointError: The checkpoint is damaged or does not load.
        """
        root = zip_root(str(path))
        modules = module_ids_of(root)
        if module_id is None:
            module_id = modules[0] if len(modules) == 1 else DEFAULT_MODULE_ID
        if module_id not in modules:
            raise CheckpointNotFoundError(
                f"The checkpoint {path} has no module {module_id!r}; its modules are {modules}. Pass module_id=."
            )
        # The connectors come along: the note about leaving them behind does not apply.
        module = RLModule.from_checkpoint(_join(root, MODULE_FOLDER, module_id), device=device, note_connectors=False)
        pipeline_id = module_id if len(modules) > 1 else None
        return cls(
            module,
            EnvToModulePipeline.from_checkpoint(_join(root, PIPELINE_FOLDER), module_id=pipeline_id),
            ModuleToEnvPipeline.from_checkpoint(_join(root, MODULE_TO_ENV_FOLDER), module_id=pipeline_id),
        )

    @property
    def keeps_state(self) -> bool:
        """Whether an action depends on earlier observations (a recurrent module, a frame stack, previous actions)."""
        # A piece keeps per-episode state when that state is its runner's own and it has any (a frame
        # stack's histories, previous actions); FlattenObservations is a ConnectorV2 without state.
        return self.module.is_stateful() or any(
            piece.RUNNER_LOCAL_STATE and bool(piece.get_state()) for piece in self.env_to_module.connectors
        )

    def reset(self) -> None:
        """Begin a new episode for :meth:`compute_single_action` (its state and frame stack start over)."""
        self._episode, self._last = None, None

    def compute_single_action(self, observation: Any, *, reward: float = 0.0, explore: bool = False) -> Any:
        """The action for one raw observation of the current episode.

        Args:
            observation: What the environment returned (reset or step).
            reward: The reward of the step that led to it (only connectors that read previous
                rewards use it).
            explore: Sample the action (else the most likely / the mean).

        Returns:
            The action as the environment takes it (an int for Discrete, an array for Box).
        """
        if self._episode is None or self._last is None:
            self._episode = self._new_episode("stream", observation)
        else:
            previous, episode = self._last, self._episode
            # Only the last step is kept (bounded memory over a long stream): what the connectors
            # and a recurrent state read is the latest observation and the last step's outputs.
            self._episode = SingleAgentEpisode(
                episode.id_,
                observations=[episode.get_observations(-1), observation],
                actions=[previous[0]],
                rewards=[float(reward)],
                extra_model_outputs={key: [value] for key, value in previous[1].items()},
                len_lookback_buffer=0,
                observation_space=self.module.observation_space,
                action_space=self.module.action_space,
            )
        to_env = self._step([self._episode], explore=explore)
        action = to_env.pop(Columns.ACTIONS)[0]
        self._last = (action, {key: values[0] for key, values in to_env.items()})
        return _plain(to_env[Columns.ACTIONS_FOR_ENV][0])

    def compute_actions(self, observations: Any, *, explore: bool = False) -> np.ndarray[Any, Any]:
        """The actions for a batch of independent raw observations (``[B, ...]`` in, ``[B, ...]`` out).

        Raises:
            ValueError: The policy keeps state between steps (:attr:`keeps_state`): follow one
                stream with :meth:`compute_single_action`, or several with RLlib's idiom (episodes).
        """
        if self.keeps_state:
            raise ValueError(
                "This policy keeps state between steps (a recurrent module or a frame stack), so a batch of "
                "independent observations has no meaning for it: use compute_single_action for one episode, or "
                "EnvToModulePipeline/ModuleToEnvPipeline with one SingleAgentEpisode per stream (docs/deploy.md)."
            )
        rows = _rows(observations)
        episodes = [self._new_episode(f"row-{i}", row) for i, row in enumerate(rows)]
        to_env = self._step(episodes, explore=explore)
        return np.asarray(stack_rows(to_env[Columns.ACTIONS_FOR_ENV]))

    def forward(self, observations: Any, *, explore: bool = False) -> dict[str, Any]:
        """The module's outputs for a batch of independent raw observations (``action_dist_inputs``,
        ``actions``, ...), each a numpy array ``[B, ...]``: what an exported file returns.

        Raises:
            ValueError: As :meth:`compute_actions`.
        """
        if self.keeps_state:
            raise ValueError("forward() maps independent observations; this policy keeps state between steps.")
        episodes = [self._new_episode(f"row-{i}", row) for i, row in enumerate(_rows(observations))]
        to_env = self._step(episodes, explore=explore)
        return {key: np.asarray(stack_rows(values)) for key, values in to_env.items() if key != Columns.STATE_OUT}

    def _new_episode(self, id_: str, observation: Any) -> SingleAgentEpisode:
        return SingleAgentEpisode(
            id_,
            observations=[observation],
            observation_space=self.module.observation_space,
            action_space=self.module.action_space,
        )

    def _step(self, episodes: list[SingleAgentEpisode], *, explore: bool) -> dict[str, Any]:
        shared: dict[str, Any] = {}
        batch = self.env_to_module(episodes=episodes, rl_module=self.module, explore=explore, shared_data=shared)
        device = _device_of(self.module)
        batch = map_leaves(lambda leaf: leaf.to(device), batch)
        out = self.module.forward_exploration(batch) if explore else self.module.forward_inference(batch)
        return self.module_to_env(
            batch=out, episodes=episodes, rl_module=self.module, explore=explore, shared_data=shared
        )


def module_ids_of(root: str) -> list[str]:
    """The module ids of the algorithm checkpoint at ``root`` (from its manifests; nothing is loaded).

    Raises:
        CheckpointNotFoundError: ``root`` is no algorithm checkpoint (no module folder).
    """
    from cairn.tools import inspect_checkpoint

    prefix = MODULE_FOLDER + "/"
    ids = sorted(
        info.path[len(prefix) :]
        for info in inspect_checkpoint(root)
        if info.path.startswith(prefix) and "/" not in info.path[len(prefix) :]
    )
    if not ids:
        raise CheckpointNotFoundError(
            f"{root} holds no {MODULE_FOLDER}/<module id> folder: give an algorithm checkpoint (for a module "
            "folder alone, use RLModule.from_checkpoint and the connectors yourself)."
        )
    return ids


def zip_root(path: str) -> str:
    """``path``, or for a ``.zip`` file (``cairn pack``'s) the fsspec URL of the checkpoint inside it."""
    if path.endswith(".zip") and "://" not in path and os.path.isfile(path):
        return f"zip://::{os.path.abspath(path)}"
    return path


def _join(root: str, *parts: str) -> str:
    """``root/parts``; inside a zip URL (``zip://<inner>::<file>``) the parts go into the inner path."""
    if root.startswith("zip://") and "::" in root:
        inner, _, outer = root[len("zip://") :].partition("::")
        inner = "/".join(p for p in (inner.strip("/"), *parts) if p)
        return f"zip://{inner}::{outer}"
    return "/".join([root.rstrip("/"), *parts])


def _rows(observations: Any) -> list[Any]:
    """The rows of a batch (nested dicts/tuples of arrays for Dict and Tuple observations, gymnasium's layout)."""
    if isinstance(observations, Mapping | tuple):
        return [take_rows(observations, i) for i in range(leading_rows(observations))]
    return list(np.asarray(observations))


def _device_of(module: RLModule) -> torch.device:
    for parameter in module.parameters():
        return parameter.device
    return torch.device("cpu")


def _plain(action: Any) -> Any:
    """A Discrete action as an ``int`` (what ``env.step`` takes); others as they are."""
    array = np.asarray(action)
    return int(array) if array.ndim == 0 and array.dtype.kind in "iu" else action
