"""RLlib's config builders, example environments and quickstart on cairn (issue 25).

The builder form and the keyword form give equal dataclasses, so equal checkpoints;
every RLlib setting is taken, translated or refused by name, never ignored.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import callback_helpers
from cairn.rl import DQN, PPO, Algorithm, DQNConfig, PPOConfig
from cairn.rl.algorithms.sac.sac import SAC, SACConfig
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole, MultiAgentPendulum
from cairn.rl.examples.envs.classes.multi_agent.rock_paper_scissors import RockPaperScissors
from cairn.rl.examples.envs.classes.multi_agent.two_step_game import TwoStepGame
from cairn.rl.utils.replay_buffers import MultiAgentReplayBuffer, PrioritizedMultiAgentReplayBuffer
from pack_helpers import own_file


def test_the_builder_form_equals_the_keyword_form_and_writes_the_same_config(tmp_path: Path) -> None:
    built = (
        PPOConfig()
        .environment("CartPole-v1", env_config={"max_episode_steps": 50})
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2, observation_filter="NoFilter")
        .training(lr=1e-3, train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1, gamma=0.9, lambda_=0.8)
        .training(clip_param=0.1, vf_loss_coeff=0.25, entropy_coeff=0.0, grad_clip=1.0, use_kl_loss=False)
        .rl_module(model_config={"fcnet_hiddens": [8], "fcnet_activation": "relu"})
        .reporting(metrics_num_episodes_for_smoothing=5)
        .debugging(seed=7)
        .resources(num_gpus=0)
        .framework("torch")
        .api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True)
    )
    keywords = PPOConfig(
        env="CartPole-v1",
        env_config={"max_episode_steps": 50},
        num_envs_per_env_runner=2,
        observation_filter=None,
        rollout_length=32,
        lr=1e-3,
        minibatch_size=32,
        num_epochs=1,
        gamma=0.9,
        gae_lambda=0.8,
        clip_param=0.1,
        vf_loss_coeff=0.25,
        entropy_coeff=0.0,
        max_grad_norm=1.0,
        model_config={"hidden_sizes": [8], "activation": "relu"},
        episode_return_window=5,
        seed=7,
    )
    assert built == keywords
    a, b = built.build_algo(), PPO(keywords)
    paths = [algo.save_to_path(tmp_path / name) for algo, name in ((a, "built"), (b, "keywords"))]
    a.stop()
    b.stop()
    ctor = [own_file(p, "ctor.json") for p in paths]
    assert ctor[0] == ctor[1]  # the recorded config, byte for byte
    restored = PPO.from_checkpoint(paths[0])
    assert restored.config == keywords
    restored.stop()


def test_the_train_batch_follows_env_runners_and_learners_in_any_order() -> None:
    """RLlib resolves ``train_batch_size_per_learner`` when the algorithm is built: so the order does not matter."""
    first = PPOConfig().training(train_batch_size_per_learner=240).env_runners(num_envs_per_env_runner=3)
    later = PPOConfig().env_runners(num_envs_per_env_runner=3).training(train_batch_size_per_learner=240)
    assert first.rollout_length == later.rollout_length == 80
    assert PPOConfig().training(train_batch_size=120).env_runners(num_envs_per_env_runner=4).rollout_length == 30
    assert PPOConfig().env_runners(rollout_fragment_length=17).rollout_length == 17
    # What every runner takes (RLlib's "auto" gives the first runners one step more when the batch splits unevenly).
    uneven = PPOConfig().env_runners(num_envs_per_env_runner=3).training(train_batch_size_per_learner=100)
    assert [uneven.get_rollout_fragment_length(worker_index=i) for i in (0, 1, 5)] == [34, 34, 34]
    with pytest.raises(ValueError, match="worker_index"):
        uneven.get_rollout_fragment_length(worker_index=-1)
    # No multiple of the envs: taken as RLlib takes it, each env's share rounded up (3 x 34 = 102 >= 100).
    assert (
        PPOConfig().env_runners(num_envs_per_env_runner=3).training(train_batch_size_per_learner=100).rollout_length
        == 34
    )
    assert PPOConfig().env_runners(num_envs_per_env_runner=4).training(train_batch_size=2).rollout_length == 1


def test_a_refused_setting_changes_nothing_and_names_itself() -> None:
    config = PPOConfig().training(lr=1e-3)
    before = dataclasses.replace(config)
    with pytest.raises(ValueError, match=r"use_gae=False\) is refused: cairn's PPO always uses GAE"):
        config.training(lr=5e-5, use_gae=False)
    assert config == before  # the lr of the refused call is not applied either
    with pytest.raises(TypeError, match=r"unexpected setting 'no_such_thing'"):
        config.training(no_such_thing=1)
    for call, match in (
        (lambda: config.framework("tf2"), "framework\\('tf2'\\) is refused"),
        (lambda: config.api_stack(enable_rl_module_and_learner=False), "only RLlib's new API stack"),
        (lambda: config.training(lr=[[0, 1e-3], [100, 1e-4], [50, 1e-5]]), r"no \[timestep, lr\] pair after"),
        (lambda: config.training(model={"fcnet_hiddens": [8]}), "old API stack"),
        (lambda: config.environment(observation_space=object()), "reads the spaces from the environment"),
        (lambda: config.callbacks(on_sample_end=3), "give a function or a 'module:function' path"),
        (lambda: config.debugging(seed=None), "always seeds"),
        (lambda: config.evaluation(evaluation_duration="auto"), "evaluates after the training step"),
        (lambda: config.rl_module(model_config={"lstm_use_prev_action": True}), "reads observations only"),
        (lambda: config.multi_agent(policies_to_train=lambda mid, batch: True), "list of module ids"),
    ):
        with pytest.raises(ValueError, match=match):
            call()
    assert config == before


def test_lr_schedules_are_taken_as_rllib_runs_them() -> None:
    """RLlib's ``lr=[[t, value], ...]``: constant, linear to 0 at T (``lr_anneal_timesteps``), or any other
    schedule (``lr_schedule``: linear between the points, the last value after them)."""
    decay = PPOConfig().training(lr=[[0, 1e-3], [10_000, 0.0]])
    assert (decay.lr, decay.lr_anneal_timesteps, decay.lr_schedule) == (1e-3, 10_000, None)
    constant = PPOConfig().training(lr=[[0, 5e-4]])
    assert (constant.lr, constant.lr_anneal_timesteps) == (5e-4, None)
    assert PPOConfig.overrides(lr=[[0, 1e-3], [500, 0.0]]) == {"lr": 1e-3, "lr_anneal_timesteps": 500}
    to_another = PPOConfig().training(lr=[[0, 1e-3], [10_000, 1e-4]])
    assert (to_another.lr, to_another.lr_anneal_timesteps, to_another.lr_schedule) == (
        1e-3,
        None,
        ((0, 1e-3), (10_000, 1e-4)),
    )
    assert PPOConfig.from_dict(to_another.to_dict()) == to_another
    assert to_another.copy().training(lr=2e-4).lr_schedule is None  # a new lr replaces the schedule
    for schedule in ([[5, 1e-3]], [[0, 1e-3], [0, 0.0]], [[0, True]], [[0, 1e-3], [10, -1.0]], [[0, 1e-3]] * 1001):
        with pytest.raises(ValueError, match=r"training\(lr=\[\[timestep, lr\], \.\.\.\]\)"):
            PPOConfig().training(lr=schedule)
    with pytest.raises(ValueError, match="lr_anneal_timesteps=500 both say how lr changes"):
        PPOConfig(lr_anneal_timesteps=500, lr_schedule=((0, 1e-3), (10, 1e-4))).validate()
    with pytest.raises(ValueError, match="SAC's rates are actor_lr, critic_lr and alpha_lr"):
        SACConfig().training(lr_schedule=[[0, 1e-3], [10, 1e-4]])  # its optimizers keep their own rates


def test_copy_to_dict_from_dict_and_overrides() -> None:
    config = (
        PPOConfig()
        .training(lr=1e-3, lambda_=0.9)
        .multi_agent(
            policies={"p1", "p0"},
            algorithm_config_overrides_per_module={"p1": PPOConfig.overrides(lr=1e-4, lambda_=0.5)},
        )
    )
    assert config.policies == ("p0", "p1")  # a set is sorted: the same checkpoint every run
    assert config.algorithm_config_overrides_per_module == {"p1": {"lr": 1e-4, "gae_lambda": 0.5}}
    copied = config.copy()
    assert copied == config and copied is not config
    copied.training(lr=5.0)
    assert config.lr == 1e-3
    assert PPOConfig.from_dict(config.to_dict()) == config
    assert PPOConfig.from_dict({"lr": 1e-3, "lambda": 0.9, "num_env_runners": 0}) == PPOConfig(lr=1e-3, gae_lambda=0.9)
    with pytest.raises(TypeError, match="no setting 'bogus'"):
        PPOConfig.overrides(bogus=1)
    with pytest.raises(ValueError, match="same sampled batch"):
        PPOConfig.overrides(train_batch_size_per_learner=10)


def test_dqn_and_sac_training_settings() -> None:
    dqn = DQNConfig().training(
        epsilon=[(0, 1.0), (500, 0.1)],
        replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 1_000},
        train_batch_size_per_learner=16,
        target_network_update_freq=50,
        n_step=2,
        double_q=False,
        dueling=False,
    )
    assert (dqn.epsilon_start, dqn.epsilon_end, dqn.epsilon_timesteps) == (1.0, 0.1, 500)
    assert (dqn.replay_buffer_capacity, dqn.minibatch_size, dqn.n_step, dqn.double_q) == (1_000, 16, 2, False)
    per = DQNConfig().training(
        replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 500, "alpha": 0.5, "beta": 0.3},
        n_step=(2, 5),
        dueling=True,
    )
    assert per.replay_buffer_class is PrioritizedMultiAgentReplayBuffer and per.prioritized
    assert (per.replay_buffer_capacity, per.prioritized_replay_alpha, per.prioritized_replay_beta) == (500, 0.5, 0.3)
    assert (per.n_step, per.dueling) == ((2, 5), True)
    assert DQNConfig.from_dict(per.to_dict()) == per  # the range survives the round trip as a tuple
    back = per.training(replay_buffer_config={"type": "EpisodeReplayBuffer"})
    assert back.replay_buffer_class is MultiAgentReplayBuffer and not back.prioritized
    with pytest.raises(ValueError, match=r"keys \['gamma'\] are refused"):
        DQNConfig().training(replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "gamma": 0.9})
    with pytest.raises(ValueError, match=r"1 <= low < high"):
        DQNConfig().training(n_step=(5, 2))
    with pytest.raises(ValueError, match=r"samples uniformly \(prioritized replay is DQN's only\)"):
        SACConfig().training(replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer"})
    sac = SACConfig().training(initial_alpha=0.2, target_entropy="auto", actor_lr=1e-4, critic_lr=2e-4, tau=0.01)
    assert sac == SACConfig(model_config={"initial_alpha": 0.2}, policy_lr=1e-4, q_lr=2e-4, tau=0.01)
    with pytest.raises(ValueError, match="actor_lr, critic_lr and alpha_lr"):
        SACConfig().training(lr=1e-3)
    assert isinstance(
        DQNConfig().environment("CartPole-v1").training(num_steps_sampled_before_learning_starts=0), DQNConfig
    )
    assert DQNConfig.algo_class() is DQN and SACConfig.algo_class() is SAC


def test_the_rllib_quickstart_runs(tmp_path: Path) -> None:
    """RLlib's quickstart with the import changed (and a tiny batch for CI)."""
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
        .training(lr=1e-4, train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1)
    )
    algo = config.build_algo()
    result = algo.train()
    assert result["training_iteration"] == 1 and result["env_runners/num_env_steps_sampled"] == 64
    path = algo.save_to_path(tmp_path / "ckpt")
    restored = Algorithm.from_checkpoint(path)
    assert isinstance(restored, PPO) and restored.training_iteration == 1
    a = algo.train().flatten(wall_clock=False)
    b = restored.train().flatten(wall_clock=False)
    assert a == b
    algo.stop()
    restored.stop()


def map_player_to_module(agent_id: str, episode: Any, **kwargs: Any) -> str:
    """RLlib's mapping: ``f"p{agent_id}"``-style, here for the players of RockPaperScissors."""
    return "p0" if agent_id == "player1" else "p1"


def map_by_agent_number(agent_id: str | int, episode: Any, **kwargs: Any) -> str:
    return f"p{agent_id}"


@pytest.mark.parametrize(
    ("env", "env_config", "mapping", "spaces"),
    [
        (MultiAgentCartPole, {"num_agents": 2}, map_by_agent_number, ((4,), "Discrete")),
        (MultiAgentPendulum, {"num_agents": 2}, map_by_agent_number, ((3,), "Box")),
        (RockPaperScissors, {}, map_player_to_module, ((3,), "Discrete")),
        (TwoStepGame, {}, map_by_agent_number, ((6,), "Discrete")),
    ],
)
def test_rllib_example_envs_train_with_a_mapping_function(
    env: type, env_config: dict[str, Any], mapping: Any, spaces: tuple[tuple[int, ...], str]
) -> None:
    """Each example env trains two modules through RLlib's builders, the mapping function choosing per episode;
    the runner logged its sampling counters before ``on_sample_end`` (the multi-agent runner too)."""
    callback_helpers.SAMPLE_END_PEEKS.clear()
    instance = env(env_config)
    obs_shape, action_kind = spaces
    agent = instance.possible_agents[0]
    assert instance.observation_spaces[agent].shape == obs_shape
    assert type(instance.action_spaces[agent]).__name__ == action_kind
    config = (
        PPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(num_envs_per_env_runner=1, rollout_fragment_length=16)
        .training(minibatch_size=8, num_epochs=1)
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=mapping)
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .callbacks(callback_helpers.PeekSampledSteps)
    )
    assert config.env == f"{env.__module__}:{env.__qualname__}"
    algo = config.build_algo()
    result = algo.train()
    algo.stop()
    assert "p0" in result["learners"], sorted(result.flatten())
    assert "p1" in result["learners"], sorted(result.flatten())  # the mapping function chose p1 too
    [(env_steps, agent_steps)] = callback_helpers.SAMPLE_END_PEEKS
    assert env_steps == 16 and agent_steps >= 16


def test_example_env_rules() -> None:
    rps = RockPaperScissors()
    rps.reset(seed=0)
    obs, rewards, terminateds, _, _ = rps.step({"player1": RockPaperScissors.ROCK, "player2": RockPaperScissors.PAPER})
    assert rewards == {"player1": -1.0, "player2": 1.0} and not terminateds["__all__"]
    assert np.array_equal(obs["player1"], [0, 1, 0])
    for _ in range(9):
        _, _, terminateds, _, _ = rps.step({"player1": 0, "player2": 0})
    assert terminateds["__all__"]
    game = TwoStepGame()
    game.reset(seed=0)
    game.step({0: 1, 1: 0})  # agent 0 picks the second matrix
    _, rewards, terminateds, _, _ = game.step({0: 1, 1: 1})
    assert rewards == {0: 4.0, 1: 4.0} and terminateds["__all__"]
    with pytest.raises(ValueError, match="QMIX"):
        TwoStepGame({"actions_are_logits": True})
    cartpole = MultiAgentCartPole({"num_agents": 3})
    observations, _ = cartpole.reset(seed=1)
    assert sorted(observations) == [0, 1, 2]  # RLlib's int agent ids


def test_an_explicit_none_is_applied_as_rllib_applies_it_never_ignored() -> None:
    """callbacks(None) resets to the default callbacks; environment(None) is refused by name; left out keeps."""
    config = PPOConfig().environment("CartPole-v1").callbacks(callback_helpers.RecordEvents)
    assert config.callbacks_class is callback_helpers.RecordEvents
    assert config.copy().callbacks().callbacks_class is callback_helpers.RecordEvents  # left out: kept
    assert config.copy().callbacks(None).callbacks_class is None  # RLlib: back to the default callbacks
    assert config.copy().environment(env_config={}).env == "CartPole-v1"  # left out: kept
    with pytest.raises((TypeError, ValueError), match="env"):
        config.copy().environment(None)


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [
        ("rollout_length", 2.5, "an int >= 1"),  # int(2.5) used to pass as 2
        ("num_epochs", True, "an int >= 1"),
        ("num_env_runners", -1, "a non-negative int"),
        ("evaluation_duration", 0, "an int >= 1"),
        ("max_num_env_runner_restarts", float("nan"), "a non-negative int"),
    ],
)
def test_integer_settings_are_counts_checked_by_one_rule(field: str, value: Any, wanted: str) -> None:
    """Issue 37 §2: a config's integer settings are read with state_checks.Count, as restored counts are."""
    with pytest.raises(ValueError, match=rf"^{field} must be {wanted}, got {value!r}"):
        PPOConfig(env="CartPole-v1", **{field: value}).validate()
    assert PPOConfig(env="CartPole-v1", **{field: np.int64(3)}).validate() is None  # numpy ints are ints


def test_rl_module_spec_reads_the_default_spec_and_records_what_was_given() -> None:
    """Issue 38: ``config.rl_module_spec`` is RLlib's property (the default spec when none is given), while
    the config holds and records ``None``, through builders, ``dataclasses.replace`` and ``to_dict``."""
    from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
    from cairn.rl.core.rl_module.rl_module import RLModuleSpec

    config = PPOConfig().environment("CartPole-v1").training(lr=1e-3)
    assert config.rl_module_spec == RLModuleSpec(module_class=DefaultPPORLModule)
    rebuilt = dataclasses.replace(config, num_epochs=2)  # replace passes on what the attribute reads
    for one in (config, rebuilt):
        assert one.given_rl_module_spec() is None
        assert one.to_dict()["rl_module_spec"] is None
        assert not [name for name in one.recorded_names() if name[0].startswith("rl_module_spec")]
    given = RLModuleSpec(model_config={"hidden_sizes": [8]})
    config = config.rl_module(rl_module_spec=given)
    assert config.rl_module_spec == given == config.given_rl_module_spec() == config.to_dict()["rl_module_spec"]
