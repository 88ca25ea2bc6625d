"""RLlib's TargetNetworkAPI on cairn: make_target_network copies and freezes; the LSTM example's target pass."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from cairn.rl.core.columns import Columns
from cairn.rl.core.learner.utils import make_target_network
from cairn.rl.core.rl_module.apis import TARGET_NETWORK_ACTION_DIST_INPUTS, TargetNetworkAPI
from cairn.rl.examples.rl_modules.classes.lstm_containing_rlm import LSTMContainingRLModuleWithTargetNetwork


def test_make_target_network_copies_weights_and_takes_no_gradients() -> None:
    main = torch.nn.Linear(3, 2)
    target = make_target_network(main)
    assert target is not main and all(not p.requires_grad for p in target.parameters())
    assert torch.equal(target.weight, main.weight)
    with torch.no_grad():
        main.weight.add_(1.0)
    assert not torch.equal(target.weight, main.weight)


def test_the_target_pass_equals_the_main_pass_until_the_main_nets_change() -> None:
    module = LSTMContainingRLModuleWithTargetNetwork(
        observation_space=gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        action_space=gym.spaces.Discrete(2),
        model_config={"lstm_cell_size": 4, "dense_layers": [5]},
    )
    assert isinstance(module, TargetNetworkAPI)
    module.make_target_networks()
    state = {k: torch.from_numpy(v).unsqueeze(0).repeat(2, 1) for k, v in module.get_initial_state().items()}
    batch = {Columns.OBS: torch.rand(2, 3, 3), Columns.STATE_IN: state}
    target = module.forward_target(batch)[TARGET_NETWORK_ACTION_DIST_INPUTS]
    assert target.shape == (2, 3, 2)
    assert torch.allclose(target, module.forward_train(batch)[Columns.ACTION_DIST_INPUTS])
    with torch.no_grad():
        module._pi_head.weight.add_(1.0)
    assert torch.allclose(module.forward_target(batch)[TARGET_NETWORK_ACTION_DIST_INPUTS], target)
    assert not torch.allclose(module.forward_train(batch)[Columns.ACTION_DIST_INPUTS], target)
