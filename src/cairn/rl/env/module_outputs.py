"""Which modules owe the env runner ``action_logp`` and ``vf_preds``: those whose rows are trained on-policy.

PPO's batches need the log-probability of each sampled action and the value of
each observation. A module outside ``policies_to_train`` (a heuristic policy,
RLlib's ``RandomRLModule``) acts, but its rows are never trained, so it may
return actions only, as in RLlib; off-policy algorithms (``sample_next_obs``)
ask no module for them, nor do evaluation runners (``explore=False``). The
runners fill what a module does not owe with zeros.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from cairn.rl.config.algorithm_config import AlgorithmConfig

__all__ = ["owed_output", "owes_logp_and_values"]


def owes_logp_and_values(config: AlgorithmConfig, module_id: str) -> bool:
    """Whether the runner must read ``action_logp``/``vf_preds`` from ``module_id`` (and ask its values).

    Read from the config at each call: ``add_module``/``remove_module`` change
    ``policies_to_train``, and the runner takes the new config.
    """
    if config.sample_next_obs or not config.explore:  # evaluation runners (explore=False) train nothing
        return False
    trainable = config.policies_to_train
    return trainable is None or module_id in trainable


def owed_output(out: Mapping[str, torch.Tensor], key: str, module_id: str) -> torch.Tensor:
    """``out[key]`` of a module that owes it, or a ``ValueError`` that says what the module must return.

    Raises:
        ValueError: ``key`` is missing (``vf_preds``: the module has no value function).
    """
    if key not in out:
        how = (
            "subclass ValueFunctionAPI and implement compute_values(batch, embeddings=None), or return 'vf_preds'"
            if key == "vf_preds"
            else "return 'action_dist_inputs' without 'actions' (the runner samples and adds 'action_logp')"
        )
        raise ValueError(
            f"Module {module_id!r} returned {sorted(out)} from forward_exploration, without {key!r}, which the "
            f"algorithm trains on: {how}; or leave the module out of policies_to_train."
        )
    return out[key]
