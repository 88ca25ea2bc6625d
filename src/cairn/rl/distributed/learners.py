"""Data-parallel learners as Ray actors, behind :class:`~cairn.rl.core.learner.learner_group.LearnerGroup`.

Each of the ``num_learners`` actors holds a full :class:`DataParallelLearner`
and joins one ``torch.distributed`` process group (gloo, over TCP on
127.0.0.1 when all actors share this machine). An update goes like this:

- the driver puts the batch in the object store once; every learner gets the
  same reference (numpy arrays are read from shared memory, not copied);
- every learner draws the same minibatch permutation (the learners' shuffling
  generators are in the same state) and computes the loss on its share of each
  minibatch (rows ``rank::world_size``); advantages are normalized with the
  minibatch's global mean and standard deviation (one all-reduce);
- the gradients, weighted by each learner's row count, are summed with one
  all-reduce and divided by the minibatch size: every learner obtains the
  gradient of the whole minibatch's loss, clips it and steps Adam.

So the learners' weights, optimizer states, generators and counters stay
identical (a test checks it bit for bit), and a checkpoint holds learner 0's
state, which restores into any number of learners. The metrics returned are
learner 0's (the losses of its share of the data).

If a learner dies, the process group cannot go on; the group rebuilds all
learners on its next update from the state of a surviving one (or raises
when none survives: restore a checkpoint then).

Every call of a checkpoint operation (writing or reading ``learner/``,
applying it, handing out or taking a state) has a deadline, the config's
``checkpoint_timeout_s``: a learner that misses it is stopped, the operation
fails with :class:`~cairn.rl.distributed._ray.ActorTimeoutError` naming it,
and the group is rebuilt from a healthy learner on its next use.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from cairn.delegation import DelegatedFolder, LoadedComponent
from cairn.errors import CheckpointError
from cairn.rl.core.learner.learner import Learner, TrainBatch
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.distributed._ray import HEALTH_PROBE_TIMEOUT_S, actor_label, get_all, init_ray, stop_named
from cairn.rl.distributed.checkpoint import ActorFolderDelegate, FolderActor, nest_state
from cairn.rl.distributed.placement import LEARNER, actor_options, learner_resources
from cairn.rl.utils.nested import leading_rows, map_leaves

if TYPE_CHECKING:
    from cairn.manifest import FileEntry
    from cairn.rl.config.algorithm_config import AlgorithmConfig

__all__ = ["DataParallelLearner", "LearnerActor", "RemoteLearners", "data_parallel"]


class DataParallelLearner(Learner):
    """A :class:`~cairn.rl.core.learner.learner.Learner` that computes on its share of each minibatch.

    A mix-in: :func:`data_parallel` puts it in front of an algorithm's learner
    class (``PPOLearner``), so any loss trains data-parallel.
    ``torch.distributed`` must be initialized in this process (gloo backend).

    Args:
        config: The algorithm's config.
        module_specs: Module id -> spec.
        rank: This learner's rank.
        world_size: The number of learners.
    """

    def __init__(
        self, config: AlgorithmConfig, module_specs: Mapping[str, RLModuleSpec], *, rank: int, world_size: int
    ) -> None:
        super().__init__(config, module_specs)
        self.rank = int(rank)
        self.world_size = int(world_size)

    def _local_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """Rows ``rank::world_size`` of the minibatch."""
        return indices[self.rank :: self.world_size]

    def normalize_over_minibatch(self, values: torch.Tensor) -> torch.Tensor:
        """Normalize with the mean and (unbiased) std of the whole minibatch, over all learners."""
        import torch.distributed as dist

        a64 = values.to(torch.float64)
        moments = torch.stack([torch.tensor(float(a64.numel()), dtype=torch.float64), a64.sum(), (a64 * a64).sum()])
        dist.all_reduce(moments)
        n, total, total_sq = (float(x) for x in moments)
        if n <= 1:
            return values
        mean = total / n
        var = max(0.0, (total_sq - n * mean * mean) / (n - 1))
        return (values - mean) / (math.sqrt(var) + 1e-8)

    def mean_over_minibatch(self, total: float, rows: int) -> float:
        """``total / rows`` summed over all learners (every learner reads the whole minibatch's value)."""
        import torch.distributed as dist

        sums = torch.tensor([float(total), float(rows)], dtype=torch.float64)
        dist.all_reduce(sums)
        return float(sums[0] / sums[1]) if float(sums[1]) > 0 else float("nan")

    def _reduce_gradients(self, module: RLModule, num_rows: int) -> None:
        """Every learner's gradient := the gradient of the whole minibatch's mean loss."""
        import torch.distributed as dist

        params = [p for p in module.parameters() if p.requires_grad]
        grads = [
            p.grad.reshape(-1) * float(num_rows)
            if p.grad is not None and num_rows > 0
            else torch.zeros(p.numel(), dtype=p.dtype)
            for p in params
        ]
        flat = torch.cat([*grads, torch.tensor([float(num_rows)], dtype=params[0].dtype)])
        dist.all_reduce(flat)
        total = float(flat[-1])
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = (flat[offset : offset + n] / max(total, 1.0)).reshape(p.shape).clone()
            offset += n

    def _minibatch_step(
        self,
        module_id: str,
        module: RLModule,
        optimizers: Mapping[str, torch.optim.Optimizer],
        mb: Mapping[str, torch.Tensor],
    ) -> dict[str, float]:
        """As the base class; a learner with no rows of this minibatch still joins the all-reduces."""
        if leading_rows(next(iter(mb.values()))) > 0:
            return super()._minibatch_step(module_id, module, optimizers, mb)
        # No rows here: contribute nothing, but take part in every collective and the step.
        self.join_collectives_without_rows(module_id)
        for param in module.parameters():
            param.grad = None
        self._reduce_gradients(module, 0)
        max_grad_norm = self.config_for_module(module_id).max_grad_norm
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(module.parameters(), max_grad_norm)
        for optimizer in optimizers.values():
            optimizer.step()
        return {}


_DATA_PARALLEL: dict[type[Learner], type[DataParallelLearner]] = {}


def data_parallel(learner_class: type[Learner]) -> type[DataParallelLearner]:
    """``learner_class`` with :class:`DataParallelLearner` in front (one class per learner class)."""
    if issubclass(learner_class, DataParallelLearner):
        return learner_class
    cls = _DATA_PARALLEL.get(learner_class)
    if cls is None:
        cls = type(f"DataParallel{learner_class.__name__}", (DataParallelLearner, learner_class), {})
        _DATA_PARALLEL[learner_class] = cls
    return cls


class LearnerActor(FolderActor):
    """The body of one remote learner (run as a Ray actor); it writes and reads ``learner/``.

    Args:
        config: The algorithm's config.
        module_specs: Module id -> spec.
        rank: This learner's rank (0 writes checkpoints).
        world_size: The number of learners.
    """

    def __init__(
        self, config: AlgorithmConfig, module_specs: Mapping[str, RLModuleSpec], rank: int, world_size: int
    ) -> None:
        super().__init__()
        if config.num_torch_threads is not None:
            torch.set_num_threads(int(config.num_torch_threads))
        self.rank = int(rank)
        self.world_size = int(world_size)
        learner_class = data_parallel(config.get_default_learner_class())
        self.learner = learner_class(config, module_specs, rank=rank, world_size=world_size)

    @property
    def checkpoint_target(self) -> Learner:
        """The learner."""
        return self.learner

    def ping(self) -> int:
        """The rank (a liveness check)."""
        return self.rank

    def node_and_free_port(self) -> tuple[str, str, int]:
        """``(node id, node IP, a free TCP port)``, for the process group's rendezvous."""
        import ray

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = int(s.getsockname()[1])
        node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        return ray.get_runtime_context().get_node_id(), node_ip, port

    def init_process_group(self, address: str, port: int) -> None:
        """Join the gloo process group at ``address:port``."""
        import torch.distributed as dist

        if address == "127.0.0.1":
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(
            "gloo", init_method=f"tcp://{address}:{port}", rank=self.rank, world_size=self.world_size
        )

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """One data-parallel update on ``batches``; returns this learner's metrics."""
        # Arrays from the object store are read-only views; torch wants writable memory. A column may be
        # a dict (tuple) of arrays: the Dict/Tuple observations of a module that takes them.
        return self.learner.update({m: {k: map_leaves(np.array, v) for k, v in b.items()} for m, b in batches.items()})

    def get_weights(self) -> dict[str, Any]:
        """Module id -> RLModule state."""
        return self.learner.get_weights()

    def add_module(
        self, module_id: str, spec: RLModuleSpec, config_overrides: Mapping[str, Any] | None, weights: dict[str, Any]
    ) -> None:
        """Add module ``module_id`` built from ``spec``, with ``weights`` (the driver's copy)."""
        module = self.learner.add_module(module_id, spec, config_overrides=config_overrides)
        module.set_state({k: torch.as_tensor(np.array(v)) for k, v in weights.items()})

    def remove_module(self, module_id: str) -> None:
        """Remove module ``module_id``."""
        self.learner.remove_module(module_id)

    def get_weights_for_broadcast(self) -> dict[str, Any]:
        """Module id -> RLModule state as numpy arrays (the object store passes them without copies)."""
        return {
            module_id: {name: value.numpy() if isinstance(value, torch.Tensor) else value for name, value in s.items()}
            for module_id, s in self.learner.get_weights().items()
        }

    def get_state(self, components: Any = None, not_components: Any = None) -> dict[str, Any]:
        """The learner's state (selected parts)."""
        return self.learner.get_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply a learner state."""
        self.learner.set_state(state)

    def save(self, folder: DelegatedFolder, *, allow_pickle: bool) -> FileEntry:
        """Write ``learner_group/learner/`` (and its module folders)."""
        return self._write(folder, allow_pickle=allow_pickle)

    def shutdown(self) -> None:
        """Leave the process group."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class RemoteLearners(ActorFolderDelegate):
    """``num_learners`` data-parallel learners on Ray: a ``LearnerGroup``'s remote backend.

    It has the methods of :class:`~cairn.rl.core.learner.learner_group.LearnerBackend`, and
    it is the delegate (:class:`cairn.delegation.DelegatedComponent`) of the group's
    ``learner`` folder: learner 0 writes it, every learner reads it.

    Args:
        config: The PPO config (``num_learners`` > 1).
        module_specs: Module id -> spec.
        local: The group's local learner: the shape of the learners' state (class,
            constructor, components), used to write and read the folder in the
            driver when the actors cannot reach the storage (``memory://``).
    """

    def __init__(self, config: AlgorithmConfig, module_specs: Mapping[str, RLModuleSpec], *, local: Learner) -> None:
        self._ray = init_ray(f"num_learners={config.num_learners}")
        self.config = config
        self.module_specs = dict(module_specs)
        self.local: Learner = local
        self._driver_read: tuple[LoadedComponent, str | None] | None = None
        self._actor_cls = self._ray.remote(LearnerActor)
        self._broken: str | None = None
        """Why the learners' state is gone (a learner failed during an update), or None."""
        self.actors: list[Any] = []
        self._nodes: list[str] = []
        """The node id of each learner, by rank."""
        try:
            self._start()
        except BaseException:
            self.close()  # nobody holds this group yet: its actors would outlive it
            raise

    def label(self, position: int) -> str:
        """How messages name the learner of rank ``position``."""
        return actor_label("learner", position, self.actors[position])

    @property
    def num_learners(self) -> int:
        """How many learners train."""
        return len(self.actors)

    @property
    def delegate(self) -> RemoteLearners:
        """The learners themselves write and read the ``learner`` folder."""
        return self

    def _start(self, state: Any = None) -> None:
        """Create the actors, join them in a process group, and give them ``state`` if any."""
        world = int(self.config.num_learners)
        resources = learner_resources(self.config)
        self.actors = [
            self._actor_cls.options(
                **actor_options(self._ray, config=self.config, kind=LEARNER, index=rank, resources=resources)
            ).remote(self.config, self.module_specs, rank, world)
            for rank in range(world)
        ]
        # Bounded like a runner's start: a learner that no node can hold must not hang the build.
        where = get_all(
            self._ray,
            [(self.label(r), a.node_and_free_port.remote()) for r, a in enumerate(self.actors)],
            doing="starting",
            timeout_s=self.config.env_runner_restore_timeout_s,
            stop=self._stop,
            setting="env_runner_restore_timeout_s",
            hint=(
                f"Each learner reserves {resources or 'nothing'} (num_cpus_per_learner, num_gpus_per_learner, "
                "custom_resources_per_learner): it may be waiting for a node that has them (ray status)."
            ),
        )
        self._nodes = [node for node, _, _ in where]
        nodes = set(self._nodes)
        address = "127.0.0.1" if len(nodes) == 1 else where[0][1]
        port = where[0][2]
        get_all(
            self._ray,
            [(self.label(r), a.init_process_group.remote(address, port)) for r, a in enumerate(self.actors)],
            doing="joining the process group",
        )
        if state is not None:
            get_all(
                self._ray,
                [(self.label(r), a.set_state.remote(state)) for r, a in enumerate(self.actors)],
                doing="taking the group's state",
            )

    def _alive(self) -> list[int]:
        """The ranks that answer a ping in time (a hung learner counts as dead)."""
        alive = []
        pings = [actor.ping.remote() for actor in self.actors]  # all in flight at once
        timeout = min(HEALTH_PROBE_TIMEOUT_S, float(self.config.checkpoint_timeout_s))
        _, late = self._ray.wait(pings, num_returns=len(pings), timeout=timeout) if pings else ([], [])
        late_refs = set(late)
        for rank, ping in enumerate(pings):
            if ping in late_refs:
                continue
            try:
                self._ray.get(ping)
                alive.append(rank)
            except self._ray.exceptions.RayActorError:
                pass
        return alive

    def _get_in_time(self, calls: list[tuple[str, Any]], *, doing: str) -> list[Any]:
        """:func:`get_all` within ``checkpoint_timeout_s``; learners that miss it are stopped."""
        return get_all(self._ray, calls, doing=doing, timeout_s=self.config.checkpoint_timeout_s, stop=self._stop)

    def _stop(self, labels: Sequence[str]) -> None:
        """Kill the learners named ``labels``; :meth:`replace_dead` rebuilds the group on its next use."""
        stop_named(self._ray, self.actors, self.label, labels)

    def replace_dead(self) -> bool:
        """Rebuild all learners from a survivor's state if any learner died; return whether it did.

        Raises:
            CheckpointError: Every learner died (restore a checkpoint to go on).
        """
        if self._broken is not None:
            raise CheckpointError(self._broken)
        alive = self._alive()
        if len(alive) == len(self.actors):
            return False
        if not alive:
            raise CheckpointError(
                "Every learner actor died, and the learners' state is gone with them. Restore the "
                "algorithm from its latest checkpoint (restore_from_path) to go on."
            )
        state = self._get_in_time(
            [(self.label(alive[0]), self.actors[alive[0]].get_state.remote())], doing="reporting its state"
        )[0]
        self.close()
        self._start(self._ray.put(state))
        return True

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """A data-parallel update on every learner; returns learner 0's metrics."""
        self.replace_dead()
        ref = self._ray.put({module_id: dict(batch) for module_id, batch in batches.items()})
        calls = [(self.label(r), a.update.remote(ref)) for r, a in enumerate(self.actors)]
        refs = [call_ref for _, call_ref in calls]
        remaining = list(refs)
        while remaining:  # the first failure ends the wait: the others would wait for it in an all-reduce
            done, remaining = self._ray.wait(remaining, num_returns=1)
            try:
                get_all(self._ray, [c for c in calls if c[1] in done], doing="updating")
            except CheckpointError as err:
                self._break(err)
                raise
        results = get_all(self._ray, calls, doing="updating")
        metrics: dict[str, float] = results[0]
        return metrics

    def _break(self, err: CheckpointError) -> None:
        """A learner failed during an update: stop them all, and refuse to go on without a restore.

        The survivors are inside the same update (waiting for the failed one in an all-reduce, or
        part-way through its minibatches): no learner holds a state from before or after it, so
        none can seed a rebuilt group.
        """
        self.close()
        self._broken = (
            f"The learners' state was lost: {err} The other learners were stopped in the middle of the same "
            "update. Restore the algorithm from its latest checkpoint (restore_from_path, or "
            "CheckpointManager.restore_latest) to go on; RLlib's learners stop the run here too."
        )

    def add_module(
        self, module_id: str, module_spec: RLModuleSpec | RLModule, config_overrides: Mapping[str, Any] | None
    ) -> RLModule:
        """Add a module to the local learner, then to every learner with its weights; return the local one.

        A restart after a failure keeps it.
        """
        module = self.local.add_module(module_id, module_spec, config_overrides=config_overrides)
        spec = module.spec
        self.replace_dead()
        ref = self._ray.put(module.get_state())
        get_all(
            self._ray,
            [
                (self.label(r), a.add_module.remote(module_id, spec, config_overrides, ref))
                for r, a in enumerate(self.actors)
            ],
            doing="adding a module",
        )
        self.module_specs[module_id] = spec
        self.config = self._updated_config(module_id, config_overrides)
        return module

    def remove_module(self, module_id: str) -> RLModule:
        """Remove a module from the local learner, then from every learner; return the local one."""
        module = self.local.remove_module(module_id)
        self.replace_dead()
        get_all(
            self._ray,
            [(self.label(r), a.remove_module.remote(module_id)) for r, a in enumerate(self.actors)],
            doing="removing a module",
        )
        self.module_specs.pop(module_id, None)
        self.config = self._updated_config(module_id, None)
        return module

    def _updated_config(self, module_id: str, overrides: Mapping[str, Any] | None) -> AlgorithmConfig:
        import dataclasses

        per_module = dict(self.config.algorithm_config_overrides_per_module)
        per_module.pop(module_id, None)
        if overrides:
            per_module[module_id] = dict(overrides)
        return dataclasses.replace(self.config, algorithm_config_overrides_per_module=per_module)

    def get_weights_ref(self) -> Any:
        """An object reference to learner 0's weights (module id -> RLModule state, numpy arrays)."""
        return self.actors[0].get_weights_for_broadcast.remote()

    def get_weights(self) -> dict[str, Any]:
        """Learner 0's weights (module id -> RLModule state, torch tensors)."""
        weights: dict[str, Any] = get_all(
            self._ray, [(self.label(0), self.actors[0].get_weights.remote())], doing="reporting its weights"
        )[0]
        return weights

    def get_module(self, module_id: str) -> RLModule:
        """The local module ``module_id`` with learner 0's weights."""
        module = self.local.module[module_id]
        module.set_state(self.get_weights()[module_id])
        return module

    def get_state(self, components: Any = None, not_components: Any = None) -> dict[str, Any]:
        """Learner 0's state (all learners hold the same)."""
        result: dict[str, Any] = self._get_in_time(
            [(self.label(0), self.actors[0].get_state.remote(components, not_components))],
            doing="reporting its state",
        )[0]
        return result

    def get_all_states(self) -> list[dict[str, Any]]:
        """Every learner's state, by rank (to check that they are identical)."""
        refs = [(self.label(r), a.get_state.remote()) for r, a in enumerate(self.actors)]
        return get_all(self._ray, refs, doing="reporting its state")

    def set_state(self, state: dict[str, Any]) -> None:
        """Give every learner ``state`` (put in the object store once)."""
        ref = self._ray.put(state)
        self._get_in_time(
            [(self.label(r), a.set_state.remote(ref)) for r, a in enumerate(self.actors)], doing="taking a state"
        )

    def close(self) -> None:
        """Kill the actors."""
        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone
                self._ray.kill(actor)
        self.actors = []

    # ------------------------------------------------------------------ delegate of the `learner` folder

    @property
    def restores_local_copy(self) -> bool:
        """The driver's learner is only a shape (class, components, constructor); it is not restored."""
        return False

    def _prepare(self, *, loading: bool) -> None:
        """Replace dead learners first: every learner takes part in a load, learner 0 writes.

        A load into learners whose state was lost (a failed update, or every learner dead)
        starts fresh learners: the load gives them their state.
        """
        if loading and (self._broken is not None or not self._alive()):
            self.close()
            self._broken = None
            self._start()
            return
        self.replace_dead()

    def _start_actor_loads(
        self, folder: DelegatedFolder, *, component: str | None, allow_pickle: bool
    ) -> list[tuple[str, Any]]:
        """The first learner on each node reads and verifies the folder; the others there take what it read.

        Every learner holds the same state: one download per node, not one per learner. The
        read goes to the others through the node's object store (the driver never fetches it).
        A failed read fails the others' calls too: nothing is applied anywhere.
        """
        readers: dict[str, Any] = {}
        calls = []
        for rank, actor in enumerate(self.actors):
            node = self._nodes[rank]
            if node in readers:
                calls.append((self.label(rank), actor.adopt_loaded.remote(readers[node])))
                continue
            done, readers[node] = actor.load_shared.options(num_returns=2).remote(
                folder, component=component, allow_pickle=allow_pickle
            )
            calls.append((self.label(rank), done))
        return calls

    def _start_actor_save(self, folder: DelegatedFolder, *, allow_pickle: bool) -> tuple[str, Any]:
        """Learner 0 writes ``learner_group/learner/`` (all learners hold the same state)."""
        return self.label(0), self.actors[0].save.remote(folder, allow_pickle=allow_pickle)

    def _driver_state(self) -> dict[str, Any]:
        """Learner 0's state."""
        return self.get_state()

    def _apply_driver_read(self, loaded: LoadedComponent, component: str | None) -> None:
        """Every learner takes the state read (of ``component`` only, when given)."""
        self.set_state(nest_state(component, loaded.state()))
