"""Checks of the states the env runners restore: a hostile or damaged checkpoint gets a clear error.

The env runners' restore paths (:meth:`EnvRunner.set_state
<cairn.rl.env.env_runner.EnvRunner.set_state>` and its multi-agent sibling) read their state in
two steps: everything is checked and parsed first, with the helpers here and the generic ones of
:mod:`cairn.state_checks` (counts, numbers, dicts, duplicates, ``check_state_tree``), and only then
applied; the runner is left as it was when a value is refused.

What is checked here: per-slot arrays have one entry per sub-environment and a numeric dtype;
a stateful module's memory has its initial state's names and shapes (:func:`module_memory`);
environment states go through :func:`~cairn.rl.env.env_state.env_state_problem`;
observations have their space's shape; agent ids and module ids are ones the
runner has (an ``int`` agent is not its ``str``); the episode objects of the
episode API are those of the runner's slots or agents and hold plain data only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from cairn.errors import CheckpointError, IncompatibleCheckpointError, at_component
from cairn.rl.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from cairn.rl.env.episodes import SingleAgentEpisode, check_episode_data
from cairn.state_checks import ArrayField, ById, ListOf, Schema, corrupt, count, mapping, number

__all__ = [
    "PEER_OWN_KEYS",
    "PEER_STATES_KEY",
    "episode_from_state",
    "episode_windows",
    "layout_problem",
    "module_memory",
    "runner_local_states",
    "slot_rows",
    "spec_spaces_problem",
    "tracker_state",
]

PEER_STATES_KEY = "other_env_runners"
"""Key of an ``env_runner`` state that holds the own states of remote runners 2..N (written by remote
runner 1, see :mod:`cairn.rl.distributed.env_runners`); every runner checks them all before a restore
applies anything, so that one runner's hostile entry never leaves the group half restored."""

PEER_OWN_KEYS = ("rng", "env", "metrics")
"""The keys of an ``env_runner`` state that belong to one runner: RNG, environments, its callbacks' metrics."""


_KINDS = {"bool": "b", "float": "biuf", "int": "iu"}


def slot_rows(value: Any, *, length: int, kind: str, where: str) -> npt.NDArray[Any]:
    """A per-slot array: 1-d, ``length`` entries, of a ``kind`` dtype (``"bool"``, ``"float"``, ``"int"``).

    ``"int"`` rows are counts: non-negative. Returns a copy in the runner's dtype.

    Raises:
        CorruptCheckpointError: Another shape (one entry per sub-environment), dtype, or a negative count.
    """
    if not isinstance(value, np.ndarray) or value.dtype.kind not in _KINDS[kind]:
        what = f"a {value.dtype} array" if isinstance(value, np.ndarray) else f"a {type(value).__name__}"
        raise corrupt(where, f"expected an array of {kind}s, the checkpoint holds {what}")
    if value.shape != (length,):
        raise corrupt(where, f"has shape {value.shape}, and this runner has {length} sub-environments (slots)")
    if kind == "int" and (value < 0).any():
        raise corrupt(where, "holds negative counts")
    dtype = {"bool": np.bool_, "float": np.float64, "int": np.int64}[kind]
    return np.array(value, dtype=dtype, copy=True)


def layout_problem(space: gym.Space[Any], value: Any) -> str | None:
    """Why ``value`` cannot be an observation (or action) of ``space``, or None.

    Arrays must be numeric and of the space's shape (Box, MultiDiscrete, MultiBinary;
    a scalar for Discrete); Dict and Tuple spaces are checked key by key. Bounds are
    not checked: an observation may leave its Box. Other spaces are not checked.
    """
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, Mapping) or set(map(str, value)) != set(map(str, space.spaces)):
            return f"is not a dict with the keys {sorted(map(str, space.spaces))}"
        items = {str(k): v for k, v in value.items()}
        problems = (layout_problem(sub, items[str(key)]) for key, sub in space.spaces.items())
        return next((p for p in problems if p is not None), None)
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, list | tuple) or len(value) != len(space.spaces):
            return f"is not a list of {len(space.spaces)} items"
        problems = (layout_problem(sub, item) for sub, item in zip(space.spaces, value, strict=True))
        return next((p for p in problems if p is not None), None)
    if not isinstance(space, gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return None
    if isinstance(value, Mapping | list | tuple | str | bytes) or value is None:
        return f"is a {type(value).__name__}, not an array"
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        return f"is an array of {array.dtype}, not of numbers"
    if array.shape != tuple(space.shape or ()):
        return f"has shape {array.shape}, and its space {space} has shape {tuple(space.shape or ())}"
    return None


def episode_from_state(state: Any, *, where: str) -> SingleAgentEpisode:
    """An episode object of the episode API from its checkpointed state, refusing what its save would refuse.

    Raises:
        CorruptCheckpointError: Not an episode's state, a negative length, or ``custom_data``,
            infos or temporary data that is not plain data (a save refuses those too).
    """
    try:
        episode = SingleAgentEpisode.from_state(mapping(state, where=where))
    except (OverflowError, ValueError) as err:
        raise corrupt(where, f"is not an episode's state ({err})") from err
    name = f"{where} (episode {episode.id_!r:.60})"
    count(episode.env_index, where=f"{name}/env_index")
    count(episode.length, where=f"{name}/length")
    if not isinstance(state.get("custom_data"), Mapping):
        raise corrupt(f"{name}/custom_data", "is not a dict")
    try:
        check_episode_data(episode.custom_data, where="custom_data")
        check_episode_data(episode.get_infos() if episode.keep_history else [], where="infos")
        check_episode_data(state.get("temporary"), where="temporary timestep data")
    except TypeError as err:
        raise corrupt(name, str(err)) from err
    return episode


_WINDOWS = Schema(
    {
        "recent_returns": ListOf(number),
        "recent_lengths": ListOf(count),
        "recent_module_returns": ById(ListOf(number)),
    }
)
"""The windows of recent episodes a runner's state holds (each optional: an older state restores what it has)."""


def episode_windows(
    state: Any, modules: Collection[str], *, where: str
) -> tuple[list[float] | None, list[int] | None, dict[str, list[float]]]:
    """The windows of recent episodes: ``(returns, lengths, module id -> returns)`` (None: not saved).

    Modules the runner does not have are skipped (removed since); lengths are counts.

    Raises:
        CorruptCheckpointError: A window that is not a list of numbers.
    """
    read = _WINDOWS.read(state, where=where)
    per_module = read.get("recent_module_returns", {})
    module_returns = {module_id: values for module_id, values in per_module.items() if module_id in modules}
    return read.get("recent_returns"), read.get("recent_lengths"), module_returns


def runner_local_states(runner: Any, states: Any, *, max_slot: int, where: str) -> Mapping[str, Any]:
    """The connectors' runner-local states of a runner's env state (frame stacks), each checked by its connector.

    ``runner`` has ``env_to_module`` and ``module_to_env`` (a pipeline, or a module id ->
    pipeline container); frame stacks must name slots below ``max_slot``.

    Raises:
        CheckpointError: A connector refuses its state, or a stack of a slot the runner does not have.
    """
    checked = mapping(states, where=where)
    for name, pipelines in (
        ("env_to_module_connector", runner.env_to_module),
        ("module_to_env_connector", runner.module_to_env),
    ):
        if name not in checked:
            continue
        state = mapping(checked[name], where=f"{where}/{name}")
        if hasattr(pipelines, "pipelines"):  # one pipeline per module (the multi-agent runner)
            for module_id, pipeline in pipelines.pipelines.items():
                if module_id in state:
                    sub = mapping(state[module_id], where=f"{where}/{name}/{module_id}")
                    _check_pipeline_local(pipeline, sub, max_slot=max_slot, where=f"{where}/{name}/{module_id}")
        else:
            _check_pipeline_local(pipelines, state, max_slot=max_slot, where=f"{where}/{name}")
    return checked


def _check_pipeline_local(pipeline: Any, states: Mapping[str, Any], *, max_slot: int, where: str) -> None:
    for connector in pipeline.connectors:
        state = states.get(connector.name)
        if not connector.RUNNER_LOCAL_STATE or not isinstance(state, Mapping):
            continue
        try:
            connector.check_state(dict(state), ())
        except CheckpointError as err:
            named = at_component(err, f"{where}/{connector.name}", path=f"{where}/{connector.name}")
            if named is err:
                raise
            raise named from err
        except Exception as err:  # a user's piece: its refusal, as the checkpoint's problem
            raise corrupt(f"{where}/{connector.name}", f"the piece refuses it ({type(err).__name__}: {err})") from err
        slots = state.get("slots")
        if not (isinstance(connector, FrameStackingEnvToModule) and isinstance(slots, np.ndarray) and slots.size):
            continue
        if int(slots.max()) >= max_slot:
            raise corrupt(
                f"{where}/{connector.name}/slots",
                f"holds the frames of slot {int(slots.max())}, and this runner's slots are 0..{max_slot - 1}",
            )


def module_memory(
    saved: Any, initial: Mapping[str, torch.Tensor], *, rows: tuple[int, ...], module_id: str, where: str
) -> dict[str, torch.Tensor]:
    """A stateful module's saved memory, as tensors of its ``get_initial_state()``'s dtypes.

    The names must be those of ``initial``, each a finite numeric array of shape ``rows`` (the
    env slots that hold it; none for one agent) followed by that state's own shape.

    Raises:
        IncompatibleCheckpointError: Other names or shapes (another module, state size or number of envs).
        CorruptCheckpointError: Not numeric arrays, or NaN or infinite values.
    """
    if not isinstance(saved, Mapping) or set(saved) != set(initial):
        raise IncompatibleCheckpointError(
            f"{where} is not a state with the names {sorted(initial)} of module {module_id!r}'s "
            "get_initial_state(); the checkpoint was written by another module or altered."
        )
    schema = Schema(
        {name: ArrayField("fiu", shape=(*rows, *value.shape), finite=True) for name, value in initial.items()},
        unfit=f"the checkpoint was written with another state size of module {module_id!r} (lstm_cell_size) or "
        "another number of envs. Restore it with the config it was written with.",
    )
    read = schema.read(saved, where=where)
    return {name: torch.as_tensor(read[name].copy()).to(value.dtype) for name, value in initial.items()}


def tracker_state(
    state: Any,
    slot_agents: Sequence[Any],
    slot_modules: Sequence[str],
    spaces: tuple[gym.Space[Any], gym.Space[Any]],
    *,
    where: str,
) -> tuple[list[int], list[SingleAgentEpisode]]:
    """``(episode numbers, episodes)`` of a single-agent runner's episode API state, one per slot.

    Each episode must be that of its slot: its ``env_index``, its agent (``1`` is not
    ``"1"``) and its module; the observations and actions of its history must have the
    env's ``spaces`` (callbacks index them: ``episode.get_observations(-1)[2]``).

    Raises:
        CorruptCheckpointError: Another number of slots, or an episode of another slot, agent or module.
    """
    state = mapping(state, where=where)
    numbers = ListOf(count)(state.get("numbers"), where=f"{where}/numbers")
    records = state.get("episodes")
    if not isinstance(records, list | tuple) or len(numbers) != len(slot_agents) or len(records) != len(slot_agents):
        found = len(records) if isinstance(records, list | tuple) else type(records).__name__
        raise corrupt(where, f"holds {found} episodes and {len(numbers)} numbers for {len(slot_agents)} slots")
    episodes = [episode_from_state(r, where=f"{where}/episodes/{i}") for i, r in enumerate(records)]
    for slot, episode in enumerate(episodes):
        agent = slot_agents[slot]
        if episode.env_index != slot or type(episode.agent_id) is not type(agent) or episode.agent_id != agent:
            raise corrupt(
                f"{where}/episodes/{slot}",
                f"is the episode of env {episode.env_index}, agent {episode.agent_id!r:.40}; slot {slot} runs "
                f"agent {agent!r}",
            )
        if episode.module_id != slot_modules[slot]:
            raise corrupt(
                f"{where}/episodes/{slot}",
                f"acts with module {episode.module_id!r:.60}; slot {slot} acts with {slot_modules[slot]!r}",
            )
        _check_history(episode, spaces, where=f"{where}/episodes/{slot}")
    return numbers, episodes


def _check_history(episode: SingleAgentEpisode, spaces: tuple[gym.Space[Any], gym.Space[Any]], *, where: str) -> None:
    if not episode.keep_history:
        return
    for name, items, space in (
        ("observations", episode.get_observations(), spaces[0]),
        ("actions", episode.get_actions(), spaces[1]),
    ):
        problem = next((p for p in (layout_problem(space, item) for item in items) if p is not None), None)
        if problem is not None:
            raise corrupt(f"{where}/{name}", f"an item of the episode's history {problem}")


def _space_fits(given: gym.Space[Any] | None, actual: gym.Space[Any]) -> bool:
    """Whether a spec's space takes what ``actual`` gives: same kind and shape (bounds may differ), same ``n``."""
    if given is None:
        return True
    if type(given) is not type(actual):
        return False
    if isinstance(given, gym.spaces.Discrete) and isinstance(actual, gym.spaces.Discrete):
        return int(given.n) == int(actual.n)
    if isinstance(given, gym.spaces.Box | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return given.shape == actual.shape
    return bool(given == actual)


def spec_spaces_problem(spec: Any, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> str | None:
    """Why a module spec's own spaces cannot take a runner's observations and actions, or None.

    A spec (from a config, possibly a checkpoint's recorded one) that gives its spaces
    wins over the env's; spaces of another kind or shape would fail the module's first
    forward pass deep in sampling.
    """
    if spec is None:
        return None
    given = (getattr(spec, "observation_space", None), getattr(spec, "action_space", None))
    if _space_fits(given[0], observation_space) and _space_fits(given[1], action_space):
        return None
    return (
        f"its RLModuleSpec gives the spaces ({given[0]}, {given[1]}), but its agents' observations reach it as "
        f"{observation_space} (after the env_to_module connectors) and they act in {action_space}. Leave the "
        "spaces out of the spec (the env's are used), or give ones of these shapes."
    )
