"""RLlib's RLModule APIs (``ray.rllib.core.rl_module.apis``): what a module offers besides acting."""

from cairn.rl.core.rl_module.apis.target_network_api import TARGET_NETWORK_ACTION_DIST_INPUTS, TargetNetworkAPI
from cairn.rl.core.rl_module.apis.value_function_api import ValueFunctionAPI

__all__ = ["TARGET_NETWORK_ACTION_DIST_INPUTS", "TargetNetworkAPI", "ValueFunctionAPI"]
