"""Compute against sequence length: a small transformer's forward and backward timed on this CPU.

Usage: ``.venv/bin/python benchmarks/bench_cost_model.py [--quick] [--repeat 3]``

``balance="cost"`` (``chute.plan.cost``) takes a sample of ``n`` tokens to cost ``a + b*n +
c*n^2``; its default constants are the FLOP count of a stated model shape (Llama-3-8B). This
script checks the form on real kernels: a small Llama-like decoder (``SHAPE``: RMSNorm, causal
attention through ``torch.nn.functional.scaled_dot_product_attention``, a SwiGLU MLP, an output
head; float32, random weights) runs forward and backward on one sequence of ``n`` tokens for
``n`` from 256 to 8192 (2048 with ``--quick``). The lengths are swept ``--repeat`` times, in
turn, and each keeps its fastest time (a burst of load from other processes then spoils one
sweep, not one length), after a warm-up. ``t = a + b*n + c*n^2`` is fitted to the times (least
squares on relative error); ``a`` is what one call costs whatever its length (the Python,
the kernels' launches, the loss), per row, not per sample. Printed beside it: the same shape's
FLOP count (``CostModel.transformer``), scaled to seconds by one factor, and each one's error.

Then the packed row: 8192 tokens as one sample, as 8 samples of 1024 and as 64 of 128, attention
run per sample (what ``cu_seqlens`` does in a varlen kernel), the dense layers over the whole
row (equal samples go side by side through one attention call, so no sample pays a call of
its own, as in a varlen kernel). The fit predicts each row as ``a`` plus the sum over its
samples of ``b*n + c*n^2``; the row's length squared would predict all three alike. One thread
(``torch.set_num_threads(1)``): the machine is shared, and a busy core stalls a second
thread's share of every kernel.

CPU timings do not transfer to GPUs (other kernels, another balance between matrix units and
memory): the fit shows the quadratic term is real, not the constants to train with.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import save
from chute.plan.cost import CostModel

SHAPE = {
    "layers": 2,
    "hidden": 128,
    "intermediate": 344,
    "heads": 2,
    "kv_heads": 2,
    "vocab": 2048,
}
LENGTHS = (256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
SPLITS = (1, 8, 64)


def build_model(torch: Any) -> Any:
    nn = torch.nn
    f = torch.nn.functional
    s = SHAPE
    head_dim = s["hidden"] // s["heads"]

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            h = s["hidden"]
            self.norm1 = nn.RMSNorm(h)
            self.qkv = nn.Linear(h, 3 * h, bias=False)
            self.out = nn.Linear(h, h, bias=False)
            self.norm2 = nn.RMSNorm(h)
            self.gate_up = nn.Linear(h, 2 * s["intermediate"], bias=False)
            self.down = nn.Linear(s["intermediate"], h, bias=False)

        def forward(self, x: Any, segments: list[int]) -> Any:
            n = x.shape[0]
            q, k, v = self.qkv(self.norm1(x)).view(n, 3, s["heads"], head_dim).unbind(1)
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (heads, n, dim)
            # attention within each sample, as cu_seqlens keeps it: equal samples side by side
            # in one call (one launch, as a varlen kernel makes), no Python loop per sample
            k_, m = len(segments), segments[0]
            q, k, v = (t.reshape(s["heads"], k_, m, head_dim).transpose(0, 1) for t in (q, k, v))
            attn = f.scaled_dot_product_attention(q, k, v, is_causal=True)  # (k_, heads, m, dim)
            attn = attn.permute(0, 2, 1, 3).reshape(n, -1)
            x = x + self.out(attn)
            gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(f.silu(gate) * up)

    class Model(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(s["vocab"], s["hidden"])
            self.blocks = nn.ModuleList(Block() for _ in range(s["layers"]))
            self.norm = nn.RMSNorm(s["hidden"])
            self.head = nn.Linear(s["hidden"], s["vocab"], bias=False)

        def forward(self, ids: Any, segments: list[int]) -> Any:
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x, segments)
            return self.head(self.norm(x))

    torch.manual_seed(0)
    return Model()


def step_times(torch: Any, model: Any, layouts: list[list[int]], repeat: int) -> list[float]:
    """The fastest forward + backward of each row layout (segment lengths), over ``repeat``
    sweeps that take the layouts in turn (after a warm-up of each)."""

    def once(segments: list[int]) -> float:
        n = sum(segments)
        ids = torch.randint(0, SHAPE["vocab"], (n,))
        labels = torch.randint(0, SHAPE["vocab"], (n,))
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(ids, segments), labels)
        loss.backward()
        return time.perf_counter() - t0

    for segments in layouts:  # warm-up: allocations, kernel selection
        once(segments)
    best = [float("inf")] * len(layouts)
    for sweep in range(repeat):
        for i, segments in enumerate(layouts):
            best[i] = min(best[i], once(segments))
        print(f"sweep {sweep + 1}/{repeat}: " + ", ".join(f"{t:.3f}" for t in best), flush=True)
    return best


def fit(n: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """``a + b*n + c*n^2`` by least squares on relative error (each time weighted by 1/t)."""
    design = np.stack([np.ones_like(n), n, n * n], axis=1) / t[:, None]
    coef, *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(coef[0]), float(coef[1]), float(coef[2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="lengths up to 2048, 2 sweeps")
    ap.add_argument("--repeat", type=int, default=5, help="sweeps over the lengths")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # steadier on a machine shared with other work
    lengths = [n for n in LENGTHS if n <= 2048] if args.quick else list(LENGTHS)
    repeat = 2 if args.quick else args.repeat
    model = build_model(torch)
    row = max(lengths)
    splits = [k for k in SPLITS if row % k == 0]
    layouts = [[n] for n in lengths] + [[row // k] * k for k in splits[1:]]
    measured = step_times(torch, model, layouts, repeat)
    times, split_times = (
        measured[: len(lengths)],
        [measured[len(lengths) - 1], *measured[len(lengths) :]],
    )
    n_arr, t_arr = np.array(lengths, dtype=np.float64), np.array(times)
    a, b, c = fit(n_arr, t_arr)
    fitted = CostModel(0.0, b, max(c, 0.0), name="fit on this CPU, per sample (a apart)")
    flops = CostModel.transformer(**SHAPE, name="FLOP count of the same shape")
    # the FLOP model in seconds: scaled to the measured times by one factor (least squares)
    scale = float(np.dot(flops.cost(n_arr), t_arr) / np.dot(flops.cost(n_arr), flops.cost(n_arr)))
    rows = []
    for n, t in zip(lengths, times, strict=True):
        x = np.array([n])
        rows.append(
            {
                "n": n,
                "seconds": round(t, 5),
                "fit": round(a + float(fitted.cost(x)[0]), 5),
                "flops_scaled": round(float(flops.cost(x)[0]) * scale, 5),
                "attention_share_fit": round(c * n * n / (a + float(fitted.cost(x)[0])), 3),
            }
        )
    print(f"fit:   a={a:.4g} s per call; {fitted.describe()}")
    print(f"flops: {flops.describe()}")
    for r in rows:
        print(r)
    # the packed row: one sample of the longest length, or that row cut into equal samples
    packed = []
    for k, seconds in zip(splits, split_times, strict=True):
        segments = np.full(k, row // k)
        predicted = a + float(fitted.cost(segments).sum())
        square = a + float(fitted.cost(np.array([row]))[0])
        packed.append(
            {
                "samples": k,
                "each": row // k,
                "seconds": round(seconds, 5),
                "fit_sum_over_samples": round(predicted, 5),
                "fit_row_squared": round(square, 5),
            }
        )
        print(f"row of {row}: {k} x {row // k}: {seconds:.3f} s (fit: {predicted:.3f} s)")
    save(
        "cost_model",
        {
            "shape": SHAPE,
            "dtype": "float32",
            "threads": torch.get_num_threads(),
            "repeat": repeat,
            "times": rows,
            "fit": {"a_per_call": a, "b": b, "c": c, "crossover_tokens": fitted.crossover},
            "flops": {
                "b": flops.b,
                "c": flops.c,
                "crossover_tokens": flops.crossover,
                "seconds_per_flop": scale,
            },
            "packed_row": packed,
        },
    )


if __name__ == "__main__":
    main()
