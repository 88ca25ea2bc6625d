"""SPEC 8 on every process: a checkpoint never makes a Ray worker import a module (issue 24, finding 1).

The names a recorded config gives by reference (its env ``"module:Class"``, its
``policy_mapping_fn`` ``"module:function"``) are checked on the driver by the one
resolver (:mod:`cairn.registry`: the allow-list), and a remote env runner imports and
registers only the names its driver resolved (:func:`cairn.rl.env.multi_agent_env.driver_names`);
whatever else a config it receives names is refused there by the same resolver.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")

from dist_helpers import small_config

import cairn
from cairn import CheckpointError
from cairn.rl import PPO
from cairn.rl.distributed.env_runner_actor import EnvRunnerActor
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.env.multi_agent_env import driver_names
from pack_helpers import own_file, replace_own_file
from storage.storage_reseal import reseal

# A module that no test imports and that does something visible when it is: it prints the Zen of Python.
FORBIDDEN = "this"


def _edit_configs(checkpoint: Path, replacements: dict[str, str]) -> None:
    """Replace text in every ``ctor.json`` of a checkpoint, then re-seal its manifests."""
    for manifest in checkpoint.rglob("manifest.json"):
        text = own_file(manifest.parent, "ctor.json").decode()
        for old, new in replacements.items():
            text = text.replace(old, new)
        replace_own_file(manifest.parent, "ctor.json", text.encode())
    reseal(fsspec.filesystem("file"), str(checkpoint))


def _imported_in(actor: Any, ray: Any, module: str) -> bool:
    """Whether the worker process of ``actor`` has imported ``module``."""
    return bool(ray.get(actor.__ray_call__.remote(lambda _self: module in sys.modules)))


def test_a_recorded_mapping_function_is_resolved_on_the_driver_before_any_worker_starts(
    ray_cluster: Any, tmp_path: Path
) -> None:
    ck = Path(PPO(small_config()).save_to_path(tmp_path / "ck"))
    _edit_configs(
        ck,
        {
            '"num_env_runners": 0': '"num_env_runners": 1',
            '"policy_mapping_fn": null': f'"policy_mapping_fn": "{FORBIDDEN}:anything"',
        },
    )
    assert FORBIDDEN not in sys.modules
    # Before the fix, the load succeeded and the env runner's worker imported the module.
    with pytest.raises(CheckpointError, match=rf"'{FORBIDDEN}:anything', which is not on cairn's allow-list"):
        PPO.from_checkpoint(ck)
    assert FORBIDDEN not in sys.modules


def test_a_worker_imports_only_what_its_driver_resolved(ray_cluster: Any) -> None:
    """The worker's own rule: a config that names a module the driver did not allow is refused there."""
    config = small_config(num_env_runners=1)
    actor = ray_cluster.remote(num_cpus=0)(EnvRunnerActor).remote(config, 1, EnvRunner, driver_names(config))
    try:
        assert ray_cluster.get(actor.ping.remote()) == 1
        # A config the driver never checked (built around __post_init__), as a bug or a hostile caller would send.
        hostile = dataclasses.replace(config)
        hostile.policy_mapping_fn = f"{FORBIDDEN}:anything"
        hostile.env = f"{FORBIDDEN}:CartPole-v1"
        # A single-agent runner has no use for the mapping; before the fix it imported its module anyway.
        ray_cluster.get(actor.prepare_remove_module.remote("nothing", hostile, driver_names(config)))
        assert not _imported_in(actor, ray_cluster, FORBIDDEN)
        # A runner built from it refuses the env id with the driver's message, and imports nothing.
        hostile_actor = ray_cluster.remote(num_cpus=0)(EnvRunnerActor).remote(
            hostile, 2, EnvRunner, driver_names(config)
        )
        with pytest.raises(Exception, match=rf"module '{FORBIDDEN}', which this program has not imported"):
            ray_cluster.get(hostile_actor.ping.remote())
    finally:
        ray_cluster.kill(actor)


def test_a_worker_imports_the_modules_of_a_mapping_function_the_driver_resolved(ray_cluster: Any) -> None:
    import mapping_helpers

    # Given by its path, the function is allowed by the program's registration (not by the import).
    cairn.register(mapping_helpers.always_main_v1)
    config = small_config(num_env_runners=1, policy_mapping_fn=mapping_helpers.__name__ + ":always_main_v1")
    allowed = driver_names(config)
    assert allowed.names == (f"{mapping_helpers.__name__}:always_main_v1",)
    actor = ray_cluster.remote(num_cpus=0)(EnvRunnerActor).remote(config, 1, EnvRunner, allowed)
    try:
        assert ray_cluster.get(actor.ping.remote()) == 1
        assert _imported_in(actor, ray_cluster, mapping_helpers.__name__)
    finally:
        ray_cluster.kill(actor)
