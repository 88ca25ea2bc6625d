"""ConnectorV2: RLlib's connector piece, on cairn's array-based env runners.

RLlib's import path ``ray.rllib.connectors.connector_v2.ConnectorV2`` is
``cairn.rl.connectors.connector_v2.ConnectorV2``. A subclass overrides
:meth:`ConnectorV2.__call__` (and, when it changes the observations' shape,
:meth:`ConnectorV2.recompute_output_observation_space`), as in RLlib.

What differs from RLlib, because cairn's env runners step all their
sub-environments at once and hand the module one array per step:

* ``batch`` is a dict with one column: ``{"obs": rows}`` in an env-to-module
  pipeline, ``{"actions": rows}`` in a module-to-env pipeline. ``rows`` is a
  numpy array whose leading dimension is the batch (one row per acting env
  slot), or, for Dict/Tuple observation spaces, a dict/tuple of such arrays
  (gymnasium's batched layout). The piece returns the (new) batch.
* ``episodes`` is ``None``: cairn has no episode objects in its sampling loop.
  What a piece needs of them it gets as keyword arguments:
  ``episode_starts`` (bool array, one per row: the row's observation is the
  first of a new episode), ``slots`` (int array, one per row: a stable id of the
  env slot the row belongs to, to key per-slot state) and ``update`` (``False``
  when the runner only looks, e.g. at a final observation to value it: the
  piece must not change its state then).
* State: a stateful piece implements ``get_state`` / ``set_state`` (numpy
  arrays, numbers, strings, lists and dicts of them); it is a component of the
  env runner's checkpoint (``env_runner/env_to_module_connector/<name>/``), on
  local and remote runners alike. By default a piece's state is its runner's
  own (``RUNNER_LOCAL_STATE = True``: per-slot histories of the episodes in
  flight): remote runners each keep theirs, and each one's is also saved with
  its environments, so each resumes its own. A piece whose statistics should be
  merged across runners (as ``MeanStdFilter``'s) sets ``RUNNER_LOCAL_STATE =
  False`` and implements ``pop_delta`` / ``merge_delta`` / ``set_synced_state``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from cairn.rl.connectors.connectors import Connector

__all__ = ["ConnectorV2"]


class ConnectorV2(Connector):
    """A connector piece with RLlib's interface (see the module docstring for cairn's contract).

    Args:
        input_observation_space: The observation space of the piece's input; set by
            the pipeline builder (leave it out).
        input_action_space: The action space; set by the pipeline builder.
    """

    RUNNER_LOCAL_STATE: ClassVar[bool] = True

    def __init__(
        self,
        input_observation_space: gym.Space[Any] | None = None,
        input_action_space: gym.Space[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(
                f"{type(self).__name__}() got unexpected keyword arguments {sorted(kwargs)}; a ConnectorV2 "
                "subclass takes its own settings as keyword arguments and passes the spaces on to "
                "super().__init__()."
            )
        self._input_observation_space = input_observation_space
        self._input_action_space = input_action_space
        self._observation_space: gym.Space[Any] | None = None
        self._action_space: gym.Space[Any] | None = None
        if input_observation_space is not None and input_action_space is not None:
            self.set_input_spaces(input_observation_space, input_action_space)

    # ------------------------------------------------------------------ spaces

    @property
    def input_observation_space(self) -> gym.Space[Any] | None:
        """The observation space this piece receives."""
        return self._input_observation_space

    @property
    def input_action_space(self) -> gym.Space[Any] | None:
        """The action space this piece receives."""
        return self._input_action_space

    @property
    def observation_space(self) -> gym.Space[Any] | None:
        """The observation space this piece outputs (:meth:`recompute_output_observation_space`)."""
        return self._observation_space

    @property
    def action_space(self) -> gym.Space[Any] | None:
        """The action space this piece outputs (:meth:`recompute_output_action_space`)."""
        return self._action_space

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space[Any], input_action_space: gym.Space[Any]
    ) -> gym.Space[Any]:
        """The observation space of this piece's output; the input's by default."""
        return input_observation_space

    def recompute_output_action_space(
        self, input_observation_space: gym.Space[Any], input_action_space: gym.Space[Any]
    ) -> gym.Space[Any]:
        """The action space of this piece's output; the input's by default."""
        return input_action_space

    def set_input_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> gym.Space[Any]:
        """Take the input spaces and compute the output spaces; return the output observation space."""
        self._input_observation_space = observation_space
        self._input_action_space = action_space
        self._observation_space = self.recompute_output_observation_space(observation_space, action_space)
        self._action_space = self.recompute_output_action_space(observation_space, action_space)
        return self._observation_space

    # ------------------------------------------------------------------ calling

    def __call__(  # type: ignore[override]
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: Any,
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Transform ``batch`` and return it (RLlib's signature; see the module docstring).

        Args:
            rl_module: The env runner's :class:`~cairn.rl.core.rl_module.multi_rl_module.MultiRLModule`.
            batch: ``{"obs": rows}`` or ``{"actions": rows}``.
            episodes: ``None`` in cairn (no episode objects); see ``episode_starts`` and ``slots``.
            explore: Whether the runner explores (cairn's env runners always do).
            shared_data: A dict the pieces of one pipeline call share.
            kwargs: ``episode_starts``, ``slots``, ``update``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement __call__.")

    def apply(self, data: Any, *, update: bool = True, **context: Any) -> Any:
        """Call the piece the RLlib way on ``{column: data}`` and return the column of its result.

        ``context`` holds ``column`` (``"obs"`` by default), ``rl_module``,
        ``episode_starts``, ``slots``, ``explore`` and ``shared_data``.

        Raises:
            TypeError: The piece returned something without the column.
        """
        column = str(context.pop("column", "obs"))
        rl_module = context.pop("rl_module", None)
        explore = context.pop("explore", True)
        shared_data = context.pop("shared_data", None)
        out = self(
            rl_module=rl_module,
            batch={column: data},
            episodes=None,
            explore=explore,
            shared_data={} if shared_data is None else shared_data,
            update=update,
            **context,
        )
        if not isinstance(out, dict) or column not in out:
            raise TypeError(
                f"{type(self).__name__}.__call__ returned {type(out).__name__}, not the batch dict with its "
                f"{column!r} column; return the batch you were given (changed)."
            )
        result = out[column]
        space = self._observation_space
        announced = None if column != "obs" or space is None else space.shape
        if announced is not None and isinstance(result, np.ndarray) and result.shape[1:] != announced:
            raise ValueError(
                f"{type(self).__name__} returned observations of shape {result.shape[1:]}, but its "
                f"recompute_output_observation_space said {announced}; make them agree."
            )
        return result

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((), {"input_observation_space": ..., "input_action_space": ...})``; subclasses add their own."""
        return (), {
            "input_observation_space": self._input_observation_space,
            "input_action_space": self._input_action_space,
        }
