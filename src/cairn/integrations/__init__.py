"""Bridges from other frameworks to cairn's checkpoints (SPEC 11).

Each module here is imported only when used, and imports its framework then:

* :mod:`cairn.integrations.rllib`: RLlib's algorithms, learners, env runners
  and modules saved and restored in cairn's format; RLlib checkpoints
  converted (``pip install 'cairn-rl[rllib]'``).
* :mod:`cairn.integrations.tune`: cairn checkpoints reported to Ray Tune, and
  trials restored from them (``pip install 'cairn-rl[tune]'``).
"""
