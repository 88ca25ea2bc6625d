"""Learner: the MultiRLModule, one optimizer per module, the LR schedule and the update loop.

The generic part of training, as in RLlib's ``Learner``: for each module,
``num_epochs`` passes over the batch in shuffled minibatches; each minibatch
asks the algorithm's learner for its loss (:meth:`Learner.compute_loss_for_module`,
e.g. :class:`~cairn.rl.algorithms.ppo.ppo_learner.PPOLearner`), clips the
gradient norm and steps the optimizer. Shuffling uses the learner's own
``torch.Generator``, whose state is checkpointed with the optimizers, so a
restored learner takes exactly the steps the original would have.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import torch

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.core.columns import Columns
from cairn.rl.core.learner.gradients import GradientsAPI
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.utils._util import Names
from cairn.rl.utils.metrics.constants import LEARNER_RESULTS
from cairn.rl.utils.nested import index_rows, leading_rows, map_leaves
from cairn.state_checks import Schema, count, counts_by_id, mapping
from cairn.torch import clone_state, generator_state, normalize_optimizer_state

__all__ = ["DEFAULT_OPTIMIZER", "Learner", "LinearSchedule", "PiecewiseSchedule", "TrainBatch", "lr_schedule_for"]

DEFAULT_OPTIMIZER = "default"
"""The name of a module's optimizer when it has one (PPO); algorithms with several
(SAC: ``"qf"``, ``"policy"``, ``"alpha"``) name theirs in
:meth:`Learner.configure_optimizers_for_module`."""

TrainBatch = Mapping[str, npt.NDArray[Any]]
"""One module's training data, flat ``[B, ...]`` arrays by column name (the
algorithm decides the columns; PPO's are ``obs``, ``actions``, ``action_logp``,
``vf_preds``, ``advantages``, ``value_targets``). ``obs`` may be a dict (tuple) of such arrays:
the Dict/Tuple observations of a module that takes them (``RLModule.takes_nested_observations``);
every leaf is indexed alike."""


class LinearSchedule:
    """A value that falls linearly from ``start`` to ``end`` over ``horizon`` timesteps.

    Args:
        start: Value at timestep 0.
        end: Value from ``horizon`` on.
        horizon: Timesteps of the decay; ``None`` keeps ``start`` for ever.
    """

    def __init__(self, start: float, end: float = 0.0, horizon: int | None = None) -> None:
        self.start = float(start)
        self.end = float(end)
        self.horizon = horizon

    def value(self, timestep: int) -> float:
        """The value at ``timestep``."""
        if self.horizon is None or self.horizon <= 0:
            return self.start
        frac = min(1.0, max(0.0, timestep / self.horizon))
        return self.start + frac * (self.end - self.start)


class PiecewiseSchedule:
    """RLlib's learning-rate schedule ``[[t0, v0], [t1, v1], ...]``: linear between the points, the last value after.

    Args:
        points: ``(timestep, value)`` pairs, the first at timestep 0, timesteps increasing
            (checked by the config: ``AlgorithmConfig.lr_schedule``).
    """

    def __init__(self, points: Sequence[Sequence[float]]) -> None:
        self.points = [(int(t), float(v)) for t, v in points]

    def value(self, timestep: int) -> float:
        """The value at ``timestep``."""
        start_t, start_v = self.points[0]
        for end_t, end_v in self.points[1:]:
            if timestep < end_t:
                return start_v + (end_v - start_v) * max(0, timestep - start_t) / (end_t - start_t)
            start_t, start_v = end_t, end_v
        return start_v


def lr_schedule_for(config: Any) -> LinearSchedule | PiecewiseSchedule:
    """A module config's learning-rate schedule: its ``lr_schedule`` points (RLlib's list form of ``lr``) if it
    has them, else ``lr`` falling linearly to 0 over ``lr_anneal_timesteps`` (constant when that is None)."""
    if config.lr_schedule:
        return PiecewiseSchedule(config.lr_schedule)
    return LinearSchedule(config.lr, 0.0, config.lr_anneal_timesteps)


def _writable(value: Any) -> np.ndarray:
    """``value`` as an array torch may share memory with: a read-only one is copied.

    Batches that come through Ray's object store are read-only numpy views of shared
    memory; a tensor over them that anything wrote into in place would write there.
    """
    arr = np.asarray(value)
    return arr if arr.flags.writeable else arr.copy()


class Learner(GradientsAPI, Checkpointable):
    """Trains a MultiRLModule: optimizers, schedules, counters and the minibatch loop.

    An algorithm subclasses it and implements :meth:`compute_loss_for_module`
    (and, if it likes, :meth:`configure_optimizer_for_module` and
    :meth:`compute_metrics_for_module`).

    Components: ``rl_module`` (the :class:`MultiRLModule`). Own state: the
    optimizer states of each module, the shuffling RNG, counters (from which the
    learning-rate schedule is computed).

    A module has one optimizer (:data:`DEFAULT_OPTIMIZER`) unless the algorithm's
    learner names several in :meth:`configure_optimizers_for_module` and returns
    one loss per optimizer from :meth:`compute_losses_for_module` (SAC: the
    Q-networks, the policy and the entropy coefficient). A module with one
    optimizer is checkpointed as before (``optimizers/<module id>`` is that
    optimizer's state), one with several as ``optimizers/<module id>/<name>``.
    A module without trainable parameters (a heuristic policy, RLlib's
    ``RandomRLModule``) has no optimizer and no entry; it acts but cannot be updated.
    Modules outside ``policies_to_train`` that have parameters keep their optimizer
    (a later ``add_module(new_should_module_be_updated=...)`` may train them, and
    checkpoints of earlier versions hold it).

    Each module trains with its own config (:meth:`config_for_module`: the
    config with ``algorithm_config_overrides_per_module`` applied): its
    learning rate and schedule, epochs, minibatch size, clipping and loss settings.

    Args:
        config: The algorithm's config (``lr``, ``lr_anneal_timesteps``,
            ``num_epochs``, ``minibatch_size``, ``max_grad_norm``, ``seed``,
            ``algorithm_config_overrides_per_module`` and whatever the loss reads).
        module_specs: Module id -> spec of each module to train.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    state_schema: ClassVar[Schema] = Schema(
        {"counters": Schema({"num_updates_lifetime": count, "num_module_steps_trained_lifetime": counts_by_id})}
    )
    """What the state holds besides its RNG (checked by hand) and its module and optimizers (components);
    a subclass adds its own (``Learner.state_schema | Schema(...)``)."""

    supports_stateful_modules: ClassVar[bool] = False
    """A capability: whether the loss trains stateful (recurrent) modules on sequences
    (:mod:`cairn.rl.core.rl_module.stateful`); a learner without it refuses them when built."""

    def __init__(self, config: AlgorithmConfig, module_specs: Mapping[str, RLModuleSpec]) -> None:
        self.config = config
        self._module_configs: dict[str, AlgorithmConfig] = {}
        self.module = MultiRLModule({module_id: self._complete_spec(spec) for module_id, spec in module_specs.items()})
        self.lr_schedules: dict[str, LinearSchedule | PiecewiseSchedule] = {}
        self.named_optimizers: dict[str, dict[str, torch.optim.Optimizer]] = {}
        self.num_module_steps_trained_lifetime: dict[str, int] = {}
        for module_id, module in self.module.items():
            self._check_stateful(module_id, module)
            self._add_optimizer(module_id, module)
        seed = int(np.random.SeedSequence([config.seed, 15485863]).generate_state(1)[0])
        self._generator = torch.Generator().manual_seed(seed)
        self.num_updates_lifetime = 0

    def _complete_spec(self, spec: RLModuleSpec) -> RLModuleSpec:
        # A spec without a class (recorded by cairn 0.1, or written by hand) builds the algorithm's default module.
        if spec.module_class is None:
            return replace(spec, module_class=self.config.get_default_rl_module_class())
        return spec

    def config_for_module(self, module_id: str) -> AlgorithmConfig:
        """The config of module ``module_id``: :attr:`config` with that module's
        ``algorithm_config_overrides_per_module`` applied (RLlib's ``get_config_for_module``)."""
        module_config = self._module_configs.get(module_id)
        if module_config is None:
            module_config = self.config.get_config_for_module(module_id)
            self._module_configs[module_id] = module_config
        return module_config

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Module id -> its :data:`DEFAULT_OPTIMIZER` (modules with named optimizers only are left out).

        A new dict each time; :attr:`named_optimizers` holds every optimizer of every module.
        """
        return {
            module_id: named[DEFAULT_OPTIMIZER]
            for module_id, named in self.named_optimizers.items()
            if DEFAULT_OPTIMIZER in named
        }

    def configure_optimizer_for_module(self, module_id: str, module: RLModule) -> torch.optim.Optimizer:
        """The optimizer of a new module: Adam with the module's ``lr`` and CleanRL's ``eps=1e-5``.

        Override it for another optimizer; its ``state_dict`` is checkpointed.
        """
        return torch.optim.Adam(module.parameters(), lr=self.config_for_module(module_id).lr, eps=1e-5)

    def configure_optimizers_for_module(self, module_id: str, module: RLModule) -> dict[str, torch.optim.Optimizer]:
        """The optimizers of a new module by name: ``{DEFAULT_OPTIMIZER: configure_optimizer_for_module(...)}``.

        Override it when parts of a module learn with their own optimizers (SAC);
        :meth:`compute_losses_for_module` then returns a loss per name. Names are
        path segments of the checkpoint, so they may not be ``"state"`` or
        ``"param_groups"`` (the keys of an optimizer's own state).
        """
        return {DEFAULT_OPTIMIZER: self.configure_optimizer_for_module(module_id, module)}

    def _check_stateful(self, module_id: str, module: RLModule) -> None:
        """Refuse a stateful module with trainable parameters when the loss does not train on sequences.

        Raises:
            ValueError: It is; the message names the module and the algorithm that trains it.
        """
        if self.supports_stateful_modules or not any(p.requires_grad for p in module.parameters()):
            return
        if module.is_stateful():
            raise ValueError(
                f"Module {module_id!r} ({type(module).__qualname__}) is stateful (get_initial_state() is not empty), "
                f"and {type(self).__name__} trains stateless modules only: train recurrent modules with PPO."
            )

    def _add_optimizer(self, module_id: str, module: RLModule) -> None:
        module_config = self.config_for_module(module_id)
        self.lr_schedules[module_id] = lr_schedule_for(module_config)
        self.num_module_steps_trained_lifetime.setdefault(module_id, 0)
        if not any(param.requires_grad for param in module.parameters()):
            # A module with nothing to learn (a heuristic policy) gets no optimizer: torch refuses an empty
            # parameter list, and its checkpoint then holds no optimizers/<module id> (RLlib builds none either).
            self.named_optimizers[module_id] = {}
            return
        named = self.configure_optimizers_for_module(module_id, module)
        clash = sorted(set(named) & {"state", "param_groups"})
        if not named or clash:
            raise ValueError(
                f"{type(self).__name__}.configure_optimizers_for_module({module_id!r}) returned names "
                f"{sorted(named)}: give at least one optimizer, and none named 'state' or 'param_groups' "
                "(those keys mark a single optimizer's state in a checkpoint)."
            )
        self.named_optimizers[module_id] = named

    def _set_overrides(self, module_id: str, overrides: Mapping[str, Any] | None) -> None:
        # A new config object (never a change to the shared one): the constructor arguments this
        # learner records then rebuild it with exactly its modules' overrides.
        per_module = dict(self.config.algorithm_config_overrides_per_module)
        if overrides:
            per_module[module_id] = dict(overrides)
        else:
            per_module.pop(module_id, None)
        if per_module != self.config.algorithm_config_overrides_per_module:
            self.config = replace(self.config, algorithm_config_overrides_per_module=per_module)
        self._module_configs.pop(module_id, None)
        self.config_for_module(module_id)  # an unknown setting fails here, before anything changed

    def add_module(
        self,
        module_id: str,
        module: RLModule | RLModuleSpec | None = None,
        *,
        module_spec: RLModuleSpec | None = None,
        config_overrides: Mapping[str, Any] | None = None,
    ) -> RLModule:
        """Add a module to train, with a new optimizer; returns the module.

        Args:
            module_id: The new module's id (one path segment).
            module: The module, or a spec to build it from (its missing class is
                the algorithm's default module; its spaces must be given).
            module_spec: The spec, by RLlib's keyword (give it or ``module``).
            config_overrides: Settings of this module that differ from the config
                (``{"lr": 1e-3}``), kept in ``algorithm_config_overrides_per_module``.

        Raises:
            ValueError: An invalid or existing id, an unknown setting in ``config_overrides``,
                neither or both of ``module`` and ``module_spec``.
        """
        if (module is None) == (module_spec is None):
            raise ValueError(f"add_module({module_id!r}): give the module or its spec (module_spec=), one of them.")
        module = module if module is not None else module_spec
        assert module is not None  # for mypy: one of them is given
        if module_id in self.module:
            raise ValueError(f"Module id {module_id!r} already exists; remove it first.")
        previous = self.config
        try:
            self._set_overrides(module_id, config_overrides)
            built = module if isinstance(module, RLModule) else self._complete_spec(module).build()
            self._check_stateful(module_id, built)
            self.module.add_module(module_id, built)
        except Exception:
            self.config = previous
            self._module_configs.pop(module_id, None)
            raise
        self._add_optimizer(module_id, built)
        return built

    def remove_module(self, module_id: str) -> RLModule:
        """Stop training ``module_id`` and return it (its optimizer and overrides go too)."""
        module = self.module.remove_module(module_id)
        del self.named_optimizers[module_id]
        self.lr_schedules.pop(module_id, None)
        self.num_module_steps_trained_lifetime.pop(module_id, None)
        self._set_overrides(module_id, None)
        self._module_configs.pop(module_id, None)
        return module

    def get_weights(self) -> dict[str, Any]:
        """Module id -> RLModule state (copies), for the env runners."""
        return self.module.get_state()

    # ------------------------------------------------------------------ the update

    def compute_loss_for_module(
        self, module_id: str, module: RLModule, minibatch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of one minibatch and its statistics (averaged over the update).

        Each algorithm's learner implements it; the base class has no loss.

        Args:
            module_id: The module being trained.
            module: That module, in training mode.
            minibatch: Column name -> tensor, the rows of this minibatch.

        Returns:
            ``(loss, stats)``: a scalar tensor to minimize and floats to report.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no loss: an algorithm's learner (PPOLearner, ...) implements "
            "compute_loss_for_module, and its config's get_default_learner_class names it."
        )

    def compute_losses_for_module(
        self, module_id: str, module: RLModule, minibatch: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """One loss per optimizer of the module, and statistics (RLlib keeps a loss per optimizer too).

        By default ``{DEFAULT_OPTIMIZER: loss}`` of :meth:`compute_loss_for_module`.
        A learner with named optimizers overrides it; each loss's gradients go to
        its optimizer's parameters only, every gradient is computed before any
        optimizer steps (so all losses see the same weights), and a name left out
        of the dict does not step this time (a delayed policy update, say).
        """
        loss, stats = self.compute_loss_for_module(module_id, module, minibatch)
        return {DEFAULT_OPTIMIZER: loss}, stats

    def compute_metrics_for_module(self, module_id: str, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Metrics of a whole batch after its update (none by default)."""
        return {}

    def join_collectives_without_rows(self, module_id: str) -> None:
        """Take part in the collectives :meth:`compute_loss_for_module` runs, with no rows.

        Data-parallel learners (``cairn.rl.distributed``) call it when a
        minibatch has no rows for them, so that the all-reduces of the others
        are matched; a loss that calls :meth:`normalize_over_minibatch`
        overrides it to call that with an empty tensor.
        """

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """One update of every module that has a batch.

        Args:
            batches: Module id -> flat training batch.

        Returns:
            Metrics at their result paths, ``"learners/<module id>/<metric>"`` (RLlib's names).
        """
        metrics: dict[str, float] = {}
        for module_id, batch in batches.items():
            module_metrics = self._update_module(module_id, batch)
            for name, value in module_metrics.items():
                metrics[f"{LEARNER_RESULTS}/{module_id}/{name}"] = value
        return metrics

    def _update_module(self, module_id: str, batch: TrainBatch) -> dict[str, float]:
        config = self.config_for_module(module_id)
        module = self.module[module_id]
        optimizers = self.named_optimizers[module_id]
        if not optimizers:
            raise ValueError(
                f"Module {module_id!r} ({type(module).__qualname__}) has no trainable parameters, so it cannot be "
                "updated; leave it out of policies_to_train (config.multi_agent(policies_to_train=[...]))."
            )
        # A column may be a dict (tuple) of arrays: the Dict/Tuple observations of a module that takes them.
        data = {key: map_leaves(lambda leaf: torch.as_tensor(_writable(leaf)), value) for key, value in batch.items()}
        size = leading_rows(next(iter(data.values())))
        minibatch_size = int(config.minibatch_size)
        mask = data.get(Columns.LOSS_MASK)
        if mask is not None:  # rows are zero-padded sequences (stateful modules): a minibatch holds whole ones
            self._check_sequences(module_id, module, mask)
            minibatch_size = max(1, minibatch_size // int(mask.shape[1]))
        # The schedule drives the default optimizer; named ones keep the rates their learner gave them.
        lr = self.lr_schedules[module_id].value(self.num_module_steps_trained_lifetime[module_id])
        if DEFAULT_OPTIMIZER in optimizers:
            for group in optimizers[DEFAULT_OPTIMIZER].param_groups:
                group["lr"] = lr
        sums: dict[str, float] = {}
        steps = 0
        module.train()
        for _ in range(int(config.num_epochs)):
            order = torch.randperm(size, generator=self._generator)
            for start in range(0, size, minibatch_size):
                idx = self._local_indices(order[start : start + minibatch_size])
                rows = {k: index_rows(v, idx) for k, v in data.items()}
                stats = self._minibatch_step(module_id, module, optimizers, rows)
                for name, value in stats.items():
                    sums[name] = sums.get(name, 0.0) + value
                steps += 1
                self.num_updates_lifetime += 1
        module.eval()
        trained = size if mask is None else int(mask.sum())  # env steps, not padding
        self.num_module_steps_trained_lifetime[module_id] += trained
        metrics = {name: total / max(steps, 1) for name, total in sums.items()}
        metrics.update(self.compute_metrics_for_module(module_id, data))
        if DEFAULT_OPTIMIZER in optimizers:
            metrics["lr"] = lr
        metrics["num_module_steps_trained"] = float(trained)
        metrics["num_module_steps_trained_lifetime"] = float(self.num_module_steps_trained_lifetime[module_id])
        return metrics

    def _check_sequences(self, module_id: str, module: RLModule, mask: torch.Tensor) -> None:
        """Refuse a batch of sequences this learner cannot train (a learner without a sequence loss).

        Raises:
            ValueError: The learner does not train stateful modules, or the mask is not ``[S, T]``.
        """
        if not self.supports_stateful_modules:
            raise ValueError(
                f"{type(self).__name__} got a batch of sequences (Columns.LOSS_MASK) for module {module_id!r} "
                f"({type(module).__qualname__}): it trains stateless modules only; PPO trains recurrent ones."
            )
        if mask.dim() != 2:
            raise ValueError(f"Columns.LOSS_MASK of module {module_id!r} must be [sequences, max_seq_len].")

    @staticmethod
    def _num_rows(mb: Mapping[str, torch.Tensor]) -> int:
        """The rows a minibatch's loss averages over: its env steps (the padding of sequences is not)."""
        mask = mb.get(Columns.LOSS_MASK)
        return leading_rows(next(iter(mb.values()))) if mask is None else int(mask.sum())

    # Hooks of data-parallel learners (cairn.rl.distributed); a single learner uses
    # the whole minibatch, normalizes over it and keeps its own gradients.

    def _local_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """The rows of a minibatch (indices into the batch) this learner computes on."""
        return indices

    def normalize_over_minibatch(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` normalized to mean 0, std 1 over the minibatch (unchanged with one row).

        Data-parallel learners normalize over the whole minibatch, all learners'
        rows together, so a loss gives the same result at any scale.
        """
        if values.numel() <= 1:
            return values
        return (values - values.mean()) / (values.std() + 1e-8)

    def mean_over_minibatch(self, total: float, rows: int) -> float:
        """``total / rows``, a statistic of the minibatch (``NaN`` without rows).

        Data-parallel learners sum ``total`` and ``rows`` over all learners first, so that
        every learner reads the same value of the whole minibatch (PPO's adaptive KL
        coefficient, which must stay equal on all of them).
        """
        return total / rows if rows else float("nan")

    def _reduce_gradients(self, module: RLModule, num_rows: int) -> None:
        """Combine this learner's gradients (of ``num_rows`` rows) with the other learners'."""

    def _minibatch_step(
        self,
        module_id: str,
        module: RLModule,
        optimizers: Mapping[str, torch.optim.Optimizer],
        mb: Mapping[str, torch.Tensor],
    ) -> dict[str, float]:
        if set(optimizers) != {DEFAULT_OPTIMIZER}:
            return self._named_minibatch_step(module_id, module, optimizers, mb)
        optimizer = optimizers[DEFAULT_OPTIMIZER]
        loss, stats = self.compute_loss_for_module(module_id, module, mb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        self._reduce_gradients(module, self._num_rows(mb))
        max_grad_norm = self.config_for_module(module_id).max_grad_norm
        if max_grad_norm is not None:
            grad_norm = torch.nn.utils.clip_grad_norm_(module.parameters(), max_grad_norm)
        else:
            grad_norm = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in module.parameters() if p.grad is not None])
            )
        optimizer.step()
        return {"total_loss": float(loss.detach()), **stats, "grad_norm": float(grad_norm)}

    def _named_minibatch_step(
        self,
        module_id: str,
        module: RLModule,
        optimizers: Mapping[str, torch.optim.Optimizer],
        mb: Mapping[str, torch.Tensor],
    ) -> dict[str, float]:
        losses, stats = self.compute_losses_for_module(module_id, module, mb)
        unknown = sorted(set(losses) - set(optimizers))
        if unknown:
            raise ValueError(
                f"{type(self).__name__}.compute_losses_for_module({module_id!r}) returned losses {unknown} "
                f"for which the module has no optimizer (it has {sorted(optimizers)})."
            )
        for param in module.parameters():
            param.grad = None
        # Every gradient first, then every step: a loss that reads another optimizer's parameters
        # (SAC's policy loss reads the Q-networks) sees them before any of them changed.
        names = list(losses)
        for i, name in enumerate(names):
            params = [p for group in optimizers[name].param_groups for p in group["params"]]
            grads = torch.autograd.grad(losses[name], params, retain_graph=i < len(names) - 1, allow_unused=True)
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad
        self._reduce_gradients(module, self._num_rows(mb))
        max_grad_norm = self.config_for_module(module_id).max_grad_norm
        out: dict[str, float] = dict(stats)
        for name in names:
            params = [p for group in optimizers[name].param_groups for p in group["params"] if p.grad is not None]
            if max_grad_norm is not None and params:
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizers[name].step()
            out[f"{name}_loss"] = float(losses[name].detach())
        return out

    # ------------------------------------------------------------------ Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``rl_module``: the MultiRLModule."""
        return [("rl_module", self.module)]

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Optimizer states (module id -> ``optimizer.state_dict()``), RNG, counters, components."""
        state: dict[str, Any] = {
            "optimizers": clone_state(self._optimizer_states()),
            "rng": {"torch": self._generator.get_state()},
            "counters": {
                "num_updates_lifetime": self.num_updates_lifetime,
                "num_module_steps_trained_lifetime": dict(self.num_module_steps_trained_lifetime),
            },
        }
        state.update(self._get_components_state(components, not_components=not_components))
        return state

    def get_state_buffers(self) -> dict[str, Any] | None:
        """The optimizers' live state tensors (Adam's moments): a restore from local disk reads into them."""
        # The generator state has no live tensor (get_state copies it): None, so it is read into a fresh one.
        return {"optimizers": self._optimizer_states(), "rng": {"torch": None}}

    def _optimizer_states(self) -> dict[str, Any]:
        # A module with only the default optimizer keeps cairn 0.1's layout (optimizers/<module id>).
        return {
            module_id: named[DEFAULT_OPTIMIZER].state_dict()
            if set(named) == {DEFAULT_OPTIMIZER}
            else {name: optimizer.state_dict() for name, optimizer in named.items()}
            for module_id, named in self.named_optimizers.items()
            if named  # a module without parameters has no optimizer, and no entry
        }

    def check_state(self, state: dict[str, Any], components: Collection[str]) -> None:
        """Refuse counters that are no counts and an RNG state torch would refuse, before anything changes.

        Raises:
            CorruptCheckpointError: A counter that is NaN, negative, a float or a str, or
                an RNG state that is no torch generator state.
        """
        super().check_state(state, components)  # state_schema
        # By hand: the RNG state's size is the live generator's, and its bytes are checked only once read.
        self._check_rng(state, values=False)  # during a restore the array does not hold its bytes yet

    def _check_rng(self, state: Mapping[str, Any], *, values: bool) -> None:
        """The RNG state's layout (and, with ``values``, that a fresh torch generator takes it).

        Raises:
            CorruptCheckpointError: Not the uint8 bytes of a generator state, or ones torch refuses.
        """
        rng = mapping(state.get("rng", {}), where="rng")
        if "torch" in rng:
            generator_state(self._generator, rng["torch"], where="rng/torch", values=values)

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what ``state`` holds; modules, optimizers and keys it lacks are left as is.

        Raises:
            IncompatibleCheckpointError: An optimizer state that does not fit its
                module (another number or shape of parameters).
            CorruptCheckpointError: What :meth:`check_state` refuses (checked first here too,
                for a state handed over directly, as a remote learner's is).
        """
        self.check_state(state, ())
        self._check_rng(state, values=True)  # the bytes are there now: refused before anything changes
        self._set_components_state(state)
        for module_id, optimizer_state in state.get("optimizers", {}).items():
            named = self.named_optimizers.get(module_id)
            if named is None:
                continue
            single = "param_groups" in optimizer_state
            if single != (set(named) == {DEFAULT_OPTIMIZER}):
                raise IncompatibleCheckpointError(
                    f"The checkpoint holds {'one optimizer' if single else sorted(optimizer_state)} for module "
                    f"{module_id!r}, but this {type(self).__name__} has {sorted(named)}; the checkpoint was "
                    "written by another algorithm's learner. Restore it with that algorithm."
                )
            per_name = {DEFAULT_OPTIMIZER: optimizer_state} if single else optimizer_state
            for name, optimizer in named.items():
                if name not in per_name:
                    continue
                try:
                    optimizer.load_state_dict(normalize_optimizer_state(per_name[name], optimizer))
                except (ValueError, KeyError, RuntimeError) as err:
                    raise IncompatibleCheckpointError(
                        f"The state of optimizer {name!r} of module {module_id!r} does not fit this learner's "
                        f"module: {err}. The checkpoint was written for another architecture."
                    ) from err
        if "rng" in state and "torch" in state["rng"]:
            self._generator.set_state(torch.as_tensor(state["rng"]["torch"], dtype=torch.uint8))
        counters = state.get("counters", {})
        if "num_updates_lifetime" in counters:
            self.num_updates_lifetime = int(counters["num_updates_lifetime"])
        for module_id, steps in counters.get("num_module_steps_trained_lifetime", {}).items():
            if module_id in self.named_optimizers:
                self.num_module_steps_trained_lifetime[module_id] = int(steps)

    @property
    def module_specs(self) -> dict[str, RLModuleSpec]:
        """Module id -> spec of each module trained now (after any add_module / remove_module)."""
        return self.module.specs

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config, module_specs), {})`` of the modules trained now, so that from_checkpoint
        rebuilds exactly them (an added module is not dropped, a removed one does not come back)."""
        return (self.config, self.module_specs), {}
