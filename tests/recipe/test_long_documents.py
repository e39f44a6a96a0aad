"""Long documents split into windows (``overflow="split"``): every token kept, windows as samples."""

from __future__ import annotations

import importlib
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import ConfigError, JsonlSource, Loader, Recipe, World
from chute.cache import open_cache, preprocess
from chute.lengths import Pieces, lengths_of, split_lengths
from chute.lengths.base import Lengths
from chute.recipe.windows import split_sample, window_bounds, window_counts
from chute.sample.rejects import reject_entry
from chute.sources.record import Record, TextLine
from chute.testing import check_resume
from recipe_helpers import tiny_tokenizer

# the module (``chute.recipe.encode`` the attribute is the function of that name)
encode_module = importlib.import_module("chute.recipe.encode")

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "owls",
    "watch",
]


def write_docs(path: Path, sizes: list[int], *, broken: tuple[int, ...] = ()) -> Path:
    """One ``{"text"}`` document per line, ``sizes[i]`` words each; ``broken`` lines are bad."""
    rng = np.random.default_rng(len(sizes))
    with open(path, "w") as f:
        for i, n in enumerate(sizes):
            if i in broken:
                f.write('{"text": "cut\n')
                continue
            words = [f"doc{i}", *(WORDS[k] for k in rng.integers(0, len(WORDS), n))]
            f.write(json.dumps({"text": " ".join(words)}) + "\n")
    return path


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    sizes = [3, 400, 20, 1500, 60, 900, 5, 250, 2200, 40, 130, 700]
    return write_docs(tmp_path / "docs.jsonl", sizes, broken=(4,))


def split_recipe(**kw: Any) -> Recipe:
    kw.setdefault("max_length", 128)
    return Recipe(tokenizer=tiny_tokenizer(), format="text", overflow="split", **kw)


# -- the window arithmetic ---------------------------------------------------------------------


@pytest.mark.parametrize("stride", [0, 1, 5])
def test_windows_cover_every_token_once_and_train_each_once(stride: int) -> None:
    for length in [1, 7, 8, 9, 15, 16, 17, 50, 123]:
        sample = {"input_ids": np.arange(length), "labels": np.arange(length)}
        windows = split_sample(sample, max_length=8, stride=stride)
        assert len(windows) == int(window_counts(np.array([length]), 8, stride)[0])
        assert all(1 <= len(w["input_ids"]) <= 8 for w in windows)
        # the tokens, overlaps removed, are the document; every label appears once
        stitched = np.concatenate(
            [w["input_ids"][(stride if w["window"] else 0) :] for w in windows]
        )
        assert stitched.tolist() == list(range(length))
        trained = np.concatenate([w["labels"][w["labels"] != -100] for w in windows])
        assert sorted(trained.tolist()) == list(range(length))
        for w in windows:  # each later window's context is the end of the one before
            start, end, context = window_bounds(length, w["window"], 8, stride)
            assert w["input_ids"].tolist() == list(range(start, end))
            assert (w["labels"][:context] == -100).all() and context == (stride if start else 0)
            if w["window"] and stride:  # with an overlap, every trained token has context
                assert w["labels"][0] == -100


def test_window_numbers_out_of_range_raise() -> None:
    with pytest.raises(IndexError, match="window 3 of a 20-token document that has 3"):
        window_bounds(20, 3, 8, 0)


# -- the recipe --------------------------------------------------------------------------------


def test_split_recipe_keeps_the_whole_document_and_its_windows(docs: Path) -> None:
    recipe = split_recipe(stride=2)
    source = JsonlSource(docs)
    whole = recipe(source[8])
    assert whole["windows"] > 1 and whole["length"] > 128 and not whole["truncated"]
    windows = recipe.pieces(whole)
    assert [w["window"] for w in windows] == list(range(whole["windows"]))
    for w in windows:  # a record standing for its window gives that window
        again = recipe(source[8].with_window(w["window"]))
        assert again["input_ids"].tolist() == w["input_ids"].tolist()
        assert again["labels"].tolist() == w["labels"].tolist()
        assert (again["path"], again["line"], again["window"]) == (str(docs), 9, w["window"])
    short = recipe(source[0])
    assert short["windows"] == 1 and [p["window"] for p in recipe.pieces(short)] == [0]
    assert recipe.batch([source[8].with_window(1)])[0]["window"] == 1


def test_split_refuses_what_it_cannot_cut(tmp_path: Path) -> None:
    tok = tiny_tokenizer()
    with pytest.raises(ConfigError, match="overflow='split' cuts documents into windows"):
        Recipe(tokenizer=tok, template="raw", overflow="split")
    with pytest.raises(ConfigError, match="stride=8 must be smaller than max_length=8"):
        Recipe(tokenizer=tok, template="raw", max_length=8, overflow="split", stride=8)
    with pytest.raises(ConfigError, match="stride=2 is the overlap of split windows"):
        Recipe(tokenizer=tok, template="raw", max_length=8, stride=2)
    with pytest.raises(ConfigError, match="task='preference' keeps a response"):
        Recipe(tokenizer=tok, template="raw", max_length=8, overflow="split", task="preference")
    # a long sample with an image cannot be cut into windows of text: a counted reject
    (tmp_path / "a.png").write_bytes(b"")
    recipe = Recipe(
        tokenizer=tiny_tokenizer(), template="chatml", max_length=16, overflow="split",
        image_tokens=4, check_images=False,
    )  # fmt: skip
    record = {"text": "<image>" + " hello there" * 20, "images": ["a.png"]}
    with pytest.raises(Exception, match="too_long: .* overflow='split' cuts documents into"):
        recipe.process(record, path=str(tmp_path / "d.jsonl"))


def test_text_files_are_one_document_per_line(shared_data: Path) -> None:
    wiki = shared_data / "llama-factory" / "wiki_demo.txt"
    source = JsonlSource(wiki)
    assert len(source) == 30 and isinstance(source[0], TextLine)
    first_line = wiki.read_text(encoding="utf-8").splitlines()[0]
    assert source[0].data == {"text": first_line} and source[0].line == 1
    recipe = Recipe(tokenizer=shared_data / "tokenizers" / "qwen3", max_length=2048)
    assert recipe.format_of(source[0]) == "text"
    assert recipe(source[0])["truncated"]


# -- windows as samples --------------------------------------------------------------------------


def test_lengths_of_a_split_recipe_are_per_window(docs: Path) -> None:
    recipe = split_recipe(stride=1)
    source = JsonlSource(docs)
    lens = lengths_of(source, recipe)
    table = lens.pieces
    assert table is not None and table.records == len(source) == 12
    full = [recipe(r)["length"] if i != 4 else -1 for i, r in enumerate(source)]
    counts = window_counts(np.array(full), 128, 1)
    assert len(lens) == int(counts.sum()) and lens.rejected == {"bad_json": 1}
    for piece in range(len(lens)):
        record, window = table.locate(piece)
        if full[record] < 0:
            assert lens.length[piece] == -1
            continue
        start, end, _ = window_bounds(full[record], window, 128, 1)
        assert lens.length[piece] == end - start
    # the per-record lengths are what is cached: a second call tokenizes nothing
    again = lengths_of(source, recipe, workers=1)
    assert again.length.tolist() == lens.length.tolist()


def test_split_lengths_keep_a_rejected_record_as_one_piece() -> None:
    lens = split_lengths(Lengths(np.array([300, 9000, 700, -1])), max_length=4096, stride=0)
    assert lens.length.tolist() == [300, 4096, 4096, 808, 700, -1]
    assert lens.pieces.first.tolist() == [0, 1, 4, 5, 6]
    assert lens.num_rejected == 1


@pytest.mark.parametrize("plan", ["random", "grouped", "packed"])
def test_every_window_exactly_once_on_every_layout(docs: Path, plan: str) -> None:
    recipe = split_recipe(stride=1)
    pieces = Pieces(JsonlSource(docs), lengths_of(JsonlSource(docs), recipe))
    valid = set(pieces.lengths.valid_ids().tolist())
    for world_size in (1, 2, 3):
        seen: list[int] = []
        counts = set()
        for rank in range(world_size):
            loader = Loader(
                docs, recipe, batch_size=2, plan=plan, world=World(rank, world_size), seed=3,
                max_bad_fraction=None,
            )  # fmt: skip
            batches = list(loader)
            counts.add(len(batches))
            for batch in batches:
                seen += [i for i in batch["sample_ids"].tolist() if i >= 0]
        assert len(counts) == 1, f"{plan}: ranks yield {counts} batches"
        assert sorted(seen) == sorted(valid), f"{plan} on {world_size} ranks"


def test_windows_with_workers_and_rejects_counted_once(docs: Path, tmp_path: Path) -> None:
    rejects = tmp_path / "rejects.jsonl"
    recipe = split_recipe()
    loader = Loader(
        docs, recipe, batch_size=3, num_workers=2, world=World(0, 1), rejects=rejects,
        max_bad_fraction=None,
    )  # fmt: skip
    seen = [i for b in loader for i in b["sample_ids"].tolist()]
    n = len(loader.source)
    assert sorted(seen) == [i for i in range(n) if loader.source.lengths.length[i] >= 0]
    # the random plan deals the broken record's one piece, and the worker rejects it once
    assert loader.stats == {"bad_json": 1}
    entry = json.loads(rejects.read_text())
    assert (entry["path"], entry["line"], entry["reason"], entry["window"]) == (
        str(docs), 5, "bad_json", 0,
    )  # fmt: skip


def test_resume_over_windows(docs: Path) -> None:
    recipe = split_recipe(stride=2)

    def make(world: World = World(0, 1), num_workers: int = 0) -> Loader:
        return Loader(
            docs, recipe, batch_size=2, plan="packed", world=world, num_workers=num_workers,
            seed=5, max_bad_fraction=None,
        )  # fmt: skip

    assert check_resume(make, epochs=2, every=4) > 3
    state = make().state_dict()
    assert state["source"]["kind"] == "pieces" and state["source"]["stride"] == 2


def test_a_window_reject_names_its_window() -> None:
    record = Record(b'{"text": 1}', path="d.jsonl", line=7, index=6).with_window(3)
    recipe = split_recipe()
    with pytest.raises(Exception, match=r"d.jsonl:7: wrong_type") as info:
        recipe(record)
    entry = reject_entry(record, info.value)  # type: ignore[arg-type]
    assert entry["window"] == 3 and record.location == "d.jsonl:7 (window 3)"


# -- packed: every token, rows nearly full --------------------------------------------------------


def packed_windows(loader: Loader) -> tuple[dict[int, np.ndarray], int, int]:
    """Each window's tokens read back from the packed batches; real tokens; row tokens."""
    assert loader.lengths is not None
    lengths = loader.lengths.length
    out: dict[int, np.ndarray] = {}
    real = total = 0
    for batch in loader:
        ids = batch["input_ids"].numpy()
        total += ids.size
        for row, sids in enumerate(batch["row_sample_ids"].numpy()):
            at = 0
            for sid in sids[sids >= 0].tolist():
                n = int(lengths[sid])
                assert batch["position_ids"][row, at] == 0
                out[sid] = ids[row, at : at + n]
                at += n
                real += n
    return out, real, total


@pytest.mark.parametrize("stride", [0, 1])
def test_packed_windows_lose_no_token_and_fill_rows(
    shared_data: Path, tmp_path: Path, stride: int
) -> None:
    """Real web pages and Wikipedia articles (up to ~25k tokens), split and packed: rows are
    >= 99.5% real tokens, and every token of every document comes back, in order."""
    data = shared_data / "llama-factory"
    paths = [str(data / "c4_demo.jsonl"), str(data / "wiki_demo.txt")]
    tok = shared_data / "tokenizers" / "qwen3"
    options = {"max_length": 1024, "overflow": "split", "stride": stride}
    recipe = Recipe(tokenizer=tok, **options)  # type: ignore[arg-type]
    # tokenized once (a cache), so the test does not re-encode a document for every window
    cfg = {"sources": paths, "recipe": {"tokenizer": str(tok), **options}, "out": tmp_path}
    preprocess({**cfg, "cache": {"chunk_size": 64, "workers": 1}})
    loader = Loader(tmp_path, recipe, batch_size=4, plan="packed", world=World(0, 1), seed=2)
    windows, real, total = packed_windows(loader)
    assert real / total >= 0.995, f"{real / total:.4f} of the rows are real tokens"
    cache = loader.source
    per_record: dict[int, dict[int, np.ndarray]] = {}
    for piece, tokens in windows.items():
        row = cache[piece]
        per_record.setdefault(int(row["index"]), {})[int(row["window"])] = tokens
    source = JsonlSource(paths)
    assert sorted(per_record) == list(range(len(source))) and len(source) == 330
    kept = 0
    for record, parts in per_record.items():
        whole = recipe(source[record])["input_ids"]
        assert sorted(parts) == list(range(len(parts)))
        stitched = np.concatenate([parts[w][(stride if w else 0) :] for w in sorted(parts)])
        assert stitched.tolist() == whole.tolist(), f"record {record}"
        kept += whole.size
    assert kept == real - stride * (len(windows) - len(per_record))  # only overlaps repeat


def test_a_cache_of_a_split_recipe_holds_the_same_windows(
    shared_data: Path, tmp_path: Path
) -> None:
    c4 = shared_data / "llama-factory" / "c4_demo.jsonl"
    tok = shared_data / "tokenizers" / "qwen3"
    cfg = {
        "sources": [str(c4)],
        "recipe": {"tokenizer": str(tok), "max_length": 512, "overflow": "split", "stride": 3},
        "cache": {"chunk_size": 100, "workers": 1},
        "out": str(tmp_path / "cache"),
    }
    preprocess(cfg)
    recipe = Recipe(tokenizer=tok, max_length=512, overflow="split", stride=3)
    cache = open_cache(tmp_path / "cache", recipe=recipe)
    pieces = Pieces(JsonlSource(c4), lengths_of(JsonlSource(c4), recipe))
    assert len(cache) == len(pieces) > cache.summary["records"] == 300
    assert cache.lengths.tolist() == pieces.lengths.length.tolist()
    for i in (0, 7, len(cache) - 1):
        row, live = cache[i], recipe(pieces[i])
        assert (row["line"], row["window"]) == (live["line"], live["window"])
        assert row["input_ids"].tolist() == live["input_ids"].tolist()
        assert row["labels"].tolist() == live["labels"].tolist()
    loader = Loader(tmp_path / "cache", recipe, batch_size=8, plan="packed", world=World(0, 1))
    seen = [i for b in loader for i in b["sample_ids"].tolist()]
    assert sorted(seen) == list(range(len(cache)))


def test_elastic_resume_over_windows(docs: Path) -> None:
    from chute.testing import check_elastic

    recipe = split_recipe(stride=1)

    def make(world: World) -> Loader:
        return Loader(docs, recipe, batch_size=2, plan="packed", world=world, seed=7,
                      max_bad_fraction=None)  # fmt: skip

    consumed, delivered = check_elastic(make, old_world_size=2, new_world_size=3, steps=2)
    valid = make(World(0, 1)).source.lengths.valid_ids().tolist()
    assert sorted([*consumed.tolist(), *delivered.tolist()]) == valid


def test_windows_built_one_by_one_start_from_cuts_and_equal_the_whole_sample_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(3)
    texts = [
        " ".join(WORDS[k] for k in rng.integers(0, len(WORDS), n)) for n in (21_000, 9_000, 60)
    ]
    recipe = split_recipe(max_length=512, stride=3)
    wanted = [split_sample(recipe.process({"text": t}), 512, 3) for t in texts]
    assert [len(w) > 1 for w in wanted] == [True, True, False]
    assert len(texts[0]) > 100_000  # cut into pieces (chute.tokenize.prefix)
    order = [(d, k) for d, windows in enumerate(wanted) for k in range(len(windows))]
    rng.shuffle(order)
    searches: list[int] = []  # searches for a place to cut a long text (the costly part)
    search = encode_module.safe_prefix_end
    monkeypatch.setattr(
        encode_module, "safe_prefix_end", lambda *a, **k: searches.append(1) or search(*a, **k)
    )
    seen: set[int] = set()
    for d, k in order:
        searches.clear()
        got = recipe.process({"text": texts[d]}, window=k)
        assert got["input_ids"].tolist() == wanted[d][k]["input_ids"].tolist(), (d, k)
        assert got["labels"].tolist() == wanted[d][k]["labels"].tolist(), (d, k)
        assert (got["window"], got["windows"]) == (k, len(wanted[d]))
        # the first window seen of a document encodes it all (cutting the long one in pieces);
        # later ones re-encode the pieces holding them, without searching for cuts
        if d in seen:
            assert not searches, (d, k)
        elif d == 0:
            assert searches
        seen.add(d)
    restarts = recipe._restarts
    assert len(restarts) == 3
    # the long document's cuts: more than the start, so a later window skips what is before it
    chars, tokens, total = max(restarts._known.values(), key=lambda known: known[2])
    assert len(chars) > 1 and chars[0] == tokens[0] == 0
    assert tokens == sorted(tokens) and tokens[-1] < total
    assert total == len(recipe.process({"text": texts[0]})["input_ids"])
    # a copy sent to another process (a DataLoader worker) starts empty
    assert len(pickle.loads(pickle.dumps(restarts))) == 0


def test_a_changed_document_is_encoded_again() -> None:
    recipe = split_recipe(max_length=64)
    text = " ".join(WORDS * 2000)
    record = Record.from_data({"text": text}, path="d.jsonl", line=1, index=0)
    first = recipe(record.with_window(5))
    changed = Record.from_data({"text": text[::-1]}, path="d.jsonl", line=1, index=0)
    want = split_sample(recipe.process(changed.data), 64, 0)[5]
    got = recipe(changed.with_window(5))
    assert got["input_ids"].tolist() == want["input_ids"].tolist()
    assert got["input_ids"].tolist() != first["input_ids"].tolist()
