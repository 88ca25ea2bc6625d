"""RLlib's example RLModules (``ray.rllib.examples.rl_modules``), ported to cairn."""
