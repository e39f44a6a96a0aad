r"""One measured run of a loader: time to first batch, steady rate, tokens, waiting, memory.

The consumer is this process. Every ``next()`` on the loader's iterator is timed; with a
simulated training step (``step_s``, a sleep between batches, as a GPU step leaves the CPU
idle), the time spent blocked in ``next()`` is what the model would wait for data::

    t0 ── first batch ──┬── step ──┬ wait ┬── step ──┬┬── step ──┬ wait ┬ ...
                        │  (sleep) │ next │  (sleep) ││  (sleep) │ next │
        first_batch_s   └───────────────────── seconds (steady) ───────────────┘

    starvation = sum(wait) / seconds        (only meaningful when step_s > 0)

Batches are counted as they arrive: samples (rows with a sample id >= 0), real tokens and the
tokens of the padded rows, so ``padding_efficiency = real / padded`` over the run.

Example:
    >>> from chute import Loader, World
    >>> data = [{"input_ids": [1] * (1 + i % 4)} for i in range(64)]
    >>> make = lambda w: Loader(data, batch_size=8, num_workers=w, world=World(), shuffle=False)
    >>> run = measure_run(make, workers=0, steps=8)
    >>> run.batches, run.samples, run.real_tokens, run.padded_tokens
    (8, 64, 160, 256)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from chute.bench.memory import MemorySampler

__all__ = ["WorkerRun", "batch_counts", "measure_run", "packed_real_tokens"]


@dataclass
class WorkerRun:
    """What one run with ``workers`` DataLoader workers measured.

    Attributes:
        workers: DataLoader workers (0: batches built in the consumer's process).
        first_batch_s: from building the loader to holding its first batch (worker start-up
            included).
        batches, samples, real_tokens, padded_tokens: everything the run received, first batch
            included.
        seconds: wall time after the first batch (the steady part).
        steady_batches, steady_samples, steady_tokens, steady_padded: what arrived in it.
        wait_s: time the consumer spent blocked in ``next()`` in the steady part.
        step_s: the simulated training step per batch (0: none).
        rejected: samples the loader skipped as bad.
        memory: peak memory (see ``MemorySampler.to_json``), or ``None`` without psutil.
    """

    workers: int
    first_batch_s: float
    batches: int
    samples: int
    real_tokens: int
    padded_tokens: int
    seconds: float
    steady_batches: int
    steady_samples: int
    steady_tokens: int
    steady_padded: int
    wait_s: float
    step_s: float
    rejected: int = 0
    memory: dict[str, Any] | None = None

    @property
    def samples_per_s(self) -> float | None:
        return self.steady_samples / self.seconds if self.seconds > 0 else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.steady_tokens / self.seconds if self.seconds > 0 else None

    @property
    def padded_tokens_per_s(self) -> float | None:
        return self.steady_padded / self.seconds if self.seconds > 0 else None

    @property
    def batches_per_s(self) -> float | None:
        return self.steady_batches / self.seconds if self.seconds > 0 else None

    @property
    def padding_efficiency(self) -> float | None:
        return self.real_tokens / self.padded_tokens if self.padded_tokens else None

    @property
    def starvation(self) -> float | None:
        """Share of the steady wall time spent waiting for a batch (``None`` without a step)."""
        if self.step_s <= 0 or self.seconds <= 0:
            return None
        return min(1.0, self.wait_s / self.seconds)

    @property
    def fetch_ms(self) -> float | None:
        """Mean time the loader needs per batch when the consumer does nothing else.

        With no simulated step this is the mean ``next()`` time; with one, the batch interval
        beyond the step. A training step shorter than this leaves the model waiting.
        """
        if not self.steady_batches:
            return None
        return 1000.0 * (self.seconds / self.steady_batches - self.step_s)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for name in (
            "samples_per_s",
            "tokens_per_s",
            "padded_tokens_per_s",
            "batches_per_s",
            "padding_efficiency",
            "starvation",
            "fetch_ms",
        ):
            out[name] = getattr(self, name)
        return out


def batch_counts(batch: Mapping[str, Any], pad_id: int = 0) -> tuple[int, int, int]:
    """``(samples, real tokens, padded tokens)`` of one collated batch.

    Samples are the ``sample_ids`` >= 0 (a placeholder batch has -1). Real tokens come from
    ``attention_mask`` when it is a 0/1 matrix of the batch's shape; in packed batches
    (``cu_seqlens`` over the flattened rows, ``row_sample_ids``) they are the segments of the
    samples, not the padding segment that ends a row that is not full; otherwise they are the
    ``input_ids`` different from ``pad_id``. Padded tokens are every position of ``input_ids``.

    Example:
        >>> import torch
        >>> batch = {"input_ids": torch.tensor([[5, 6, 7], [8, 0, 0]]),
        ...          "attention_mask": torch.tensor([[1, 1, 1], [1, 0, 0]]),
        ...          "sample_ids": torch.tensor([3, 9])}
        >>> batch_counts(batch)
        (2, 4, 6)
    """
    ids = batch["input_ids"]
    padded = int(ids.numel())
    sample_ids = batch.get("sample_ids")
    samples = int((sample_ids >= 0).sum()) if sample_ids is not None else int(ids.shape[0])
    if samples == 0:
        return 0, 0, padded
    mask = batch.get("attention_mask")
    if mask is not None and tuple(mask.shape) == tuple(ids.shape):
        return samples, int(mask.sum()), padded
    cu, rows = batch.get("cu_seqlens"), batch.get("row_sample_ids")
    if cu is not None and rows is not None and ids.ndim == 2:
        return samples, packed_real_tokens(cu, rows, int(ids.shape[1])), padded
    return samples, int((ids != pad_id).sum()), padded


def packed_real_tokens(cu_seqlens: Any, row_sample_ids: Any, width: int) -> int:
    """Tokens of the samples in packed rows (not their padding).

    Each row holds its samples' segments, then one padding segment when it is not full.

    Example:
        >>> packed_real_tokens([0, 3, 5, 8, 16], [[7, 2], [5, -1]], width=8)
        13
    """
    seg = np.diff(np.asarray(cu_seqlens, dtype=np.int64))
    per_row = (np.asarray(row_sample_ids) >= 0).sum(axis=1)
    real, j = 0, 0
    for k in per_row.tolist():
        row = int(seg[j : j + k].sum())
        real += min(row, width)
        j += k + (1 if row < width else 0)
    return real


def measure_run(
    make_loader: Callable[[int], Any],
    *,
    workers: int,
    steps: int,
    step_s: float = 0.0,
    pad_id: int = 0,
    memory_interval: float = 0.1,
) -> WorkerRun:
    """Build a loader with ``make_loader(workers)`` and time up to ``steps`` batches from it.

    The run stops early at the end of the loader's epoch. Memory is sampled in a thread for the
    whole run (the loader's construction included), and once more at the first and at the last
    batch, while the workers are surely alive.

    Args:
        make_loader: builds the loader to measure for a worker count.
        workers: the worker count to pass.
        steps: batches to take (the first one included), at least 2.
        step_s: seconds of simulated training per batch (a sleep; 0 for none).
        pad_id: the padding id, for batches without ``attention_mask``.
        memory_interval: seconds between memory samples.
    """
    if steps < 2:
        raise ValueError(f"steps must be >= 2 (the first batch and at least one more), got {steps}")
    if step_s < 0:
        raise ValueError(f"step_s must be >= 0 seconds, got {step_s}")
    sleep, clock = time.sleep, time.perf_counter
    with MemorySampler(memory_interval) as mem:
        t0 = clock()
        loader = make_loader(workers)
        it = iter(loader)
        try:
            first = next(it)
            first_batch_s = clock() - t0
            mem.sample()  # the workers are alive now, however short the run
            n, real, padded = batch_counts(first, pad_id)
            batches = 1
            s_n = s_real = s_padded = 0
            wait = 0.0
            start = last = clock()
            for _ in range(steps - 1):
                if step_s:
                    sleep(step_s)
                t = clock()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                last = clock()
                wait += last - t
                bn, breal, bpadded = batch_counts(batch, pad_id)
                batches += 1
                s_n, s_real, s_padded = s_n + bn, s_real + breal, s_padded + bpadded
            seconds = last - start  # up to the last batch (a final sleep is not counted)
            mem.sample()
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()  # shuts the workers down now, not at garbage collection
    rejected = 0
    summary = getattr(loader, "summary", None)
    if callable(summary):
        rejected = int(summary().get("rejected", 0))
    return WorkerRun(
        workers=workers,
        first_batch_s=first_batch_s,
        batches=batches,
        samples=n + s_n,
        real_tokens=real + s_real,
        padded_tokens=padded + s_padded,
        seconds=seconds,
        steady_batches=batches - 1,
        steady_samples=s_n,
        steady_tokens=s_real,
        steady_padded=s_padded,
        wait_s=wait,
        step_s=step_s,
        rejected=rejected,
        memory=mem.to_json() if mem.available else None,
    )
