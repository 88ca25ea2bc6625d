"""The algorithm config and its builders: the floor of ``cairn.rl`` that every other floor reads.

:mod:`cairn.rl.config.algorithm_config` holds :class:`AlgorithmConfig`,
:mod:`cairn.rl.config.builders` RLlib's builder methods (their rules in
:mod:`cairn.rl.config.builder_rules` and :mod:`cairn.rl.config.translations`),
:mod:`cairn.rl.config.module_specs` which learner and module spec a config names,
:mod:`cairn.rl.config.recorded_names` the names and callables a config records,
:mod:`cairn.rl.config.callback_forms` how callbacks are recorded in a config,
:mod:`cairn.rl.config.references` how callables are recorded, and
:mod:`cairn.rl.config.setting_checks` the checks a config runs on its settings.
These import nothing of ``cairn.rl`` above ``utils/`` (``tests/test_architecture.py``);
RLlib's path ``cairn.rl.algorithms.algorithm_config`` re-exports the config.
"""
