"""RLlib's ``EnvToModulePipeline``: a trained env runner's env-to-module connectors, called on episodes.

RLlib's inference idiom (``rllib/examples/inference/policy_inference_after_training_w_connector.py``)
loads the pipeline a checkpoint's env runner used and calls it on the episodes in flight::

    env_to_module = EnvToModulePipeline.from_checkpoint(f"{ckpt}/env_runner/env_to_module_connector")
    batch = env_to_module(episodes=[episode], rl_module=module, explore=False, shared_data={})
    out = module.forward_inference(batch)

The pipeline reads each episode's latest observation, runs the rows through the
checkpoint's connectors (a ``MeanStdFilter`` normalises with the statistics it was
saved with, ``FlattenObservations`` flattens Dict observations, frame stacks and
previous actions/rewards come from the connectors' per-episode histories) and
returns the module's input: ``{"obs": Tensor[B, ...]}``, and for a stateful module
(an LSTM) the observations with a time step of one (``[B, 1, ...]``) and
``Columns.STATE_IN`` (each episode's last ``STATE_OUT`` from its
``extra_model_outputs``, the module's initial state at the episode's start).

Loaded for inference, the pipeline does not change its statistics (a filter's
mean and variance stay those of the checkpoint) unless built with
``update_statistics=True``; histories of the episodes in flight (frame stacks)
always move on, as they do in an evaluation env runner.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.core.columns import Columns
from cairn.rl.utils.nested import map_leaves, stack_rows

__all__ = ["ADDED_TIME_RANK", "EnvToModulePipeline", "load_pipeline"]

ADDED_TIME_RANK = "_added_single_ts_time_rank"
"""The ``shared_data`` key (RLlib's) by which the env-to-module pipeline tells the module-to-env
pipeline that it gave a stateful module one time step, which the outputs then lose again."""


class EnvToModulePipeline:
    """A connector pipeline with RLlib's calling convention (``episodes=``, ``rl_module=``; see the module doc).

    Args:
        pipeline: The connectors (a :class:`~cairn.rl.connectors.connectors.ConnectorPipeline`).
        update_statistics: Whether statistics (a filter's mean and variance) take the
            observations into account; False (the default) keeps those of the checkpoint.
    """

    def __init__(self, pipeline: ConnectorPipeline | None = None, *, update_statistics: bool = False) -> None:
        self.pipeline = pipeline if pipeline is not None else ConnectorPipeline()
        self.update_statistics = update_statistics
        self.to_tensors = True
        self._slots: dict[str, int] = {}

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str],
        *,
        module_id: str | None = None,
        update_statistics: bool = False,
        filesystem: Any = None,
    ) -> EnvToModulePipeline:
        """The pipeline saved at ``path`` (``<algorithm checkpoint>/env_runner/env_to_module_connector``).

        Args:
            path: The pipeline's folder, on any storage cairn reads (a zip's ``zip://...::file.zip`` too).
            module_id: In a multi-agent checkpoint (one pipeline per module), the module's;
                may be left out when there is one module.
            update_statistics: See the class.
            filesystem: An fsspec filesystem ``path`` lives on.

        Raises:
            IncompatibleCheckpointError: ``path`` holds no connector pipeline, or a multi-agent one
                without ``module_id`` (the message lists the modules).
        """
        return cls(load_pipeline(path, module_id=module_id, filesystem=filesystem), update_statistics=update_statistics)

    @property
    def connectors(self) -> list[ConnectorV2]:
        """The pieces, in order."""
        return self.pipeline.connectors

    def __getitem__(self, name: str) -> ConnectorV2:
        return self.pipeline[name]

    def __len__(self) -> int:
        return len(self.pipeline)

    def remove(self, name: str) -> None:
        """Drop the piece ``name``; ``"NumpyToTensor"`` (RLlib's last piece): return numpy arrays, not tensors.

        Raises:
            KeyError: No piece of that name.
        """
        if name == "NumpyToTensor":
            self.to_tensors = False
            return
        piece = self.pipeline[name]
        self.pipeline.connectors.remove(piece)

    def __call__(
        self,
        *,
        episodes: Sequence[Any],
        rl_module: Any = None,
        explore: bool = False,
        shared_data: dict[str, Any] | None = None,
        batch: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The module's input for the latest observation of each of ``episodes`` (one row each).

        Args:
            episodes: :class:`~cairn.rl.env.single_agent_episode.SingleAgentEpisode` objects,
                each with at least its first observation.
            rl_module: The module the batch is for (its initial state, for a stateful one).
            explore: Whether the module explores (given to the pieces).
            shared_data: A dict the pieces of this step share with the module-to-env pipeline.
            batch: Ignored (RLlib passes ``{}``); the batch is built from the episodes.
            kwargs: Ignored keyword arguments of RLlib's signature (``metrics``).

        Returns:
            ``{"obs": Tensor[B, ...]}`` (numpy after ``remove("NumpyToTensor")``), plus
            ``Columns.STATE_IN`` for a stateful module.

        Raises:
            ValueError: No episodes, or an episode without an observation.
        """
        del batch, kwargs
        if not episodes:
            raise ValueError("EnvToModulePipeline needs at least one episode (episodes=[episode]).")
        shared = shared_data if shared_data is not None else {}
        obs = stack_rows([episode.get_observations(-1) for episode in episodes])
        slots = np.array([self._slot(episode.id_) for episode in episodes], dtype=np.int64)
        starts = np.array([len(episode) == 0 for episode in episodes], dtype=np.bool_)
        context: dict[str, Any] = {"slots": slots, "episode_starts": starts, "advance": True}
        if any(getattr(piece, "NEEDS_PREV_ACTIONS_REWARDS", False) for piece in self.connectors):
            context.update(_previous(episodes))
        rows = self.pipeline(
            rl_module=rl_module,
            batch={Columns.OBS: obs},
            episodes=None,
            explore=explore,
            shared_data=shared,
            update=self.update_statistics,
            **context,
        )[Columns.OBS]
        out: dict[str, Any] = {Columns.OBS: rows}
        initial = _initial_state(rl_module)
        if initial:
            out[Columns.OBS] = map_leaves(lambda leaf: np.expand_dims(leaf, 1), rows)
            out[Columns.STATE_IN] = {
                name: np.stack([_last_state(episode, name, value) for episode in episodes])
                for name, value in initial.items()
            }
            shared[ADDED_TIME_RANK] = True
        return map_leaves(torch.from_numpy, out) if self.to_tensors else out

    def _slot(self, episode_id: str) -> int:
        """A stable row id per episode (frame stacks and previous actions are kept per id)."""
        if episode_id not in self._slots:
            self._slots[episode_id] = len(self._slots)
        return self._slots[episode_id]


def load_pipeline(path: str | os.PathLike[str], *, module_id: str | None, filesystem: Any = None) -> ConnectorPipeline:
    """The :class:`ConnectorPipeline` saved at ``path`` (a multi-agent runner's: that of ``module_id``).

    Raises:
        IncompatibleCheckpointError: No pipeline there, or a multi-agent one whose module is not given.
    """
    loaded: Any = Checkpointable.from_checkpoint(path, filesystem=filesystem)
    if isinstance(loaded, ConnectorPipeline):
        return loaded
    per_module = getattr(loaded, "pipelines", None)  # a multi-agent runner's ModulePipelines (rl/env, a floor up)
    if isinstance(per_module, dict) and all(isinstance(p, ConnectorPipeline) for p in per_module.values()):
        modules = sorted(per_module)
        if module_id is None and len(modules) == 1:
            module_id = modules[0]
        if module_id not in modules:
            raise IncompatibleCheckpointError(
                f"{path} holds one connector pipeline per module ({modules}); pass module_id= (one of them)."
            )
        pipeline: ConnectorPipeline = per_module[module_id]
        return pipeline
    raise IncompatibleCheckpointError(
        f"{path} holds a {type(loaded).__qualname__}, not a connector pipeline; give the folder "
        "<algorithm checkpoint>/env_runner/env_to_module_connector (or module_to_env_connector)."
    )


def _initial_state(rl_module: Any) -> dict[str, Any]:
    """The module's initial state (``{}``: stateless, or no module given)."""
    get = getattr(rl_module, "get_initial_state", None)
    if get is None:
        return {}
    state = get()
    return {name: _numpy(value) for name, value in state.items()} if isinstance(state, dict) else {}


def _last_state(episode: Any, name: str, initial: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The episode's last ``STATE_OUT[name]`` (``add_env_step(extra_model_outputs=...)``), or ``initial``."""
    if len(episode) == 0 or Columns.STATE_OUT not in episode.extra_model_outputs:
        return initial
    state = episode.get_extra_model_outputs(Columns.STATE_OUT, -1)
    return _numpy(state[name])


def _numpy(value: Any) -> np.ndarray[Any, Any]:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _previous(episodes: Sequence[Any]) -> dict[str, Any]:
    """Each episode's previous action and reward (zeros at its start), for ``PrevActionsPrevRewards``."""
    actions, rewards = [], []
    for episode in episodes:
        space = episode.action_space
        if len(episode) == 0:
            shape = getattr(space, "shape", None) or ()
            actions.append(np.zeros(shape, dtype=np.int64 if not shape else np.float32))
            rewards.append(0.0)
        else:
            actions.append(np.asarray(episode.get_actions(-1)))
            rewards.append(float(episode.get_rewards(-1)))
    return {"prev_actions": np.stack(actions), "prev_rewards": np.asarray(rewards, dtype=np.float32)}
