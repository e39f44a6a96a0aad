"""Plans: pure functions from (samples, seed, epoch, world size, options) to batches of ids.

See ``docs/loader.md`` for the guarantees and pictures. Everything here is numpy and
deterministic: no I/O, no processes, no torch.
"""

from chute.plan.base import Plan, Planner
from chute.plan.budget import BudgetPlanner
from chute.plan.cost import CostModel
from chute.plan.efficiency import PaddingReport, padding_report
from chute.plan.elastic import continue_epoch, dealt_ids
from chute.plan.grouped import GroupedPlanner
from chute.plan.lengthed import LengthPlanner
from chute.plan.locality import order_locality
from chute.plan.order import IdOrder, Order, Sequential
from chute.plan.packed import PackedPlanner, packing_bound
from chute.plan.registry import PLANNERS, make_planner
from chute.plan.shard import REMAINDERS, BatchPlan, RandomPlanner
from chute.plan.shards import ShardPlanner, ShardWindowOrder
from chute.plan.shuffle import ALGORITHM, Permutation, permutation
from chute.plan.table import TablePlan

__all__ = [
    "ALGORITHM",
    "PLANNERS",
    "REMAINDERS",
    "BatchPlan",
    "BudgetPlanner",
    "CostModel",
    "GroupedPlanner",
    "IdOrder",
    "LengthPlanner",
    "Order",
    "PackedPlanner",
    "PaddingReport",
    "Permutation",
    "Plan",
    "Planner",
    "RandomPlanner",
    "Sequential",
    "ShardPlanner",
    "ShardWindowOrder",
    "TablePlan",
    "continue_epoch",
    "dealt_ids",
    "make_planner",
    "order_locality",
    "packing_bound",
    "padding_report",
    "permutation",
]
