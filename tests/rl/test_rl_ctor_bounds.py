"""Constructor arguments are bounded by what the checkpoint holds, before anything is built (issue 24, finding 2).

A 39 KB module checkpoint recording ``hidden_sizes=[6144] * 4`` took 1.3 GB and 36 s
to build before any check; a 1.2 KB buffer checkpoint recording ``capacity=3e6,
chunk_rows=1``, 2.4 GB and 32 s. Each component class that allocates by its
arguments has the hook ``ctor_args_problem`` of :mod:`cairn._ctor_bounds`; these
tests ask it through :func:`cairn._ctor_bounds.check_ctor_args` with the sizes of
real checkpoint folders, the way the engine does before it calls the constructor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from rl_helpers import forge_ctor

from cairn import CorruptCheckpointError
from cairn._ctor_bounds import FolderSizes, check_ctor_args
from cairn.rl.algorithms.dqn.default_dqn_rl_module import DefaultDQNRLModule
from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from cairn.rl.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from cairn.rl.utils.replay_buffers.multi_agent_replay_buffer import MultiAgentReplayBuffer
from cairn.rl.utils.replay_buffers.replay_buffer import ReplayBuffer, ReplayBufferChunk

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files


def folder_sizes(folder: Path) -> FolderSizes:
    """What the folder's manifest lists, and the bytes of every file under it (what the engine knows)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    files = {name: (folder / name).stat().st_size for name in manifest["files"] if "/" not in name}
    tree = sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(folder) for f in names)
    return FolderSizes(files=files, components=tuple(manifest["components"]), tree_bytes=tree)


def _check(component: Any, folder: Path, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    check_ctor_args(type(component), args, kwargs, folder_sizes(folder), where=f"{folder}/ctor.json")


BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


@pytest.mark.parametrize(
    ("cls", "action_space"),
    [
        (DefaultPPORLModule, gym.spaces.Discrete(2)),
        (DefaultDQNRLModule, gym.spaces.Discrete(2)),
        (DefaultSACRLModule, gym.spaces.Box(-1.0, 1.0, (2,), np.float32)),
    ],
)
def test_a_module_recording_huge_hidden_sizes_is_refused_before_it_is_built(
    tmp_path: Path, cls: type, action_space: gym.Space[Any]
) -> None:
    module = cls(BOX, action_space, {"hidden_sizes": [32, 32]}, seed=0)
    folder = Path(module.save_to_path(tmp_path / "module"))
    args, kwargs = module.get_ctor_args_and_kwargs()
    _check(module, folder, args, kwargs)  # what it recorded fits
    hostile = {**kwargs, "model_config": {**kwargs["model_config"], "hidden_sizes": [6144] * 4}}
    with pytest.raises(CorruptCheckpointError, match=r"hidden_sizes=\[6144, .*bytes of parameters.*nothing was built"):
        _check(module, folder, args, hostile)


def test_a_buffer_recording_millions_of_chunks_is_refused_before_it_is_built(tmp_path: Path) -> None:
    columns = {"obs": ((4,), "float32"), "reward": ((), "float32")}
    buffer = ReplayBuffer(64, columns, chunk_rows=16)
    buffer.add({"obs": np.ones((20, 4), np.float32), "reward": np.ones(20, np.float32)})
    folder = Path(buffer.save_to_path(tmp_path / "buffer"))
    args, kwargs = buffer.get_ctor_args_and_kwargs()
    _check(buffer, folder, args, kwargs)
    with pytest.raises(CorruptCheckpointError, match=r"capacity=3000000 in chunks of chunk_rows=1 make 3000000 chunk"):
        _check(buffer, folder, (3_000_000, *args[1:]), {**kwargs, "chunk_rows": 1})
    # A chunk folder loaded alone: its rows are bounded by its own bytes.
    (chunk_name, chunk), *_ = buffer.get_checkpointable_components()
    chunk_args, chunk_kwargs = chunk.get_ctor_args_and_kwargs()
    _check(chunk, folder / chunk_name, chunk_args, chunk_kwargs)
    with pytest.raises(CorruptCheckpointError, match=r"a chunk of 100000000 rows"):
        _check(chunk, folder / chunk_name, (*chunk_args[:2], 100_000_000, *chunk_args[3:]), chunk_kwargs)
    assert isinstance(chunk, ReplayBufferChunk)


def test_a_multi_agent_buffer_counts_the_chunks_of_every_module(tmp_path: Path) -> None:
    columns = {m: {"obs": ((2,), "float32")} for m in ("p0", "p1")}
    buffer = MultiAgentReplayBuffer(32, columns, chunk_rows=8)
    folder = Path(buffer.save_to_path(tmp_path / "buffers"))
    args, kwargs = buffer.get_ctor_args_and_kwargs()
    _check(buffer, folder, args, kwargs)
    with pytest.raises(CorruptCheckpointError, match=r"make 2000000 chunk objects"):
        _check(buffer, folder, (1_000_000, *args[1:]), {**kwargs, "chunk_rows": 1})


def test_from_checkpoint_refuses_a_module_recording_huge_hidden_sizes_before_building_it(tmp_path: Path) -> None:
    """Through the public API: the engine asks the hook before the constructor runs (the issue's 1.3 GB)."""
    module = DefaultPPORLModule(BOX, gym.spaces.Discrete(2), {"hidden_sizes": [32, 32]}, seed=0)
    folder = Path(module.save_to_path(tmp_path / "module"))
    forge_ctor(folder, lambda c: c["kwargs"]["model_config"].update(hidden_sizes=[6144] * 4))
    with pytest.raises(CorruptCheckpointError, match=r"ctor\.json.*do not fit what the checkpoint holds"):
        DefaultPPORLModule.from_checkpoint(folder)


def test_from_checkpoint_refuses_a_buffer_recording_millions_of_chunks_before_building_it(tmp_path: Path) -> None:
    buf = ReplayBuffer(64, {"obs": ((4,), "float32")}, chunk_rows=8)
    buf.add({"obs": np.zeros((3, 4), np.float32)})
    folder = Path(buf.save_to_path(tmp_path / "buf"))

    def huge(c: dict[str, Any]) -> None:
        c["args"][0] = 3_000_000
        c["kwargs"]["chunk_rows"] = 1

    forge_ctor(folder, huge)
    with pytest.raises(CorruptCheckpointError, match=r"ctor\.json.*do not fit what the checkpoint holds"):
        ReplayBuffer.from_checkpoint(folder)


def test_from_checkpoint_refuses_an_algorithm_whose_config_asks_for_huge_modules(tmp_path: Path) -> None:
    """The sibling at the algorithm's level: its config builds the modules (and their copies)."""
    from cairn.rl import PPO, PPOConfig

    algo = PPO(PPOConfig(env="CartPole-v1", rollout_length=32, minibatch_size=32, model_config={"hidden_sizes": [8]}))
    try:
        folder = Path(algo.save_to_path(tmp_path / "algo"))
    finally:
        algo.stop()
    forge_ctor(folder, lambda c: c["args"][0]["value"]["model_config"].update(hidden_sizes=[6144] * 4))
    with pytest.raises(CorruptCheckpointError, match=r"ctor\.json.*at least .* bytes of parameters"):
        PPO.from_checkpoint(folder)


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_envs_per_env_runner", 10**9), ("rollout_length", 10**10), ("num_env_runners", 10**8)],
)
def test_from_checkpoint_refuses_an_algorithm_whose_config_asks_for_huge_sampling(
    tmp_path: Path, field: str, value: int
) -> None:
    """A recorded env count or rollout length that no checkpoint of this size could come from is refused
    before any env runner is built (10**9 CartPole copies would take the machine's memory first)."""
    from cairn.rl import PPO, PPOConfig

    config = PPOConfig(env="CartPole-v1", rollout_length=32, minibatch_size=32, model_config={"hidden_sizes": [8]})
    algo = PPO(config)
    try:
        folder = Path(algo.save_to_path(tmp_path / "algo"))
    finally:
        algo.stop()
    forge_ctor(folder, lambda c: c["args"][0]["value"].update({field: value}))
    with pytest.raises(CorruptCheckpointError, match=r"ctor\.json.*sub-environments.*nothing was built"):
        PPO.from_checkpoint(folder)
    # A file that records more than it could hold is hostile whatever replaces it (cairn/_restore.py).
    with pytest.raises(CorruptCheckpointError, match="sub-environments"):
        PPO.from_checkpoint(folder, config=config)


def test_the_sampling_bound_is_far_above_real_runs(tmp_path: Path) -> None:
    """A large real run's settings pass with room to spare: 512 envs x 4 runners x 2,048 steps, evaluation too."""
    from cairn._ctor_bounds import ALLOC_BYTES_CONSTANT
    from cairn.rl import PPOConfig
    from cairn.rl.algorithms.config_bounds import sampling_problem

    config = PPOConfig(
        env="CartPole-v1", num_envs_per_env_runner=512, num_env_runners=3, rollout_length=2048, evaluation_interval=1
    )
    assert sampling_problem(config, ALLOC_BYTES_CONSTANT) is None
    assert sampling_problem(config, 1 << 20) is not None  # and it does bound: a 1 MB allowance is too little
