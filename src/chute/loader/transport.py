"""Batches cross from a worker to the main process as one shared-memory block, not one per tensor.

A DataLoader worker hands each tensor of a batch to the main process through its own
shared-memory segment and file descriptor; that handshake, not the copy, dominates the cost of
moving a padded text batch (``benchmarks/bench_loader.py --part transport``: a batch of four
tensors moves at 1.6x the rate once packed, the packing copy included).
``share_one_storage`` copies a batch's tensors into one byte buffer and returns views of it, so
the batch crosses as one segment::

    worker:  input_ids ─┐
             labels ────┼─► [ one uint8 storage: ids | labels | mask | sample_ids ] ──► main
             mask ──────┤     views keep their dtype and shape; each starts 64-byte aligned
             sample_ids ┘

Example:
    >>> import torch
    >>> batch = {"a": torch.arange(6).view(2, 3), "b": torch.ones(2, dtype=torch.bool), "n": 3}
    >>> packed = share_one_storage(batch)
    >>> packed["a"].tolist(), packed["b"].tolist(), packed["n"]
    ([[0, 1, 2], [3, 4, 5]], [True, True], 3)
    >>> packed["a"].untyped_storage().data_ptr() == packed["b"].untyped_storage().data_ptr()
    True
"""

from __future__ import annotations

from typing import Any

from chute._internal.lazy_torch import require_torch

__all__ = ["share_one_storage"]

ALIGN = 64


def share_one_storage(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with its CPU tensors moved into views of a single storage (others untouched)."""
    torch = require_torch()
    tensors = {
        k: v for k, v in batch.items() if isinstance(v, torch.Tensor) and v.device.type == "cpu"
    }
    if len(tensors) < 2:
        return batch
    first = next(iter(tensors.values())).untyped_storage().data_ptr()
    if all(t.untyped_storage().data_ptr() == first for t in tensors.values()):
        return batch  # already one storage (e.g. a collate that allocates one buffer)
    offsets, total = {}, 0
    for key, t in tensors.items():
        offsets[key] = total
        total += -(-t.numel() * t.element_size() // ALIGN) * ALIGN
    buffer = torch.empty(total, dtype=torch.uint8)
    out = dict(batch)
    for key, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        view = buffer[offsets[key] : offsets[key] + nbytes].view(t.dtype).view(t.shape)
        view.copy_(t)
        out[key] = view
    return out
