"""Training metrics and checkpoints sent to Weights & Biases or MLflow (``pip install 'cairn-rl[wandb]'``,
``'cairn-rl[mlflow]'``).

What Ray's ``WandbLoggerCallback`` and ``MLflowLoggerCallback`` do for RLlib under Tune, for
cairn's own loop: each iteration's result under RLlib's nested names, ``"/"``-joined
(``env_runners/episode_return_mean``, ``learners/default_policy/entropy``; each value once,
none of the deprecated flat aliases), at the step ``training_iteration``; the config as the
run's config (W&B) or parameters (MLflow); and, when asked, each checkpoint folder as an
artifact (a W&B ``model`` artifact with the aliases ``step_N`` and ``latest``; MLflow
artifacts under ``checkpoints/step_N``)::

    from cairn.integrations.trackers import WandbTracker

    with WandbTracker(project="cartpole", config=config.to_dict()) as tracker:
        for _ in range(40):
            result = algo.train()
            tracker.log_result(result, step=result["training_iteration"])
        tracker.log_checkpoint(algo.save_to_path("ckpt"), step=algo.training_iteration)

``cairn train --log-to wandb`` (or ``mlflow``, repeatable; ``--log-checkpoints``) does the
same. The trackers take their usual settings from the environment as well
(``WANDB_PROJECT``, ``WANDB_MODE=offline``, ``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``).
Each package is imported when its tracker is made, never by ``import cairn``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

from cairn._metrics import flat_metrics

__all__ = ["TRACKERS", "MLflowTracker", "Tracker", "WandbTracker", "open_tracker", "tracker_metrics"]


class Tracker(Protocol):
    """An experiment tracker's run: metrics per iteration, checkpoints as artifacts."""

    def log_result(self, result: Mapping[str, Any], *, step: int) -> None:
        """Log one iteration's result (``Algorithm.train()``'s) at ``step``."""

    def log_checkpoint(self, path: str, *, step: int) -> None:
        """Log the committed checkpoint folder at ``path`` (local) as an artifact of ``step``."""

    def close(self) -> None:
        """End the run (idempotent)."""


def tracker_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of ``result`` under RLlib's ``"/"``-joined names, each value once.

    A ``train()`` result gives its own names only (no deprecated flat aliases); other
    mappings are flattened. Booleans, strings and non-finite values are left out (neither
    tracker plots them).
    """
    flatten = getattr(result, "flatten", None)
    flat = flatten(aliases=False) if callable(flatten) else flat_metrics(result)
    out: dict[str, float] = {}
    for key, value in flat.items():
        if hasattr(value, "item") and callable(value.item) and getattr(value, "shape", None) == ():
            value = value.item()  # numpy scalars
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[str(key)] = float(value)
    return out


def _plain(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``config`` with every value JSON can hold kept, and the others (classes, functions) as their text."""
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        try:
            json.dumps(value)
            out[str(key)] = value
        except (TypeError, ValueError):
            out[str(key)] = str(value)
    return out


class WandbTracker:
    """A Weights & Biases run (``wandb.init``); see the module docstring.

    Args:
        project: The W&B project (default: ``WANDB_PROJECT``, else W&B's own default).
        name: The run's display name.
        config: The run's config (an algorithm config's ``to_dict()``).
        init_kwargs: More arguments of ``wandb.init`` (``mode="offline"``, ``dir=``, ``tags=``, ...).

    Raises:
        ImportError: ``wandb`` is not installed (the message names the extra).
    """

    def __init__(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        **init_kwargs: Any,
    ) -> None:
        try:
            import wandb
        except ImportError as err:
            raise ImportError(
                f"Logging to Weights & Biases needs wandb ({err}): pip install 'cairn-rl[wandb]'.", name="wandb"
            ) from err
        self._wandb = wandb
        self._run: Any = wandb.init(project=project, name=name, config=_plain(config), **init_kwargs)

    def log_result(self, result: Mapping[str, Any], *, step: int) -> None:
        """Log the iteration's numbers at ``step``."""
        self._run.log(tracker_metrics(result), step=step)

    def log_checkpoint(self, path: str, *, step: int) -> None:
        """Log the checkpoint folder as a ``model`` artifact of this run, aliased ``step_N`` and ``latest``."""
        artifact = self._wandb.Artifact(f"checkpoint-{self._run.id}", type="model", metadata={"step": step})
        artifact.add_dir(path)
        self._run.log_artifact(artifact, aliases=[f"step_{step}", "latest"])

    def close(self) -> None:
        """Finish the run (idempotent)."""
        if self._run is not None:
            self._run.finish()
            self._run = None

    def __enter__(self) -> WandbTracker:
        """Use as a context manager: the run is finished on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Finish the run."""
        self.close()


class MLflowTracker:
    """An MLflow run (``mlflow.start_run``); see the module docstring.

    Args:
        experiment: The experiment's name (default: ``MLFLOW_EXPERIMENT_NAME``, else MLflow's default).
        run_name: The run's name.
        tracking_uri: Where runs go (default: ``MLFLOW_TRACKING_URI``, else MLflow's default).
        params: The run's parameters (an algorithm config's ``to_dict()``), as text.

    Raises:
        ImportError: ``mlflow`` is not installed (the message names the extra).
    """

    def __init__(
        self,
        *,
        experiment: str | None = None,
        run_name: str | None = None,
        tracking_uri: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            import mlflow
        except ImportError as err:
            raise ImportError(
                f"Logging to MLflow needs mlflow ({err}): pip install 'cairn-rl[mlflow]'.", name="mlflow"
            ) from err
        self._mlflow = mlflow
        self._client = mlflow.MlflowClient(tracking_uri=tracking_uri)
        name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default"
        found = self._client.get_experiment_by_name(name)
        experiment_id = found.experiment_id if found is not None else self._client.create_experiment(name)
        self._run_id: str | None = self._client.create_run(experiment_id, run_name=run_name).info.run_id
        from mlflow.entities import Param

        # MLflow keeps a parameter's value as text of bounded length: each is cut to 500 characters.
        values = [Param(k, json.dumps(v) if not isinstance(v, str) else v) for k, v in _plain(params).items()]
        values = [Param(p.key, p.value[:500]) for p in values]
        for start in range(0, len(values), 100):  # MLflow takes at most 100 parameters per call
            self._client.log_batch(self._run_id, params=values[start : start + 100])

    @property
    def run_id(self) -> str | None:
        """The MLflow run's id (None once closed)."""
        return self._run_id

    def log_result(self, result: Mapping[str, Any], *, step: int) -> None:
        """Log the iteration's numbers at ``step``."""
        from mlflow.entities import Metric

        if self._run_id is None:
            raise ValueError("This MLflow run is closed.")
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value in tracker_metrics(result).items()]
        for start in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per call
            self._client.log_batch(self._run_id, metrics=metrics[start : start + 1000])

    def log_checkpoint(self, path: str, *, step: int) -> None:
        """Log the checkpoint folder's files as artifacts under ``checkpoints/step_N``."""
        if self._run_id is None:
            raise ValueError("This MLflow run is closed.")
        self._client.log_artifacts(self._run_id, path, artifact_path=f"checkpoints/step_{step}")

    def close(self) -> None:
        """End the run (idempotent)."""
        if self._run_id is not None:
            self._client.set_terminated(self._run_id)
            self._run_id = None

    def __enter__(self) -> MLflowTracker:
        """Use as a context manager: the run is ended on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """End the run."""
        self.close()


TRACKERS = ("wandb", "mlflow")
"""The trackers :func:`open_tracker` (and ``cairn train --log-to``) knows."""


def open_tracker(kind: str, *, name: str, config: Mapping[str, Any]) -> WandbTracker | MLflowTracker:
    """A run of tracker ``kind`` (one of :data:`TRACKERS`) named ``name``, with ``config``; settings
    from the tracker's environment variables.

    Raises:
        ValueError: An unknown ``kind``.
        ImportError: The tracker's package is not installed.
    """
    if kind == "wandb":
        return WandbTracker(name=name, config=config)
    if kind == "mlflow":
        return MLflowTracker(run_name=name, params=config)
    raise ValueError(f"Unknown tracker {kind!r}: cairn logs to {', '.join(TRACKERS)}.")
