"""What a sample costs to train: ``a + b*n + c*n^2`` for ``n`` tokens, the model ``balance`` uses.

Long-context training (32k to 128k tokens) has to even out *compute* across the data-parallel
ranks of a step, not tokens: the dense layers cost the same per token, but attention grows with
the square of each sample's length. In a packed row the samples are kept apart
(``cu_seqlens``, the block mask), so a row's attention is the sum of its samples' squares, not
the square of the row::

    one row of 32,768 tokens         dense part     attention          cost (Llama-3-8B shape)
    one document of 32,768           32,768 b       32,768^2 c         1.57 x 32,768 b
    64 samples of 512                32,768 b       64 x 512^2 c       1.01 x 32,768 b

``CostModel(a, b, c)``: ``a`` per sample, ``b`` per token, ``c`` per token squared, in any unit
(balance compares each rank with the step's mean, so only the ratios matter).
``CostModel.transformer(...)`` counts them for a model shape, in training FLOPs (forward and
backward, 3x the forward):

* ``b = 6 x P``: ``P`` the parameters multiplied per token (every matrix of the layers, and the
  output head; not the input embedding, which is a lookup; norms are negligible);
* ``c = 6 x layers x heads x head_dim``: per layer, causal attention's scores ``Q K^T`` and
  their product with ``V`` are ``2 x n^2 x heads x head_dim`` FLOPs forward each for the full
  square; kernels that skip the masked half (flash-attention, cuDNN, SDPA's flash path) do half
  of it: ``2 x n^2 x width`` forward, ``6 x n^2 x width`` with the backward;
* ``a = 0``: nothing is paid per sample in FLOPs.

``DEFAULT_COST`` is Llama-3-8B's shape (``COST_MODELS["llama3-8b"]``: 32 layers, hidden 4096,
MLP 14336, 32 query and 8 key-value heads of 128, vocabulary 128256): ``b = 6 x 7.505e9``,
``c = 6 x 32 x 4096 = 786,432``, so attention equals the dense part at ``b / c = 57,256``
tokens: a 32k-token document costs 1.57x its dense share, a 128k one 3.29x.
``benchmarks/bench_cost_model.py`` times a small transformer's forward and backward against
sequence length on a CPU and fits the three constants: the quadratic term is real there too, but
CPU timings do not transfer to GPUs, so the default is the FLOP count of a stated shape.

Planners need integer costs (exact sums, the same on every rank): ``units(n)`` gives the cost
in thousandths of a one-token sample's (``cost(1) = 1000`` units), rounded.

Example:
    >>> model = CostModel(a=0, b=1, c=0.001)
    >>> model.cost(np.array([10, 1000])).tolist()
    [10.1, 2000.0]
    >>> model.units(np.array([1, 1000])).tolist()
    [1000, 1998002]
    >>> round(DEFAULT_COST.crossover)
    57256
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chute.errors import ConfigError
from chute.lengths.base import Lengths

__all__ = [
    "COST_MODELS",
    "COST_UNITS",
    "DEFAULT_COST",
    "CostModel",
    "CostOption",
    "sample_costs",
]

# A one-token sample costs this many integer units (``CostModel.units``).
COST_UNITS = 1000
# Integer sums over an epoch must stay below int64's range.
_LIMIT = 2.0**62
_CONSTANTS = ("a", "b", "c")
_SHAPE = ("layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim", "vocab", "gated")


@dataclass(frozen=True)
class CostModel:
    """A sample of ``n`` tokens costs ``a + b*n + c*n^2`` (see the module docstring).

    Args:
        a: per sample (>= 0).
        b: per token (>= 0): the dense layers.
        c: per token squared (>= 0): attention within the sample.
        name: what the constants describe (a model shape), for reports; not compared.

    Example:
        >>> CostModel(b=50_000, c=1).crossover
        50000.0
    """

    a: float = 0.0
    b: float = 1.0
    c: float = 0.0
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for key in _CONSTANTS:
            value = getattr(self, key)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(
                    f"{key} must be a finite number >= 0 (a sample of n tokens costs "
                    f"a + b*n + c*n^2), got {value!r}",
                    param="cost",
                )
            object.__setattr__(self, key, float(value))
        if self.a + self.b + self.c <= 0:
            raise ConfigError(
                "a, b and c are all 0: every sample would cost nothing; give b (per token) and "
                "c (per token squared), e.g. {'b': 1, 'c': 1.7e-05}, or a model's name "
                f"({sorted(COST_MODELS)})",
                param="cost",
            )

    @classmethod
    def transformer(
        cls,
        *,
        layers: int,
        hidden: int,
        intermediate: int,
        heads: int,
        vocab: int,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        gated: bool = True,
        name: str = "",
    ) -> CostModel:
        """The training FLOPs of a decoder-only transformer of this shape (module docstring).

        Args:
            layers: transformer blocks.
            hidden: the model width.
            intermediate: the MLP's inner width.
            heads: query heads.
            vocab: the output head's vocabulary.
            kv_heads: key-value heads (grouped-query attention; default ``heads``).
            head_dim: each head's width (default ``hidden // heads``).
            gated: the MLP has three matrices (SwiGLU: gate, up, down), else two.
            name: a label for reports.

        Example:
            >>> m = CostModel.transformer(layers=2, hidden=8, intermediate=16, heads=2, vocab=10)
            >>> m.b, m.c     # 6 x (2 x (4 x 64 + 3 x 128) + 80), 6 x 2 x 8
            (8160.0, 96.0)
        """
        shape = dict(layers=layers, hidden=hidden, intermediate=intermediate, heads=heads)
        shape.update(vocab=vocab, kv_heads=kv_heads or heads)
        shape["head_dim"] = head_dim or (hidden // heads if heads else 0)
        for key, value in shape.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"the model shape's {key} must be a positive integer, got {value!r}",
                    param="cost",
                )
        width = shape["heads"] * shape["head_dim"]  # queries and the attention output
        kv = shape["kv_heads"] * shape["head_dim"]
        attention = 2 * hidden * width + 2 * hidden * kv  # q, o; k, v
        mlp = (3 if gated else 2) * hidden * intermediate
        params = layers * (attention + mlp) + vocab * hidden  # + the output head
        return cls(a=0.0, b=6.0 * params, c=6.0 * layers * width, name=name)

    @classmethod
    def of(cls, value: CostOption) -> CostModel:
        """The ``cost`` option as a ``CostModel`` (``None``: ``DEFAULT_COST``).

        ``value``: a ``CostModel``; a name from ``COST_MODELS``; a mapping of the constants
        (``{"b": 1, "c": 1.7e-05}``, missing ones 0) or of a shape (``CostModel.transformer``'s
        keywords).

        Raises:
            ConfigError: naming ``cost``, the value and what it may be.

        Example:
            >>> CostModel.of({"b": 2, "c": 0.5}) == CostModel(0, 2, 0.5)
            True
            >>> CostModel.of("llama3-8b") == DEFAULT_COST
            True
        """
        if value is None:
            return DEFAULT_COST
        if isinstance(value, CostModel):
            return value
        if isinstance(value, str):
            model = COST_MODELS.get(value.strip().lower())
            if model is None:
                raise ConfigError(
                    f"no cost model is named {value!r}; give one of {sorted(COST_MODELS)}, the "
                    f"constants ({{'a': 0, 'b': 1, 'c': 1.7e-05}}) or a model shape "
                    f"({{'layers': 32, 'hidden': 4096, ...}})",
                    param="cost",
                )
            return model
        if isinstance(value, Mapping):
            given: dict[str, Any] = {str(k): v for k, v in value.items()}  # checked on use
            keys = set(given) - {"name"}
            if keys and keys <= set(_CONSTANTS):
                return cls(**given)
            if keys and keys <= set(_SHAPE):
                return cls.transformer(**given)
            raise ConfigError(
                f"give the constants {list(_CONSTANTS)} or a model shape {list(_SHAPE)} (and "
                f"a 'name'), not both or others, got {sorted(given)}",
                param="cost",
            )
        raise ConfigError(
            f"expected a CostModel, a name ({sorted(COST_MODELS)}) or a mapping of a, b, c, got "
            f"{value!r}",
            param="cost",
        )

    @property
    def crossover(self) -> float:
        """Tokens where a sample's attention costs as much as its dense part (``b / c``)."""
        return self.b / self.c if self.c else math.inf

    def cost(self, tokens: np.ndarray) -> np.ndarray:
        """``a + b*n + c*n^2`` per sample (float64); samples of 0 tokens cost nothing."""
        n = np.asarray(tokens, dtype=np.float64)
        return np.where(n > 0, self.a + self.b * n + self.c * n * n, 0.0)

    def units(self, tokens: np.ndarray) -> np.ndarray:
        """Each sample's cost as an integer: thousandths of a one-token sample's (int64).

        Raises:
            ConfigError: when the costs would overflow an integer sum (a model whose ``c``
                dwarfs ``a + b`` over very long samples).
        """
        unit = (self.a + self.b + self.c) / COST_UNITS
        values = self.cost(tokens) / unit
        if values.size and float(values.max()) * values.size >= _LIMIT:
            raise ConfigError(
                f"costs of up to {float(values.max()):.3g} units for {values.size} samples "
                f"overflow integer sums; give the model a per-token term b, in proportion to c "
                f"(a model shape does)",
                param="cost",
            )
        return np.rint(values).astype(np.int64)

    def to_json(self) -> dict[str, float]:
        """The constants (what a plan's ``params()`` records and a resume state compares)."""
        return {"a": self.a, "b": self.b, "c": self.c}

    def describe(self) -> str:
        """One line for reports: the name, the constants and the crossover.

        Example:
            >>> CostModel(b=1, c=0.001).describe()
            'a + b*n + c*n^2 with a=0, b=1, c=0.001 (attention = dense at 1,000 tokens)'
        """
        head = f"{self.name}: " if self.name else ""
        where = "" if not self.c else f" (attention = dense at {self.crossover:,.0f} tokens)"
        return f"{head}a + b*n + c*n^2 with a={self.a:g}, b={self.b:g}, c={self.c:g}{where}"


def sample_costs(
    model: CostModel, lengths: Lengths, ids: np.ndarray, cap: int | None = None
) -> np.ndarray:
    """Each sample's ``model.units`` (int64) for the global ``ids``; rejected samples cost 0.

    ``cap``: tokens beyond it are not fed (a truncated packed sample). A preference pair is two
    sequences, each its own segment: its cost is that of its longer side plus the other's.

    Example:
        >>> lens = Lengths.of([1, 1000, -1])
        >>> sample_costs(CostModel(b=1, c=0.001), lens, np.arange(3)).tolist()
        [1000, 1998002, 0]
    """
    ids = np.asarray(ids, dtype=np.int64)
    total = np.maximum(lengths.length[ids].astype(np.int64), 0)
    if cap is not None:
        total = np.minimum(total, cap)
    if lengths.sequences == 2 and lengths.longest is not None:
        longer = np.minimum(np.maximum(lengths.longest[ids].astype(np.int64), 0), total)
        return model.units(longer) + model.units(total - longer)
    return model.units(total)


# Optional model shapes, each its FLOP count (``CostModel.transformer``).
COST_MODELS: dict[str, CostModel] = {
    "llama3-8b": CostModel.transformer(
        layers=32,
        hidden=4096,
        intermediate=14336,
        heads=32,
        kv_heads=8,
        vocab=128256,
        name="llama3-8b",
    ),
    "llama3-70b": CostModel.transformer(
        layers=80,
        hidden=8192,
        intermediate=28672,
        heads=64,
        kv_heads=8,
        vocab=128256,
        name="llama3-70b",
    ),
    "qwen3-8b": CostModel.transformer(
        layers=36,
        hidden=4096,
        intermediate=12288,
        heads=32,
        kv_heads=8,
        head_dim=128,
        vocab=151936,
        name="qwen3-8b",
    ),
}
DEFAULT_COST = COST_MODELS["llama3-8b"]

# What ``plan_options={"cost": ...}`` takes (see ``CostModel.of``).
CostOption = CostModel | str | Mapping[str, float | str] | None
