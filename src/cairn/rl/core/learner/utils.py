"""RLlib's ``ray.rllib.core.learner.utils`` helper for modules with target networks: ``make_target_network``."""

from cairn.rl.core.rl_module.apis.target_network_api import make_target_network

__all__ = ["make_target_network"]
