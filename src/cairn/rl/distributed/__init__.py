"""cairn.rl on Ray: remote EnvRunners and data-parallel Learners behind the group interfaces.

Nothing here is imported by ``cairn.rl`` unless a config asks for more than
one process (``num_env_runners > 0`` or ``num_learners > 1``); Ray itself is
imported on first use and is an extra (``pip install 'cairn-rl[ray]'``).

- :class:`~cairn.rl.distributed.env_runners.RemoteEnvRunners`: the actors
  behind an :class:`~cairn.rl.env.env_runner_group.EnvRunnerGroup`; they sample
  in parallel, take versioned weight broadcasts and report their connector
  deltas, which the group merges into its local runner and spreads back.
- :class:`~cairn.rl.distributed.learners.RemoteLearners`: data-parallel
  learners behind a :class:`~cairn.rl.core.learner.learner_group.LearnerGroup`; gradients
  are all-reduced with ``torch.distributed`` (gloo) inside the actors, so all
  learners hold identical weights and optimizer states after every update.
- :mod:`~cairn.rl.distributed.checkpoint`: saves in which each actor writes
  its own folder of the checkpoint straight to storage, in parallel, and the
  driver commits the manifests last; restores in which each actor reads and
  verifies its folder itself, and nothing is applied until every part is read.
"""

from __future__ import annotations

from cairn.rl.distributed._ray import RAY_EXTRA_HINT, import_ray, ray_available

__all__ = ["RAY_EXTRA_HINT", "import_ray", "ray_available"]
