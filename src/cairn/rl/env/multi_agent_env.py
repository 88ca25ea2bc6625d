"""Multi-agent environments: RLlib's ``MultiAgentEnv`` interface, ``multi:<env id>``, policy mapping.

A :class:`MultiAgentEnv` speaks in dicts keyed by agent id: ``reset`` returns
the observations of the agents that act first, ``step`` takes one action per
agent that was given an observation and returns observations, rewards,
``terminateds`` and ``truncateds`` (each with the key ``"__all__"``) and
infos. Agents act together (every agent gets an observation every step), in
turns (only the agent to move gets one) or appear and disappear. The
:class:`~cairn.rl.env.multi_agent_env_runner.MultiAgentEnvRunner` steps such
environments; a config names one by ``"module:Class"`` (a subclass in a
module the program has imported: SPEC 8, nothing is imported for a name read
from a checkpoint) or by a name given to :func:`register_env`. Which module
each agent's experience goes to is decided per episode by the config's
``policy_mapping_fn(agent_id, episode)``.

``env="multi:CartPole-v1"`` with ``num_agents=n`` is a multi-agent
environment made of ``n`` independent copies of ``CartPole-v1``, one per
agent (``"agent_0"`` .. ``"agent_{n-1}"``). Each agent acts in its own copy
every step and its episodes end and restart on their own, so an env runner
runs such an environment as ``n`` sub-environments of its vector env, and
each agent's experience goes to the module its policy mapping names.
A plain gymnasium id is a single-agent environment whose one agent is
``"default_agent"``.

Agent ids are ``str`` or ``int`` (RLlib's ``make_multi_agent`` numbers its agents
``0 .. n-1``); the runner keeps them as they are, through the policy mapping, the
callbacks and checkpoints (``1`` and ``"1"`` are two agents). Other hashables
(tuples, ...) are refused: a checkpoint could not give them back exactly.

:func:`register_env` names single-agent environments too (RLlib's
``tune.register_env``): a creator that returns a plain ``gymnasium.Env`` is
sampled by the single-agent :class:`~cairn.rl.env.env_runner.EnvRunner`, as is
``"module:Class"`` of a ``gymnasium.Env`` subclass (built as ``Class(env_config)``,
as RLlib builds ``config.environment(EnvClass)``).

:class:`~cairn.rl.env.independent_agents_env.IndependentAgentsEnv` is the same environment with a dict API
(agent id -> value), for stepping it by hand; the env runner steps exactly
these per-agent copies inside its vector env (copy ``e``, agent ``i`` is
sub-environment ``e * n + i``, seeded ``seed + e * n + i``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym

from cairn.registry import (
    CALLBACK_FUNCTION,
    ENV_CLASS,
    MAPPING_FUNCTION,
    AllowedNames,
    Role,
    Unrecorded,
    allowed,
    resolve_function,
)
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.callback_forms import callback_names
from cairn.rl.config.env_creators import EnvCreator, live_env_creator, register_env, registered_env
from cairn.rl.config.setting_checks import MULTI_AGENT_PREFIX, check_env_config, check_env_id
from cairn.rl.env.connector_building import connector_names
from cairn.rl.env.env_state import env_state_mismatch, get_env_state, register_env_state_handler, set_env_state
from cairn.rl.utils._util import check_component_name
from cairn.state_checks import Count

__all__ = [
    "ALL_AGENTS",
    "DEFAULT_AGENT_ID",
    "MULTI_AGENT_PREFIX",
    "AgentID",
    "EpisodeInfo",
    "MultiAgentEnv",
    "MultiAgentSingleEnvCopies",
    "agent_ids",
    "check_env_config",
    "check_env_id",
    "driver_names",
    "is_multi_agent_env",
    "live_env_creator",
    "make_multi_agent",
    "make_multi_agent_env",
    "multi_agent_env_creator",
    "parse_env",
    "register_env",
    "register_policy_mapping_fn",
    "resolve_policy_mapping",
    "resolve_policy_mapping_fn",
    "single_agent_env_creator",
]

ALL_AGENTS = "__all__"
"""The key of ``terminateds``/``truncateds`` that ends the whole episode (RLlib's name)."""

AgentID = str | int
"""An agent id: a ``str`` or an ``int`` (not a ``bool``), kept exactly through checkpoints."""

MultiAgentDict = dict[Any, Any]
"""Agent id -> value."""

Spaces = tuple[gym.Space[Any], gym.Space[Any]]
"""``(observation space, action space)``."""


class MultiAgentEnv(gym.Env[MultiAgentDict, MultiAgentDict]):
    """RLlib's multi-agent environment interface (a ``gymnasium.Env`` speaking in agent dicts).

    Subclasses set :attr:`possible_agents`, :attr:`observation_spaces` and
    :attr:`action_spaces` in ``__init__`` (which takes the config's
    ``env_config`` dict), keep :attr:`agents` (the agents alive now) and
    implement :meth:`reset` and :meth:`step`. ``reset`` should call
    ``super().reset(seed=seed)`` so that ``self.np_random`` is seeded.

    Its state (for exact resume) is saved when a handler is registered for the
    class with :func:`cairn.rl.register_env_state_handler` (``np_random`` is
    saved by cairn itself); otherwise checkpoints say that episodes restart.
    """

    possible_agents: list[Any]
    """Every agent id that may ever appear (``str`` or ``int`` ids, see :data:`AgentID`)."""

    agents: list[Any]
    """The agents alive now."""

    observation_spaces: dict[Any, gym.Space[Any]]
    """Agent id -> observation space."""

    action_spaces: dict[Any, gym.Space[Any]]
    """Agent id -> action space."""

    # RLlib's MultiAgentEnv declares both (None unless an env sets one): code written for it, such as a
    # connector factory's ``env.observation_space``, reads them. cairn reads the per-agent dicts above.
    observation_space: gym.Space[Any] | None = None  # type: ignore[assignment]
    action_space: gym.Space[Any] | None = None  # type: ignore[assignment]

    def get_observation_space(self, agent_id: Any) -> gym.Space[Any]:
        """The observation space of ``agent_id``."""
        return self.observation_spaces[agent_id]

    def get_action_space(self, agent_id: Any) -> gym.Space[Any]:
        """The action space of ``agent_id``."""
        return self.action_spaces[agent_id]

    def __init__(self) -> None:
        """As RLlib's base: an env that has not set its agent lists yet starts with empty ones."""
        super().__init__()
        self.agents = list(getattr(self, "agents", []))
        self.possible_agents = list(getattr(self, "possible_agents", []))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        """Start an episode (a subclass's own); its ``super().reset(seed=seed)`` seeds ``np_random``, as RLlib's."""
        super().reset(seed=seed)
        if type(self).reset is MultiAgentEnv.reset:
            raise NotImplementedError(f"{type(self).__qualname__} must implement reset(seed=, options=).")
        return {}, {}

    def step(  # type: ignore[override]  # dicts of rewards and flags, not one float and bool
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        """Apply one action per agent that was given an observation.

        Returns:
            ``(observations, rewards, terminateds, truncateds, infos)``, dicts by
            agent id; ``terminateds`` and ``truncateds`` also hold ``"__all__"``.
            The observations are those of the agents that act next (and, for an
            agent whose episode ends here, its last observation).
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement step(action_dict).")


@dataclass(frozen=True)
class EpisodeInfo:
    """What a ``policy_mapping_fn(agent_id, episode)`` learns about the episode.

    Everything is determined by the config's seed and the runner's history, so
    a mapping that draws with ``numpy.random.default_rng(episode.seed)`` (not
    with a global RNG) maps the same way after a restore.

    Attributes:
        id_: Unique id, ``"<worker index>-<env index>-<episode number>"``.
        seed: An integer drawn for this episode from the config's seed.
        env_index: Which env copy of the runner plays it.
        worker_index: The env runner's index.
        module_ids: The modules that exist now, in order.
    """

    id_: str
    seed: int
    env_index: int
    worker_index: int
    module_ids: tuple[str, ...]


_MAPPING_FNS: dict[str, Callable[[Any, EpisodeInfo], str]] = {}


def register_policy_mapping_fn(name: str, fn: Callable[[Any, EpisodeInfo], str]) -> None:
    """Name a policy mapping function, so that ``config.policy_mapping_fn=name`` finds it.

    Like :func:`register_env`, the registration lives in this process.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"register_policy_mapping_fn needs a non-empty name without ':' (got {name!r}).")
    if not callable(fn):
        raise ValueError(f"register_policy_mapping_fn({name!r}, ...) needs a callable (agent_id, episode) -> id.")
    _MAPPING_FNS[name] = fn


def _env_class(env: str) -> type | None:
    """The class ``"module:Class"`` names if it is on the allow-list (registered: building a config with
    ``environment(MyEnv)`` registers it; ``cairn.register(MyEnv)``), else ``None`` (a gymnasium id)."""
    klass = allowed(env, ENV_CLASS)
    return klass if isinstance(klass, type) else None


def multi_agent_env_creator(env: str, creator: EnvCreator | None = None) -> EnvCreator | None:
    """The creator of ``env`` if it may name a multi-agent environment, else ``None`` (a gymnasium id).

    ``creator``, the config's own (``config.env_creator``, :func:`live_env_creator`),
    wins when given. ``env`` names one when it is a name given to :func:`register_env` (whose
    creator may also build a single-agent env: :func:`is_multi_agent_env` tells),
    or ``"module:Class"`` where the module is imported and ``Class`` (looked up
    without running attribute hooks) is a :class:`MultiAgentEnv` subclass.
    Nothing is imported: a module not yet imported makes ``env`` a gymnasium
    id, which :func:`check_env_id` then refuses.
    """
    creator = creator or registered_env(env)
    if creator is not None:
        return creator
    klass = _env_class(env)
    if klass is not None and issubclass(klass, MultiAgentEnv):
        found: EnvCreator = klass
        return found
    return None


def single_agent_env_creator(env: str, creator: EnvCreator | None = None) -> EnvCreator | None:
    """The creator of a single-agent ``env`` that gymnasium does not make, else ``None``.

    ``creator`` (the config's own) when given; else a name given to :func:`register_env`, or ``"module:Class"`` of a
    ``gymnasium.Env`` subclass (not a :class:`MultiAgentEnv`) in an imported
    module, built as ``Class(env_config)`` (RLlib's ``environment(EnvClass)``).
    ``None`` for a gymnasium id (``"CartPole-v1"``, ``"module:Env-v0"``).

    Wrappers and gymnasium's own classes are never built this way: they take
    no ``env_config`` dict (gymnasium's envs are made by id), and a name read
    from a checkpoint must not reach a constructor that was not written for one.
    """
    creator = creator or registered_env(env)
    if creator is not None:
        return creator
    klass = _env_class(env)
    if (
        klass is not None
        and issubclass(klass, gym.Env)
        and not issubclass(klass, MultiAgentEnv | gym.Wrapper)
        and klass.__module__.partition(".")[0] != "gymnasium"
    ):
        found: EnvCreator = klass
        return found
    return None


def is_multi_agent_env(env: str, env_config: Mapping[str, Any], creator: EnvCreator | None = None) -> bool:
    """Whether ``env`` is sampled by the multi-agent runner.

    A ``"module:Class"`` says so by its class. A creator (the config's own, or
    one given to :func:`register_env`) does not (a function may return either
    kind): it is called once with ``env_config`` and the env it built is closed
    (RLlib too builds an env to learn its spaces).
    """
    creator = creator or registered_env(env)
    if creator is not None:
        built = make_multi_agent_env_or_env(env, env_config, creator)
        try:
            return isinstance(built, MultiAgentEnv)
        finally:
            built.close()
    return multi_agent_env_creator(env) is not None


def make_multi_agent_env_or_env(env: str, env_config: Mapping[str, Any], creator: EnvCreator) -> gym.Env[Any, Any]:
    """The env ``creator`` (``env``'s) builds, checked to be a ``gymnasium.Env`` (either kind).

    Raises:
        ValueError: The creator returned something else.
    """
    check_env_config(env_config)
    built = creator(dict(env_config))
    if not isinstance(built, gym.Env):
        raise ValueError(
            f"env={env!r}: its creator returned a {type(built).__qualname__}, neither a "
            "gymnasium.Env nor a MultiAgentEnv; return the environment itself from the creator."
        )
    return built


def driver_names(config: AlgorithmConfig) -> AllowedNames:
    """On the driver: resolve what ``config`` names by path, and return what a remote worker may resolve.

    The env (``"module:Class"`` on the allow-list, or a gymnasium id ``"module:Env-v0"``
    of an imported module), the policy mapping function, the connector factories and
    the callbacks go through the one resolver (:func:`cairn.registry.resolve`), exactly
    as when this process builds them; a Ray env runner registers exactly these before it
    builds its runner (:meth:`~cairn.registry.AllowedNames.import_here`), and nothing
    else: a config recorded in a checkpoint cannot make a worker import or call anything.

    Raises:
        ValueError: The env id names a module this process has not imported.
        cairn.CheckpointError: A name the allow-list refuses.
    """
    refs: list[tuple[str, str, Role]] = []
    modules: list[str] = []
    env = config.env
    check_env_id(env)
    env_id = env.removeprefix(MULTI_AGENT_PREFIX)
    module_name, sep, _ = env_id.partition(":")
    if config.env_creator is not None:
        live_env_creator(config)  # a creator: the workers get it with the config (Ray's cloudpickle)
    elif sep and registered_env(env_id) is None:
        if _env_class(env_id) is not None:
            refs.append((env_id, f"env={env!r}", ENV_CLASS))
        else:
            modules.append(module_name)
    ref = config.policy_mapping_fn
    if isinstance(ref, Unrecorded):
        ref.live("policy_mapping_fn")  # a lambda: the workers get it with the config (Ray's cloudpickle)
    elif ref is not None:
        if not isinstance(ref, str):
            raise ValueError(f"policy_mapping_fn must be recorded as a str, got a {type(ref).__qualname__}.")
        resolve_policy_mapping_fn(ref)
        if ref not in _MAPPING_FNS:
            refs.append((ref, "policy_mapping_fn", MAPPING_FUNCTION))
    refs.extend(connector_names(config))  # the connector factories (env_to_module_connector, ...)
    refs.extend(
        r for r in callback_names(config) if r[2] is CALLBACK_FUNCTION
    )  # config.callbacks(on_episode_end=fn) runs in the worker too; classes travel as objects
    return AllowedNames.resolve(refs, modules=modules)


def make_multi_agent_env(env: str, env_config: Mapping[str, Any], creator: EnvCreator | None = None) -> MultiAgentEnv:
    """Build the multi-agent environment ``env`` names (see :func:`multi_agent_env_creator`).

    Raises:
        ValueError: ``env`` names no multi-agent environment, or its creator
            returned something else.
    """
    check_env_id(env)
    check_env_config(env_config)
    creator = multi_agent_env_creator(env, creator)
    if creator is None:
        raise ValueError(
            f"env={env!r} names no multi-agent environment: give 'module:Class' of a MultiAgentEnv subclass in a "
            "module you have imported, or a name registered with cairn.rl.env.multi_agent_env.register_env."
        )
    built = creator(dict(env_config))
    if not isinstance(built, MultiAgentEnv):
        raise ValueError(
            f"env={env!r} built a {type(built).__qualname__}, not a MultiAgentEnv; wrap PettingZoo environments "
            "in cairn.rl.env.pettingzoo_env.ParallelPettingZooEnv."
        )
    return built


def resolve_policy_mapping_fn(ref: str | Callable[..., Any]) -> Callable[[Any, EpisodeInfo], str]:
    """The function a config's ``policy_mapping_fn`` names; never imports anything.

    A name registered with :func:`register_policy_mapping_fn`, else a
    ``"module:function"`` path resolved by :func:`cairn.registry.resolve_function`.

    Raises:
        ValueError: Nothing is registered under the name and it is no path.
        cairn.CheckpointError: A path :func:`~cairn.registry.resolve_function`
            refuses (its module is not imported, it is no plain function, ...).
    """
    if isinstance(ref, Unrecorded):
        return ref.live("policy_mapping_fn")  # the program's own callable (a lambda, a closure)
    if not isinstance(ref, str):  # a config keeps a path or an Unrecorded (AlgorithmConfig.__post_init__)
        raise ValueError(f"policy_mapping_fn must be kept as a str or an Unrecorded, got a {type(ref).__qualname__}.")
    if ref in _MAPPING_FNS:
        return _MAPPING_FNS[ref]
    if ":" not in ref:
        raise ValueError(
            f"policy_mapping_fn={ref!r} is not registered (register_policy_mapping_fn) and not a 'module:function' "
            "path."
        )
    return resolve_function(ref, where="policy_mapping_fn", role=MAPPING_FUNCTION)


DEFAULT_AGENT_ID = "default_agent"
"""The agent id of a single-agent environment (RLlib's name)."""


def parse_env(env: str) -> tuple[str, bool]:
    """Split ``"multi:CartPole-v1"`` into ``("CartPole-v1", True)``."""
    if env.startswith(MULTI_AGENT_PREFIX):
        inner = env[len(MULTI_AGENT_PREFIX) :]
        if not inner:
            raise ValueError(f"env={env!r} names no gymnasium environment after 'multi:'.")
        return inner, True
    return env, False


def agent_ids(env: str, num_agents: int) -> list[str]:
    """The agent ids of ``env``: ``["default_agent"]`` or ``["agent_0", ...]``."""
    _, multi = parse_env(env)
    if not multi:
        return [DEFAULT_AGENT_ID]
    if num_agents < 1:
        raise ValueError(f"num_agents must be at least 1 for a multi-agent env, got {num_agents}.")
    return [f"agent_{i}" for i in range(num_agents)]


def resolve_policy_mapping(
    agents: Sequence[str], policies: Sequence[str], policy_mapping: Mapping[str, str] | None
) -> dict[str, str]:
    """Agent id -> module id, checked.

    With one policy and no mapping, every agent maps to it.

    Raises:
        ValueError: No policies, an invalid policy id, an agent without a policy,
            or a mapping to an unknown policy.
    """
    if not policies:
        raise ValueError("policies must name at least one module id.")
    for policy in policies:
        check_component_name(policy, what="Policy id")
    if policy_mapping is None:
        if len(policies) != 1:
            raise ValueError(
                f"policies={list(policies)} has several module ids, so policy_mapping must say "
                f"which one each agent of {list(agents)} uses."
            )
        return {agent: policies[0] for agent in agents}
    mapping: dict[str, str] = {}
    for agent in agents:
        if agent not in policy_mapping:
            raise ValueError(f"policy_mapping has no entry for agent {agent!r}; the agents are {list(agents)}.")
        module_id = policy_mapping[agent]
        if module_id not in policies:
            raise ValueError(
                f"policy_mapping maps {agent!r} to {module_id!r}, which is not in policies={list(policies)}."
            )
        mapping[agent] = module_id
    return mapping


def make_env(env: str, env_config: Mapping[str, Any], creator: EnvCreator | None = None) -> gym.Env[Any, Any]:
    """Build one (single-agent) environment of ``env`` (``multi:`` stripped).

    ``creator`` (the config's own, :func:`live_env_creator`) builds it when given;
    a name given to :func:`register_env` is built by its creator, ``"module:Class"``
    of a ``gymnasium.Env`` subclass as ``Class(env_config)``
    (:func:`single_agent_env_creator`), anything else by ``gymnasium.make``.
    Checked here again, on every process: gymnasium imports the module of a
    ``"mymod:Env-v0"`` id, so the id may name only an imported module. A remote
    env runner (a Ray worker) has imported ``mymod`` first when its driver had
    (:func:`driver_names`), and nothing a config names otherwise.

    Raises:
        ValueError: The id names a module this process has not imported,
            ``env_config`` asks for a window, or a creator built a multi-agent env
            or no env.
    """
    check_env_id(env)
    check_env_config(env_config)
    env_id, _ = parse_env(env)
    creator = single_agent_env_creator(env_id, creator)
    if creator is None:
        return gym.make(env_id, **dict(env_config))
    built = creator(dict(env_config))
    if isinstance(built, MultiAgentEnv) or not isinstance(built, gym.Env):
        raise ValueError(
            f"env={env!r} built a {type(built).__qualname__} where a single-agent gymnasium.Env is needed "
            "(a MultiAgentEnv is named without the 'multi:' prefix and sampled by the multi-agent runner)."
        )
    return built


# ---------------------------------------------------------------------- make_multi_agent


class MultiAgentSingleEnvCopies(MultiAgentEnv):
    """``num_agents`` copies of the gymnasium env :attr:`ENV_ID`, one per agent (RLlib's ``make_multi_agent``).

    Args:
        config: ``num_agents`` (default 1); the other keys go to ``gymnasium.make``.
    """

    ENV_ID: ClassVar[str] = ""
    """The gymnasium id each agent's copy is made from (set by each subclass)."""

    ENV_CREATOR: ClassVar[Callable[[dict[str, Any]], gym.Env[Any, Any]] | None] = None
    """Instead of :attr:`ENV_ID`, the creator each copy is made by, ``creator(config)`` without
    ``num_agents`` (RLlib's ``make_multi_agent(creator)``; set by :func:`make_multi_agent` only)."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        settings = dict(config or {})
        num_agents = int(settings.pop("num_agents", 1))
        if num_agents < 1:
            raise ValueError(f"{type(self).__name__} needs num_agents >= 1, got {num_agents}.")
        self.possible_agents: list[int] = list(range(num_agents))  # RLlib's ids: ints
        self.agents = list(self.possible_agents)
        creator = type(self).ENV_CREATOR
        self.envs = {
            agent: creator(dict(settings)) if creator is not None else gym.make(self.ENV_ID, **settings)
            for agent in self.possible_agents
        }
        self.observation_spaces = {agent: env.observation_space for agent, env in self.envs.items()}
        self.action_spaces = {agent: env.action_space for agent, env in self.envs.items()}
        self._done: set[int] = set()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Reset every copy (each with its own seed drawn from the episode's), all agents act."""
        gym.Env.reset(self, seed=seed)
        self.agents = list(self.possible_agents)
        self._done = set()
        observations: dict[Any, Any] = {}
        infos: dict[Any, Any] = {}
        for agent, env in self.envs.items():
            observations[agent], infos[agent] = env.reset(seed=int(self.np_random.integers(2**31)), options=options)
        return observations, infos

    def step(  # type: ignore[override]  # dicts of rewards and flags, as MultiAgentEnv.step
        self, action_dict: dict[Any, Any]
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """Step the copies of the agents that act; an agent whose copy's episode ended stops acting."""
        observations: dict[Any, Any] = {}
        rewards: dict[Any, Any] = {}
        terminateds: dict[Any, Any] = {}
        truncateds: dict[Any, Any] = {}
        infos: dict[Any, Any] = {}
        for agent, action in action_dict.items():
            obs, reward, terminated, truncated, info = self.envs[agent].step(action)
            observations[agent], rewards[agent], infos[agent] = obs, float(reward), info
            terminateds[agent], truncateds[agent] = bool(terminated), bool(truncated)
            if terminated or truncated:
                self._done.add(agent)
                self.agents.remove(agent)
        # RLlib: the episode ends when every copy's has; "__all__" says how the last one ended.
        all_done = len(self._done) == len(self.possible_agents)
        terminateds[ALL_AGENTS] = all_done and not any(truncateds.values())
        truncateds[ALL_AGENTS] = all_done and any(truncateds.values())
        return observations, rewards, terminateds, truncateds, infos

    def close(self) -> None:
        """Close every copy."""
        for env in self.envs.values():
            env.close()


def _copies_state(env: MultiAgentSingleEnvCopies) -> dict[str, Any]:
    """Each agent's copy (in ``possible_agents`` order), which agents are done, which act."""
    return {
        "copies": [get_env_state(env.envs[agent]) for agent in env.possible_agents],
        "done": [env.possible_agents.index(agent) for agent in sorted(env._done)],
        "agents": [env.possible_agents.index(agent) for agent in env.agents],
    }


def _set_copies_state(env: MultiAgentSingleEnvCopies, state: Any) -> None:
    """Apply :func:`_copies_state`; refuses a state of another number or kind of copies before changing any."""
    n = len(env.possible_agents)
    copies = state.get("copies") if isinstance(state, dict) else None
    done, agents = (state.get("done"), state.get("agents")) if isinstance(state, dict) else (None, None)
    indices = [*(done or []), *(agents or [])] if isinstance(done, list) and isinstance(agents, list) else None
    if (
        not isinstance(copies, list)
        or len(copies) != n
        or indices is None
        or any(not Count(0, n - 1).fits(i) for i in indices)
        or any(env_state_mismatch(env.envs[a], c) is not None for a, c in zip(env.possible_agents, copies, strict=True))
    ):
        raise ValueError(
            f"the saved state of {type(env).__qualname__} is not one of {n} copies of {env.ENV_ID or 'its creator'} "
            "(written by "
            "other code, another num_agents, or tampered with)."
        )
    for agent, copy_state in zip(env.possible_agents, copies, strict=True):
        set_env_state(env.envs[agent], copy_state)
    assert isinstance(done, list) and isinstance(agents, list)  # checked above (indices is not None)
    env._done = {env.possible_agents[i] for i in done}
    env.agents = [env.possible_agents[i] for i in agents]


# Every copies class (its copies are gymnasium envs whose state cairn saves) resumes its episodes in flight.
register_env_state_handler(MultiAgentSingleEnvCopies, _copies_state, _set_copies_state)


def make_multi_agent(
    env_name_or_creator: str | Callable[[dict[str, Any]], gym.Env[Any, Any]],
) -> type[MultiAgentSingleEnvCopies]:
    """A :class:`MultiAgentEnv` class of ``config["num_agents"]`` copies of a gymnasium env (RLlib's).

    ``make_multi_agent("CartPole-v1")({"num_agents": 2})`` is a two-agent env whose agents
    ``0`` and ``1`` each play their own CartPole. For ``"CartPole-v1"`` and ``"Pendulum-v1"``
    it returns :class:`~cairn.rl.examples.envs.classes.multi_agent.MultiAgentCartPole` /
    ``MultiAgentPendulum`` once that module is imported (configs and checkpoints record them by
    reference); otherwise a new class (one per id), which works in this process but that a config
    cannot record (cairn records
    classes by reference, never by pickle): define
    ``class MyEnv(MultiAgentSingleEnvCopies): ENV_ID = "..."`` in a module instead.

    A creator function (RLlib's ``make_multi_agent(lambda config: ...)``) gives a new class
    whose copies are ``creator(config)`` (``num_agents`` left out, as RLlib's). No path names
    it, so a config given it keeps it as it keeps a lambda creator (issue 39): it trains in this
    process and on Ray runners, a checkpoint records only that it existed, and a new process's
    load asks for it as ``env=`` (docs/rl.md "Lambdas and closures").

    Args:
        env_name_or_creator: A registered gymnasium id, or a creator ``config -> gymnasium.Env``.

    Raises:
        TypeError: Neither a gymnasium id nor a callable.
    """
    if not isinstance(env_name_or_creator, str):
        if not callable(env_name_or_creator):
            raise TypeError(
                "make_multi_agent takes a gymnasium id or a creator function config -> gymnasium.Env; got "
                f"{type(env_name_or_creator).__name__}."
            )
        label = "".join(c for c in getattr(env_name_or_creator, "__qualname__", "") if c.isalnum()) or "Creator"
        return type(
            f"MultiAgent{label}",
            (MultiAgentSingleEnvCopies,),
            {
                "ENV_CREATOR": staticmethod(env_name_or_creator),
                # "<locals>": no path names this class, so environment() keeps it as a creator.
                "__qualname__": f"make_multi_agent.<locals>.MultiAgent{label}",
                "__module__": getattr(env_name_or_creator, "__module__", None) or __name__,
            },
        )
    gym.spec(env_name_or_creator)  # an unknown id fails here, not at the first reset
    for known in MultiAgentSingleEnvCopies.__subclasses__():
        if env_name_or_creator == known.ENV_ID and known.__module__ != __name__:
            return known
    made = _MADE_COPIES.get(env_name_or_creator)
    if made is None:
        name = "MultiAgent" + "".join(c for c in env_name_or_creator if c.isalnum())
        made = type(name, (MultiAgentSingleEnvCopies,), {"ENV_ID": env_name_or_creator, "__module__": __name__})
        _MADE_COPIES[env_name_or_creator] = made
    return made


_MADE_COPIES: dict[str, type[MultiAgentSingleEnvCopies]] = {}
"""The classes :func:`make_multi_agent` made, by gymnasium id (one class per id, as a module's would be)."""
