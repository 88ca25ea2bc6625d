"""Where cairn's Ray actors go: their resource requests and the bundles of a Tune trial.

One home for the layout RLlib's ``Algorithm.default_resource_request`` gives Tune:
bundle 0 is the algorithm's own process (``num_cpus_for_main_process``), then one
bundle per remote env runner (``num_cpus_per_env_runner``,
``custom_resources_per_env_runner``), one per evaluation env runner, one per remote
learner (``num_cpus_per_learner``, ``num_gpus_per_learner``,
``custom_resources_per_learner``). Each actor asks for its own bundle by index when it
starts inside a placement group of exactly this layout (a Tune trial given
:meth:`~cairn.rl.algorithms.algorithm.Algorithm.default_resource_request`), so an
actor never takes another's reservation; outside one it asks Ray for the same
resources, and Ray places it on a node that has them.

Nothing here imports Ray at module level: a config's layout is plain data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.rl.config.algorithm_config import AlgorithmConfig

__all__ = ["ActorBundle", "actor_options", "env_runner_resources", "learner_resources", "resource_bundles"]

MAIN = "main"
ENV_RUNNER = "env_runner"
EVALUATION_ENV_RUNNER = "evaluation_env_runner"
LEARNER = "learner"


@dataclass(frozen=True)
class ActorBundle:
    """One bundle of the layout: who it is for (``kind``, worker index or rank) and what it reserves.

    ``resources`` holds only amounts above 0, as Tune's ``PlacementGroupFactory`` keeps them.
    """

    kind: str
    index: int
    resources: dict[str, float]


def _nonzero(resources: dict[str, float]) -> dict[str, float]:
    return {name: float(amount) for name, amount in resources.items() if amount}


def env_runner_resources(config: AlgorithmConfig) -> dict[str, float]:
    """What one remote env runner of ``config`` reserves (zero amounts left out)."""
    return _nonzero({"CPU": float(config.num_cpus_per_env_runner), **config.custom_resources_per_env_runner})


def learner_resources(config: AlgorithmConfig) -> dict[str, float]:
    """What one remote learner of ``config`` reserves (zero amounts left out)."""
    return _nonzero(
        {
            "CPU": float(config.num_cpus_per_learner),
            "GPU": float(config.num_gpus_per_learner),
            **config.custom_resources_per_learner,
        }
    )


def _learner_bundles(config: AlgorithmConfig) -> int:
    """How many learner bundles ``config`` reserves (remote learners that reserve something)."""
    return int(config.num_learners) if int(config.num_learners) > 1 and learner_resources(config) else 0


def _head(config: AlgorithmConfig) -> int:
    """1 when the main process's bundle is kept (Tune drops an empty first bundle), else 0."""
    return 1 if float(config.num_cpus_for_main_process) > 0 else 0


def resource_bundles(config: AlgorithmConfig, *, evaluation: AlgorithmConfig | None) -> list[ActorBundle]:
    """The bundles a run of ``config`` reserves, in RLlib's order; see the module docstring.

    Args:
        config: The algorithm's config.
        evaluation: The evaluation runners' config, when the algorithm has evaluation runners.

    Actors that reserve nothing (cairn's default ``num_cpus_per_env_runner=0``) get no
    bundle: Ray's placement groups refuse empty bundles, and such an actor fits anywhere.
    """
    bundles = [ActorBundle(MAIN, 0, _nonzero({"CPU": float(config.num_cpus_for_main_process)}))]
    runner = env_runner_resources(config)
    if runner:
        bundles += [ActorBundle(ENV_RUNNER, i, runner) for i in range(1, int(config.num_env_runners) + 1)]
    if evaluation is not None:
        eval_runner = env_runner_resources(evaluation)
        if eval_runner:
            count = int(evaluation.num_env_runners)
            bundles += [ActorBundle(EVALUATION_ENV_RUNNER, i, eval_runner) for i in range(1, count + 1)]
    learner = learner_resources(config)
    bundles += [ActorBundle(LEARNER, rank, learner) for rank in range(_learner_bundles(config))]
    return bundles


def _slot(config: AlgorithmConfig, kind: str, index: int, total: int) -> int:
    """The bundle index of actor ``(kind, index)`` in a placement group of ``total`` bundles laid out
    by :func:`resource_bundles`: env runners right after the main bundle, learners last, evaluation
    runners just before the learners (``config`` is the group's own: the evaluation runners' config
    carries the algorithm's learner settings)."""
    if kind == ENV_RUNNER:
        return _head(config) + index - 1
    if kind == EVALUATION_ENV_RUNNER:
        return total - _learner_bundles(config) - int(config.num_env_runners) + index - 1
    return total - _learner_bundles(config) + index


def actor_options(
    ray: Any, *, config: AlgorithmConfig, kind: str, index: int, resources: dict[str, float]
) -> dict[str, Any]:
    """Ray's ``.options(...)`` for the actor ``(kind, index)`` that reserves ``resources``.

    Inside a placement group (a Tune trial) whose bundle at the actor's place in the layout
    reserves exactly ``resources``, the actor asks for that bundle; otherwise Ray places it
    on any node (or, in a placement group that captures its children, any bundle) that has them.

    Args:
        ray: The ``ray`` module.
        config: The config of the actor's group.
        kind: ``"env_runner"``, ``"evaluation_env_runner"`` or ``"learner"``.
        index: The worker index (runners, from 1) or rank (learners, from 0).
        resources: What the actor reserves (``CPU``, ``GPU``, custom resources; zero amounts left out).
    """
    options: dict[str, Any] = {
        "num_cpus": resources.get("CPU", 0.0),
        "num_gpus": resources.get("GPU", 0.0),
        "resources": {k: v for k, v in resources.items() if k not in ("CPU", "GPU")},
    }
    group = ray.util.get_current_placement_group() if resources else None
    if group is None:
        return options
    specs = [{name: float(amount) for name, amount in spec.items() if amount} for spec in group.bundle_specs]
    slot = _slot(config, kind, index, len(specs))
    if 0 <= slot < len(specs) and specs[slot] == resources:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=slot
        )
    return options
