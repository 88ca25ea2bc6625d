"""The layout of cairn.rl (SPEC 9): RLlib's module tree, no import cycles, old paths still load."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import cairn
import cairn.rl

RL_ROOT = pathlib.Path(cairn.rl.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(RL_ROOT.parent.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every cairn.rl module ``path`` imports, anywhere in it (also in functions and TYPE_CHECKING)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cairn.rl"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("cairn.rl"))
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in RL_ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        # ``from cairn.rl.core.learner import learner`` style imports name a package; keep modules only.
        graph[name] = {m for m in _imports(path) if m in modules and m != name and m != "cairn.rl"}
    return graph


def test_the_rllib_layout_is_there() -> None:
    expected = [
        "algorithms/algorithm.py",
        "algorithms/algorithm_config.py",
        "config/algorithm_config.py",
        "algorithms/ppo/ppo.py",
        "algorithms/ppo/ppo_learner.py",
        "core/rl_module/rl_module.py",
        "core/rl_module/multi_rl_module.py",
        "core/learner/learner.py",
        "core/learner/learner_group.py",
        "env/env_runner.py",
        "env/env_runner_group.py",
        "env/multi_agent_env.py",
        "connectors/connectors.py",
    ]
    missing = [p for p in expected if not (RL_ROOT / p).is_file()]
    assert not missing
    # The command line, plotting and the metrics log are the CLI layer's, not cairn.rl's.
    assert not [p.name for p in RL_ROOT.rglob("*.py") if p.stem in ("_cli", "_plot", "metrics_log")]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("cairn.rl.ppo:PPO", "cairn.rl.algorithms.ppo.ppo:PPO"),
        ("cairn.rl.ppo:PPOConfig", "cairn.rl.algorithms.ppo.ppo:PPOConfig"),
        ("cairn.rl.learner:Learner", "cairn.rl.algorithms.ppo.ppo_learner:PPOLearner"),
        ("cairn.rl.learner_group:LearnerGroup", "cairn.rl.core.learner.learner_group:LearnerGroup"),
        ("cairn.rl.rl_module:RLModule", "cairn.rl.algorithms.ppo.default_ppo_rl_module:DefaultPPORLModule"),
        ("cairn.rl.multi_rl_module:MultiRLModule", "cairn.rl.core.rl_module.multi_rl_module:MultiRLModule"),
        ("cairn.rl.env_runner:EnvRunner", "cairn.rl.env.env_runner:EnvRunner"),
        ("cairn.rl.connectors:MeanStdFilter", "cairn.rl.connectors.connectors:MeanStdFilter"),
    ],
)
def test_old_class_paths_resolve_to_the_moved_classes(old: str, new: str) -> None:
    from cairn.registry import class_path, resolve_class

    cairn.rl.PPO  # noqa: B018 - imports the stack, which registers the old paths
    assert class_path(resolve_class(old, where="test")) == new


def test_old_import_names_still_work() -> None:
    """``from cairn.rl import X`` for every name of 0.1 but ``Connector`` (the array connector contract, which
    ConnectorV2 replaced: issue 37), in a fresh interpreter."""
    code = (
        "from cairn.rl import PPO, PPOConfig, Algorithm, AlgorithmConfig, RLModule, RLModuleSpec, MultiRLModule, "
        "Learner, LearnerGroup, EnvRunner, EnvRunnerGroup, IndependentAgentsEnv, ConnectorPipeline, ConnectorV2, "
        "MeanStdFilter, ClipActions, compute_gae, register_env_state_handler, DEFAULT_MODULE_ID, DEFAULT_AGENT_ID; "
        "assert DEFAULT_MODULE_ID == AlgorithmConfig().policies[0] == 'default_policy'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_class_less_spec_builds_ppo_module_when_taken_from_the_package() -> None:
    """``from cairn.rl import RLModuleSpec`` still makes a class-less spec build 0.1's MLP, in a fresh interpreter."""
    code = (
        "import gymnasium as gym, sys; from cairn.rl import RLModuleSpec; "
        "m = RLModuleSpec(observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=gym.spaces.Discrete(2)).build(); "
        "assert type(m).__name__ == 'DefaultPPORLModule', type(m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_base_config_is_recorded_under_rllibs_path_before_and_after_the_move() -> None:
    """Issue 37 moved AlgorithmConfig to rl/config; a checkpoint names it as every 0.3 checkpoint did."""
    from cairn.codec.ctor import decode_ctor, encode_ctor
    from cairn.rl.config.algorithm_config import AlgorithmConfig

    config = AlgorithmConfig(env="CartPole-v1", lr=1e-3)
    encoded, _ = encode_ctor((), {"config": config}, allow_pickle=False)
    assert "cairn.rl.algorithms.algorithm_config:AlgorithmConfig" in str(encoded)
    assert "cairn.rl.config.algorithm_config" not in str(encoded)
    _, kwargs = decode_ctor(encoded, allow_pickle=False, where="test")
    assert kwargs["config"] == config
