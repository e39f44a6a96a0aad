"""States a one-dataset Loader saved before it planned through a mixture of one still resume.

The literals below are ``state_dict()`` of loaders over one dataset, saved by chute before issue
29 point 3 (commit c22d189) after 3 batches on rank 1 of 2, with the rest of the stream that code
delivered (the rest of epoch 0, then epoch 1). The current Loader must accept them unchanged and
deliver the same rest; its own state keeps every key and value of the old one.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chute import Loader, World
from chute.errors import StateMismatch

DATA = [{"input_ids": list(range(1 + i % 7))} for i in range(53)]
OPTIONS: dict[str, dict[str, Any]] = {
    "random": {"batch_size": 4},
    "grouped": {"batch_size": 4, "plan": "grouped"},
    "packed": {"batch_size": 2, "plan": "packed", "plan_options": {"max_length": 12}},
    "noshuffle_droplast": {"batch_size": 3, "shuffle": False, "drop_last": True},
}

# fmt: off
SAVED: dict[str, dict[str, Any]] = {"random/list": {"state": {"format": "chute.loader",
                           "version": 1,
                           "epoch": 0,
                           "batches": 3,
                           "world_size": 2,
                           "segments": [],
                           "rank": 1,
                           "plan": {"kind": "random",
                                    "batch_size": 4,
                                    "shuffle": True,
                                    "shuffle_algorithm": "feistel6-v1",
                                    "seed": 7,
                                    "drop_last": False,
                                    "wrap": False},
                           "source": {"kind": "dataset", "type": "builtins.list", "records": 53},
                           "budget": {"seen": 12, "bad": 0, "run": 0},
                           "counters": {"batches": 3,
                                        "samples": 12,
                                        "valid": 12,
                                        "rejected": 0,
                                        "topped_up": 0,
                                        "placeholder_batches": 0},
                           "rejects": {"by_reason": {}, "examples": {}}},
                 "rest": [[4, 13, 40, 45], [10, 0, 6, 21], [5, 24, 15, 18], [52, 33],
                          [46, 39, 4, 35], [34, 27, 51, 21], [36, 10, 25, 24], [44, 6, 0, 41],
                          [1, 30, 29, 8], [49, 40, 33, 45], [16, 43]]},
 "grouped/jsonl": {"state": {"format": "chute.loader",
                             "version": 1,
                             "epoch": 0,
                             "batches": 3,
                             "world_size": 2,
                             "segments": [],
                             "rank": 1,
                             "plan": {"kind": "grouped",
                                      "shuffle": True,
                                      "shuffle_algorithm": "feistel6-v1",
                                      "seed": 7,
                                      "lengths": {"samples": 53,
                                                  "valid": 53,
                                                  "tokens": 206,
                                                  "hash": "f067ce43b0b5464e27a71192c992092c"},
                                      "batch_size": 4,
                                      "group_size": 50,
                                      "grad_accum": 1,
                                      "longest_first": True,
                                      "drop_last": False},
                             "source": {"kind": "jsonl",
                                        "records": 53,
                                        "files": [{"path": "/tmp/w29c/old.jsonl",
                                                   "records": 53,
                                                   "size": 1466,
                                                   "mtime_ns": 1795766864810672776,
                                                   "edge_hash": "1b45aed4a60fa3f0f485bba7a90a7e03"}]},
                             "budget": {"seen": 12, "bad": 0, "run": 0},
                             "counters": {"batches": 3,
                                          "samples": 12,
                                          "valid": 12,
                                          "rejected": 0,
                                          "topped_up": 0,
                                          "placeholder_batches": 0},
                             "rejects": {"by_reason": {}, "examples": {}}},
                   "rest": [[15, 49, 42, 35], [39, 17, 45, 38], [52, 16, 30, 51], [21, 7],
                            [6, 41, 48, 12], [45, 9, 23, 51], [16, 15, 22, 36], [32, 38, 52, 10],
                            [43, 28, 35, 7], [33, 26, 46, 39], [42, 49]]},
 "packed/list": {"state": {"format": "chute.loader",
                           "version": 1,
                           "epoch": 0,
                           "batches": 3,
                           "world_size": 2,
                           "segments": [],
                           "rank": 1,
                           "plan": {"kind": "packed",
                                    "shuffle": True,
                                    "shuffle_algorithm": "feistel6-v1",
                                    "seed": 7,
                                    "lengths": {"samples": 53,
                                                "valid": 53,
                                                "tokens": 206,
                                                "hash": "f067ce43b0b5464e27a71192c992092c"},
                                    "max_length": 12,
                                    "batch_size": 2,
                                    "split": False,
                                    "window": None,
                                    "overflow": "truncate",
                                    "drop_last": False},
                           "source": {"kind": "dataset", "type": "builtins.list", "records": 53},
                           "budget": {"seen": 15, "bad": 0, "run": 0},
                           "counters": {"batches": 3,
                                        "samples": 15,
                                        "valid": 15,
                                        "rejected": 0,
                                        "topped_up": 0,
                                        "placeholder_batches": 0},
                           "rejects": {"by_reason": {}, "examples": {}}},
                 "rest": [[40, 19, 10, 3, 24], [33, 17, 29], [19, 5, 13, 46], [42, 49, 20, 11],
                          [34, 39, 40, 33], [12, 47, 30, 16, 36, 50, 1], [27, 4]]},
 "noshuffle_droplast/jsonl": {"state": {"format": "chute.loader",
                                        "version": 1,
                                        "epoch": 0,
                                        "batches": 3,
                                        "world_size": 2,
                                        "segments": [],
                                        "rank": 1,
                                        "plan": {"kind": "random",
                                                 "batch_size": 3,
                                                 "shuffle": False,
                                                 "shuffle_algorithm": None,
                                                 "seed": 7,
                                                 "drop_last": True,
                                                 "wrap": False},
                                        "source": {"kind": "jsonl",
                                                   "records": 53,
                                                   "files": [{"path": "/tmp/w29c/old.jsonl",
                                                              "records": 53,
                                                              "size": 1466,
                                                              "mtime_ns": 1795766864810672776,
                                                              "edge_hash": "1b45aed4a60fa3f0f485bba7a90a7e03"}]},
                                        "budget": {"seen": 9, "bad": 0, "run": 0},
                                        "counters": {"batches": 3,
                                                     "samples": 9,
                                                     "valid": 9,
                                                     "rejected": 0,
                                                     "topped_up": 0,
                                                     "placeholder_batches": 0},
                                        "rejects": {"by_reason": {}, "examples": {}}},
                              "rest": [[21, 22, 23], [27, 28, 29], [33, 34, 35], [39, 40, 41],
                                       [45, 46, 47], [3, 4, 5], [9, 10, 11], [15, 16, 17],
                                       [21, 22, 23], [27, 28, 29], [33, 34, 35], [39, 40, 41],
                                       [45, 46, 47]]}}
# fmt: on


def loader_of(case: str, tmp_path: Path, rank: int = 1, world_size: int = 2) -> Loader:
    plan, kind = case.split("/")
    source: Any = DATA
    if kind == "jsonl":  # the same bytes the state was saved over (path and mtime may differ)
        source = tmp_path / "train.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in DATA))
        source = str(source)
    world = World(rank=rank, world_size=world_size)
    return Loader(source, world=world, seed=7, **OPTIONS[plan])


def ids(loader: Loader) -> list[list[int]]:
    return [np.asarray(b["sample_ids"]).ravel().tolist() for b in loader]


@pytest.mark.parametrize("case", sorted(SAVED))
def test_a_state_saved_before_resumes_to_the_same_rest(case: str, tmp_path: Path) -> None:
    saved = SAVED[case]
    loader = loader_of(case, tmp_path)
    loader.load_state_dict(copy.deepcopy(saved["state"]))
    rest = ids(loader) + ids(loader)  # the rest of epoch 0, then epoch 1
    assert rest == saved["rest"]
    # the uninterrupted run of today's code: the same 3 batches, then the same rest
    fresh = loader_of(case, tmp_path)
    stream = ids(fresh) + ids(fresh)
    assert stream[3:] == saved["rest"]


@pytest.mark.parametrize("case", sorted(SAVED))
def test_todays_state_keeps_every_key_and_value_of_the_old_one(case: str, tmp_path: Path) -> None:
    loader = loader_of(case, tmp_path)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    old = SAVED[case]["state"]
    for key, value in old.items():
        if key == "source" and value["kind"] == "jsonl":  # this file's own path and mtime
            files = [
                {k: v for k, v in f.items() if k not in ("path", "mtime_ns")}
                for f in value["files"]
            ]
            mine = [
                {k: v for k, v in f.items() if k not in ("path", "mtime_ns")}
                for f in state[key]["files"]
            ]
            assert mine == files and state[key]["records"] == value["records"]
            continue
        assert state[key] == value, key
    # added: the per-dataset counts of the one dataset ("data"), the recipe's fingerprint
    assert set(state) - set(old) == {"datasets", "recipe"}
    assert state["datasets"]["names"] == ["data"]
    assert state["datasets"]["samples"] == [old["counters"]["samples"]]


def test_a_state_saved_before_resumes_elastically_on_three_ranks(tmp_path: Path) -> None:
    """2 ranks -> 3: what epoch 0 still owes is dealt over the new ranks, each sample once."""
    state = SAVED["random/list"]["state"]
    before = Loader(DATA, world=World(rank=0, world_size=2), seed=7, **OPTIONS["random"])
    first = [i for b in ids(before)[:3] for i in b]
    other = Loader(DATA, world=World(rank=1, world_size=2), seed=7, **OPTIONS["random"])
    first += [i for b in ids(other)[:3] for i in b]
    rest = []
    for rank in range(3):
        loader = Loader(DATA, world=World(rank=rank, world_size=3), seed=7, **OPTIONS["random"])
        loader.load_state_dict(copy.deepcopy(state))
        rest += [i for b in ids(loader) for i in b]
    assert sorted(first + rest) == list(range(len(DATA)))


def test_a_state_saved_over_a_mixture_is_refused_by_a_one_dataset_loader(tmp_path: Path) -> None:
    state = copy.deepcopy(SAVED["random/list"]["state"])
    state["plan"]["mixture"] = {"algorithm": "mixture-v1", "names": ["data"]}
    with pytest.raises(StateMismatch, match=r"plan\.mixture"):
        loader_of("random/list", tmp_path).load_state_dict(state)
