"""Columns: the names of the columns of RL data (RLlib's ``ray.rllib.core.columns.Columns``).

The strings are RLlib's and are the keys cairn's env runners, batches and
learners use, so that a module written against RLlib's ``Columns`` reads and
writes what cairn gives and expects. One exception: :attr:`Columns.NEXT_OBS` is
``"next_obs"``, the key of cairn's off-policy batches (RLlib: ``"new_obs"``).
"""

from __future__ import annotations

__all__ = ["Columns"]


class Columns:
    """Column names of batches and of the outputs of an RLModule's forward passes."""

    OBS = "obs"
    """Observations, as the module gets them (after the env_to_module connectors)."""
    INFOS = "infos"
    ACTIONS = "actions"
    """Actions computed or sampled by a module."""
    ACTIONS_FOR_ENV = "actions_for_env"
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    NEXT_OBS = "next_obs"
    """The observation that followed a step (cairn's off-policy batches; RLlib's string is ``"new_obs"``)."""
    EPS_ID = "eps_id"
    AGENT_ID = "agent_id"
    MODULE_ID = "module_id"
    T = "t"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    """What a module's forward pass returns for its action distribution: logits (Discrete) or
    mean and log standard deviation concatenated (Box)."""
    ACTION_PROB = "action_prob"
    ACTION_LOGP = "action_logp"
    """Log-probability of the action taken, under the distribution that sampled it."""
    VF_PREDS = "vf_preds"
    """Value estimates (of the observations)."""
    VALUES_BOOTSTRAPPED = "values_bootstrapped"
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    STATE_IN = "state_in"
    STATE_OUT = "state_out"
    EMBEDDINGS = "embeddings"
    """Features a module shares between its policy and value heads (:meth:`ValueFunctionAPI.compute_values`)."""
    LOSS_MASK = "loss_mask"
