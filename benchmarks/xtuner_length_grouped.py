"""XTuner's LengthGroupedSampler, re-implemented from its documented algorithm (for comparison).

What XTuner does (``xtuner/dataset/samplers/length_grouped.py``), step by step:

1. ``generator = torch.Generator().manual_seed(seed + epoch)``.
2. Group size: ``mega_batch_mult x per_device_batch_size x world_size`` samples, where
   ``mega_batch_mult`` defaults to ``min(len(dataset) // (global_batch * 4), 50)`` (at least 1).
3. Lengths are signed: positive for multimodal samples, negative for text-only ones. When both
   signs occur, each modality is grouped on its own: a ``torch.randperm`` of its samples, cut
   into mega-batches, each sorted by length, longest first; all mega-batches but each modality's
   last are put in a random order (``torch.randperm``), and the two last ones are merged into one
   final mega-batch sorted by length. With one modality: ``torch.randperm`` of all samples, cut
   into mega-batches, each sorted by length, longest first.
4. The longest sample is swapped into the first position (so an OOM shows at once).
5. ``round_up``: the flat index list is repeated until it holds ``ceil(n / world_size / B) x B x
   world_size`` entries (the first samples are seen twice).
6. Rank ``r`` takes ``indices[r::world_size]``; its DataLoader cuts that into batches of ``B``.

So within one step the ``world_size x B`` consecutive sorted samples are dealt round-robin: each
rank's batch spans the whole step, every ``world_size``-th sample. Each batch is padded to its
longest sample (``DataCollatorForSeq2Seq``-style padding).

Example:
    >>> batches = xtuner_batches([5, 3, 9, 1, 7, 2, 8, 4], batch_size=2, world_size=2, seed=0)
    >>> sorted(i for rank in batches for b in rank for i in b)
    [0, 1, 2, 3, 4, 5, 6, 7]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["xtuner_batches", "xtuner_efficiency", "xtuner_indices"]


def _megabatches(lengths: Sequence[int], group: int, generator: torch.Generator) -> list[list[int]]:
    order = torch.randperm(len(lengths), generator=generator).tolist()
    chunks = [order[i : i + group] for i in range(0, len(order), group)]
    return [sorted(chunk, key=lambda i: lengths[i], reverse=True) for chunk in chunks]


def xtuner_indices(lengths: Sequence[int], group: int, generator: torch.Generator) -> list[int]:
    """The global index order of one epoch (steps 3 and 4 above)."""
    if any(x == 0 for x in lengths):
        raise ValueError("XTuner's sampler refuses zero lengths")
    if all(x > 0 for x in lengths) or all(x < 0 for x in lengths):
        megabatches = _megabatches(lengths, group, generator)
    else:
        mm = [i for i, x in enumerate(lengths) if x > 0]
        text = [i for i, x in enumerate(lengths) if x < 0]
        mm_batches = [
            [mm[i] for i in mb] for mb in _megabatches([lengths[i] for i in mm], group, generator)
        ]
        text_batches = [
            [text[i] for i in mb]
            for mb in _megabatches([-lengths[i] for i in text], group, generator)
        ]
        last = mm_batches[-1] + text_batches[-1]
        rest = mm_batches[:-1] + text_batches[:-1]
        shuffled = torch.randperm(len(rest), generator=generator).tolist()
        megabatches = [rest[i] for i in shuffled]
        if last:
            megabatches.append(sorted(last, key=lambda i: abs(lengths[i]), reverse=True))
    maxima = [abs(lengths[mb[0]]) for mb in megabatches]
    top = int(np.argmax(maxima))  # the first maximum, as torch.argmax on a CPU tensor
    megabatches[0][0], megabatches[top][0] = megabatches[top][0], megabatches[0][0]
    return [i for mb in megabatches for i in mb]


def xtuner_batches(
    lengths: Sequence[int],
    *,
    batch_size: int,
    world_size: int,
    seed: int,
    epoch: int = 0,
    mega_batch_mult: int | None = None,
    round_up: bool = True,
) -> list[list[list[int]]]:
    """Every rank's batches in one epoch, as XTuner's sampler and a DataLoader deal them."""
    n = len(lengths)
    total_batch = batch_size * world_size
    if mega_batch_mult is None:
        mega_batch_mult = min(n // (total_batch * 4), 50) or 1
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    indices = xtuner_indices(lengths, mega_batch_mult * total_batch, generator)
    if round_up:
        per_rank = math.ceil(n / world_size / batch_size) * batch_size
        total = per_rank * world_size
        indices = (indices * (total // len(indices) + 1))[:total]
    else:
        total = n
    out = []
    for rank in range(world_size):
        mine = indices[rank:total:world_size]
        out.append([mine[k : k + batch_size] for k in range(0, len(mine), batch_size)])
    return out


def xtuner_efficiency(
    lengths: np.ndarray,
    *,
    batch_size: int,
    world_size: int,
    seed: int,
    mega_batch_mult: int | None = None,
) -> dict[str, float]:
    """Real tokens / padded tokens over every batch of every rank in one epoch."""
    batches = xtuner_batches(
        lengths.tolist(),
        batch_size=batch_size,
        world_size=world_size,
        seed=seed,
        mega_batch_mult=mega_batch_mult,
    )
    real = padded = 0
    for rank in batches:
        for ids in rank:
            lens = lengths[ids]
            real += int(lens.sum())
            padded += len(ids) * int(lens.max())
    steps = len(batches[0])
    return {"efficiency": real / padded, "steps": steps, "tokens": real, "padded": padded}
