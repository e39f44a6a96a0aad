"""Context- and sequence-parallel slices of real batches: long documents and rows with images.

LLaMA-Factory's ``wiki_demo.txt`` and ``c4_demo.jsonl`` (330 documents, up to ~25k tokens) with
the Qwen3 tokenizer, ``Recipe(overflow="split", max_length=32768)``, packed into rows of 32,768
tokens and dealt over 2 data-parallel ranks: on every step the slices of each group put back are
the whole batch, every row holds the documents' own tokens, and every window comes once over the
data-parallel ranks. On ``mllm_demo.json`` (Qwen2-VL image tokens, 3-D positions) the same holds,
with the images whole on every rank; a tiny model that embeds images before the split gives the
whole batch's loss from the slices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from chute import Loader, Recipe, World  # noqa: E402
from chute.cache import preprocess  # noqa: E402
from chute.collate.slices import gather_slices, shift_labels  # noqa: E402
from ring_reference import TinyLM, ring_loss, whole_loss  # noqa: E402

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]

MAX_LENGTH = 32768


@pytest.fixture(scope="module")
def documents(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = shared_data / "llama-factory"
    tok = shared_data / "tokenizers" / "qwen3"
    options = {"max_length": MAX_LENGTH, "overflow": "split"}
    out = tmp_path_factory.mktemp("long-cache")
    paths = [str(data / "wiki_demo.txt"), str(data / "c4_demo.jsonl")]
    # tokenized once (a cache): every simulated rank reads the windows without re-encoding
    preprocess(
        {
            "sources": paths,
            "recipe": {"tokenizer": str(tok), **options},
            "out": out,
            "cache": {"chunk_size": 64, "workers": 1},
        }
    )
    return {"cache": out, "recipe": Recipe(tokenizer=tok, **options)}  # type: ignore[arg-type]


def sample_tokens(batch: dict[str, Any]) -> list[np.ndarray]:
    """Each segment's real tokens, read from the unsliced aligned rows."""
    flat = batch["input_ids"].reshape(-1).numpy()
    pad, real = batch["cu_seqlens_padded"].numpy(), np.diff(batch["cu_seqlens"].numpy())
    return [flat[a : a + n] for a, n in zip(pad[:-1], real, strict=True)]


@pytest.mark.parametrize(("kind", "size"), [("cp", 2), ("cp", 4), ("sp", 4)])
def test_slices_of_32k_rows_put_back_are_the_whole_batches(
    documents: dict[str, Any], kind: str, size: int
) -> None:
    dp = 2
    world_size = dp * size
    align = 2 * size if kind == "cp" else 1
    common: dict[str, Any] = {"batch_size": 1, "seed": 3, "plan": "packed"}
    whole = [
        Loader(
            documents["cache"],
            documents["recipe"],
            world=World(d, dp),
            plan_options={"max_length": MAX_LENGTH, "align": align},
            **common,
        )
        for d in range(dp)
    ]
    ranks = [
        Loader(
            documents["cache"],
            documents["recipe"],
            world=World(r, world_size, **{kind: size}),
            slices=kind,
            **common,
        )
        for r in range(world_size)
    ]
    cache = whole[0].source
    assert len({len(x) for x in (*whole, *ranks)}) == 1  # equal steps on every rank
    seen: list[int] = []
    rows = 0
    for d in range(dp):
        group = World(d * size, world_size, **{kind: size}).dp_peers
        for w, *parts in zip(whole[d], *(ranks[g] for g in group), strict=True):
            assert all(torch.equal(p["sample_ids"], w["sample_ids"]) for p in parts)
            for p in parts:
                assert p["input_ids"].shape == (1, MAX_LENGTH // size)
                assert torch.equal(p["cu_seqlens"], w["cu_seqlens"])
            back = gather_slices(parts)
            assert torch.equal(back["input_ids"], w["input_ids"])
            assert torch.equal(back["position_ids"], w["position_ids"])
            bounds = w.get("cu_seqlens_padded", w["cu_seqlens"]).numpy()
            want = shift_labels(w["labels"].numpy(), bounds)
            assert back["shift_labels"].reshape(-1).numpy().tolist() == want.tolist()
            # the rows hold the windows' own tokens, each in its own segment
            ids = [i for i in w["sample_ids"].tolist() if i >= 0]
            if kind == "cp":
                segments = sample_tokens(w)[: len(ids)]
                for piece, tokens in zip(ids, segments, strict=True):
                    assert tokens.tolist() == list(cache[piece]["input_ids"])
            seen += ids
            rows += 1
    assert sorted(seen) == list(range(len(cache)))  # every window once over the dp ranks
    assert rows >= 10  # about 0.6M tokens: a real number of 32k rows


def test_ring_attention_over_real_text_gives_the_whole_batchs_loss(
    shared_data: Path,
) -> None:
    tok = shared_data / "tokenizers" / "qwen3"
    wiki = shared_data / "llama-factory" / "wiki_demo.txt"
    recipe = Recipe(tokenizer=tok, max_length=2048, overflow="split")
    cp, vocab = 4, 1000
    model = TinyLM(vocab, seed=2)
    kw: dict[str, Any] = {"batch_size": 2, "seed": 1, "plan": "packed"}
    plain = Loader(wiki, recipe, world=World(0, 1), plan_options={"align": 2 * cp}, **kw)
    ranks = [Loader(wiki, recipe, world=World(r, cp, cp=cp), slices="cp", **kw) for r in range(cp)]
    for w, *parts in zip(plain, *ranks, strict=True):
        for batch in (w, *parts):  # the tiny model's vocabulary
            for key in ("input_ids", "labels", "shift_labels"):
                if key in batch:
                    batch[key] = small(batch[key], vocab)
        with torch.no_grad():
            assert ring_loss(model, parts) == pytest.approx(whole_loss(model, w), rel=1e-6)
        break  # one step of two rows of 2048 tokens: ~20 s of attention in Python


def small(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """Token ids folded into a small vocabulary; -100 (no target) kept."""
    return torch.where(ids >= 0, ids % vocab, ids)


# -- rows with images --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def images(shared_data: Path) -> dict[str, Any]:
    recipe = Recipe(
        tokenizer=shared_data / "tokenizers" / "qwen3", image_tokens="qwen2-vl", max_length=2048
    )
    return {
        "path": shared_data / "llama-factory" / "mllm_demo.json",
        "recipe": recipe,
        "image_pad": recipe.tokenizer.token_to_id("<|image_pad|>"),
    }


def multimodal(images: dict[str, Any], world: World, **kw: Any) -> Loader:
    return Loader(
        images["path"], images["recipe"], batch_size=2, seed=0, plan="packed", world=world, **kw
    )


@pytest.mark.parametrize("cp", [2, 4])
def test_slices_of_rows_with_images_put_back_are_the_whole_batch(
    images: dict[str, Any], cp: int
) -> None:
    whole = multimodal(images, World(0, 1), plan_options={"align": 2 * cp})
    ranks = [multimodal(images, World(r, cp, cp=cp), slices="cp") for r in range(cp)]
    for w, *parts in zip(whole, *ranks, strict=True):
        assert w["position_ids"].shape[0] == 4  # Qwen2-VL's 3-D positions under the text row
        back = gather_slices(parts)
        for key in ("input_ids", "position_ids", "mm_token_type_ids"):
            assert torch.equal(back[key], w[key]), key
        for p in parts:
            assert torch.equal(p["full_input_ids"], w["input_ids"])
            assert torch.equal(p["pixel_values"], w["pixel_values"])  # images whole everywhere
            assert torch.equal(p["image_grid_thw"], w["image_grid_thw"])
        # every image span lies whole in full_input_ids: as many image tokens as the grids say
        tokens = int((w["input_ids"] == images["image_pad"]).sum())
        assert tokens == int(w["image_grid_thw"].prod(1).sum()) // 4
        # and the slices do cut spans: image tokens sit on more than one rank
        assert sum(int((p["input_ids"] == images["image_pad"]).any()) for p in parts) > 1


def test_embedding_images_before_the_split_gives_the_whole_batchs_loss(
    images: dict[str, Any],
) -> None:
    """The model embeds ``full_input_ids``, puts each image's features at its tokens (Qwen2-VL:
    four patches per token), keeps its tokens by ``token_index``, then runs ring attention."""
    cp, vocab = 2, 1000
    model = TinyLM(vocab, seed=3)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        vision = torch.nn.Linear(4 * 1176, 32)

    def embed(ids: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
        h = model.emb(ids.reshape(-1) % vocab)
        at = torch.nonzero(ids.reshape(-1) == images["image_pad"]).squeeze(1)
        return h.index_put((at,), vision(pixels.reshape(-1, 4 * 1176)))

    plain = multimodal(images, World(0, 1))
    ranks = [multimodal(images, World(r, cp, cp=cp), slices="cp") for r in range(cp)]
    with torch.no_grad():
        for w, *parts in zip(plain, *ranks, strict=True):
            w["labels"] = small(w["labels"], vocab)
            for p in parts:
                p["shift_labels"] = small(p["shift_labels"], vocab)
            want = whole_loss(model, w, embed(w["input_ids"], w["pixel_values"]))
            full = [embed(p["full_input_ids"], p["pixel_values"]) for p in parts]
            got = ring_loss(
                model, parts, [f[p["token_index"]] for f, p in zip(full, parts, strict=True)]
            )
            assert got == pytest.approx(want, rel=1e-6)
