"""RLlib's ``ray.rllib.examples.rl_modules.classes``: modules the example scripts use."""

from cairn.rl.examples.rl_modules.classes.lstm_containing_rlm import LSTMContainingRLModule
from cairn.rl.examples.rl_modules.classes.random_rlm import RandomRLModule
from cairn.rl.examples.rl_modules.classes.rock_paper_scissors_heuristic_rlm import (
    AlwaysSameHeuristicRLM,
    BeatLastHeuristicRLM,
)

__all__ = ["AlwaysSameHeuristicRLM", "BeatLastHeuristicRLM", "LSTMContainingRLModule", "RandomRLModule"]
