"""RLlib's gradient-level ``Learner`` API: compute, postprocess and apply gradients by hand.

cairn's :meth:`~cairn.rl.core.learner.learner.Learner.update` runs the whole minibatch
step itself; these methods are RLlib's pieces of it for code that drives a learner
step by step (RLlib's ``TorchLearner``): a gradient dict maps a parameter's
reference (in torch, the parameter itself, as RLlib's ``get_param_ref``) to its
gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from cairn.rl.utils.torch_utils import clip_gradients

if TYPE_CHECKING:
    from cairn.rl.config.algorithm_config import AlgorithmConfig
    from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule

__all__ = ["GradientsAPI"]


class GradientsAPI:
    """RLlib's ``compute_gradients`` / ``postprocess_gradients`` / ``apply_gradients`` over a learner's optimizers.

    Mixed into :class:`~cairn.rl.core.learner.learner.Learner`, which provides
    ``module``, ``named_optimizers`` and ``config_for_module``.
    """

    module: MultiRLModule
    named_optimizers: dict[str, dict[str, torch.optim.Optimizer]]

    config_for_module: Callable[[str], AlgorithmConfig]

    def get_parameters(self, module: torch.nn.Module) -> list[torch.nn.Parameter]:
        """The module's parameters, in ``module.parameters()`` order (RLlib's)."""
        return list(module.parameters())

    def get_param_ref(self, param: torch.Tensor) -> torch.Tensor:
        """The key of ``param`` in a gradient dict: the parameter itself (RLlib's torch learner's)."""
        return param

    def _optimizer_params(self) -> list[tuple[str, torch.optim.Optimizer, list[torch.Tensor]]]:
        """``(module id, optimizer, its parameters)`` of every optimizer, in module order."""
        return [
            (module_id, optimizer, [p for group in optimizer.param_groups for p in group["params"]])
            for module_id, named in self.named_optimizers.items()
            for optimizer in named.values()
        ]

    def compute_gradients(
        self, loss_per_module: Mapping[str, torch.Tensor], gradient_tape: Any = None, **kwargs: Any
    ) -> dict[torch.Tensor, torch.Tensor | None]:
        """The gradients of the sum of the losses with respect to every optimized parameter (RLlib's).

        The optimizers' old gradients are dropped first. ``gradient_tape`` is TF's and
        must be None here.

        Returns:
            Parameter -> its gradient (None for a parameter the losses do not reach).

        Raises:
            ValueError: ``gradient_tape`` is given.
        """
        if gradient_tape is not None:
            raise ValueError("compute_gradients(gradient_tape=...) is TensorFlow's; cairn.rl is torch only.")
        for _, optimizer, _ in self._optimizer_params():
            optimizer.zero_grad(set_to_none=True)
        total: torch.Tensor = sum(loss_per_module.values(), torch.tensor(0.0))
        total.backward()  # type: ignore[no-untyped-call]
        return {param: param.grad for _, _, params in self._optimizer_params() for param in params}

    def postprocess_gradients(
        self, gradients_dict: dict[torch.Tensor, torch.Tensor | None]
    ) -> dict[torch.Tensor, torch.Tensor | None]:
        """The gradients clipped per optimizer with its module's ``max_grad_norm`` (a global norm; RLlib's
        ``grad_clip`` with ``grad_clip_by="global_norm"``, the one mode cairn's config takes).

        Parameters of no optimizer are returned as given. Changes the gradients in place.
        """
        out = dict(gradients_dict)
        for module_id, _, params in self._optimizer_params():
            mine = {ref: out[ref] for ref in params if ref in out}
            max_norm = self.config_for_module(module_id).max_grad_norm
            clip_gradients(mine, grad_clip=max_norm, grad_clip_by="global_norm")
            out.update(mine)
        return out

    def apply_gradients(self, gradients_dict: Mapping[torch.Tensor, torch.Tensor | None]) -> None:
        """Set each parameter's gradient from ``gradients_dict`` and step every optimizer (RLlib's).

        A parameter missing from the dict (or given None) has no gradient this step.
        """
        for _, optimizer, params in self._optimizer_params():
            for param in params:
                param.grad = gradients_dict.get(param)
            optimizer.step()

    @property
    def _module_optimizers(self) -> dict[str, list[str]]:
        """Module id -> the names of its optimizers (RLlib's attribute)."""
        return {module_id: list(named) for module_id, named in self.named_optimizers.items()}

    def _get_optimizer_state(self) -> dict[str, Any]:
        """``"<module id>_<name>"`` -> that optimizer's ``state_dict()`` (RLlib's names)."""
        return {
            f"{module_id}_{name}": optimizer.state_dict()
            for module_id, named in self.named_optimizers.items()
            for name, optimizer in named.items()
        }
