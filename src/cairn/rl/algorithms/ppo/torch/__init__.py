"""RLlib's ``ray.rllib.algorithms.ppo.torch``: PPO's PyTorch learner and module at RLlib's paths.

cairn has one framework, PyTorch, so its PPO learner and default module are RLlib's torch
classes: ``ppo_torch_learner.PPOTorchLearner`` is :class:`~cairn.rl.algorithms.ppo.ppo_learner.PPOLearner`
and ``default_ppo_torch_rl_module.DefaultPPOTorchRLModule`` is
:class:`~cairn.rl.algorithms.ppo.default_ppo_rl_module.DefaultPPORLModule` (the same classes,
so ``PPOConfig().learner_class == PPOTorchLearner`` as in RLlib).
"""
