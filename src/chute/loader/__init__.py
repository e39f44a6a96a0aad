"""The Loader: plans executed in DataLoader workers, bad samples skipped, exact resume."""

from chute.loader.core import Loader
from chute.loader.worker import BatchBuilder, BatchReport, BatchTask
from chute.loader.workers import WorkerOptions

__all__ = ["BatchBuilder", "BatchReport", "BatchTask", "Loader", "WorkerOptions"]
