"""Writes the golden PPO checkpoint of the current format version (never regenerate an existing one).

Run ``python tests/data/make_golden_rl.py`` once per format version: later versions of cairn must keep
loading exactly these bytes (tests/rl/test_rl_golden.py).
"""

from __future__ import annotations

from pathlib import Path

import cairn
from cairn.rl import PPO, PPOConfig

HERE = Path(__file__).parent


def golden_config() -> PPOConfig:
    """A small CartPole PPO, so that the golden checkpoint stays a few hundred KB."""
    return PPOConfig(
        env="CartPole-v1",
        seed=7,
        num_envs_per_env_runner=2,
        rollout_length=32,
        minibatch_size=32,
        num_epochs=1,
        model_config={"hidden_sizes": [16, 16]},
        # The golden checkpoints were written when MeanStdFilter was the default (before issue 35).
        observation_filter="MeanStdFilter",
    )


def main() -> None:
    out = HERE / f"golden_format_v{cairn.FORMAT_VERSION}_ppo"
    if out.exists():
        raise SystemExit(f"{out} exists; golden checkpoints are never regenerated.")
    algo = PPO(golden_config())
    algo.train()
    algo.train()
    algo.save_to_path(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
