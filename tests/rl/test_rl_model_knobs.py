"""RLlib's model and PPO knobs: ``vf_share_layers``, activations, head layers, initializers, ``vf_clip_param``.

Through the public API: ``DefaultModelConfig`` / ``model_config`` dicts, ``RLModuleSpec``,
the config builders, the learner's loss, checkpoints (hostile ones resealed so that only
the module's own check can refuse them) and an exact resume in a new process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rl_helpers import forge_ctor
from torch import nn

from cairn.errors import CheckpointError, CorruptCheckpointError
from cairn.rl import PPO, PPOConfig
from cairn.rl.algorithms.dqn.default_dqn_rl_module import DefaultDQNRLModule
from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from cairn.rl.algorithms.ppo.ppo_learner import PPOLearner
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole
from cairn.testing import assert_states_equal

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
ENV = "StatelessCartPole-v1"
if ENV not in gym.registry:
    gym.register(ENV, entry_point=StatelessCartPole, max_episode_steps=500)


def build(model_config: Any, seed: int = 0, action_space: gym.Space[Any] = ACT) -> Any:
    return RLModuleSpec(DefaultPPORLModule, OBS, action_space, model_config, seed=seed).build()


# ---------------------------------------------------------------------------- vf_share_layers


def test_vf_share_layers_builds_one_encoder_under_both_heads_and_both_losses_reach_it() -> None:
    module = build(DefaultModelConfig(vf_share_layers=True, fcnet_hiddens=[16, 8], head_fcnet_hiddens=[4]))
    shapes = {name: tuple(p.shape) for name, p in module.named_parameters()}
    assert shapes == {
        "encoder.0.weight": (16, 4),
        "encoder.0.bias": (16,),
        "encoder.2.weight": (8, 16),
        "encoder.2.bias": (8,),
        "pi_head.0.weight": (4, 8),
        "pi_head.0.bias": (4,),
        "pi_head.2.weight": (2, 4),
        "pi_head.2.bias": (2,),
        "vf_head.0.weight": (4, 8),
        "vf_head.0.bias": (4,),
        "vf_head.2.weight": (1, 4),
        "vf_head.2.bias": (1,),
    }
    batch = {"obs": torch.randn(5, 4, generator=torch.Generator().manual_seed(1)), "actions": torch.zeros(5)}
    for output, reached, untouched in (("vf_preds", "vf_head", "pi_head"), ("action_logp", "pi_head", "vf_head")):
        module.zero_grad(set_to_none=True)
        module.forward_train(batch)[output].sum().backward()
        grads = {name: p.grad for name, p in module.named_parameters()}
        assert grads["encoder.0.weight"] is not None and grads["encoder.0.weight"].abs().sum() > 0  # shared
        assert grads[f"{reached}.0.weight"] is not None and grads[f"{untouched}.0.weight"] is None
    # The values the runner samples with are the ones the learner trains.
    with torch.no_grad():
        explored = module.forward_exploration(batch, generator=torch.Generator().manual_seed(0))
        assert torch.equal(explored["vf_preds"], module.compute_values(batch))
        assert torch.equal(explored["vf_preds"], module.forward_train(batch)["vf_preds"])


def test_leaving_vf_share_layers_out_builds_what_cairn_always_built() -> None:
    """None (cairn's default): separate MLPs, or the LSTM layout, which vf_share_layers=True names."""
    assert DefaultModelConfig(fcnet_hiddens=[8]).to_dict() == {"fcnet_hiddens": [8]}  # recorded as before
    separate = build(DefaultModelConfig(fcnet_hiddens=[8]))
    assert {n.split(".")[0] for n, _ in separate.named_parameters()} == {"pi", "vf"}
    assert separate.model_config == {"hidden_sizes": [8], "activation": "tanh", "log_std_init": 0.0}
    explicit_false = build({"fcnet_hiddens": [8], "vf_share_layers": False})
    assert explicit_false.model_config == separate.model_config
    assert_states_equal(explicit_false.get_state(), separate.get_state())

    lstm = {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 4}
    old, shared = build(lstm), build({**lstm, "vf_share_layers": True})
    assert_states_equal(shared.get_state(), old.get_state())  # the same layout, names and weights
    with pytest.raises(ValueError, match="no separate value LSTM"):
        build({**lstm, "vf_share_layers": False})
    with pytest.raises(ValueError, match="only PPO's default module"):
        DefaultDQNRLModule(OBS, ACT, {"vf_share_layers": True})


# ---------------------------------------------------------------------------- activations and heads


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("linear", nn.Identity),
        (None, nn.Identity),
        ("swish", nn.SiLU),
        ("silu", nn.SiLU),
        ("elu", nn.ELU),
        ("relu", nn.ReLU),
        ("tanh", nn.Tanh),
    ],
)
def test_rllib_activations_build_the_same_layers_in_ppo_and_dqn(name: str | None, layer: type) -> None:
    ppo = build(
        {"fcnet_hiddens": [8], "fcnet_activation": name, "head_fcnet_hiddens": [3], "head_fcnet_activation": name}
    )
    assert type(ppo.pi[1]) is layer and type(ppo.pi[3]) is layer  # the encoder's and the head's
    dqn = DefaultDQNRLModule(OBS, ACT, {"fcnet_hiddens": [8], "fcnet_activation": name})
    assert type(dqn.q_net[1]) is layer
    if name == "linear":  # no activation: the policy's logits are affine in the observation
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            f0, f1, f2 = (ppo.pi(v) for v in (torch.zeros(3, 4), x, 2 * x))
        torch.testing.assert_close(f2 - f0, 2 * (f1 - f0))


@pytest.mark.parametrize("bad", ["gelu", "torch.nn.GELU", "Tanh", 3, ["relu"]])
def test_an_activation_cairn_lacks_is_refused_by_name(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"activation .* is refused"):
        build({"fcnet_activation": bad})
    with pytest.raises(ValueError, match=r"activation .* is refused"):
        build({"head_fcnet_activation": bad})


# ---------------------------------------------------------------------------- initializers


def test_initializers_are_torch_s_by_name_drawn_from_the_module_s_seed() -> None:
    module = build(
        DefaultModelConfig(
            fcnet_hiddens=[16, 8],
            fcnet_kernel_initializer="xavier_uniform",  # RLlib writes it with or without the trailing _
            fcnet_kernel_initializer_kwargs={"gain": 0.5},
            fcnet_bias_initializer="constant_",
            fcnet_bias_initializer_kwargs={"val": 0.1},
        ),
        seed=7,
    )
    expected = nn.init.xavier_uniform_(torch.empty(16, 4), gain=0.5, generator=torch.Generator().manual_seed(7))
    assert torch.equal(module.pi[0].weight, expected)  # the first draw of the module's seed
    for layer in (module.pi[0], module.pi[2], module.vf[0], module.vf[2]):
        assert torch.all(layer.bias == 0.1)
    assert torch.all(module.pi[4].bias == 0.0)  # the heads keep cairn's initialization
    again = build(module.model_config, seed=7)  # what a checkpoint records rebuilds the same weights
    assert_states_equal(again.get_state(), module.get_state())

    by_function = DefaultModelConfig(fcnet_kernel_initializer=nn.init.orthogonal_)  # RLlib passes the function
    assert by_function.to_dict() == {"fcnet_kernel_initializer": "orthogonal_"}  # recorded by name

    kaiming = build({"fcnet_hiddens": [8], "fcnet_kernel_initializer": "kaiming_normal_",
                     "fcnet_kernel_initializer_kwargs": {"mode": "fan_out", "nonlinearity": "relu"},
                     "fcnet_bias_initializer": "zeros_"}, seed=1)  # fmt: skip
    reference = nn.init.kaiming_normal_(
        torch.empty(8, 4), mode="fan_out", nonlinearity="relu", generator=torch.Generator().manual_seed(1)
    )
    assert torch.equal(kaiming.pi[0].weight, reference)


@pytest.mark.parametrize(
    ("initializer", "kwargs", "match"),
    [
        ("os.system", None, "refused: cairn looks initializers up by name"),
        ("torch.nn.init.xavier_uniform_", None, "never a callable or a path"),
        ("__import__", None, "refused"),
        ("calculate_gain", None, "refused"),
        ("xavier_uniform_\x00", None, "refused"),
        (nn.init.xavier_uniform_, None, "never a callable"),
        ("xavier_uniform_", {"generator": 1}, "_kwargs\\['generator'\\]"),
        ("xavier_uniform_", {"gain": "1"}, "_kwargs\\['gain'\\]"),
        ("xavier_uniform_", {"gain": float("nan")}, "_kwargs\\['gain'\\]"),
        ("kaiming_uniform_", {"gain": 2.0}, "cannot initialize a tensor"),
        ("normal_", {"std": 1e308, "mean": 1e308}, "non-finite"),
        ("normal_", {"std": -1.0}, "cannot initialize a tensor"),
        ("kaiming_normal_", {"mode": "fan_sideways"}, "cannot initialize a tensor"),
        (None, {"gain": 1.0}, "without an initializer"),
    ],
)
def test_initializers_outside_the_allow_list_are_refused(initializer: Any, kwargs: Any, match: str) -> None:
    config = {"fcnet_kernel_initializer": initializer, "fcnet_kernel_initializer_kwargs": kwargs}
    with pytest.raises(ValueError, match=match):
        build(config)


def test_a_checkpoint_recording_a_path_as_initializer_or_huge_heads_is_refused(tmp_path: Path) -> None:
    module = build({"fcnet_hiddens": [8], "fcnet_kernel_initializer": "orthogonal_"})
    folder = Path(module.save_to_path(tmp_path / "module"))
    assert_states_equal(DefaultPPORLModule.from_checkpoint(folder).get_state(), module.get_state())

    forge_ctor(folder, lambda c: c["kwargs"]["model_config"].update(fcnet_kernel_initializer="os.system"))
    with pytest.raises(CheckpointError, match=r"'os\.system' is refused") as caught:
        DefaultPPORLModule.from_checkpoint(folder)
    assert "cairn looks initializers up by name" in str(caught.value) + str(caught.value.__cause__)
    forge_ctor(folder, lambda c: c["kwargs"]["model_config"].update(
        fcnet_kernel_initializer="orthogonal_", head_fcnet_hiddens=[6144] * 4))  # fmt: skip
    with pytest.raises(CorruptCheckpointError, match=r"head_fcnet_hiddens=\[6144.*bytes of parameters"):
        DefaultPPORLModule.from_checkpoint(folder)


def test_an_algorithm_checkpoint_recording_huge_heads_is_refused_before_building(tmp_path: Path) -> None:
    """The algorithm builds its modules itself: its own bound counts the heads' layers too."""
    algo = PPO(PPOConfig(env="CartPole-v1", rollout_length=32, minibatch_size=32, model_config={"hidden_sizes": [8]}))
    try:
        folder = Path(algo.save_to_path(tmp_path / "algo"))
    finally:
        algo.stop()
    forge_ctor(folder, lambda c: c["args"][0]["value"]["model_config"].update(head_fcnet_hiddens=[6144] * 4))
    with pytest.raises(CorruptCheckpointError, match=r"ctor\.json.*at least .* bytes of parameters"):
        PPO.from_checkpoint(folder)


# ---------------------------------------------------------------------------- vf_clip_param and the alias


def _loss(vf_clip_param: float | None) -> tuple[torch.Tensor, dict[str, float], torch.Tensor, dict[str, Any]]:
    config = PPOConfig(env="CartPole-v1", vf_clip_param=vf_clip_param, vf_loss_coeff=0.5, entropy_coeff=0.0)
    learner = PPOLearner(config, {"p": RLModuleSpec(DefaultPPORLModule, OBS, ACT, {"hidden_sizes": [8]}, seed=0)})
    g = torch.Generator().manual_seed(3)
    batch = {
        "obs": torch.randn(16, 4, generator=g),
        "actions": torch.randint(0, 2, (16,), generator=g),
        "action_logp": torch.full((16,), -0.69),
        "advantages": torch.randn(16, generator=g),
        "value_targets": torch.linspace(-8.0, 8.0, 16),  # squared errors from ~0 to ~64: some above the clip
        "vf_preds": torch.zeros(16),
    }
    module = learner.module["p"]
    loss, metrics = learner.compute_loss_for_module("p", module, batch)
    values = module.forward_train({"obs": batch["obs"], "actions": batch["actions"]})["vf_preds"].detach()
    return loss, metrics, values, batch


def test_vf_clip_param_clamps_each_squared_value_error_as_rllib_does() -> None:
    unclipped_loss, unclipped, values, batch = _loss(None)
    errors = (values - batch["value_targets"]).pow(2)
    assert unclipped["vf_loss"] == float(0.5 * errors.mean())  # cairn's loss, unchanged without the setting
    clipped_loss, clipped, _, _ = _loss(10.0)
    assert clipped["vf_loss"] == float(0.5 * torch.clamp(errors, 0.0, 10.0).mean())  # RLlib's clamp(vf_loss, 0, c)
    assert 0 < clipped["vf_loss"] < unclipped["vf_loss"]
    assert clipped["policy_loss"] == unclipped["policy_loss"]
    torch.testing.assert_close(
        clipped_loss - unclipped_loss, torch.tensor(0.5 * (clipped["vf_loss"] - unclipped["vf_loss"]))
    )
    inf_loss, _, _, _ = _loss(float("inf"))
    assert torch.equal(inf_loss, unclipped_loss)


def test_vf_clip_param_and_mini_batch_size_per_learner_through_the_builders() -> None:
    assert PPOConfig().vf_clip_param is None  # cairn's default: no clipping (RLlib's is 10.0)
    assert PPOConfig().training(vf_clip_param=10.0).vf_clip_param == 10.0
    assert PPOConfig().training(vf_clip_param=None).vf_clip_param is None
    for bad in (-1.0, 0, True, "10", float("nan")):
        with pytest.raises(ValueError, match="vf_clip_param"):
            PPOConfig().training(vf_clip_param=bad)
    with pytest.raises(ValueError, match=r"vf_clip_param=-2\.0 is refused"):
        PPOConfig(env="CartPole-v1", algorithm_config_overrides_per_module={"p": {"vf_clip_param": -2.0}}).validate()
    assert PPOConfig().training(mini_batch_size_per_learner=64).minibatch_size == 64
    with pytest.raises(ValueError, match="mini_batch_size_per_learner must be an int"):
        PPOConfig().training(mini_batch_size_per_learner=6.4)


def test_rllib_pettingzoo_wrapper_path_is_the_same_class() -> None:
    from cairn.rl.env.pettingzoo_env import ParallelPettingZooEnv as Home
    from cairn.rl.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    assert ParallelPettingZooEnv is Home
    assert f"{Home.__module__}:{Home.__qualname__}" == "cairn.rl.env.pettingzoo_env:ParallelPettingZooEnv"


# ---------------------------------------------------------------------------- exact resume


RESUME = r"""
import json, sys
import gymnasium as gym
from cairn.rl import PPO
from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole
gym.register("StatelessCartPole-v1", entry_point=StatelessCartPole, max_episode_steps=500)
algo = PPO.from_checkpoint(sys.argv[1])
metrics = [algo.train().flatten(wall_clock=False) for _ in range(2)]
algo.save_to_path(sys.argv[2] + "/final")
with open(sys.argv[2] + "/metrics.json", "w") as f:
    json.dump(metrics, f)
"""


def test_shared_lstm_with_clipped_values_resumes_exactly_in_a_new_process(tmp_path: Path) -> None:
    config = (
        PPOConfig()
        .environment(ENV)
        .env_runners(num_envs_per_env_runner=3)
        .training(train_batch_size_per_learner=72, minibatch_size=24, num_epochs=2, vf_clip_param=1.0)
        .rl_module(model_config=DefaultModelConfig(
            fcnet_hiddens=[8], fcnet_activation="swish", head_fcnet_hiddens=[4], vf_share_layers=True,
            use_lstm=True, lstm_cell_size=8, max_seq_len=5, fcnet_kernel_initializer="xavier_uniform_"))
        .debugging(seed=0)
    )  # fmt: skip
    algo = config.build_algo()
    try:
        algo.train()
        mid = algo.save_to_path(tmp_path / "mid")
        straight = [algo.train().flatten(wall_clock=False) for _ in range(2)]
        straight_state = algo.get_state()
    finally:
        algo.stop()
    out = tmp_path / "resumed"
    out.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", RESUME, str(mid), str(out)], check=True, env=env, timeout=300)
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(straight))
    again = PPO.from_checkpoint(out / "final")
    try:
        assert_states_equal(again.get_state(), straight_state)
        assert again.config.vf_clip_param == 1.0
    finally:
        again.stop()
