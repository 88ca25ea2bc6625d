"""RLlib's ``rllib/examples/envs/agents_act_simultaneously.py``, ported to cairn.

Ported from the newest stored version of that file in ray-project/ray (it imports
``ray.rllib.examples.utils``; the folder's listing names commit 205081dc566e...): two
PPO modules learn rock-paper-scissors against each other, both players moving at once
(RLlib's ``RockPaperScissors`` ``MultiAgentEnv``); with ``sheldon_cooper_mode`` the game
has Lizard and Spock too. It is RLlib's "learned vs learned" rock-paper-scissors example
(``multi_agent/rock_paper_scissors_learned_vs_learned.py`` plays the same on PettingZoo's
``rps_v2``, whose ``Discrete`` observations cairn's default module cannot take without
RLlib's ``FlattenObservations`` connector).

Every line that differs from RLlib's, and why:

* ``from ray.rllib.examples.envs.classes.multi_agent.rock_paper_scissors import RockPaperScissors``
  -> ``from cairn.rl.examples.envs.classes.multi_agent.rock_paper_scissors import RockPaperScissors``
  (it observes the opponent's last move one-hot, a ``Box``).
* ``from ray.rllib.connectors.env_to_module.flatten_observations import FlattenObservations``
  -> ``from cairn.rl.connectors.env_to_module import FlattenObservations``; RLlib's
  ``env_to_module_connector`` and ``policy_mapping_fn`` lambdas are kept as RLlib writes
  them (a checkpoint would record only that they existed: docs/rl.md "Lambdas and
  closures"). Each module's pipeline flattens its agents' observations; cairn's
  ``RockPaperScissors`` already observes the opponent's last move one-hot (a ``Box``), which
  flattening leaves as it is (RLlib's env observes a ``Discrete`` index, which it one-hots).
* ``get_trainable_cls(args.algo).get_default_config()`` -> ``PPOConfig()``;
  ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` ->
  ``main(iterations, sheldon_cooper_mode)``.

Run it::

    python examples/rllib/agents_act_simultaneously.py
"""

from __future__ import annotations

from typing import Any

from example_output import print_iteration

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.connectors.env_to_module import FlattenObservations
from cairn.rl.examples.envs.classes.multi_agent.rock_paper_scissors import RockPaperScissors


def main(iterations: int = 2, sheldon_cooper_mode: bool = False) -> dict[str, Any]:
    """Train ``iterations`` times; return the last result."""
    base_config = (
        PPOConfig()
        .environment(
            RockPaperScissors,
            env_config={"sheldon_cooper_mode": sheldon_cooper_mode},
        )
        .multi_agent(
            # Define two policies.
            policies={"player1", "player2"},
            # Map agent "player1" to policy "player1" and agent "player2" to policy
            # "player2".
            policy_mapping_fn=lambda agent_id, episode, **kw: agent_id,
        )
        .env_runners(
            env_to_module_connector=(lambda env, spaces, device: FlattenObservations(multi_agent=True)),
        )
    )

    algo = base_config.build_algo()
    try:
        result: dict[str, Any] = {}
        for _ in range(iterations):
            result = algo.train()
            print_iteration(result)
        return result
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
