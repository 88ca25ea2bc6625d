"""The real checkpoints the fuzz suite mutates: templates, and how to rebuild what they hold.

A template is a committed checkpoint written once per session (or a golden
checkpoint of ``tests/data``) together with:

* ``cls``: the class recorded at its root, used as the target of
  ``restore_from_path`` and ``from_checkpoint``;
* ``pristine()``: a fresh object of that class whose values all differ from the
  checkpoint's, so that a restore that did nothing cannot pass for a good one.

The fuzz tree covers what SPEC section 3 lets a checkpoint hold::

    FuzzRoot               numpy arrays of several dtypes (empty, 0-d), torch tensors
                           (float32, bfloat16, int64, bool, uint8, empty, 0-d), tuples,
                           bytes, big ints, None keys; ctor: gymnasium spaces, a registered
                           dataclass, an enum, a tuple, bytes
      policy/              FuzzLeaf: torch weights, a non-contiguous view
      buffers/             FuzzNode: own counters, and
        obs/               FuzzLeaf
        act/               FuzzLeaf
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import cairn

DATA = Path(__file__).resolve().parent.parent / "data"


@cairn.register  # the fuzz worker loads templates another process saved
class Mode(enum.Enum):
    """An enum constructor argument."""

    TRAIN = "train"
    EVAL = "eval"


@cairn.register_type
@dataclasses.dataclass
class FuzzConfig:
    """A registered dataclass constructor argument."""

    width: int = 3
    lr: float = 0.25
    tags: tuple[str, ...] = ("x", "y")


def _values(seed: int, n: int) -> np.ndarray:
    return (np.arange(n, dtype=np.float32) + np.float32(seed * 100)) / np.float32(7)


@cairn.register
class FuzzLeaf(cairn.Checkpointable):
    """Torch and numpy leaves of one component."""

    def __init__(self, width: int = 3, seed: int = 0) -> None:
        self.width, self.seed = width, seed
        self.set_values(seed)

    def set_values(self, seed: int) -> None:
        """Give every value a seed-dependent content."""
        w = torch.from_numpy(_values(seed, self.width * 2)).reshape(self.width, 2)
        self.weight = w
        self.weight_t = w.t()
        self.bias = np.arange(self.width, dtype=np.float64) * (seed + 1)
        self.count = seed

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Own values."""
        return {"weight": self.weight, "weight_t": self.weight_t, "bias": self.bias, "count": self.count}

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what is present."""
        for key in ("weight", "weight_t", "bias", "count"):
            if key in state:
                setattr(self, key, state[key])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Width and seed."""
        return (self.width,), {"seed": self.seed}


@cairn.register
class FuzzNode(cairn.Checkpointable):
    """A node with two leaves and its own counters."""

    def __init__(self, width: int = 3) -> None:
        self.width = width
        self.obs = FuzzLeaf(width, seed=1)
        self.act = FuzzLeaf(width + 1, seed=2)
        self.counters = {"steps": 0, "pair": (0, b"\x00"), None: [1.5, None]}

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        """``obs`` and ``act``."""
        return [("obs", self.obs), ("act", self.act)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Counters and the components' states."""
        return {"counters": self.counters, **self._get_components_state(components, not_components=not_components)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what is present."""
        self.counters = state.get("counters", self.counters)
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Width."""
        return (), {"width": self.width}


@cairn.register
class FuzzRoot(cairn.Checkpointable):
    """The root of the fuzz tree (see the module docstring)."""

    def __init__(
        self,
        config: FuzzConfig | None = None,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        mode: Mode = Mode.TRAIN,
        extra: tuple[Any, ...] = (),
    ) -> None:
        self.config = config or FuzzConfig()
        self.observation_space = observation_space or gym.spaces.Box(-1.0, 1.0, (self.config.width,), np.float32)
        self.action_space = action_space or gym.spaces.Discrete(4)
        self.mode = mode
        self.extra = extra
        self.policy = FuzzLeaf(self.config.width, seed=3)
        self.buffers = FuzzNode(self.config.width)
        self.set_values(0)

    def set_values(self, seed: int) -> None:
        """Give the root's own values a seed-dependent content."""
        s = seed
        self.arrays = {
            "f32": _values(s, 5),
            "f16": np.arange(3, dtype=np.float16) + s,
            "i8": np.array([-(s % 100), 7], dtype=np.int8),
            "u64": np.array([2**63 + s], dtype=np.uint64),
            "c64": np.array([1 + 2j * s], dtype=np.complex64),
            "bool": np.array([True, s % 2 == 0]),
            "empty": np.zeros((0, 3), dtype=np.float32),
            "scalar0d": np.array(1.5 + s, dtype=np.float64),
            "npscalar": np.int16(s - 3),
            "strided": np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2] + s,
        }
        self.tensors = {
            "f32": torch.arange(4, dtype=torch.float32) + s,
            "bf16": (torch.arange(6, dtype=torch.float32).reshape(2, 3) + s).to(torch.bfloat16),
            "i64": torch.tensor([s, -1, 2**40], dtype=torch.int64),
            "bool": torch.tensor([True, False]),
            "u8": torch.tensor([255, s % 256], dtype=torch.uint8),
            "empty": torch.zeros(0, 2),
            "scalar0d": torch.tensor(float(s) + 0.5),
        }
        self.misc = {
            "tuple": (s, "two", b"\x03\x00", None, (1.5, [True])),
            "bytes": bytes(range(s % 7, s % 7 + 5)),
            "big": 2**70 + s,
            "neg": -(2**63) + s,
            7: [None, 1e-300, float("inf")],
            None: {"deep": ({"x": s},)},
        }
        self.step = s

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        """``policy`` and ``buffers``."""
        return [("policy", self.policy), ("buffers", self.buffers)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Own values and the components' states."""
        return {
            "arrays": self.arrays,
            "tensors": self.tensors,
            "misc": self.misc,
            "step": self.step,
            **self._get_components_state(components, not_components=not_components),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Apply what is present."""
        for key in ("arrays", "tensors", "misc", "step"):
            if key in state:
                setattr(self, key, state[key])
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Config, spaces, mode and extra."""
        return (self.config, self.observation_space, self.action_space), {"mode": self.mode, "extra": self.extra}


def saved_fuzz_root() -> FuzzRoot:
    """The object the ``fuzz_tree`` template holds."""
    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-2.0, 2.0, (3,), np.float32),
            "id": gym.spaces.MultiDiscrete([3, 5]),
        }
    )
    root = FuzzRoot(
        FuzzConfig(width=3, lr=0.5, tags=("a",)),
        space,
        gym.spaces.Discrete(5, start=1),
        mode=Mode.EVAL,
        extra=(b"\x01", 2**65, (None,)),
    )
    root.set_values(11)
    root.policy.set_values(12)
    root.buffers.counters = {"steps": 99, "pair": (4, b"\xff"), None: [2.5, None]}
    root.buffers.obs.set_values(13)
    root.buffers.act.set_values(14)
    return root


@dataclass(frozen=True)
class Template:
    """A checkpoint to mutate and the objects to load it into."""

    name: str
    cls: type[cairn.Checkpointable]
    pristine: Callable[[], cairn.Checkpointable]
    path: str


def _pristine_fuzz() -> cairn.Checkpointable:
    root = saved_fuzz_root()
    root.set_values(50)
    root.policy.set_values(51)
    root.buffers.counters = {"steps": -1}
    root.buffers.obs.set_values(52)
    root.buffers.act.set_values(53)
    return root


def _pristine_tree() -> cairn.Checkpointable:
    from cairn_test_components import Tree

    return Tree("golden", n=3)


def _pristine_leaf() -> cairn.Checkpointable:
    from cairn_test_components import Leaf

    leaf = Leaf()
    leaf.mutate(9)
    return leaf


def _pristine_ppo() -> cairn.Checkpointable:
    from cairn.rl import PPO, PPOConfig

    # The config of tests/data/make_golden_rl.py, untrained: every value differs from the checkpoint's.
    return PPO(
        PPOConfig(
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
    )


def _pristine_module() -> cairn.Checkpointable:
    import gymnasium as gym

    from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule

    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    return DefaultPPORLModule(box, gym.spaces.Discrete(2), {"hidden_sizes": [16, 16]}, seed=1)


def _pristine_buffer() -> cairn.Checkpointable:
    from cairn.rl.utils.replay_buffers import ReplayBuffer

    buf = ReplayBuffer(64, {"obs": ((4,), "float32"), "reward": ((), "float32")}, chunk_rows=8, seed=1)
    buf.add({"obs": np.ones((3, 4), np.float32), "reward": np.ones(3, np.float32)})
    return buf


def _saved_buffer() -> cairn.Checkpointable:
    buf = _pristine_buffer()
    buf.add({"obs": _values(3, 40).reshape(10, 4), "reward": _values(4, 10)})
    return buf


def templates(workdir: str) -> dict[str, Template]:
    """Every template; the fuzz tree is saved into ``workdir`` on first use."""
    from cairn.rl import PPO
    from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
    from cairn.rl.utils.replay_buffers import ReplayBuffer
    from cairn_test_components import Leaf, Tree

    fuzz_path = os.path.join(workdir, "template_fuzz_tree")
    if not os.path.exists(fuzz_path):
        saved_fuzz_root().save_to_path(fuzz_path)
    # Components that allocate by a constructor argument (issue 24, finding 2).
    module_path = os.path.join(workdir, "template_ppo_module")
    if not os.path.exists(module_path):
        _pristine_module().save_to_path(module_path)
    buffer_path = os.path.join(workdir, "template_replay_buffer")
    if not os.path.exists(buffer_path):
        _saved_buffer().save_to_path(buffer_path)
    return {
        "ppo_module": Template("ppo_module", DefaultPPORLModule, _pristine_module, module_path),
        "replay_buffer": Template("replay_buffer", ReplayBuffer, _pristine_buffer, buffer_path),
        "fuzz_tree": Template("fuzz_tree", FuzzRoot, _pristine_fuzz, fuzz_path),
        "golden_tree": Template("golden_tree", Tree, _pristine_tree, str(DATA / "golden_format_v2")),
        "golden_leaf": Template("golden_leaf", Leaf, _pristine_leaf, str(DATA / "golden_format_v1_leaf")),
        "golden_ppo": Template("golden_ppo", PPO, _pristine_ppo, str(DATA / "golden_format_v2_ppo")),
    }
