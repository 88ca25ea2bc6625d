"""RLlib's ``ModuleToEnvPipeline``: a trained env runner's module-to-env connectors, called on a module's output.

The second half of RLlib's inference idiom::

    module_to_env = ModuleToEnvPipeline.from_checkpoint(f"{ckpt}/env_runner/module_to_env_connector")
    to_env = module_to_env(batch=out, episodes=[episode], rl_module=module, explore=False, shared_data=shared)
    action = to_env.pop(Columns.ACTIONS)[0]

What it does, in RLlib's order: greedy or sampled ``actions`` from
``action_dist_inputs`` when the module gave none (``GetActions``); tensors to numpy
(``TensorToNumpy``); the time step a stateful module was given dropped again
(``RemoveSingleTsTimeRankFromBatch``); the checkpoint's connectors on the actions
(cairn's ``ClipActions`` for a Box space), written to ``Columns.ACTIONS_FOR_ENV``
while ``Columns.ACTIONS`` keeps what the module chose (``NormalizeAndClipActions``);
and every column as a list with one item per episode (``ListifyDataForVectorEnv``:
``STATE_OUT`` as one ``{name: array}`` per episode), ready for
``episode.add_env_step(..., extra_model_outputs={k: v[0] for k, v in to_env.items()})``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.connectors.env_to_module.env_to_module_pipeline import ADDED_TIME_RANK, load_pipeline
from cairn.rl.core.columns import Columns

__all__ = ["ModuleToEnvPipeline", "actions_from_dist_inputs"]


class ModuleToEnvPipeline:
    """A module-to-env connector pipeline with RLlib's calling convention (see the module doc).

    Args:
        pipeline: The connectors (a :class:`~cairn.rl.connectors.connectors.ConnectorPipeline`).
    """

    def __init__(self, pipeline: ConnectorPipeline | None = None) -> None:
        self.pipeline = pipeline if pipeline is not None else ConnectorPipeline()

    @classmethod
    def from_checkpoint(
        cls, path: str | os.PathLike[str], *, module_id: str | None = None, filesystem: Any = None
    ) -> ModuleToEnvPipeline:
        """The pipeline saved at ``path`` (``<algorithm checkpoint>/env_runner/module_to_env_connector``).

        Args:
            path: The pipeline's folder.
            module_id: In a multi-agent checkpoint, the module's (may be left out for one module).
            filesystem: An fsspec filesystem ``path`` lives on.

        Raises:
            IncompatibleCheckpointError: ``path`` holds no connector pipeline (see
                :meth:`EnvToModulePipeline.from_checkpoint`).
        """
        return cls(load_pipeline(path, module_id=module_id, filesystem=filesystem))

    @property
    def connectors(self) -> list[ConnectorV2]:
        """The pieces, in order."""
        return self.pipeline.connectors

    def __call__(
        self,
        *,
        batch: Mapping[str, Any],
        episodes: Sequence[Any],
        rl_module: Any = None,
        explore: bool = False,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The module's output ``batch`` as the environments take it: column -> one item per episode.

        Args:
            batch: What ``forward_inference`` / ``forward_exploration`` returned.
            episodes: The episodes the batch's rows belong to (one row each).
            rl_module: The module (its action space, when actions must come from ``action_dist_inputs``).
            explore: Sample actions from ``action_dist_inputs`` (else the most likely / the mean).
            shared_data: The dict the env-to-module pipeline of this step filled.
            kwargs: Ignored keyword arguments of RLlib's signature (``metrics``).

        Raises:
            ValueError: The batch has neither ``actions`` nor ``action_dist_inputs``, or its rows
                are not one per episode.
        """
        del kwargs
        out = dict(batch)
        if Columns.ACTIONS not in out:
            if Columns.ACTION_DIST_INPUTS not in out:
                raise ValueError(
                    f"The module's output has {sorted(out)}: neither {Columns.ACTIONS!r} nor "
                    f"{Columns.ACTION_DIST_INPUTS!r} to take the actions from."
                )
            space = getattr(rl_module, "action_space", None)
            out[Columns.ACTIONS] = actions_from_dist_inputs(out[Columns.ACTION_DIST_INPUTS], space, explore=explore)
        timed = bool((shared_data or {}).get(ADDED_TIME_RANK))
        numpy = {key: _to_numpy(value, timed=timed and key != Columns.STATE_OUT) for key, value in out.items()}
        numpy[Columns.ACTIONS_FOR_ENV] = self.pipeline(
            rl_module=rl_module,
            batch={Columns.ACTIONS: numpy[Columns.ACTIONS]},
            episodes=None,
            explore=explore,
            shared_data=shared_data,
            update=False,
        )[Columns.ACTIONS]
        rows = len(episodes)
        return {key: _listify(value, rows, key) for key, value in numpy.items()}


def actions_from_dist_inputs(dist_inputs: Any, action_space: Any, *, explore: bool) -> torch.Tensor:
    """Actions from a module's ``action_dist_inputs`` (RLlib's ``GetActions``) for a Discrete or Box space.

    Discrete: logits; the most likely action, or one sampled. Box: the mean, or the
    mean and log standard deviations concatenated; the mean, or a normal sample.

    Raises:
        ValueError: Another space, or a Box's inputs of another width (or sampling without log-stds).
    """
    inputs = torch.as_tensor(dist_inputs)
    if isinstance(action_space, gym.spaces.Discrete):
        if explore:
            probs = torch.softmax(inputs, dim=-1)
            return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(probs.shape[:-1])
        return inputs.argmax(-1)
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        size = int(action_space.shape[0])
        if inputs.shape[-1] == 2 * size:
            mean, log_std = inputs[..., :size], inputs[..., size:]
            return mean + log_std.exp() * torch.randn_like(mean) if explore else mean
        if inputs.shape[-1] == size and not explore:
            return inputs
    raise ValueError(
        f"Cannot take actions of the space {action_space} from action_dist_inputs of shape {tuple(inputs.shape)} "
        f"(explore={explore}); return {Columns.ACTIONS!r} from the module's forward pass."
    )


def _to_numpy(value: Any, *, timed: bool) -> Any:
    """Tensors (nested in dicts) as numpy arrays; with ``timed``, without their time step of one."""
    if isinstance(value, Mapping):
        return {key: _to_numpy(item, timed=False) for key, item in value.items()}
    array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if timed and array.ndim >= 2 and array.shape[1] == 1:
        array = array[:, 0]
    return array


def _listify(value: Any, rows: int, key: str) -> list[Any]:
    """One item per episode (a dict's leaves split by row, as RLlib's ``ListifyDataForVectorEnv``)."""
    if isinstance(value, Mapping):
        parts = {name: _listify(item, rows, f"{key}/{name}") for name, item in value.items()}
        return [{name: items[i] for name, items in parts.items()} for i in range(rows)]
    if np.ndim(value) == 0 or len(value) != rows:
        raise ValueError(
            f"The module's output {key!r} has shape {np.shape(value)}, not one row per episode ({rows} episodes)."
        )
    return [value[i] for i in range(rows)]
