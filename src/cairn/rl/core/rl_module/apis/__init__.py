"""RLlib's RLModule APIs (``ray.rllib.core.rl_module.apis``): what a module offers besides acting."""

from cairn.rl.core.rl_module.apis.value_function_api import ValueFunctionAPI

__all__ = ["ValueFunctionAPI"]
