"""Bridges from other frameworks to cairn's checkpoints (SPEC 11).

Each module here is imported only when used, and imports its framework then:

* :mod:`cairn.integrations.rllib`: RLlib's algorithms, learners, env runners
  and modules saved and restored in cairn's format; RLlib checkpoints
  converted (``pip install 'cairn-rl[rllib]'``).
* :mod:`cairn.integrations.tune`: cairn checkpoints reported to Ray Tune, and
  trials restored from them (``pip install 'cairn-rl[tune]'``).
* :mod:`cairn.integrations.trackers`: training metrics and checkpoints logged to
  Weights & Biases or MLflow (``pip install 'cairn-rl[wandb]'`` or ``'cairn-rl[mlflow]'``).
"""
