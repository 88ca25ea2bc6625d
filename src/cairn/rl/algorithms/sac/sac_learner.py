"""SACLearner: soft actor-critic's losses on the generic :class:`Learner`.

As CleanRL's ``sac_continuous_action.py``, for a minibatch of (n-step)
transitions ``(obs, actions, rewards, next_obs, terminateds, discounts)``
(:func:`~cairn.rl.algorithms.off_policy.n_step_transitions`):

- Q loss: both Q-networks regress on ``r + discount * (1 - terminated) *
  (min(Q1', Q2')(s', a') - alpha * log pi(a'|s'))``, with ``a'`` sampled from
  the policy and ``Q'`` the target networks (``discount = gamma`` for 1-step);
- policy loss: ``alpha * log pi(a|s) - min(Q1, Q2)(s, a)`` with ``a`` sampled
  by reparametrization;
- alpha loss (automatic entropy tuning): ``-alpha * (log pi(a|s) + target_entropy)``,
  ``target_entropy = -|A|`` unless set;
- every ``target_network_update_freq`` env steps, the target networks move
  ``tau`` of the way to the Q-networks (:class:`~cairn.rl.algorithms.off_policy.TargetNetworkLearner`;
  its target copy of the module holds a policy and ``log_alpha`` too, unused).

Each loss has its own optimizer (``qf``, ``policy``, ``alpha``: the generic
learner's named optimizers, all checkpointed). The generic learner computes
every gradient before any optimizer steps, so the policy loss sees the
Q-networks of before this step's Q update (RLlib's order; CleanRL steps the Q
optimizer first). Actions are sampled with the learner's checkpointed
generator, so a restored learner takes exactly the same steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, cast

import torch

from cairn.rl.algorithms.off_policy import TargetNetworkLearner
from cairn.rl.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["SACLearner", "SACLossSettings"]


class SACLossSettings(Protocol):
    """The settings the losses read (a :class:`~cairn.rl.algorithms.sac.sac.SACConfig` has them).

    A protocol rather than the config class, so that this module does not
    import ``sac.py``, which imports it.
    """

    policy_lr: float
    q_lr: float
    alpha_lr: float
    autotune_alpha: bool
    target_entropy: float | None


def _sac_module(module_id: str, module: RLModule) -> DefaultSACRLModule:
    # The losses use the parts of DefaultSACRLModule (sample_actions, q_values, log_alpha, targets);
    # a user's SAC module subclasses it to change the networks.
    if not isinstance(module, DefaultSACRLModule):
        raise TypeError(
            f"SAC trains DefaultSACRLModule and its subclasses, but module {module_id!r} is a "
            f"{type(module).__qualname__}; subclass DefaultSACRLModule to bring your own SAC networks."
        )
    return module


class SACLearner(TargetNetworkLearner):
    """A :class:`~cairn.rl.algorithms.off_policy.TargetNetworkLearner` with SAC's three losses.

    Args:
        config: The SAC config (``policy_lr``, ``q_lr``, ``alpha_lr``,
            ``autotune_alpha``, ``target_entropy``, the target updates' ``tau``
            and ``target_network_update_freq``, and the learner's settings).
        module_specs: Module id -> spec of each module to train.
    """

    def configure_optimizers_for_module(self, module_id: str, module: RLModule) -> dict[str, torch.optim.Optimizer]:
        """``qf`` (both Q-networks, ``q_lr``), ``policy`` (``policy_lr``) and ``alpha`` (``alpha_lr``).

        Adam with torch's defaults, as CleanRL; no ``alpha`` when alpha is not tuned.
        """
        config = cast(SACLossSettings, self.config_for_module(module_id))
        sac = _sac_module(module_id, module)
        optimizers: dict[str, torch.optim.Optimizer] = {
            "qf": torch.optim.Adam(list(sac.q_parameters()), lr=config.q_lr),
            "policy": torch.optim.Adam(list(sac.policy_parameters()), lr=config.policy_lr),
        }
        if config.autotune_alpha:
            optimizers["alpha"] = torch.optim.Adam([sac.log_alpha], lr=config.alpha_lr)
        return optimizers

    def compute_losses_for_module(
        self, module_id: str, module: RLModule, minibatch: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """``{"qf", "policy"[, "alpha"]}`` losses of a minibatch of transitions, and statistics.

        Args:
            minibatch: ``obs``, ``actions``, ``rewards``, ``next_obs``, ``terminateds``,
                ``discounts`` (an episode cut by a time limit is not terminated: its next value is bootstrapped).
        """
        config = cast(SACLossSettings, self.config_for_module(module_id))
        sac = _sac_module(module_id, module)
        target = _sac_module(module_id, self.target_module[module_id])
        mb = minibatch
        alpha = sac.alpha
        with torch.no_grad():
            next_actions, next_logp = sac.sample_actions(mb["next_obs"], generator=self._generator)
            next_q = target.q_values(mb["next_obs"], next_actions).min(0).values - alpha * next_logp
            not_done = 1.0 - mb["terminateds"].to(torch.float32)
            q_target = mb["rewards"].to(torch.float32) + mb["discounts"].to(torch.float32) * not_done * next_q
        q_values = sac.forward_train({"obs": mb["obs"], "actions": mb["actions"]})["q_values"]
        qf_loss = (q_values - q_target).pow(2).mean(1).sum()

        actions, logp = sac.sample_actions(mb["obs"], generator=self._generator)
        q_pi = sac.q_values(mb["obs"], actions).min(0).values
        policy_loss = (alpha * logp - q_pi).mean()
        losses = {"qf": qf_loss, "policy": policy_loss}
        if config.autotune_alpha:
            target_entropy = -float(sac.act_dim) if config.target_entropy is None else config.target_entropy
            losses["alpha"] = (-sac.log_alpha.exp() * (logp.detach() + target_entropy)).mean()
        return losses, {
            "qf1_mean": float(q_values[0].detach().mean()),
            "qf2_mean": float(q_values[1].detach().mean()),
            "entropy": float(-logp.detach().mean()),
            "alpha": float(alpha[0]),
        }
