"""AlgorithmConfig: the settings every algorithm shares (environment, sampling, modules, scale).

This module imports nothing else of ``cairn.rl`` but the leaves of ``rl/config``:
:mod:`~cairn.rl.config.builders` (RLlib's builder methods, a base class),
:mod:`~cairn.rl.config.module_specs` (RLlib's ``get_default_*`` methods and the
``rl_module_spec`` field's reading, a base class),
:mod:`~cairn.rl.config.recorded_names` (the names and callables a config records, a base class),
:mod:`~cairn.rl.config.callback_forms` (how callbacks are recorded),
:mod:`~cairn.rl.config.references` (how callables and connector factories are recorded),
:mod:`~cairn.rl.config.setting_checks` (the checks of env ids, ``env_config`` and resources a
config runs when it is built, also when a checkpoint rebuilds it, SPEC 8) and
:mod:`~cairn.rl.config.env_creators` (and only, when a setting asks for Ray, the leaf
``cairn.rl.distributed._ray`` to see whether Ray is installed), so that every other part
(env runners, learners, algorithms) can import it without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from cairn._unrecorded import SCOPE, missing_message
from cairn.errors import MissingCallableError
from cairn.registry import (
    Unrecorded,
    register_type,
)
from cairn.rl.config.builders import ConfigBuilders
from cairn.rl.config.callback_forms import (
    CALLBACK_HOOKS,
    callbacks_class_value,
    function_field,
)
from cairn.rl.config.env_creators import ENV_ROLE
from cairn.rl.config.module_specs import DEFAULT_MODULE_ID, GivenOrDefaultSpec, ModuleSpecs, default_spec_of
from cairn.rl.config.recorded_names import RecordedNames
from cairn.rl.config.references import CONNECTOR_FIELDS, kept_callables
from cairn.rl.config.setting_checks import (
    BATCH_MODES,
    COUNT_STEPS_BY,
    MAX_RESOURCE,
    MULTI_AGENT_PREFIX,
    PLACEMENT_STRATEGIES,
    check_custom_resources,
    check_env_config,
    check_env_id,
    check_lr_schedule,
    multi_env_mapping_fn_refusal,
)
from cairn.state_checks import Count

__all__ = ["CALLABLE_FIELDS", "DEFAULT_MODULE_ID", "AlgorithmConfig"]


CALLABLE_FIELDS = (
    "policy_mapping_fn",
    *CONNECTOR_FIELDS,
    *(function_field(hook) for hook in CALLBACK_HOOKS),
)
"""The config fields that take a callable: a load passes back by these names what a checkpoint could not
record (``PPO.from_checkpoint(path, policy_mapping_fn=fn)``, issue 39)."""

_SAME_FOR_EVALUATION = ("num_env_runners", "seed", "policies", "rl_module_spec", "model_config")
"""Settings ``evaluation_config`` may not change (the evaluation runners take the learners' weights)."""

COUNTS: dict[str, Count] = {
    "num_env_runners": Count(0),
    "num_learners": Count(0),
    "num_envs_per_env_runner": Count(1),
    "rollout_length": Count(1),
    "episode_return_window": Count(1),
    "minibatch_size": Count(1),
    "num_epochs": Count(1),
    "min_sample_timesteps_per_iteration": Count(0),
    "max_num_env_runner_restarts": Count(0),
    "evaluation_interval": Count(1),
    "evaluation_duration": Count(1),
    "evaluation_num_env_runners": Count(0),
}
"""The integer settings and their bounds (``evaluation_interval`` may also be None), checked by :meth:`validate`
with :class:`~cairn.state_checks.Count`, the one integer check of cairn (also of restored state)."""


# Recorded under RLlib's path (cairn.rl.algorithms.algorithm_config, a re-export), which every
# checkpoint names; the class itself lives on the config floor, below core/ and env/, which read it.
@register_type(name="cairn.rl.algorithms.algorithm_config:AlgorithmConfig")
@dataclass
class AlgorithmConfig(ModuleSpecs, RecordedNames, ConfigBuilders):
    """Settings every algorithm shares: the environment, sampling, modules, scale.

    Build one with keywords (``PPOConfig(env="CartPole-v1", lr=1e-4)``) or with RLlib's
    builders (``PPOConfig().environment("CartPole-v1").training(lr=1e-4)``, see
    :class:`~cairn.rl.config.builders.ConfigBuilders`): both give equal configs.
    """

    env: str = "CartPole-v1"
    """A gymnasium environment id, or ``"multi:<id>"`` for ``num_agents`` independent
    copies of it, one per agent (``"agent_0"`` .. ``"agent_{n-1}"``), or a
    multi-agent environment: ``"module:Class"`` of a
    :class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv` subclass in a module
    the program has imported, or a name given to
    :func:`~cairn.rl.env.multi_agent_env.register_env`."""

    env_config: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``gymnasium.make``."""

    env_creator: Unrecorded | None = None
    """The function that builds ``env`` when no path names it (RLlib's ``environment(creator)``, or a
    ``register_env(name, creator)`` name): set by ``environment()`` and kept in step with a registered name
    when the config is built. It runs in this program and its Ray workers; a checkpoint records only that
    it existed, and a new process passes it again (``from_checkpoint(path, env=creator)``, or a
    ``register_env`` of the name before the load). See :mod:`cairn.rl.config.env_creators`."""

    num_agents: int = 2
    """Number of agents of a ``"multi:"`` environment; ignored otherwise."""

    seed: int = 0
    """Seeds everything: environments, module initialisation, action sampling,
    minibatch shuffling. Same seed on CPU, same results, bit for bit."""

    num_env_runners: int = 0
    """Number of remote env runners (Ray actors) that sample in parallel. 0: one
    runner samples in this process. More than 0 needs Ray
    (``pip install 'cairn-rl[ray]'``)."""

    num_envs_per_env_runner: int = 1
    """Vectorized environments (for ``"multi:"`` envs: env copies) per env runner. 1 by default, as
    RLlib's (``cairn train`` gives PPO 4, its quick start's speed; configs before issue 38 defaulted to 4
    and recorded it, so their checkpoints resume as they ran)."""

    rollout_length: int = 128
    """Steps each sub-environment takes per training iteration."""

    num_learners: int = 0
    """Number of learners. 0 and 1 both mean one learner in this process; more are
    data-parallel Ray actors (``pip install 'cairn-rl[ray]'``)."""

    num_cpus_per_env_runner: float = 0.0
    """CPUs Ray reserves for each remote env runner. 0 lets any number of actors
    share the machine; set 1 on a cluster so that Ray spreads them."""

    num_cpus_per_learner: float = 0.0
    """CPUs Ray reserves for each remote learner (see ``num_cpus_per_env_runner``)."""

    # --- placement (issue 41 item 4): what Ray reserves for each actor, under RLlib's names.
    custom_resources_per_env_runner: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each remote env runner reserves (RLlib's name), e.g.
    ``{"sampler": 1}`` puts every runner on a node started with that resource
    (``ray start --resources='{"sampler": 4}'``). ``CPU``/``GPU`` go in ``num_cpus_per_env_runner``."""

    num_gpus_per_learner: float = 0.0
    """GPUs Ray reserves for each remote learner (RLlib's name): the learner is placed on a
    node with a free GPU. cairn's learners compute on CPU: this places them, it does not
    move their tensors to the GPU."""

    custom_resources_per_learner: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each remote learner reserves (see ``custom_resources_per_env_runner``)."""

    num_cpus_for_main_process: float = 1.0
    """CPUs of the algorithm's own process (the driver) in :meth:`Algorithm.default_resource_request`'s
    first bundle (RLlib's name and default); a Tune trial runs there."""

    placement_strategy: str = "PACK"
    """How the bundles of :meth:`Algorithm.default_resource_request` spread over nodes (RLlib's
    name): ``"PACK"``, ``"SPREAD"``, ``"STRICT_PACK"`` or ``"STRICT_SPREAD"``."""

    checkpoint_timeout_s: float = 600.0
    """Seconds the remote env runners and learners (Ray actors) get for each step of a
    checkpoint operation: writing or reading their folders of a save or restore, and
    the calls that gather or hand out their state around it (named in RLlib's style, as
    its ``sample_timeout_s`` and ``env_runner_restore_timeout_s``). An actor that misses
    it is stopped and replaced on the group's next use, and the save or restore fails
    with ``ActorTimeoutError`` (a ``CheckpointError`` and a ``TimeoutError``) naming the
    actor; a save that fails so commits nothing. Liveness pings get at most 30 s of it.
    Raise it for states that take long to write (a large replay buffer on a slow store)."""

    env_runner_restore_timeout_s: float = 300.0
    """Seconds a remote env runner started during a save, a restore or another call that needs
    every runner (replacing one that died or was stopped) gets to start: its process, imports
    and environments (RLlib's field of this name; RLlib waits 1800 s, cairn 300 s, so that a
    checkpoint taken while a lost node's runners cannot be placed anywhere gives up in minutes).
    One that misses it is stopped, the call fails with ``ActorTimeoutError`` naming this setting,
    and the group tries again on its next use. Remote learners must start within it too (RLlib
    has no learner setting of this kind). Training does not wait for replacements: it goes
    on with the healthy runners (``restart_failed_env_runners``)."""

    # --- fault tolerance (issue 41 item 3): RLlib's names and defaults.
    restart_failed_env_runners: bool = True
    """Replace a remote env runner whose actor died (its node was lost, its process killed) or
    that hung past ``sample_timeout_s`` twice in a row, by a fresh one with the same worker
    index (RLlib's name and default). Training goes on with the healthy runners while the
    replacement starts; the replacement samples from the first ``train()`` after it is up,
    with the group's connector states and the latest weights, and the callbacks'
    ``on_env_runners_recreated`` is called. An exception raised by the runner's own code
    (its environment, a callback) is not a failure of this kind: it is raised by ``train()``."""

    restart_failed_sub_environments: bool = False
    """RLlib's: an env step or reset that raises recreates the env copies, new episodes start
    (:mod:`cairn.rl.env.env_errors`). ``SingleAgentEnvRunner`` honours it; algorithms refuse it (their
    runners checkpoint rollouts and env states, and restart whole: ``restart_failed_env_runners``)."""

    ignore_env_runner_failures: bool = False
    """With ``restart_failed_env_runners=False`` (or its restarts used up): go on with the
    remaining runners instead of raising when one fails (RLlib's name and default)."""

    max_num_env_runner_restarts: int = 1000
    """How many replacements the group starts in all, over the run (RLlib's name and default);
    after that a failure is handled as with ``restart_failed_env_runners=False``."""

    sample_timeout_s: float | None = 60.0
    """Seconds one ``train()`` waits for the remote env runners' samples (RLlib's name and
    default). A runner that misses it is left behind for this iteration: its rollout is
    discarded when it arrives (it was sampled with older weights), its episode and step counts
    and connector statistics are kept; one that misses it twice in a row counts as failed
    (``restart_failed_env_runners``). When no runner delivers in time, ``train()`` raises
    ``EnvRunnersUnavailableError`` (a ``TimeoutError``) with nothing trained, and the next call
    goes on. ``None`` waits as long as sampling takes."""

    model_config: dict[str, Any] = field(default_factory=dict)
    """The ``model_config`` of every module whose spec gives none (for PPO's default module:
    overrides of ``cairn.rl.algorithms.ppo.default_ppo_rl_module.DEFAULT_MODEL_CONFIG``,
    i.e. hidden_sizes, activation, log_std_init)."""

    rl_module_spec: Any = GivenOrDefaultSpec()  # noqa: RUF009 - a descriptor, the class's own: no shared value
    """The modules: an ``RLModuleSpec`` used for every policy, or a ``MultiRLModuleSpec``
    whose ``rl_module_specs`` give a spec per policy id (RLlib's ``rl_module_spec``).
    ``None`` (recorded so): the algorithm's default module for every policy; reading the
    attribute then gives :meth:`get_default_rl_module_spec`, as RLlib's property does
    (:meth:`given_rl_module_spec` is what was given). Fields a spec leaves ``None`` are
    filled in when the algorithm builds its modules: the class with the default module,
    the spaces from the environment, ``model_config`` with :attr:`model_config` (RLlib
    merges the class into what the attribute reads). Typed ``Any`` because this module
    imports nothing of ``cairn.rl.core`` (see the module docstring)."""

    lr: float = 2.5e-4
    """The optimizer's learning rate at the start."""

    lr_anneal_timesteps: int | None = 500_000
    """The learning rate falls linearly to 0 over this many timesteps trained per
    module (env steps for single-agent envs); ``None`` keeps it constant."""

    lr_schedule: tuple[tuple[int, float], ...] | None = None
    """RLlib's ``training(lr=[[0, lr_0], [t_1, lr_1], ...])``: linear between the points, the last value after,
    over ``lr_anneal_timesteps``' timesteps (then None); ``lr`` is the first value (checks:
    :func:`~cairn.rl.config.setting_checks.check_lr_schedule`). ``None``: ``lr``, ``lr_anneal_timesteps``."""

    num_epochs: int = 4
    """Passes over each iteration's batch."""

    minibatch_size: int = 128
    """Samples per gradient step (CleanRL: 4 minibatches of a 4 x 128 batch)."""

    max_grad_norm: float | None = 0.5
    """Gradients are clipped to this global norm; ``None`` turns clipping off."""

    policies: tuple[str, ...] = (DEFAULT_MODULE_ID,)
    """The module ids, one RLModule (and one optimizer) each."""

    policy_mapping: dict[Any, str] | None = None
    """Agent id (a ``str`` or an ``int``, as the env gives it; checkpoints keep it so) -> module id.
    ``None`` maps every agent to the only policy (or leaves the mapping to ``policy_mapping_fn``)."""

    policy_mapping_fn: str | Callable[..., Any] | None = None
    """For a multi-agent environment (:class:`~cairn.rl.env.multi_agent_env.MultiAgentEnv`):
    ``fn(agent_id, episode) -> module_id``, called once per agent per episode
    (``episode`` is an :class:`~cairn.rl.env.multi_agent_env.EpisodeInfo`).
    Recorded by reference: give the function (defined at the top level of an
    imported module) or its ``"module:function"`` path, or a name registered
    with :func:`~cairn.rl.env.multi_agent_env.register_policy_mapping_fn`; the
    config keeps the string. Takes precedence over ``policy_mapping``.
    ``Algorithm.add_module`` / ``remove_module`` store their new mapping function here."""

    policies_to_train: tuple[str, ...] | None = None
    """The modules that learn; the others act (their agents' experience is
    sampled) but are not trained. ``None``: every module learns.
    ``Algorithm.add_module`` / ``remove_module`` store their ``new_should_module_be_updated`` here."""

    batch_mode: str = "truncate_episodes"
    """What an env runner's batch holds (RLlib's ``env_runners(batch_mode=)``): ``"truncate_episodes"``,
    ``rollout_length`` steps of each sub-environment, the episodes in flight cut; or
    ``"complete_episodes"``, whole episodes of at least that many steps (PPO; :mod:`cairn.rl.env.batch_modes`)."""

    count_steps_by: str = "env_steps"
    """What a multi-agent runner's ``rollout_length`` counts (RLlib's ``multi_agent(count_steps_by=)``):
    ``"env_steps"``, or ``"agent_steps"`` (each agent's action is one step: a copy samples until its
    runner took ``rollout_length`` x ``num_envs_per_env_runner`` agent steps, at most that many env steps).
    Single-agent envs take one agent step per env step, so both count alike there."""

    algorithm_config_overrides_per_module: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Module id -> settings of this config that differ for that module (RLlib's name), e.g.
    ``{"p1": {"lr": 1e-3}}``. The learner reads every learner setting (``lr``,
    ``lr_anneal_timesteps``, ``num_epochs``, ``minibatch_size``, ``max_grad_norm`` and the
    loss's, e.g. PPO's ``clip_param``) per module through ``Learner.config_for_module``."""

    observation_filter: str | None = None
    """Observation filter of the env runners' ``env_to_module_connector``
    (``"MeanStdFilter"`` or ``None``). ``None`` by default, as RLlib (no connector normalises
    unless the config adds one: this field, or RLlib's ``MeanStdFilter`` in
    ``env_to_module_connector``). A module trained behind a filter needs it at inference:
    the checkpoint keeps its statistics (docs/deploy.md)."""

    episode_return_window: int = 100
    """``episode_return_mean`` is the mean over this many most recent episodes."""

    min_sample_timesteps_per_iteration: int = 0
    """RLlib's setting: one ``train()`` call runs ``training_step()`` again until the env runners
    sampled at least this many env steps in it (agent steps with ``count_steps_by="agent_steps"``;
    ``num_training_step_calls_per_iteration`` says how often; a step that samples nothing ends the
    iteration). 0: one ``training_step()`` per call."""

    num_torch_threads: int | None = 1
    """Applied with ``torch.set_num_threads`` when the algorithm is built (results
    are bit-for-bit reproducible for one thread count); ``None`` leaves it alone."""

    callbacks_class: Any = None
    """A subclass of :class:`cairn.rl.callbacks.callbacks.RLlibCallback`, or a list of them
    (called in order), or ``None``. Recorded in checkpoints by reference: loading one
    needs the class's module imported first. ``functools.partial(MyCallbacks, arg=1)`` of a
    top-level class with plain-data arguments is kept as a
    :class:`~cairn.rl.config.callback_forms.CallbackClass` (the class path plus the arguments)."""

    # --- part `callbacks`: RLlib's per-hook callback functions, config.callbacks(on_episode_end=fn).
    # Each is None or a list of "module:function" references (functions are never recorded by value),
    # called after the callbacks_class hooks, in list order (RLlib's make_callback order).
    callbacks_on_algorithm_init: list[str | Unrecorded] | None = None
    """Functions called as ``on_algorithm_init`` (RLlib's name); see :mod:`cairn.rl.config.callback_forms`."""
    callbacks_on_checkpoint_loaded: list[str | Unrecorded] | None = None
    """Functions called as ``on_checkpoint_loaded``."""
    callbacks_on_episode_created: list[str | Unrecorded] | None = None
    """Functions called as ``on_episode_created`` (in every env runner, for each new episode object)."""
    callbacks_on_episode_start: list[str | Unrecorded] | None = None
    """Functions called as ``on_episode_start`` (in every env runner)."""
    callbacks_on_episode_step: list[str | Unrecorded] | None = None
    """Functions called as ``on_episode_step`` (in every env runner)."""
    callbacks_on_episode_end: list[str | Unrecorded] | None = None
    """Functions called as ``on_episode_end`` (in every env runner)."""
    callbacks_on_sample_end: list[str | Unrecorded] | None = None
    """Functions called as ``on_sample_end`` (in every env runner)."""
    callbacks_on_train_result: list[str | Unrecorded] | None = None
    """Functions called as ``on_train_result``."""
    callbacks_on_evaluate_start: list[str | Unrecorded] | None = None
    """Functions called as ``on_evaluate_start`` (before each evaluation, in the algorithm's process)."""
    callbacks_on_evaluate_end: list[str | Unrecorded] | None = None
    """Functions called as ``on_evaluate_end`` (after each evaluation, with its ``evaluation_metrics``)."""
    callbacks_on_env_runners_recreated: list[str | Unrecorded] | None = None
    """Functions called as ``on_env_runners_recreated`` (in the algorithm's process, after replaced
    remote env runners are up and hold the group's state; see ``restart_failed_env_runners``)."""
    callbacks_on_environment_created: list[str | Unrecorded] | None = None
    """Functions called as ``on_environment_created`` (in every env runner, once it built its envs)."""

    # --- connectors (issue 27, part "connectors"): RLlib's connector factories, recorded by reference.
    env_to_module_connector: dict[str, Any] | None = None
    """RLlib's ``env_runners(env_to_module_connector=fn)``: ``fn(env)`` (or ``fn(env, spaces, device)``)
    returns a connector piece or a list of them, put before the observation filter in every env
    runner's env-to-module pipeline. Give a top-level function, a connector class, or a
    ``functools.partial`` of one with keyword arguments of plain data
    (``partial(FrameStackingEnvToModule, num_frames=4)``); the config records
    ``{"ref": "module:QualName", "kwargs": {...}}`` (see :func:`connector_reference`)."""

    module_to_env_connector: dict[str, Any] | None = None
    """RLlib's ``env_runners(module_to_env_connector=fn)``: pieces put before the action clipping
    of the module-to-env pipeline; recorded as :attr:`env_to_module_connector`."""

    learner_connector: dict[str, Any] | None = None
    """RLlib's ``training(learner_connector=fn)``: ``fn(input_observation_space, input_action_space)``.
    cairn's batches already hold the module's input, so the only piece accepted is
    ``FrameStackingLearner`` paired with an env-to-module ``FrameStackingEnvToModule`` of the
    same ``num_frames`` (docs/rl.md, "Connectors"); recorded as :attr:`env_to_module_connector`."""

    # --- part `algo` (issue 28): exploration switch and evaluation runners ---
    explore: bool = True
    """Env runners act with ``forward_exploration`` (sampled actions); ``False``: with
    ``forward_inference`` (greedy). RLlib's ``env_runners(explore=...)``; evaluation runners
    take it from ``evaluation_config`` (``{"explore": False}``)."""

    evaluation_interval: int | None = None
    """Run an evaluation every this many ``train()`` iterations (its results under
    ``result["evaluation"]``); ``None``: never from ``train()``."""

    evaluation_duration: int = 10
    """How long one evaluation runs, in ``evaluation_duration_unit``."""

    evaluation_duration_unit: str = "episodes"
    """``"episodes"`` (the first ``evaluation_duration`` episodes that end count) or
    ``"timesteps"`` (sample until at least that many env steps)."""

    evaluation_num_env_runners: int = 0
    """Evaluation env runners on Ray; 0: one local evaluation runner in this process."""

    evaluation_config: dict[str, Any] = field(default_factory=dict)
    """Settings in which the evaluation runners differ from the training ones, by cairn field
    name (``evaluation(evaluation_config={"explore": False})`` translates RLlib's names)."""

    always_attach_evaluation_results: bool = False
    """RLlib's setting: every ``train()`` result carries the latest evaluation's results under
    ``result["evaluation"]``, also in iterations that do not evaluate (none before the first
    evaluation; an algorithm restored from a checkpoint attaches from its next evaluation on)."""

    # --- part `rlmodule` (issue 28 item 6): the observation filter travels with load_state_path.
    load_pretrained_connectors: bool = True
    """When a module's spec has a ``load_state_path`` that is exactly
    ``<algo ckpt>/learner_group/learner/rl_module/<module id>`` of a cairn algorithm
    checkpoint, the env runners start their ``env_to_module`` connectors (the
    observation filter) from ``<algo ckpt>/env_runner/env_to_module_connector``, so the
    module sees observations as where it was trained (:mod:`cairn.rl.env.pretrained_connectors`).
    ``False``: start them fresh (the opt-out, also of the refusal of a config whose
    ``observation_filter`` differs from the checkpoint's)."""

    sample_next_obs: ClassVar[bool] = False
    """Whether env runners add a ``next_obs`` column to their sample batches (the
    observation after each step, ``final_obs`` where an episode ended). Off-policy
    algorithms' configs set it; a class attribute, not a setting, so PPO's configs and
    checkpoints are unchanged."""

    def __post_init__(self) -> None:
        # A config rebuilt from a checkpoint is checked here, before anything makes its
        # environment: gymnasium would import the module an id like "this:CartPole-v1" names,
        # or pygame for render_mode="human" in env_config.
        check_env_id(self.env)
        check_env_config(self.env_config)
        if self.policies_to_train is not None:
            self.policies_to_train = tuple(str(p) for p in self.policies_to_train)
        if isinstance(self.lr_schedule, list | tuple):  # to_dict()/JSON made the pairs lists
            self.lr_schedule = tuple(tuple(p) if isinstance(p, list | tuple) else p for p in self.lr_schedule)  # type: ignore[misc]
        for name, value in kept_callables(self.__dict__, "").items():
            setattr(self, name, value)
        self.callbacks_class = callbacks_class_value(self.callbacks_class)
        # Callables inside the dict fields are kept the same way, under the path of their field (issue 39).
        if isinstance(self.evaluation_config, Mapping):
            self.evaluation_config = {
                **self.evaluation_config,
                **kept_callables(self.evaluation_config, "evaluation_config"),
            }
        if isinstance(self.algorithm_config_overrides_per_module, Mapping):
            scope = "algorithm_config_overrides_per_module"
            self.algorithm_config_overrides_per_module = {
                module_id: {**overrides, **kept_callables(overrides, f"{scope}{SCOPE}{module_id}")}
                if isinstance(overrides, Mapping)
                else overrides
                for module_id, overrides in self.algorithm_config_overrides_per_module.items()
            }
        self.validate_evaluation()  # cheap; a builder's evaluation(...) is refused at once, by name
        # dataclasses.replace (and builders, which use it) pass on what the attribute reads: the
        # default spec stands for "none given" again, so the recorded field stays None.
        given = self.given_rl_module_spec()
        if given is not None and given == default_spec_of(self):
            self.__dict__["rl_module_spec"] = None

    def _check_counts(self, *names: str) -> None:
        """Refuse a setting of ``names`` that is not its :data:`COUNTS` bound's int (``ValueError`` naming it)."""
        for name in names:
            COUNTS[name].setting(getattr(self, name), name=name)

    def validate_evaluation(self) -> None:
        """Raise ``ValueError`` when an evaluation setting is out of range or ``evaluation_config``
        names something that is not a field of this config (part of :meth:`validate`)."""
        if not isinstance(self.explore, bool):
            raise ValueError(f"explore must be True or False, got {self.explore!r}.")
        if self.evaluation_interval is not None and not COUNTS["evaluation_interval"].fits(self.evaluation_interval):
            raise ValueError(f"evaluation_interval must be None or an int >= 1, got {self.evaluation_interval!r}.")
        self._check_counts("evaluation_duration", "evaluation_num_env_runners")
        if self.evaluation_duration_unit not in ("episodes", "timesteps"):
            raise ValueError(
                f"evaluation_duration_unit must be 'episodes' or 'timesteps', got {self.evaluation_duration_unit!r}."
            )
        if not isinstance(self.evaluation_config, Mapping):
            raise ValueError(f"evaluation_config must be a dict of settings, got {type(self.evaluation_config)}.")
        names = {f.name for f in fields(self)}
        bad = sorted(str(k) for k in self.evaluation_config if k not in names or str(k).startswith("evaluation_"))
        fixed = sorted(set(map(str, self.evaluation_config)) & set(_SAME_FOR_EVALUATION))
        if fixed:
            raise ValueError(
                f"evaluation_config sets {fixed}, which the evaluation runners cannot change: they act with the "
                "learners' modules (policies, rl_module_spec, model_config), run evaluation_num_env_runners runners "
                "and derive their own seed. Set those outside evaluation_config."
            )
        if bad:
            raise ValueError(
                f"evaluation_config names {bad}, which are not settings an evaluation runner can differ in; "
                "give settings of this config (explore, env_config, num_envs_per_env_runner, ...), or use "
                "evaluation(evaluation_config={...}) with RLlib's names."
            )
        if self.evaluation_config:  # the evaluation runners' config is checked as any config is
            replace(self, **dict(self.evaluation_config), evaluation_config={})

    def validate_cluster_settings(self) -> None:
        """Raise ``ValueError`` when a fault-tolerance or placement setting is out of range (part of
        :meth:`validate`; a recorded config comes back through it before any actor is placed)."""
        timeout = self.sample_timeout_s
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
        ):
            raise ValueError(f"sample_timeout_s must be None or a positive number of seconds, got {timeout!r}.")
        for name in ("restart_failed_env_runners", "ignore_env_runner_failures"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        self._check_counts("max_num_env_runner_restarts")
        for name in ("num_gpus_per_learner", "num_cpus_for_main_process"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < MAX_RESOURCE:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}.")
        for name in ("custom_resources_per_env_runner", "custom_resources_per_learner"):
            check_custom_resources(getattr(self, name), where=name)
        if self.placement_strategy not in PLACEMENT_STRATEGIES:
            raise ValueError(
                f"placement_strategy must be one of {list(PLACEMENT_STRATEGIES)}, got {self.placement_strategy!r:.40}."
            )

    @property
    def _per_module_overrides(self) -> dict[str, AlgorithmConfig]:
        """RLlib's (private) per-module configs: module id -> :meth:`get_config_for_module` of each module
        that :attr:`algorithm_config_overrides_per_module` gives settings (built when read, never stale)."""
        return {m: self.get_config_for_module(m) for m, o in self.algorithm_config_overrides_per_module.items() if o}

    def get_config_for_module(self, module_id: str) -> AlgorithmConfig:
        """This config with :attr:`algorithm_config_overrides_per_module` of ``module_id`` applied.

        Raises:
            ValueError: An override names a setting this config does not have.
        """
        overrides = self.algorithm_config_overrides_per_module.get(module_id)
        if not overrides:
            return self
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"algorithm_config_overrides_per_module[{module_id!r}] sets {unknown}, which "
                f"{type(self).__name__} does not have; override its own settings (lr, num_epochs, ...)."
            )
        return replace(self, **dict(overrides))

    def validate(self) -> None:
        """Raise ``ValueError`` when a setting is out of range, the env id names a module the
        program has not imported, or a setting asks for Ray and Ray is not installed."""
        check_env_id(self.env)
        check_env_config(self.env_config)
        missing = self.missing_callables()
        if missing:  # read from a checkpoint, and the load was not given them again (issue 39)
            load = f"{type(self).__name__.removesuffix('Config') or 'Algorithm'}.from_checkpoint"
            notes = {}
            for m in missing:
                env = self.env if m.role == ENV_ROLE else self.evaluation_config.get("env")
                if m.path[-1] == ENV_ROLE and isinstance(env, str) and env != m.qualname:  # a register_env name
                    notes[m.field_name] = (
                        f" (the creator of env {env!r}: register_env({env!r}, creator) before the load)"
                    )
            raise MissingCallableError(
                missing_message(missing, where="This algorithm's checkpoint", load=load, notes=notes)
            )
        for module_id in self.algorithm_config_overrides_per_module:
            module_config = self.get_config_for_module(module_id)
            if module_config is not self:
                module_config.algorithm_config_overrides_per_module = {}
                module_config.validate()
        self._check_counts(
            "min_sample_timesteps_per_iteration",
            "num_envs_per_env_runner",
            "rollout_length",
            "episode_return_window",
            "minibatch_size",
            "num_epochs",
            "num_env_runners",
            "num_learners",
        )
        if self.lr <= 0.0:
            raise ValueError(f"lr must be positive, got {self.lr}.")
        if self.lr_schedule is not None:
            check_lr_schedule(self.lr_schedule, self.lr_anneal_timesteps)
        if not isinstance(self.restart_failed_sub_environments, bool):
            raise ValueError(
                f"restart_failed_sub_environments: True or False, not {self.restart_failed_sub_environments!r:.40}."
            )
        if self.num_cpus_per_env_runner < 0 or self.num_cpus_per_learner < 0:
            raise ValueError("num_cpus_per_env_runner and num_cpus_per_learner must be >= 0.")
        for name in ("checkpoint_timeout_s", "env_runner_restore_timeout_s"):
            if not getattr(self, name) > 0:  # also refuses NaN
                raise ValueError(f"{name} must be a positive number of seconds, got {getattr(self, name)}.")
        self.validate_cluster_settings()
        if self.policy_mapping_fn is not None and self.env.startswith(MULTI_AGENT_PREFIX):
            raise ValueError(multi_env_mapping_fn_refusal(self.env, f"policy_mapping_fn={self.policy_mapping_fn!r}"))
        self.validate_evaluation()
        if not isinstance(self.always_attach_evaluation_results, bool):
            raise ValueError(
                "always_attach_evaluation_results must be True or False, got "
                f"{self.always_attach_evaluation_results!r:.40}."
            )
        if self.batch_mode not in BATCH_MODES:
            raise ValueError(f"batch_mode must be one of {list(BATCH_MODES)}, got {self.batch_mode!r:.40}.")
        if self.count_steps_by not in COUNT_STEPS_BY:
            raise ValueError(f"count_steps_by must be one of {list(COUNT_STEPS_BY)}, got {self.count_steps_by!r:.40}.")
        unknown = sorted(set(self.policies_to_train or ()) - set(self.policies))
        if unknown:
            raise ValueError(f"policies_to_train names {unknown}, which are not in policies={list(self.policies)}.")
        if self.num_env_runners > 0 or self.num_learners > 1:
            from cairn.rl.distributed._ray import RAY_EXTRA_HINT, ray_available

            if not ray_available():
                what = (
                    f"num_env_runners={self.num_env_runners}"
                    if self.num_env_runners > 0
                    else f"num_learners={self.num_learners}"
                )
                raise ValueError(
                    f"{what} runs env runners or learners as Ray actors, but Ray is not installed. "
                    f"Install the extra: {RAY_EXTRA_HINT}, or use num_env_runners=0 and num_learners<=1."
                )
