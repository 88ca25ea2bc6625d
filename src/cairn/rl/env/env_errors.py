"""RLlib's ``ray.rllib.env.env_errors``: the error an env raises to have its runner recreate it quietly."""

from __future__ import annotations

__all__ = ["ENV_STEP_FAILURE", "StepFailedRecreateEnvError"]

ENV_STEP_FAILURE = "env_step_failure"
"""What ``SingleAgentEnvRunner._try_env_step`` returns when a step failed and the envs were recreated
(``fault_tolerance(restart_failed_sub_environments=True)``; RLlib's constant)."""


class StepFailedRecreateEnvError(Exception):
    """Raised by an env's ``step()`` to say it failed and must be recreated (RLlib's).

    With ``fault_tolerance(restart_failed_sub_environments=True)`` the env runner recreates
    its envs and starts new episodes without logging the error (any other error a step
    raises is logged with its traceback first). Without that setting the step fails.
    Recreating an env that always fails this way loops forever, as in RLlib.
    """
