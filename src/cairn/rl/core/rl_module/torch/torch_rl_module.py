"""TorchRLModule: an RLModule written the RLlib way (``setup()`` and ``_forward*``).

RLlib's ``ray.rllib.core.rl_module.torch.TorchRLModule`` under cairn::

    class VPG(TorchRLModule, ValueFunctionAPI):
        def setup(self):
            self.pi = nn.Linear(self.observation_space.shape[0], self.action_space.n)
            self.vf = nn.Linear(self.observation_space.shape[0], 1)

        def _forward(self, batch, **kwargs):
            return {Columns.ACTION_DIST_INPUTS: self.pi(batch[Columns.OBS])}

        def compute_values(self, batch, embeddings=None):
            return self.vf(batch[Columns.OBS]).squeeze(-1)

The constructor takes RLlib's keywords (``observation_space=``, ``action_space=``,
``inference_only=``, ``model_config=``, ``catalog_class=None``) as well as the
positional ``(observation_space, action_space, model_config)`` and ``seed=`` with
which cairn's specs and checkpoints build every module, then calls :meth:`setup`.

The public passes wrap the private ones as RLlib's do, and add what a module
need not compute itself: when ``_forward_exploration`` returns no ``"actions"``,
:meth:`forward_exploration` samples them from ``"action_dist_inputs"`` with
:meth:`get_exploration_action_dist_cls` (``TorchCategorical`` for ``Discrete``,
``TorchDiagGaussian`` for a ``Box``) and the env runner's checkpointed
``torch.Generator``, so resume stays exact, and adds their ``"action_logp"``;
with :class:`~cairn.rl.core.rl_module.apis.ValueFunctionAPI` it adds
``"vf_preds"`` from :meth:`compute_values`. :meth:`forward_inference` takes the
greedy action (argmax, or the mean). PPO's learner computes ``action_logp`` and
``entropy`` of ``forward_train``'s ``"action_dist_inputs"`` the same way
(:func:`complete_train_outputs`).

Like every RLModule, such a module is a cairn Checkpointable: its class is recorded
by reference, its constructor arguments as msgpack-safe values (spaces,
``model_config`` as a dict), and ``RLModule.from_checkpoint`` rebuilds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cairn.rl.core.columns import Columns
from cairn.rl.core.distribution.torch_distribution import TorchDistribution, action_dist_class_for
from cairn.rl.core.rl_module.apis.value_function_api import ValueFunctionAPI
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["TorchRLModule", "complete_train_outputs"]


def _as_tensors(out: Mapping[str, Any]) -> dict[str, Any]:
    # RLlib's heuristic modules return numpy actions (action_space.sample()); the runners read tensors.
    return {key: torch.as_tensor(value) if isinstance(value, np.ndarray) else value for key, value in out.items()}


class TorchRLModule(RLModule):
    """An RLModule whose subclass builds layers in :meth:`setup` and implements ``_forward`` (RLlib's API).

    Args:
        observation_space: The observations the module reads.
        action_space: The actions it chooses.
        model_config: The module's settings: a dict, or a
            :class:`~cairn.rl.core.rl_module.default_model_config.DefaultModelConfig`
            (recorded as a dict of its set fields); read in :meth:`setup` as ``self.model_config``.
        inference_only: RLlib's flag for a copy that only acts (recorded; :meth:`forward_train` refuses then).
        learner_only: RLlib's flag for a module that only lives on learners (recorded, no other effect).
        catalog_class: RLlib's catalogs do not exist in cairn: ``None`` only.
        seed: The seed it was built with (cairn's specs pass it).

    Raises:
        ValueError: A missing space, or a ``catalog_class``.
        TypeError: An unknown keyword, or a :class:`ValueFunctionAPI` subclass without ``compute_values``.
    """

    framework = "torch"

    def __init__(
        self,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        model_config: Mapping[str, Any] | DefaultModelConfig | None = None,
        *,
        inference_only: bool = False,
        learner_only: bool = False,
        catalog_class: Any = None,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        name = type(self).__qualname__
        if kwargs:
            raise TypeError(
                f"{name} got unknown keyword arguments {sorted(kwargs)}; a TorchRLModule takes observation_space, "
                "action_space, model_config, inference_only, learner_only, catalog_class (None) and seed."
            )
        if observation_space is None or action_space is None:
            raise ValueError(f"{name} needs observation_space= and action_space= (an RLModuleSpec fills them in).")
        if catalog_class is not None:
            raise ValueError(
                f"{name}(catalog_class={catalog_class!r}): cairn has no RLlib catalogs; build the layers in setup() "
                "and leave catalog_class None."
            )
        if isinstance(self, ValueFunctionAPI) and type(self).compute_values is TorchRLModule.compute_values:
            raise TypeError(
                f"{name} declares ValueFunctionAPI but does not implement compute_values(batch, embeddings)."
            )
        if isinstance(model_config, DefaultModelConfig):
            model_config = model_config.to_dict()
        super().__init__(observation_space, action_space, model_config, seed=seed)
        self.inference_only = bool(inference_only)
        self.learner_only = bool(learner_only)
        self._sampling_generator: torch.Generator | None = None
        self.setup()

    def setup(self) -> None:
        """Build the layers (RLlib's hook) from the spaces and ``self.model_config``."""

    @property
    def sampling_generator(self) -> torch.Generator | None:
        """During :meth:`forward_exploration`: the env runner's RNG; a module that samples itself draws with it.

        ``torch.randint(..., generator=self.sampling_generator)`` keeps resume exact (the
        runner checkpoints that RNG); ``None`` outside a call (torch's global RNG).
        """
        return self._sampling_generator

    # ------------------------------------------------------------------ RLlib's private passes

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The pass every other one defaults to: return ``Columns.ACTION_DIST_INPUTS`` (or ``Columns.ACTIONS``)."""
        raise NotImplementedError(
            f"{type(self).__qualname__} implements none of _forward, _forward_inference, _forward_exploration, "
            "_forward_train: implement _forward (returning Columns.ACTION_DIST_INPUTS or Columns.ACTIONS)."
        )

    def _forward_inference(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The inference pass; defaults to :meth:`_forward`."""
        return self._forward(batch, **kwargs)

    def _forward_exploration(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The exploration pass; defaults to :meth:`_forward`."""
        return self._forward(batch, **kwargs)

    def _forward_train(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The training pass (with gradients); defaults to :meth:`_forward`."""
        return self._forward(batch, **kwargs)

    # ------------------------------------------------------------------ action distributions

    def get_inference_action_dist_cls(self) -> type[TorchDistribution]:
        """The distribution of inference (RLlib's hook); by the action space."""
        return action_dist_class_for(self.action_space)

    def get_exploration_action_dist_cls(self) -> type[TorchDistribution]:
        """The distribution actions are sampled from when exploring (RLlib's hook); by the action space."""
        return action_dist_class_for(self.action_space)

    def get_train_action_dist_cls(self) -> type[TorchDistribution]:
        """The distribution the loss reads (RLlib's hook); by the action space."""
        return action_dist_class_for(self.action_space)

    def _dist_inputs(self, out: Mapping[str, Any], where: str) -> torch.Tensor:
        if Columns.ACTION_DIST_INPUTS not in out:
            raise ValueError(
                f"{type(self).__qualname__}.{where} returned {sorted(out)}: return Columns.ACTIONS, or "
                "Columns.ACTION_DIST_INPUTS for the env runner to sample from."
            )
        return torch.as_tensor(out[Columns.ACTION_DIST_INPUTS])

    # ------------------------------------------------------------------ cairn's public passes

    def forward_inference(self, batch: Mapping[str, torch.Tensor], **kwargs: Any) -> dict[str, torch.Tensor]:
        """``_forward_inference`` without gradients, with greedy ``"actions"`` if it returned none."""
        with torch.no_grad():
            out = _as_tensors(self._forward_inference(batch, **kwargs))
            if Columns.ACTIONS not in out:
                dist = self.get_inference_action_dist_cls().from_logits(self._dist_inputs(out, "_forward_inference"))
                out[Columns.ACTIONS] = dist.deterministic_sample()
        return out

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None, **kwargs: Any
    ) -> dict[str, torch.Tensor]:
        """``_forward_exploration`` without gradients, completed with sampled actions and values.

        Args:
            batch: ``{"obs": Tensor[B, ...]}``.
            generator: The env runner's RNG: actions are sampled with it (and it is
                :attr:`sampling_generator` during the call).

        Returns:
            What ``_forward_exploration`` returned, plus ``"actions"`` and ``"action_logp"``
            sampled from ``"action_dist_inputs"`` when it gave no actions, plus ``"vf_preds"``
            from :meth:`compute_values` for a :class:`ValueFunctionAPI` module that gave none.
        """
        self._sampling_generator = generator
        try:
            with torch.no_grad():
                out = _as_tensors(self._forward_exploration(batch, **kwargs))
                if Columns.ACTIONS not in out:
                    inputs = self._dist_inputs(out, "_forward_exploration")
                    dist = self.get_exploration_action_dist_cls().from_logits(inputs)
                    actions = dist.sample(generator=generator)
                    out[Columns.ACTIONS] = actions
                    out.setdefault(Columns.ACTION_LOGP, dist.logp(actions))
                if Columns.VF_PREDS not in out and isinstance(self, ValueFunctionAPI):
                    out[Columns.VF_PREDS] = self.compute_values(batch, embeddings=out.get(Columns.EMBEDDINGS))
        finally:
            self._sampling_generator = None
        return out

    def forward_train(self, batch: Mapping[str, torch.Tensor], **kwargs: Any) -> dict[str, torch.Tensor]:
        """``_forward_train`` with gradients (PPO's learner completes logp, entropy and values).

        Raises:
            RuntimeError: The module was built ``inference_only``.
        """
        if self.inference_only:
            raise RuntimeError(f"{type(self).__qualname__} was built inference_only=True: it cannot be trained.")
        return _as_tensors(self._forward_train(batch, **kwargs))

    def compute_values(self, batch: Mapping[str, Any], embeddings: Any | None = None) -> torch.Tensor:
        """The ``"vf_preds"`` of :meth:`forward_exploration`; a :class:`ValueFunctionAPI` module overrides it.

        Raises:
            NotImplementedError: The module computes no values: mix in ValueFunctionAPI.
        """
        out = self.forward_exploration(batch, generator=torch.Generator().manual_seed(0))
        if Columns.VF_PREDS not in out:
            raise NotImplementedError(
                f"{type(self).__qualname__} has no value function: PPO needs one. Subclass ValueFunctionAPI and "
                "implement compute_values(batch, embeddings=None), or return Columns.VF_PREDS."
            )
        values: torch.Tensor = out[Columns.VF_PREDS].detach()
        return values

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The base's, plus ``inference_only``/``learner_only`` when set."""
        args, kwargs = super().get_ctor_args_and_kwargs()
        if self.inference_only:
            kwargs["inference_only"] = True
        if self.learner_only:
            kwargs["learner_only"] = True
        return args, kwargs


def complete_train_outputs(
    module: RLModule, batch: Mapping[str, torch.Tensor], out: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``forward_train``'s outputs with ``action_logp``, ``entropy`` and ``vf_preds`` that a loss like PPO's reads.

    A module that returns them (cairn's default modules) is taken as it is; one that
    returns ``"action_dist_inputs"`` (RLlib's way) gets the log-probability of
    ``batch["actions"]`` and the entropy from its train distribution, and its values
    from :meth:`ValueFunctionAPI.compute_values` (with gradients).

    Raises:
        ValueError: Neither ``action_logp`` nor ``action_dist_inputs``, or no values
            and no ValueFunctionAPI; the message names the module class.
    """
    done = dict(out)
    name = type(module).__qualname__
    if Columns.ACTION_LOGP not in done or "entropy" not in done:
        if Columns.ACTION_DIST_INPUTS not in done:
            raise ValueError(
                f"{name}.forward_train returned {sorted(done)}: PPO needs Columns.ACTION_DIST_INPUTS (or "
                "'action_logp' and 'entropy')."
            )
        get_cls = getattr(module, "get_train_action_dist_cls", None)
        dist_cls = get_cls() if callable(get_cls) else action_dist_class_for(module.action_space)
        dist = dist_cls.from_logits(torch.as_tensor(done[Columns.ACTION_DIST_INPUTS]))
        done.setdefault(Columns.ACTION_LOGP, dist.logp(torch.as_tensor(batch[Columns.ACTIONS])))
        done.setdefault("entropy", dist.entropy())
    if Columns.VF_PREDS not in done:
        if not isinstance(module, ValueFunctionAPI):
            raise ValueError(
                f"{name}.forward_train returned no Columns.VF_PREDS and the module has no ValueFunctionAPI: PPO "
                "needs values. Subclass ValueFunctionAPI and implement compute_values(batch, embeddings=None)."
            )
        done[Columns.VF_PREDS] = module.compute_values(batch, embeddings=done.get(Columns.EMBEDDINGS))
    return done
