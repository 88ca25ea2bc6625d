"""RLlib's ``ray.rllib.env.wrappers`` path: environment adapters under the names RLlib's scripts import."""
