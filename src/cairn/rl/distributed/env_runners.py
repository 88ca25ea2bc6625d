"""Env runners as Ray actors, behind :class:`~cairn.rl.env.env_runner_group.EnvRunnerGroup`.

The group keeps one local :class:`~cairn.rl.env.env_runner.EnvRunner` in the
driver that does not sample: it holds the group's totals (lifetime counters,
the window of recent episode returns) and the merged connector states, and it
is the algorithm's ``env_runner`` checkpoint component (so the tree is the
same as without Ray). The remote runners (worker indices 1..N) sample in
parallel. After each round each one reports the steps it took, the episodes
that ended and its connectors' *deltas* (the statistics of the data it saw
since its last report); the local runner adds them up in runner order, and
the merged states go back to every runner with the next weights. A
``MeanStdFilter`` thus normalizes with the statistics of all runners' data,
counted once, whatever connectors stand before it (merging goes by name).

Weights go out versioned: the driver puts them in the object store once and
passes the same reference to every runner with a version number that grows
with each broadcast; a runner ignores a version older than the one it holds,
and calls from the driver to an actor run in the order they were made, so a
stale broadcast can never land after a newer one. Every ``sample`` reports
the weights version it acted with.

Checkpoints: runner 1 writes the ``env_runner`` folder itself: its RNG and
environments, the group's counters, episode windows and merged connector
states (which the driver passes along), and under ``other_env_runners`` the
RNG and environment state of runners 2..N (each hands its own, small, to runner
1 through the object store). A local :class:`EnvRunner` ignores that key, so
the folder is an ordinary ``env_runner`` checkpoint. On restore every runner
reads the folder in parallel; runner 1 takes its part, runner k takes the
entry recorded for worker index k if there is one (same scale: the run goes on
bit for bit; its callbacks' metrics logger comes back too), else only the
connector states, keeping its own environments and RNG (two runners never
replay the same episodes).

A runner that dies is replaced on the group's next ``sample`` (same worker
index, fresh environments, the group's connector states and the latest
weights); the others go on as they were.

Every call of a checkpoint operation (gathering the runners' states, writing or
reading ``env_runner/``, applying it) has a deadline, the config's
``checkpoint_timeout_s``: a runner that misses it is stopped, so that it can
write nothing into a save already given up, the operation fails with
:class:`~cairn.rl.distributed._ray.ActorTimeoutError` naming it, and the runner
is replaced like a dead one on the group's next use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.delegation import DelegatedFolder, LoadedComponent
from cairn.registry import AllowedModules
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.distributed._ray import (
    HEALTH_PROBE_TIMEOUT_S,
    ActorFailedError,
    actor_label,
    get_all,
    init_ray,
    stop_named,
)
from cairn.rl.distributed.checkpoint import ActorFolderDelegate, FolderActor
from cairn.rl.env.env_runner import EnvRunner, SampleBatch
from cairn.rl.env.multi_agent_env import driver_modules
from cairn.rl.env.state_checks import PEER_OWN_KEYS, PEER_STATES_KEY

if TYPE_CHECKING:
    from cairn.manifest import FileEntry
    from cairn.rl.config.algorithm_config import AlgorithmConfig

__all__ = ["EnvRunnerActor", "RemoteEnvRunners"]

CHECKPOINT_WRITER_INDEX = 1
"""The worker index of the remote runner that writes (and fully restores) ``env_runner/``."""

OTHER_RUNNERS_KEY = PEER_STATES_KEY
"""Key of ``env_runner/``'s state holding the RNG and environments of runners 2..N."""

OWN_KEYS = PEER_OWN_KEYS
"""The keys of an ``env_runner`` state that belong to one runner: RNG, environments, its callbacks' metrics."""


def _own_part(env_runner_state: Mapping[str, Any], worker_index: int) -> dict[str, Any]:
    """The ``rng``/``env``/``metrics`` of an ``env_runner`` state meant for the runner ``worker_index``.

    Runner 1's are the state's own keys; runner k's, the ``other_env_runners`` entry
    recorded for worker index k. Empty when the state has none for that runner.
    """
    if worker_index == CHECKPOINT_WRITER_INDEX:
        source: Mapping[str, Any] = env_runner_state
    else:
        source = {}
        for entry in env_runner_state.get(OTHER_RUNNERS_KEY, ()):
            if isinstance(entry, Mapping) and entry.get("worker_index") == worker_index:
                source = entry
    return {key: source[key] for key in OWN_KEYS if key in source}


def _import_driver_modules(allowed: AllowedModules) -> None:
    """Import the modules the driver resolved for the config it sends (and nothing else).

    A config arrives from the driver: when the runner starts, and with ``add_module`` /
    ``remove_module``, whose new mapping function may live in a module the driver imported
    since. The driver resolved its names (:func:`~cairn.rl.env.multi_agent_env.driver_modules`);
    this worker imports those modules, then resolves the names with the same resolver,
    which refuses whatever else the config names.
    """
    allowed.import_here(where="a remote env runner")


class EnvRunnerActor(FolderActor):
    """The body of one remote env runner (run as a Ray actor); runner 1 writes ``env_runner/``, all read it.

    Args:
        config: The algorithm's config.
        worker_index: This runner's index (1..N); seeds differ per index.
        runner_class: The class of the group's local runner (``EnvRunner`` or
            ``MultiAgentEnvRunner``).
    """

    def __init__(
        self,
        config: AlgorithmConfig,
        worker_index: int,
        runner_class: type[EnvRunner],
        allowed: AllowedModules,
    ) -> None:
        import torch

        super().__init__()
        if config.num_torch_threads is not None:
            torch.set_num_threads(int(config.num_torch_threads))
        _import_driver_modules(allowed)
        self.runner = runner_class(config, worker_index=worker_index)
        self.weights_version = -1

    @property
    def checkpoint_target(self) -> EnvRunner:
        """The runner."""
        return self.runner

    def ping(self) -> int:
        """The worker index (a liveness check)."""
        return self.runner.worker_index

    def set_weights(self, version: int, weights: Mapping[str, Any]) -> int:
        """Load ``weights`` unless this runner already holds a newer version; return the version held."""
        if version > self.weights_version:
            # Arrays from the object store are read-only views; the module copies them in.
            self.runner.set_weights(
                {
                    m: {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in s.items()}
                    for m, s in weights.items()
                }
            )
            self.weights_version = version
        return self.weights_version

    def add_module(self, module_id: str, spec: RLModuleSpec, config: AlgorithmConfig, allowed: AllowedModules) -> None:
        """Add an inference copy of a new module (its weights come with the next broadcast)."""
        _import_driver_modules(allowed)
        self.runner.add_module(module_id, spec, config=config)

    def prepare_remove_module(self, module_id: str, config: AlgorithmConfig, allowed: AllowedModules) -> None:
        """Check that ``module_id`` can be dropped, changing nothing (``EnvRunner.prepare_remove_module``)."""
        _import_driver_modules(allowed)
        self.runner.prepare_remove_module(module_id, config=config)

    def apply_remove_module(self) -> None:
        """Drop the module :meth:`prepare_remove_module` checked."""
        self.runner.apply_remove_module()

    def discard_remove_module(self) -> None:
        """Forget a prepared removal (another runner refused it)."""
        self.runner.discard_remove_module()

    def set_connector_states(self, states: Mapping[str, Any]) -> None:
        """Take the group's merged connector states (keeping data not yet reported)."""
        self.runner.set_synced_connector_states(states)

    def sample(self) -> tuple[dict[str, SampleBatch], dict[str, Any]]:
        """One rollout, and the report for the group (with the weights version used)."""
        batches = self.runner.sample()
        report = self.runner.sample_report()
        report["weights_version"] = self.weights_version
        return batches, report

    def call_function(self, ref: str, allowed: AllowedModules) -> Any:
        """``fn(runner)`` for the function ``ref`` names (``foreach_env_runner``), resolved here, never unpickled."""
        from cairn.registry import resolve_function

        _import_driver_modules(allowed)
        return resolve_function(ref, where="foreach_env_runner(func=...)")(self.runner)

    def pop_connector_deltas(self) -> dict[str, Any]:
        """The connectors' deltas (data seen since the last report), without sampling."""
        return self.runner.pop_connector_deltas()

    def get_connector_states(self) -> dict[str, Any]:
        """Both pipelines' states (for tests and inspection)."""
        return self.runner.get_connector_states()

    def get_module_state(self) -> tuple[int, dict[str, Any]]:
        """``(weights version, module id -> RLModule state)`` of the inference copy."""
        return self.weights_version, self.runner.module.get_state()

    def get_state(self) -> dict[str, Any]:
        """The runner's full state."""
        return self.runner.get_state()

    def get_own_state(self) -> dict[str, Any]:
        """What only this runner has (``worker_index``, ``rng``, ``env``, ``metrics``), for runner 1's checkpoint."""
        state = self.runner.get_state(components=[])
        return {"worker_index": self.runner.worker_index, **{key: state[key] for key in OWN_KEYS}}

    def set_own_state(self, state: dict[str, Any]) -> None:
        """Take an ``rng``/``env`` state (from :meth:`get_own_state` or a checkpoint)."""
        self.runner.set_state(state)

    def save(
        self,
        folder: DelegatedFolder,
        *,
        allow_pickle: bool,
        overrides: Mapping[str, Any],
        other_runners: list[dict[str, Any]],
    ) -> FileEntry:
        """Write the ``env_runner`` folder.

        Args:
            folder: Where ``env_runner/`` goes in the staging place.
            allow_pickle: As for ``save_to_path``.
            overrides: The group's totals (counters, episode windows).
            other_runners: :meth:`get_own_state` of runners 2..N.
        """
        import ray

        def make_state() -> dict[str, Any]:
            # References inside a list are not resolved by Ray before the call: get them here.
            others = [ray.get(r) if isinstance(r, ray.ObjectRef) else r for r in other_runners]
            state = self.runner.get_state()
            state.update({**overrides, OTHER_RUNNERS_KEY: others})
            return state

        return self._write(folder, allow_pickle=allow_pickle, make_state=make_state)

    def _apply(self, pending: LoadedComponent) -> None:
        """Apply a folder read: all of it for the checkpoint's runner, else the connectors only."""
        if self.runner.worker_index != CHECKPOINT_WRITER_INDEX and pending.target is self.runner:
            # Another runner's RNG and environments would duplicate its data: take this
            # runner's own entry when the checkpoint has one, else only the connectors.
            pending.apply(own_state=_own_part(pending.own_state(), self.runner.worker_index))
            return
        pending.apply()


class RemoteEnvRunners(ActorFolderDelegate):
    """``num_env_runners`` remote env runners: an ``EnvRunnerGroup``'s remote backend.

    It has the methods of :class:`~cairn.rl.env.env_runner_group.EnvRunnerBackend`, and
    it is the delegate (:class:`cairn.delegation.DelegatedComponent`) of the
    algorithm's ``env_runner`` folder: runner 1 writes it, every runner reads it.

    Args:
        config: The algorithm's config (``num_env_runners`` > 0).
        local: The group's local runner, which keeps the totals and merged states.
    """

    def __init__(self, config: AlgorithmConfig, local: EnvRunner) -> None:
        # Resolved before Ray starts anything: what a (recorded) config names is refused here, on the driver.
        self._allowed = driver_modules(config)
        self._ray = init_ray(f"num_env_runners={config.num_env_runners}")
        self.config = config
        self.local: EnvRunner = local
        self._actor_cls = self._ray.remote(num_cpus=float(config.num_cpus_per_env_runner))(EnvRunnerActor)
        self.actors: list[Any] = [self._make_actor(i) for i in range(1, int(config.num_env_runners) + 1)]
        self.weights_version = 0
        self._weights_ref: Any = None
        self._pending: list[tuple[str, Any]] = []
        self._driver_read: tuple[LoadedComponent, str | None] | None = None
        self.last_weights_versions: list[int] = []
        self._metrics: list[list[dict[str, Any]]] = []
        try:
            get_all(self._ray, [(self.label(i), a.ping.remote()) for i, a in enumerate(self.actors)], doing="starting")
        except BaseException:
            self._kill_actors()  # nobody holds this group yet: its actors would outlive it
            raise

    def _make_actor(self, worker_index: int) -> Any:
        return self._actor_cls.remote(self.config, worker_index, type(self.local), self._allowed)

    def label(self, position: int) -> str:
        """How messages name the runner at ``position`` (0-based; its worker index is position + 1)."""
        return actor_label("env runner", position + 1, self.actors[position])

    @property
    def num_env_runners(self) -> int:
        """How many runners sample (the remote ones)."""
        return len(self.actors)

    @property
    def delegate(self) -> RemoteEnvRunners:
        """The runners themselves write and read the ``env_runner`` folder."""
        return self

    # ------------------------------------------------------------------ the group's work

    def _flush(self, doing: str, *, in_time: bool = False) -> None:
        """Wait for the broadcasts in flight, so that their errors are not lost.

        ``in_time``: within the checkpoint deadline (see :meth:`_get_in_time`).
        """
        pending, self._pending = self._pending, []
        if in_time:
            self._get_in_time(pending, doing=doing)
        else:
            get_all(self._ray, pending, doing=doing)

    def _get_in_time(self, calls: list[tuple[str, Any]], *, doing: str) -> list[Any]:
        """:func:`get_all` within ``checkpoint_timeout_s``; runners that miss it are stopped."""
        return get_all(self._ray, calls, doing=doing, timeout_s=self.config.checkpoint_timeout_s, stop=self._stop)

    def _stop(self, labels: Sequence[str]) -> None:
        """Kill the runners named ``labels``; :meth:`replace_dead` replaces them on the next use."""
        stop_named(self._ray, self.actors, self.label, labels)

    def replace_dead(self, *, probe_timeout_s: float | None = None) -> list[int]:
        """Replace runners that died by fresh ones with the group's state; return their worker indices.

        Args:
            probe_timeout_s: How long a runner may take to answer a ping; one that does
                not is hung, and is stopped and replaced too. None waits for every answer,
                and for the replacements to start; otherwise (saves and restores) the
                replacements must start within ``env_runner_restore_timeout_s``.
        """
        replaced: list[int] = []
        pings = [actor.ping.remote() for actor in self.actors]  # all in flight at once
        late: set[Any] = set()
        if probe_timeout_s is not None and pings:
            _, not_ready = self._ray.wait(pings, num_returns=len(pings), timeout=probe_timeout_s)
            late = set(not_ready)
        for position, ping in enumerate(pings):
            try:
                if ping in late:
                    self._stop([self.label(position)])
                else:
                    self._ray.get(ping)
                    continue
            except self._ray.exceptions.RayActorError:
                pass
            self.actors[position] = self._make_actor(position + 1)
            replaced.append(position + 1)
        if replaced:
            starting = [(self.label(i - 1), self.actors[i - 1].ping.remote()) for i in replaced]
            if probe_timeout_s is None:
                # Training (sample): started like the group's first runners, without a deadline.
                get_all(self._ray, starting, doing="starting")
            else:
                # A save or restore: a replacement whose start-up (its environments' constructors)
                # hangs must not hang it. One that misses the deadline is stopped, and replaced
                # again on the next use.
                get_all(
                    self._ray,
                    starting,
                    doing="starting",
                    timeout_s=self.config.env_runner_restore_timeout_s,
                    stop=self._stop,
                    setting="env_runner_restore_timeout_s",
                )
            self._pending = []  # broadcasts to dead actors are moot; the new ones get the latest
            self.sync_connector_states(only=[i - 1 for i in replaced])
            if self._weights_ref is not None:
                for index in replaced:
                    self.actors[index - 1].set_weights.remote(self.weights_version, self._weights_ref)
        return replaced

    def sample(self) -> list[dict[str, SampleBatch]]:
        """Sample on every runner in parallel; fold their reports into the local runner."""
        try:
            self._flush("receiving weights")
        except ActorFailedError as err:
            if not err.died:
                raise
            self.replace_dead()
        refs = [a.sample.remote() for a in self.actors]
        results: list[Any] = []
        for position, ref in enumerate(refs):
            try:
                results.append(get_all(self._ray, [(self.label(position), ref)], doing="sampling")[0])
            except ActorFailedError as err:
                if not err.died:
                    raise
                # Keep the others' rollouts (their connector deltas are in them); the dead
                # runner is replaced below and samples once more.
                results.append(None)
        dead = [position for position, result in enumerate(results) if result is None]
        if dead:
            self.replace_dead()
            for position in dead:
                results[position] = get_all(
                    self._ray, [(self.label(position), self.actors[position].sample.remote())], doing="sampling"
                )[0]
        self.local.begin_group_iteration()
        batches: list[dict[str, SampleBatch]] = []
        self.last_weights_versions = []
        for runner_batches, report in results:
            self.local.absorb_sample_report(report)
            self.last_weights_versions.append(int(report["weights_version"]))
            self._metrics.append(report["metrics"])
            batches.append(runner_batches)
        return batches

    def pop_metrics(self) -> list[list[dict[str, Any]]]:
        """What each runner's callbacks logged in the samples since the last call, in runner order."""
        metrics, self._metrics = self._metrics, []
        return metrics

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """Add an inference copy of a new module to the local runner and every remote one.

        Runners started later build it from ``config``.
        """
        self.local.add_module(module_id, spec, config=config)
        allowed = driver_modules(config)
        self._flush("adding a module")
        get_all(
            self._ray,
            [(self.label(i), a.add_module.remote(module_id, spec, config, allowed)) for i, a in enumerate(self.actors)],
            doing="adding a module",
        )
        self.config, self._allowed = config, allowed

    def prepare_remove_module(self, module_id: str, *, config: AlgorithmConfig) -> None:
        """The local runner, then every remote one (in parallel), checks that it can drop ``module_id``.

        Nothing changes.

        Raises:
            ValueError: A runner refused (the first refusal in runner order, with the runner named).
        """
        self.local.prepare_remove_module(module_id, config=config)
        allowed = driver_modules(config)
        self._flush("removing a module")
        calls = [
            (self.label(i), a.prepare_remove_module.remote(module_id, config, allowed))
            for i, a in enumerate(self.actors)
        ]
        try:
            get_all(self._ray, calls, doing="checking a module's removal")
        except ActorFailedError as err:
            cause = err.__cause__
            if isinstance(cause, ValueError):  # the runner's refusal, as the local runner gives it
                raise ValueError(f"{err.label}: {cause}") from cause
            raise

    def apply_remove_module(self, *, config: AlgorithmConfig) -> None:
        """Every runner drops the module it checked; runners started later build from ``config``."""
        self.local.apply_remove_module()
        allowed = driver_modules(config)
        get_all(
            self._ray,
            [(self.label(i), a.apply_remove_module.remote()) for i, a in enumerate(self.actors)],
            doing="removing a module",
        )
        self.config, self._allowed = config, allowed

    def discard_remove_module(self) -> None:
        """Every runner forgets a prepared removal (best effort: a dead runner holds none)."""
        self.local.discard_remove_module()
        refs = [(self.label(i), a.discard_remove_module.remote()) for i, a in enumerate(self.actors)]
        with contextlib.suppress(ActorFailedError):
            get_all(self._ray, refs, doing="forgetting a module's removal")

    def sync_weights(self, weights: Any) -> None:
        """Broadcast ``weights`` (a dict, or an object reference to one) as the next version.

        The weights are put in the object store once; every runner gets the same
        reference. The calls are not waited for here (the next operation on the
        runners does), but they run before anything the driver asks afterwards.
        """
        ref = weights if isinstance(weights, self._ray.ObjectRef) else self._ray.put(dict(weights))
        self.weights_version += 1
        self._weights_ref = ref
        self._pending.extend(
            (self.label(i), a.set_weights.remote(self.weights_version, ref)) for i, a in enumerate(self.actors)
        )

    def sync_connector_states(self, *, only: list[int] | None = None) -> None:
        """Send the local runner's (merged) connector states to every runner (or those at ``only``)."""
        ref = self._ray.put(self.local.get_connector_states())
        positions = range(len(self.actors)) if only is None else only
        self._pending.extend((self.label(i), self.actors[i].set_connector_states.remote(ref)) for i in positions)

    def sync_connector_states_to_local(self) -> None:
        """See :meth:`collect_connector_deltas`."""
        self.collect_connector_deltas()

    def sync_local_state_to_others(self) -> None:
        """See :meth:`sync_connector_states`."""
        self.sync_connector_states()

    def collect_connector_deltas(self) -> None:
        """Fold every runner's connector deltas (data not yet reported) into the local runner.

        Part of every ``Algorithm.get_state``, so within the checkpoint deadline. Runners
        that died (or were stopped by a missed deadline) are replaced first, as in :meth:`sample`.
        """
        try:
            self._flush("receiving weights", in_time=True)
        except ActorFailedError as err:
            if not err.died:
                raise
        self.replace_dead(probe_timeout_s=self._probe_timeout_s())
        refs = [(self.label(i), a.pop_connector_deltas.remote()) for i, a in enumerate(self.actors)]
        for deltas in self._get_in_time(refs, doing="reporting connector statistics"):
            self.local.env_to_module.merge_deltas(deltas.get("env_to_module_connector", {}))
            self.local.module_to_env.merge_deltas(deltas.get("module_to_env_connector", {}))

    def get_module_states(self) -> list[tuple[int, dict[str, Any]]]:
        """``(weights version, module states)`` of every runner, in order."""
        self._flush("receiving weights")
        refs = [(self.label(i), a.get_module_state.remote()) for i, a in enumerate(self.actors)]
        return get_all(self._ray, refs, doing="reporting weights")

    def foreach_env_runner(self, func: Any) -> list[Any]:
        """``func(runner)`` on every remote runner, in order; ``func`` travels by reference only.

        Raises:
            ValueError: ``func`` has no reference a worker could resolve (a lambda, a closure,
                a function of ``__main__``).
        """
        from cairn.registry import resolve_function
        from cairn.rl.config.algorithm_config import function_reference

        what = "foreach_env_runner(func=...) with remote env runners"
        ref = function_reference(func, what=what)
        resolve_function(ref, where=what)  # refused here, on the driver, before any worker runs anything
        allowed = AllowedModules.resolve([(ref.partition(":")[0], what)])
        self._flush("receiving weights")
        calls = [(self.label(i), a.call_function.remote(ref, allowed)) for i, a in enumerate(self.actors)]
        return list(get_all(self._ray, calls, doing="running foreach_env_runner's function"))

    def get_connector_states(self) -> list[dict[str, Any]]:
        """Every runner's connector states, in order."""
        self._flush("receiving weights")
        refs = [(self.label(i), a.get_connector_states.remote()) for i, a in enumerate(self.actors)]
        return get_all(self._ray, refs, doing="reporting connector states")

    def get_runner_states(self) -> dict[str, Any]:
        """Runner 1's ``rng`` and ``env``, and ``other_env_runners``: what ``env_runner/`` holds of the runners."""
        self._flush("receiving weights", in_time=True)
        own = self._get_in_time(
            [(self.label(i), a.get_own_state.remote()) for i, a in enumerate(self.actors)],
            doing="reporting its state",
        )
        first = CHECKPOINT_WRITER_INDEX - 1
        return {
            **{key: own[first][key] for key in OWN_KEYS},
            OTHER_RUNNERS_KEY: [s for i, s in enumerate(own) if i != first],
        }

    def set_runner_states(self, state: Mapping[str, Any]) -> None:
        """Give runner 1 the state's ``rng``/``env`` and runner k its ``other_env_runners`` entry, if any."""
        calls = []
        for position, actor in enumerate(self.actors):
            own = _own_part(state, position + 1)
            if own:
                calls.append((self.label(position), actor.set_own_state.remote(own)))
        self._get_in_time(calls, doing="taking its state")

    def close(self) -> None:
        """Kill the actors, then close the local runner's environments."""
        self._kill_actors()
        self.local.close()

    def _kill_actors(self) -> None:
        """Kill the actors."""
        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone
                self._ray.kill(actor)
        self.actors = []
        self._pending = []

    # ------------------------------------------------------------------ delegate of the `env_runner` folder

    @property
    def restores_local_copy(self) -> bool:
        """The local runner (group totals, merged connectors) is restored by the driver too."""
        return True

    def _prepare(self, *, loading: bool) -> None:
        """Replace dead or hung runners; before a load, also finish the broadcasts in flight."""
        self.replace_dead(probe_timeout_s=self._probe_timeout_s())
        if loading:
            self._flush("receiving weights", in_time=True)

    def _start_actor_save(self, folder: DelegatedFolder, *, allow_pickle: bool) -> tuple[str, Any]:
        """Runner 1 writes ``env_runner/`` with the group's totals and merged connector states."""
        # The driver merged the deltas (Algorithm.get_state); send the merged states first.
        self.sync_connector_states()
        self._flush("receiving connector states", in_time=True)
        local_state = self.local.get_state(components=[])
        overrides = {"counters": local_state["counters"], "episodes": local_state["episodes"]}
        position = CHECKPOINT_WRITER_INDEX - 1
        actor = self.actors[position]
        # The other runners' own states go to runner 1 through the object store (a list of
        # references is resolved by the actor; nothing passes through the driver).
        others = [a.get_own_state.remote() for i, a in enumerate(self.actors) if i != position]
        ref = actor.save.remote(folder, allow_pickle=allow_pickle, overrides=overrides, other_runners=others)
        return self.label(position), ref

    def _driver_state(self) -> dict[str, Any]:
        """The local runner's state with the runners' own parts (see :meth:`get_runner_states`)."""
        state = self.local.get_state()
        state.update(self.get_runner_states())
        return state

    def _apply_driver_read(self, loaded: LoadedComponent, component: str | None) -> None:
        """A whole folder read: the runners take their RNGs and environments.

        Their connectors come from the local runner, which the engine restores, at the next sync.
        """
        if component is None:
            self.set_runner_states(loaded.own_state())

    def _probe_timeout_s(self) -> float:
        """How long a ping may take on a checkpoint path: the deadline, but at most the health probe's."""
        return min(HEALTH_PROBE_TIMEOUT_S, float(self.config.checkpoint_timeout_s))
