"""Learner: the MultiRLModule, one Adam per module, the LR schedule and the PPO loss.

The update reads top to bottom as in CleanRL's ``ppo.py``: for each module,
``num_epochs`` passes over the batch in shuffled minibatches; each minibatch
computes the clipped surrogate, the value loss and the entropy bonus, clips
the gradient norm and steps Adam. Shuffling uses the learner's own
``torch.Generator``, whose state is checkpointed with the optimizers, so a
restored learner takes exactly the steps the original would have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.rl._util import Names, clone_tree
from cairn.rl.multi_rl_module import MultiRLModule
from cairn.rl.rl_module import RLModule, RLModuleSpec

if TYPE_CHECKING:
    from cairn.rl.ppo import PPOConfig

__all__ = ["Learner", "LinearSchedule", "TrainBatch"]

TrainBatch = Mapping[str, npt.NDArray[Any]]
"""One module's training data, flat ``[B, ...]``: ``obs``, ``actions``,
``action_logp``, ``vf_preds``, ``advantages``, ``value_targets``."""


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


def _normalize_optimizer_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """Bring an optimizer state dict back to the types torch uses.

    cairn's codec keeps types, but a state written by another tool or edited by
    hand may hold betas as a list or a 0-d tensor; Adam's ``betas`` must be a
    tuple of floats and ``lr``/``eps``/``weight_decay`` floats (RLlib #51560).
    """
    groups = []
    for group in state["param_groups"]:
        group = dict(group)
        for key in ("lr", "eps", "weight_decay"):
            if key in group and isinstance(group[key], torch.Tensor | np.ndarray):
                group[key] = float(group[key])
        if "betas" in group:
            group["betas"] = tuple(float(b) for b in group["betas"])
        group["params"] = [int(p) for p in group["params"]]
        groups.append(group)
    per_param = {
        int(k): {name: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for name, v in s.items()}
        for k, s in state["state"].items()
    }
    return {"state": per_param, "param_groups": groups}


class Learner(Checkpointable):
    """Trains a MultiRLModule with PPO.

    Components: ``rl_module`` (the :class:`MultiRLModule`). Own state: one
    optimizer state per module, the shuffling RNG, counters (from which the
    learning-rate schedule is computed).

    Args:
        config: The PPO config (``lr``, ``lr_anneal_timesteps``, ``num_epochs``,
            ``minibatch_size``, ``clip_param``, ``vf_loss_coeff``,
            ``entropy_coeff``, ``max_grad_norm``, ``normalize_advantages``, ``seed``).
        module_specs: Module id -> spec of each module to train.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    def __init__(self, config: PPOConfig, module_specs: Mapping[str, RLModuleSpec]) -> None:
        self.config = config
        self.module = MultiRLModule(dict(module_specs))
        self.lr_schedule = LinearSchedule(config.lr, 0.0, config.lr_anneal_timesteps)
        self.optimizers: dict[str, torch.optim.Adam] = {}
        self.num_module_steps_trained_lifetime: dict[str, int] = {}
        for module_id, module in self.module.items():
            self._add_optimizer(module_id, module)
        seed = int(np.random.SeedSequence([config.seed, 15485863]).generate_state(1)[0])
        self._generator = torch.Generator().manual_seed(seed)
        self.num_updates_lifetime = 0

    def _add_optimizer(self, module_id: str, module: RLModule) -> None:
        self.optimizers[module_id] = torch.optim.Adam(module.parameters(), lr=self.config.lr, eps=1e-5)
        self.num_module_steps_trained_lifetime.setdefault(module_id, 0)

    def add_module(self, module_id: str, module: RLModule) -> None:
        """Add a module to train (with a new optimizer)."""
        self.module.add_module(module_id, module)
        self._add_optimizer(module_id, module)

    def remove_module(self, module_id: str) -> RLModule:
        """Stop training ``module_id`` and return it."""
        module = self.module.remove_module(module_id)
        del self.optimizers[module_id]
        self.num_module_steps_trained_lifetime.pop(module_id, None)
        return module

    def get_weights(self) -> dict[str, Any]:
        """Module id -> RLModule state (copies), for the env runners."""
        return self.module.get_state()

    # ------------------------------------------------------------------ the update

    def update(self, batches: Mapping[str, TrainBatch]) -> dict[str, float]:
        """One PPO update of every module that has a batch.

        Args:
            batches: Module id -> flat training batch.

        Returns:
            Metrics named ``"learner/<module id>/<metric>"``.
        """
        metrics: dict[str, float] = {}
        for module_id, batch in batches.items():
            module_metrics = self._update_module(module_id, batch)
            for name, value in module_metrics.items():
                metrics[f"learner/{module_id}/{name}"] = value
        return metrics

    def _update_module(self, module_id: str, batch: TrainBatch) -> dict[str, float]:
        config = self.config
        module = self.module[module_id]
        optimizer = self.optimizers[module_id]
        data = {key: torch.as_tensor(np.asarray(value)) for key, value in batch.items()}
        size = int(data["obs"].shape[0])
        lr = self.lr_schedule.value(self.num_module_steps_trained_lifetime[module_id])
        for group in optimizer.param_groups:
            group["lr"] = lr
        sums: dict[str, float] = {}
        steps = 0
        module.train()
        for _ in range(int(config.num_epochs)):
            order = torch.randperm(size, generator=self._generator)
            for start in range(0, size, int(config.minibatch_size)):
                idx = self._local_indices(order[start : start + int(config.minibatch_size)])
                stats = self._minibatch_step(module, optimizer, {k: v[idx] for k, v in data.items()})
                for name, value in stats.items():
                    sums[name] = sums.get(name, 0.0) + value
                steps += 1
                self.num_updates_lifetime += 1
        module.eval()
        self.num_module_steps_trained_lifetime[module_id] += size
        metrics = {name: total / max(steps, 1) for name, total in sums.items()}
        targets = data["value_targets"].to(torch.float64)
        preds = data["vf_preds"].to(torch.float64)
        target_var = float(targets.var(unbiased=False))
        metrics["vf_explained_var"] = (
            float("nan") if target_var == 0.0 else 1.0 - float((targets - preds).var(unbiased=False)) / target_var
        )
        metrics["lr"] = lr
        metrics["num_module_steps_trained"] = float(size)
        metrics["num_module_steps_trained_lifetime"] = float(self.num_module_steps_trained_lifetime[module_id])
        return metrics

    # Hooks of data-parallel learners (cairn.rl.distributed); a single learner uses
    # the whole minibatch, normalizes over it and keeps its own gradients.

    def _local_indices(self, indices: torch.Tensor) -> torch.Tensor:
        """The rows of a minibatch (indices into the batch) this learner computes on."""
        return indices

    def _normalize_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        """Advantages normalized over the minibatch (unchanged when it has one row)."""
        if advantages.numel() <= 1:
            return advantages
        return (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    def _reduce_gradients(self, module: RLModule, num_rows: int) -> None:
        """Combine this learner's gradients (of ``num_rows`` rows) with the other learners'."""

    def _minibatch_step(
        self, module: RLModule, optimizer: torch.optim.Optimizer, mb: Mapping[str, torch.Tensor]
    ) -> dict[str, float]:
        config = self.config
        out = module.forward_train({"obs": mb["obs"], "actions": mb["actions"]})
        logratio = out["action_logp"] - mb["action_logp"]
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - logratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > config.clip_param).float().mean()

        advantages = mb["advantages"].to(torch.float32)
        if config.normalize_advantages:
            advantages = self._normalize_advantages(advantages)
        surrogate = torch.max(
            -advantages * ratio,
            -advantages * torch.clamp(ratio, 1.0 - config.clip_param, 1.0 + config.clip_param),
        )
        policy_loss = surrogate.mean()
        vf_loss = 0.5 * (out["vf_preds"] - mb["value_targets"].to(torch.float32)).pow(2).mean()
        entropy = out["entropy"].mean()
        loss = policy_loss - config.entropy_coeff * entropy + config.vf_loss_coeff * vf_loss

        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        self._reduce_gradients(module, int(mb["obs"].shape[0]))
        if config.max_grad_norm is not None:
            grad_norm = torch.nn.utils.clip_grad_norm_(module.parameters(), config.max_grad_norm)
        else:
            grad_norm = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in module.parameters() if p.grad is not None])
            )
        optimizer.step()
        return {
            "total_loss": float(loss.detach()),
            "policy_loss": float(policy_loss.detach()),
            "vf_loss": float(vf_loss.detach()),
            "entropy": float(entropy.detach()),
            "approx_kl": float(approx_kl),
            "clip_fraction": float(clip_fraction),
            "grad_norm": float(grad_norm),
        }

    # ------------------------------------------------------------------ Checkpointable

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """``rl_module``: the MultiRLModule."""
        return [("rl_module", self.module)]

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Optimizer states (module id -> ``optimizer.state_dict()``), RNG, counters, components."""
        state: dict[str, Any] = {
            "optimizers": {
                module_id: clone_tree(optimizer.state_dict()) for module_id, optimizer in self.optimizers.items()
            },
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
        return {"optimizers": {module_id: opt.state_dict() for module_id, opt in self.optimizers.items()}}

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what ``state`` holds; modules, optimizers and keys it lacks are left as is.

        Raises:
            IncompatibleCheckpointError: An optimizer state that does not fit its
                module (another number or shape of parameters).
        """
        self._set_components_state(state)
        for module_id, optimizer_state in state.get("optimizers", {}).items():
            if module_id not in self.optimizers:
                continue
            try:
                self.optimizers[module_id].load_state_dict(_normalize_optimizer_state(optimizer_state))
            except (ValueError, KeyError, RuntimeError) as err:
                raise IncompatibleCheckpointError(
                    f"The optimizer state of module {module_id!r} does not fit this learner's "
                    f"module: {err}. The checkpoint was written for another architecture."
                ) from err
        if "rng" in state and "torch" in state["rng"]:
            self._generator.set_state(torch.as_tensor(state["rng"]["torch"], dtype=torch.uint8))
        counters = state.get("counters", {})
        if "num_updates_lifetime" in counters:
            self.num_updates_lifetime = int(counters["num_updates_lifetime"])
        for module_id, steps in counters.get("num_module_steps_trained_lifetime", {}).items():
            if module_id in self.optimizers:
                self.num_module_steps_trained_lifetime[module_id] = int(steps)

    @property
    def module_specs(self) -> dict[str, RLModuleSpec]:
        """Module id -> spec of each module trained now (after any add_module / remove_module)."""
        return self.module.specs

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((config, module_specs), {})`` of the modules trained now, so that from_checkpoint
        rebuilds exactly them (an added module is not dropped, a removed one does not come back)."""
        return (self.config, self.module_specs), {}
