"""RLlib's ``ray.rllib.core.rl_module.torch``: :class:`TorchRLModule`."""

from cairn.rl.core.rl_module.torch.torch_rl_module import TorchRLModule, complete_train_outputs

__all__ = ["TorchRLModule", "complete_train_outputs"]
