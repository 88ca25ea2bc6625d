"""Policy mapping functions of the tests, in an importable module (configs record them by reference).

The Ray tests' workers find this module too: the ``ray_cluster`` fixture puts
``tests/`` on their ``PYTHONPATH``.
"""

from __future__ import annotations

from cairn.rl import EpisodeInfo


def always_main_v1(agent_id: str, episode: EpisodeInfo) -> str:
    """Every agent plays ``"main_v1"``: a mapping that a removal of ``main_v1`` must refuse."""
    return "main_v1"
