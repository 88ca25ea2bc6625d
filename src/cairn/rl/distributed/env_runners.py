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

Checkpoints: runner 1 writes ``env_runner/``, every runner reads it (see
:mod:`cairn.rl.distributed.env_runner_actor`).

Node loss (RLlib's ``restart_failed_env_runners``, ``ignore_env_runner_failures``,
``max_num_env_runner_restarts``, ``sample_timeout_s``): a runner that dies, or
misses ``sample_timeout_s`` twice in a row, is replaced by a new actor (same
worker index, fresh environments); ``sample`` does not wait for it but goes on
with the healthy runners, and the replacement samples once it answers a ping,
after it took the group's connector states and the latest weights (the
algorithm then calls ``on_env_runners_recreated``). A rollout that misses the
deadline is dropped when it arrives; its report (counts, connector deltas) is
kept. Calls that need every runner (saves, restores, ``foreach_env_runner``)
replace missing runners first and wait for them at most
``env_runner_restore_timeout_s``.

Every call of a checkpoint operation (gathering the runners' states, writing or
reading ``env_runner/``, applying it) has a deadline, the config's
``checkpoint_timeout_s``: a runner that misses it is stopped, so that it can
write nothing into a save already given up, the operation fails with
:class:`~cairn.rl.distributed._ray.ActorTimeoutError` naming it, and the runner
is replaced like a dead one on the group's next use.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cairn.delegation import DelegatedFolder, LoadedComponent
from cairn.registry import AllowedNames
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.distributed._ray import (
    HEALTH_PROBE_TIMEOUT_S,
    ActorFailedError,
    EnvRunnersUnavailableError,
    actor_label,
    get_all,
    init_ray,
)
from cairn.rl.distributed.checkpoint import ActorFolderDelegate
from cairn.rl.distributed.placement import ENV_RUNNER, EVALUATION_ENV_RUNNER, actor_options, env_runner_resources
from cairn.rl.env.env_runner import EnvRunner, SampleBatch
from cairn.rl.env.multi_agent_env import driver_names

if TYPE_CHECKING:
    from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.distributed.env_runner_actor import (
    CHECKPOINT_WRITER_INDEX,
    OTHER_RUNNERS_KEY,
    OWN_KEYS,
    EnvRunnerActor,
    _own_part,
)

__all__ = ["RemoteEnvRunners"]


_HEALTHY = "healthy"
"""A runner that is up and samples."""
_STARTING = "starting"
"""A replacement whose ping has not come back yet: training goes on without it."""
_STOPPED = "stopped"
"""Stopped after missing a checkpoint deadline: a failure, handled on the next ``sample``."""
_GONE = "gone"
"""Failed and not replaced (``ignore_env_runner_failures``, or restarts used up); calls that need
every runner (saves, restores) replace it."""


class RemoteEnvRunners(ActorFolderDelegate):
    """``num_env_runners`` remote env runners: an ``EnvRunnerGroup``'s remote backend.

    It has the methods of :class:`~cairn.rl.env.env_runner_group.EnvRunnerBackend`, and
    it is the delegate (:class:`cairn.delegation.DelegatedComponent`) of the
    algorithm's ``env_runner`` folder: runner 1 writes it, every runner reads it.

    Args:
        config: The algorithm's config (``num_env_runners`` > 0).
        local: The group's local runner, which keeps the totals and merged states.
    """

    def __init__(self, config: AlgorithmConfig, local: EnvRunner, *, evaluation: bool = False) -> None:
        # Resolved before Ray starts anything: what a (recorded) config names is refused here, on the driver.
        self._allowed = driver_names(config)
        self._ray = init_ray(f"num_env_runners={config.num_env_runners}")
        self.config = config
        self.local: EnvRunner = local
        self._kind = EVALUATION_ENV_RUNNER if evaluation else ENV_RUNNER
        self._actor_cls = self._ray.remote(EnvRunnerActor)
        self.actors: list[Any] = [self._make_actor(i) for i in range(1, int(config.num_env_runners) + 1)]
        self.weights_version = 0
        self._weights_ref: Any = None
        self._pending: list[tuple[int, Any]] = []
        """``(position, reference)`` of broadcasts not yet waited for."""
        self._driver_read: tuple[LoadedComponent, str | None] | None = None
        self.last_weights_versions: list[int] = []
        self._metrics: list[list[dict[str, Any]]] = []
        self._status: list[str] = [_HEALTHY] * len(self.actors)
        self._starting: dict[int, Any] = {}
        """Position -> ping of a replacement not known to be up yet."""
        self._late: dict[int, Any] = {}
        """Position -> a sample call that missed ``sample_timeout_s`` (its report is still wanted)."""
        self.num_restarts = 0
        """Replacements started so far (``max_num_env_runner_restarts`` bounds it)."""
        self._recreated: list[int] = []
        try:
            get_all(
                self._ray,
                [(self.label(i), a.ping.remote()) for i, a in enumerate(self.actors)],
                doing="starting",
                timeout_s=self.config.env_runner_restore_timeout_s,
                setting="env_runner_restore_timeout_s",
                hint=self._placement_hint(),
            )
        except BaseException:
            self._kill_actors()  # nobody holds this group yet: its actors would outlive it
            raise

    def _make_actor(self, worker_index: int) -> Any:
        resources = env_runner_resources(self.config)
        options = actor_options(self._ray, config=self.config, kind=self._kind, index=worker_index, resources=resources)
        return self._actor_cls.options(**options).remote(self.config, worker_index, type(self.local), self._allowed)

    def _placement_hint(self) -> str:
        """What each runner reserves, for messages about runners that do not start."""
        return (
            f"Each env runner reserves {env_runner_resources(self.config) or 'nothing'} "
            "(num_cpus_per_env_runner, custom_resources_per_env_runner): a runner that cannot start may be "
            "waiting for a node that has them (ray status shows pending demands)."
        )

    def label(self, position: int) -> str:
        """How messages name the runner at ``position`` (0-based; its worker index is position + 1)."""
        return actor_label("env runner", position + 1, self.actors[position])

    @property
    def num_env_runners(self) -> int:
        """How many runners sample (the remote ones)."""
        return len(self.actors)

    @property
    def num_healthy_env_runners(self) -> int:
        """How many runners are up and sampling (RLlib's ``num_healthy_remote_workers``)."""
        return self._status.count(_HEALTHY)

    @property
    def delegate(self) -> RemoteEnvRunners:
        """The runners themselves write and read the ``env_runner`` folder."""
        return self

    def pop_recreated(self) -> list[int]:
        """Worker indices of replacements that came up since the last call (for ``on_env_runners_recreated``)."""
        recreated, self._recreated = self._recreated, []
        return recreated

    # ------------------------------------------------------------------ failures and replacements

    def _fail(self, position: int, why: str, cause: BaseException | None = None) -> None:
        """The runner at ``position`` failed (``why``): replace it, leave it out, or raise, as the config says.

        Raises:
            ActorFailedError: Neither ``restart_failed_env_runners`` (with restarts left) nor
                ``ignore_env_runner_failures`` lets training go on without it.
        """
        label = self.label(position)
        self._late.pop(position, None)
        self._starting.pop(position, None)
        self._pending = [(p, ref) for p, ref in self._pending if p != position]  # moot: it gets the latest
        with contextlib.suppress(Exception):  # already gone
            self._ray.kill(self.actors[position])
        config = self.config
        if config.restart_failed_env_runners and self.num_restarts < int(config.max_num_env_runner_restarts):
            self._restart(position)
            return
        if config.restart_failed_env_runners or config.ignore_env_runner_failures:
            self._status[position] = _GONE  # restarts used up (or off): train on with the others
            return
        err = ActorFailedError(
            f"{label} {why}. restart_failed_env_runners=False and ignore_env_runner_failures=False: training "
            "stops here. Set restart_failed_env_runners=True (RLlib's default: a replacement starts while the "
            "healthy runners go on) or ignore_env_runner_failures=True (go on without it).",
            label=label,
            died=True,
        )
        self._status[position] = _GONE
        raise err from cause

    def _restart(self, position: int) -> None:
        """Start a replacement at ``position`` (same worker index); it samples once it answers a ping."""
        self.num_restarts += 1
        self.actors[position] = self._make_actor(position + 1)
        self._starting[position] = self.actors[position].ping.remote()
        self._status[position] = _STARTING

    def _check_started(self, ready: Sequence[Any]) -> list[int]:
        """Bring up the replacements whose pings are in ``ready``; return their positions."""
        ready_refs = set(ready)
        up: list[int] = []
        for position, ping in list(self._starting.items()):
            if ping not in ready_refs:
                continue
            del self._starting[position]
            try:
                get_all(self._ray, [(self.label(position), ping)], doing="starting")
            except ActorFailedError as err:
                if not err.died:
                    raise  # its constructor raised: the same error on every restart
                self._fail(position, "died while starting", err)
                continue
            up.append(position)
        if up:
            self._bring_up(up)
        return up

    def _bring_up(self, positions: Sequence[int]) -> None:
        """Replacements at ``positions`` answered: give them the group's connector states and the weights."""
        for position in positions:
            self._status[position] = _HEALTHY
        self.sync_connector_states(only=list(positions))
        if self._weights_ref is not None:
            for position in positions:
                ref = self.actors[position].set_weights.remote(self.weights_version, self._weights_ref)
                self._pending.append((position, ref))
        self._recreated.extend(position + 1 for position in positions)

    def _wait_pending(self, positions: Sequence[int]) -> None:
        """Collect the finished broadcasts to the runners at ``positions`` (their errors are raised).

        Called when a later call of theirs returned: the broadcasts made before it are done;
        those made after it (to a late runner) stay pending.
        """
        wanted = [(p, ref) for p, ref in self._pending if p in set(positions)]
        if not wanted:
            return
        done, _ = self._ray.wait([ref for _, ref in wanted], num_returns=len(wanted), timeout=0)
        finished = set(done)
        self._pending = [(p, ref) for p, ref in self._pending if ref not in finished]
        get_all(self._ray, [(self.label(p), ref) for p, ref in wanted if ref in finished], doing="receiving weights")

    def replace_dead(self, *, probe_timeout_s: float | None = None) -> list[int]:
        """Make every runner healthy and up to date, within deadlines; return the worker indices replaced.

        What a save, a restore and the calls that need every runner do first: a late
        sample is collected (within ``checkpoint_timeout_s``; its report kept), every runner
        is pinged (a dead one, or one that does not answer within ``probe_timeout_s``, is
        stopped and replaced, whatever ``restart_failed_env_runners`` says: these calls need
        every runner), and the replacements must start within ``env_runner_restore_timeout_s``.

        Raises:
            ActorTimeoutError: A late sample or a replacement's start missed its deadline (the
                runner is stopped, and replaced on the next use).
        """
        self._collect_late()
        replaced: list[int] = []
        positions = [p for p in range(len(self.actors)) if self._status[p] == _HEALTHY]
        pings = [self.actors[p].ping.remote() for p in positions]  # all in flight at once
        late: set[Any] = set()
        if probe_timeout_s is not None and pings:
            _, not_ready = self._ray.wait(pings, num_returns=len(pings), timeout=probe_timeout_s)
            late = set(not_ready)
        for position, ping in zip(positions, pings, strict=True):
            if ping not in late:
                try:
                    self._ray.get(ping)
                    continue
                except self._ray.exceptions.RayActorError:
                    pass
            self._replace_now(position)
            replaced.append(position + 1)
        for position in range(len(self.actors)):
            if self._status[position] in (_GONE, _STOPPED):
                self._replace_now(position)
                replaced.append(position + 1)
        if self._starting:
            starting = list(self._starting.items())
            self._starting = {}
            get_all(
                self._ray,
                [(self.label(p), ping) for p, ping in starting],
                doing="starting",
                timeout_s=self.config.env_runner_restore_timeout_s,
                stop=self._stop_and_mark,
                setting="env_runner_restore_timeout_s",
                hint=self._placement_hint(),
            )
            self._bring_up([p for p, _ in starting])
        return sorted(set(replaced))

    def _replace_now(self, position: int) -> None:
        """Replace the runner at ``position`` for a call that needs every runner (not counted as a failure)."""
        with contextlib.suppress(Exception):  # already gone
            self._ray.kill(self.actors[position])
        self._pending = [(p, ref) for p, ref in self._pending if p != position]
        self._late.pop(position, None)
        self._restart(position)

    def _stop_and_mark(self, labels: Sequence[str]) -> None:
        """Stop the runners named ``labels`` (they missed a deadline); they are replaced on the next use."""
        for position in range(len(self.actors)):
            if self.label(position) in labels:
                with contextlib.suppress(Exception):  # already gone
                    self._ray.kill(self.actors[position])
                self._starting.pop(position, None)
                self._status[position] = _STOPPED

    def _collect_late(self) -> None:
        """Collect the late samples within ``checkpoint_timeout_s``: keep their reports, drop their rollouts."""
        if not self._late:
            return
        late = sorted(self._late.items())
        self._late = {}
        results = get_all(
            self._ray,
            [(self.label(p), ref) for p, ref in late],
            doing="finishing a late sample",
            timeout_s=self.config.checkpoint_timeout_s,
            stop=self._stop_and_mark,
        )
        for (position, _), (_, report) in zip(late, results, strict=True):
            self._absorb(report)
            self._wait_pending([position])

    def _absorb(self, report: dict[str, Any]) -> None:
        """Fold one runner's sample report into the local runner (counters, episodes, connector deltas)."""
        self.local.absorb_sample_report(report)
        self._metrics.append(report["metrics"])

    # ------------------------------------------------------------------ the group's work

    def _flush(self, doing: str, *, in_time: bool = False) -> None:
        """Make every runner healthy (:meth:`replace_dead`), then wait for the broadcasts in flight.

        ``in_time``: within the checkpoint deadline (see :meth:`_get_in_time`); every wait is
        bounded either way (late samples and pings by ``checkpoint_timeout_s``, starts by
        ``env_runner_restore_timeout_s``).
        """
        self.replace_dead(probe_timeout_s=self._probe_timeout_s())
        pending, self._pending = self._pending, []
        calls = [(self.label(p), ref) for p, ref in pending]
        if in_time:
            self._get_in_time(calls, doing=doing)
        else:
            get_all(self._ray, calls, doing=doing, timeout_s=self.config.checkpoint_timeout_s, stop=self._stop_and_mark)

    def _get_in_time(self, calls: list[tuple[str, Any]], *, doing: str) -> list[Any]:
        """:func:`get_all` within ``checkpoint_timeout_s``; runners that miss it are stopped."""
        return get_all(self._ray, calls, doing=doing, timeout_s=self.config.checkpoint_timeout_s, stop=self._stop)

    def _stop(self, labels: Sequence[str]) -> None:
        """Kill the runners named ``labels``; :meth:`replace_dead` replaces them on the next use."""
        self._stop_and_mark(labels)

    def sample_batches(self) -> list[dict[str, SampleBatch]]:
        """Sample on every healthy runner in parallel, for at most ``sample_timeout_s``; fold in their reports.

        A runner that died is replaced (``restart_failed_env_runners``) while the others go on;
        a replacement samples once it answers. A runner that misses the deadline is left
        behind: its rollout is dropped when it arrives, its report is kept; missing it a
        second time in a row counts as a failure.

        Raises:
            EnvRunnersUnavailableError: No runner delivered a rollout within ``sample_timeout_s``.
            ActorFailedError: A runner failed and the config says not to go on without it, or a
                runner's own code raised (an environment, a callback).
        """
        timeout = self.config.sample_timeout_s
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        for position in range(len(self.actors)):
            if self._status[position] == _STOPPED:
                self._fail(position, "was stopped after missing a deadline")
        if self._starting:
            ready, _ = self._ray.wait(list(self._starting.values()), num_returns=len(self._starting), timeout=0)
            self._check_started(ready)
        in_flight = {
            p: self.actors[p].sample_batches.remote()
            for p in range(len(self.actors))
            if self._status[p] == _HEALTHY and p not in self._late
        }
        was_late = dict(self._late)
        results = self._gather(in_flight, deadline)
        for position in list(self._late):  # late before this call, and still not done: hung (or its node is)
            if position in was_late and position not in in_flight:
                self._fail(position, f"did not finish sampling within sample_timeout_s={timeout} s twice in a row")
        for position, ref in in_flight.items():
            if position not in results and self._status[position] == _HEALTHY:
                self._late[position] = ref
        if not results:
            raise EnvRunnersUnavailableError(self._unavailable_message(timeout))
        self.local.begin_group_iteration()
        batches: list[dict[str, SampleBatch]] = []
        self.last_weights_versions = []
        for position in sorted(results):
            runner_batches, report = results[position]
            self._absorb(report)
            self.last_weights_versions.append(int(report["weights_version"]))
            batches.append(runner_batches)
        return batches

    def _gather(self, in_flight: dict[int, Any], deadline: float | None) -> dict[int, Any]:
        """Wait until every sample in ``in_flight`` and every late one is in, or ``deadline``; return the rollouts.

        Dead runners are handled as failures (:meth:`_fail`) on the way; a late sample that
        comes in gives its report only, and its runner samples again (added to ``in_flight``).
        While no rollout is in, replacements that come up sample too.
        """
        results: dict[int, Any] = {}
        while True:
            waited = {ref: p for p, ref in in_flight.items() if p not in results}
            waited.update({ref: p for p, ref in self._late.items()})
            if not waited and (results or not self._starting):
                return results
            starts = {ref: p for p, ref in self._starting.items()} if not results else {}
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return results
            refs = [*waited, *starts]
            ready, _ = self._ray.wait(refs, num_returns=1, timeout=remaining)
            if not ready:
                return results
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)  # everything done by now
            for ref in ready:
                if ref in starts:
                    for position in self._check_started([ref]):
                        in_flight[position] = self.actors[position].sample_batches.remote()
                else:
                    self._take_sample(waited[ref], ref, in_flight, results)

    def _take_sample(self, position: int, ref: Any, in_flight: dict[int, Any], results: dict[int, Any]) -> None:
        """One finished sample call of the runner at ``position``: a rollout, a late report, or a failure."""
        try:
            result = get_all(self._ray, [(self.label(position), ref)], doing="sampling")[0]
        except ActorFailedError as err:
            if not err.died:
                raise  # the runner's own code raised: not a node loss
            self._fail(position, "died while sampling", err)
            in_flight.pop(position, None)
            return
        self._wait_pending([position])
        if position not in self._late:
            results[position] = result
            return
        del self._late[position]  # a rollout sampled with older weights: only its report counts
        self._absorb(result[1])
        if position not in in_flight and self._status[position] == _HEALTHY:
            in_flight[position] = self.actors[position].sample_batches.remote()

    def _unavailable_message(self, timeout: float | None) -> str:
        late, starting, gone = len(self._late), len(self._starting), self._status.count(_GONE)
        return (
            f"No remote env runner delivered a rollout within sample_timeout_s={timeout} s: of "
            f"{len(self.actors)} runners, {late} are still sampling, {starting} replacements are starting, "
            f"{gone} are gone (restarts used: {self.num_restarts} of max_num_env_runner_restarts="
            f"{self.config.max_num_env_runner_restarts}). Nothing was trained; call train() again to go on "
            f"(a replacement samples once it is up). {self._placement_hint()} If sampling is only slow, raise "
            "sample_timeout_s."
        )

    def pop_metrics(self) -> list[list[dict[str, Any]]]:
        """What each runner's callbacks logged in the samples since the last call, in runner order."""
        metrics, self._metrics = self._metrics, []
        return metrics

    def add_module(self, module_id: str, spec: RLModuleSpec, *, config: AlgorithmConfig) -> None:
        """Add an inference copy of a new module to the local runner and every remote one.

        Runners started later build it from ``config``.
        """
        self.local.add_module(module_id, spec, config=config)
        allowed = driver_names(config)
        self._flush("adding a module")
        self._get_in_time(
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
        allowed = driver_names(config)
        self._flush("removing a module")
        calls = [
            (self.label(i), a.prepare_remove_module.remote(module_id, config, allowed))
            for i, a in enumerate(self.actors)
        ]
        try:
            self._get_in_time(calls, doing="checking a module's removal")
        except ActorFailedError as err:
            cause = err.__cause__
            if isinstance(cause, ValueError):  # the runner's refusal, as the local runner gives it
                raise ValueError(f"{err.label}: {cause}") from cause
            raise

    def apply_remove_module(self, *, config: AlgorithmConfig) -> None:
        """Every runner drops the module it checked; runners started later build from ``config``."""
        self.local.apply_remove_module()
        allowed = driver_names(config)
        self._get_in_time(
            [(self.label(i), a.apply_remove_module.remote()) for i, a in enumerate(self.actors)],
            doing="removing a module",
        )
        self.config, self._allowed = config, allowed

    def discard_remove_module(self) -> None:
        """Every runner forgets a prepared removal (best effort: a dead runner holds none)."""
        self.local.discard_remove_module()
        refs = [(self.label(i), a.discard_remove_module.remote()) for i, a in enumerate(self.actors)]
        with contextlib.suppress(ActorFailedError):
            self._get_in_time(refs, doing="forgetting a module's removal")

    def sync_weights(self, weights: Any) -> None:
        """Broadcast ``weights`` (a dict, or an object reference to one) as the next version.

        The weights are put in the object store once; every runner gets the same
        reference. The calls are not waited for here (the next operation on the
        runners does), but they run before anything the driver asks afterwards.
        """
        ref = weights if isinstance(weights, self._ray.ObjectRef) else self._ray.put(dict(weights))
        self.weights_version += 1
        self._weights_ref = ref
        # Runners that are starting get the latest weights when they come up (_bring_up).
        self._pending.extend(
            (i, a.set_weights.remote(self.weights_version, ref))
            for i, a in enumerate(self.actors)
            if self._status[i] == _HEALTHY
        )

    def sync_connector_states(self, *, only: list[int] | None = None) -> None:
        """Send the local runner's (merged) connector states to every runner (or those at ``only``)."""
        ref = self._ray.put(self.local.get_connector_states())
        positions = range(len(self.actors)) if only is None else only
        self._pending.extend(
            (i, self.actors[i].set_connector_states.remote(ref)) for i in positions if self._status[i] == _HEALTHY
        )

    def sync_connector_states_to_local(self) -> None:
        """See :meth:`collect_connector_deltas`."""
        self.collect_connector_deltas()

    def sync_local_state_to_others(self) -> None:
        """See :meth:`sync_connector_states`."""
        self.sync_connector_states()

    def collect_connector_deltas(self) -> None:
        """Fold every runner's connector deltas (data not yet reported) into the local runner.

        Part of every ``Algorithm.get_state``, so within the checkpoint deadline. Runners
        that died (or were stopped by a missed deadline) are replaced first, as in :meth:`sample_batches`.
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
        return self._get_in_time(refs, doing="reporting weights")

    def foreach_env_runner(self, func: Any) -> list[Any]:
        """``func(runner)`` on every remote runner, in order; ``func`` travels by reference only.

        Raises:
            ValueError: ``func`` has no reference a worker could resolve (a lambda, a closure,
                a function of ``__main__``).
        """
        from cairn.registry import WORKER_FUNCTION
        from cairn.rl.config.references import function_reference

        what = "foreach_env_runner(func=...) with remote env runners"
        ref = function_reference(func, what=what)  # a function passed here is registered: the program's own
        # Refused here, on the driver, before any worker runs anything; the worker registers only this name.
        allowed = AllowedNames.resolve([(ref, what, WORKER_FUNCTION)])
        self._flush("receiving weights")
        calls = [(self.label(i), a.call_function.remote(ref, allowed)) for i, a in enumerate(self.actors)]
        return list(self._get_in_time(calls, doing="running foreach_env_runner's function"))

    def get_connector_states(self) -> list[dict[str, Any]]:
        """Every runner's connector states, in order."""
        self._flush("receiving weights")
        refs = [(self.label(i), a.get_connector_states.remote()) for i, a in enumerate(self.actors)]
        return self._get_in_time(refs, doing="reporting connector states")

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
        self._status, self._starting, self._late = [], {}, {}

    # ------------------------------------------------------------------ delegate of the `env_runner` folder

    @property
    def restores_local_copy(self) -> bool:
        """The local runner (group totals, merged connectors) is restored by the driver too."""
        return True

    def _prepare(self, *, loading: bool) -> None:
        """Replace dead or hung runners (bounded); before a load, also finish the broadcasts in flight."""
        if loading:
            self._flush("receiving weights", in_time=True)
        else:
            self.replace_dead(probe_timeout_s=self._probe_timeout_s())

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
