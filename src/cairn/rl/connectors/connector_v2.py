"""ConnectorV2: RLlib's connector piece, the one contract of cairn's connector pipelines.

RLlib's import path ``ray.rllib.connectors.connector_v2.ConnectorV2`` is
``cairn.rl.connectors.connector_v2.ConnectorV2``. Every piece of a pipeline is one
(cairn's own ``MeanStdFilter`` and ``ClipActions`` too), and every caller calls a
piece, and a :class:`~cairn.rl.connectors.connectors.ConnectorPipeline`, as RLlib
does: ``piece(rl_module=, batch=, episodes=, explore=, shared_data=, **kwargs)``,
which returns the (changed) batch. A subclass overrides :meth:`ConnectorV2.__call__`
(and, when it changes the observations' shape,
:meth:`ConnectorV2.recompute_output_observation_space`), as in RLlib.

What differs from RLlib, because cairn's env runners step all their
sub-environments at once and hand the module one array per step:

* ``batch`` is a dict with one column: ``{"obs": rows}`` in an env-to-module
  pipeline, ``{"actions": rows}`` in a module-to-env pipeline. ``rows`` is a
  numpy array whose leading dimension is the batch (one row per acting env
  slot), or, for Dict/Tuple observation spaces, a dict/tuple of such arrays
  (gymnasium's batched layout). The caller builds the dict once per call of the
  pipeline; every piece gets it, changes it and returns it.
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

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym

from cairn import Checkpointable
from cairn.rl.utils._util import Names

__all__ = ["ConnectorV2"]


class ConnectorV2(Checkpointable):
    """A connector piece with RLlib's interface (see the module docstring for cairn's contract).

    Subclasses take their own settings as keyword arguments and pass the spaces on to
    ``super().__init__()`` (a pipeline records ``(class, kwargs)`` of each piece as its
    own constructor arguments). Stateless pieces keep the empty defaults of
    :meth:`get_state` and :meth:`set_state`.

    Args:
        input_observation_space: The observation space of the piece's input; set by
            the pipeline builder (leave it out).
        input_action_space: The action space; set by the pipeline builder.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    RUNNER_LOCAL_STATE: ClassVar[bool] = True
    """Whether this piece's state belongs to its own env runner's episodes in flight (a frame
    stack), not to all runners (filter statistics). Such state is never replaced by the
    group's synced state, and each runner's is also kept with its environments in the
    checkpoint (the runner's ``env`` state), so that every remote runner resumes its own."""

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

    @property
    def name(self) -> str:
        """The component name of this piece in its pipeline (its class name)."""
        return type(self).__name__

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

    def __call__(
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

    # ------------------------------------------------------------------ state

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Stateless by default."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Stateless by default."""

    # -------------------------------------------------- merging across env runners
    #
    # Several env runners each update their own copy of a piece's statistics. To merge
    # them without counting the shared part twice, a piece keeps the statistics of the
    # data it saw since it last reported (its *delta*); the group adds every runner's
    # delta to the merged state (the *base*) and sends the result back. Pieces without
    # such statistics have nothing to merge (``pop_delta`` returns None).

    def pop_delta(self) -> dict[str, Any] | None:
        """Statistics of the data seen since the last call (and forget them); None: nothing to merge."""
        return None

    def merge_delta(self, delta: Mapping[str, Any]) -> None:
        """Add another runner's delta (from :meth:`pop_delta`) to this piece's statistics."""

    def set_synced_state(self, state: dict[str, Any]) -> None:
        """Take the group's merged ``state``, keeping the data seen since the last :meth:`pop_delta`."""
        self.set_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((), {"input_observation_space": ..., "input_action_space": ...})``; subclasses add their own."""
        return (), {
            "input_observation_space": self._input_observation_space,
            "input_action_space": self._input_action_space,
        }
