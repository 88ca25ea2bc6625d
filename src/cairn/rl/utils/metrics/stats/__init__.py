"""RLlib 2.60's ``Stats`` classes: one statistic each, logged at leaves and merged up a tree of loggers.

``from cairn.rl.utils.metrics.stats import MeanStats, EmaStats, ...`` works as
``from ray.rllib.utils.metrics.stats import ...`` does, with RLlib 2.60's semantics:

==================  ==============  ===========================================================
class               ``reduce=``     what :meth:`~StatsBase.peek` gives
==================  ==============  ===========================================================
:class:`MeanStats`  ``"mean"``      mean of the last ``window`` values (of all since the last
                                    reduce without a window); merged: mean of the parts' means
:class:`MinStats`   ``"min"``       min (windowed or running); merged: min of the parts
:class:`MaxStats`   ``"max"``       max (windowed or running); merged: max of the parts
:class:`SumStats`   ``"sum"``       sum since the last reduce (or of the last ``window``);
                                    optional throughput (sum / seconds since the last reduce)
:class:`LifetimeSumStats` ``"lifetime_sum"``  a sum that a *root* stat never clears; a
                                    non-root one hands its increment up and restarts at 0
:class:`EmaStats`   ``"ema"``       exponential moving average (``ema_coeff``, default 0.01);
                                    merged: mean of the parts' averages
:class:`PercentilesStats` ``"percentiles"``  percentile -> value of the last ``window`` values
:class:`ItemStats`  ``"item"``      the last item logged
:class:`ItemSeriesStats` ``"item_series"``  the last ``window`` items, as a list
==================  ==============  ===========================================================

Every stat is a *leaf* (values are pushed into it), an *aggregation* stat (``is_leaf=False``:
stats of parallel components are merged into it), or both at the root. ``reduce()`` returns the
reduced value (``compile=True``) or a stat holding it, for the next logger up to merge, and
starts a new cycle: everything is cleared except a root's lifetime sum.

cairn's additions: values are numbers (Python, numpy or 0-d torch; items may also be strings or
None), checked when pushed; :meth:`StatsBase.from_state` checks a state before building anything
(``ValueError``/``TypeError`` that :class:`~cairn.rl.utils.metrics.metrics_logger.MetricsLogger`
turns into :class:`~cairn.errors.IncompatibleCheckpointError`); integer sums stay ints.
"""

from cairn.rl.utils.metrics.stats.base import StatsBase
from cairn.rl.utils.metrics.stats.ema import EmaStats
from cairn.rl.utils.metrics.stats.item import ItemSeriesStats, ItemStats
from cairn.rl.utils.metrics.stats.lifetime_sum import LifetimeSumStats
from cairn.rl.utils.metrics.stats.percentiles import DEFAULT_PERCENTILES, PercentilesStats, compute_percentiles
from cairn.rl.utils.metrics.stats.series import MaxStats, MeanStats, MinStats, SeriesStats, SumStats

__all__ = [
    "DEFAULT_PERCENTILES",
    "EmaStats",
    "ItemSeriesStats",
    "ItemStats",
    "LifetimeSumStats",
    "MaxStats",
    "MeanStats",
    "MinStats",
    "PercentilesStats",
    "SeriesStats",
    "StatsBase",
    "SumStats",
    "compute_percentiles",
]
