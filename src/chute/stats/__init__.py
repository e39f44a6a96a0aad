"""Padding statistics: how much of a batch is real tokens under each plan (``chute stats``).

``padding_stats`` (``padding.py``) needs only lengths; ``plot_stats`` (``plot.py``) draws its
PNG and needs matplotlib (``pip install 'chute[plot]'``), so it is imported from its module.
"""

from chute.stats.padding import PERCENTILES, PLAN_NAMES, padding_stats

__all__ = ["PERCENTILES", "PLAN_NAMES", "padding_stats"]
