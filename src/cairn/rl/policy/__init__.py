"""RLlib's ``ray.rllib.policy`` paths that new-API-stack scripts still import (``PolicySpec``)."""
