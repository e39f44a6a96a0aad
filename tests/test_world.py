from __future__ import annotations

import pytest

from chute import ConfigError, World


def test_defaults_and_worker_arithmetic() -> None:
    w = World()
    assert (w.rank, w.world_size, w.worker_id, w.num_workers) == (0, 1, 0, 1)
    shares = [World(rank=r, world_size=3).with_worker(k, 2) for r in range(3) for k in range(2)]
    assert [s.global_worker for s in shares] == list(range(6))
    assert {s.total_workers for s in shares} == {6}
    assert World(rank=1, world_size=2).with_rank(2, 4) == World(rank=2, world_size=4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 2, "world_size": 2}, r"rank must be in \[0, world_size=2\), got 2"),
        ({"world_size": 0}, "world_size must be >= 1, got 0"),
        ({"num_workers": 0}, "num_workers must be >= 1"),
        ({"worker_id": 3, "num_workers": 2}, r"worker_id must be in \[0, num_workers=2\)"),
        ({"rank": "0"}, "rank must be an int"),
    ],
)
def test_invalid_worlds_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        World(**kwargs)


def test_detect_reads_the_launcher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert World.detect() == World()
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert World.detect() == World(rank=3, world_size=4, local_rank=1)
    monkeypatch.setenv("WORLD_SIZE", "four")
    with pytest.raises(ConfigError, match="WORLD_SIZE='four' is not an integer"):
        World.detect()


class _WhereAmI:
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[int, int]:
        w = World.detect()
        return w.worker_id, w.num_workers


def test_detect_inside_dataloader_workers() -> None:
    torch = pytest.importorskip("torch")
    loader = torch.utils.data.DataLoader(_WhereAmI(), batch_size=None, num_workers=2)
    seen = {tuple(map(int, x)) for x in loader}
    assert seen == {(0, 2), (1, 2)}


def test_detect_prefers_an_initialised_process_group(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    monkeypatch.setenv("RANK", "5")  # stale environment: the process group must win
    monkeypatch.setenv("WORLD_SIZE", "9")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        assert World.detect() == World(rank=0, world_size=1)
    finally:
        dist.destroy_process_group()


# -- parallel groups -----------------------------------------------------------------------------


def megatron_groups(world_size: int, sizes: dict[str, int], order: str, dim: str) -> set:
    """Groups along ``dim`` as Megatron-LM's RankGenerator builds them: the dimensions of
    ``order`` with the first innermost, each rank's coordinates read off in that order."""
    import itertools

    names = order.split("-")
    shape = [sizes[n] for n in names]
    groups: dict[tuple, list[int]] = {}
    for rank in range(world_size):
        coords, rest = {}, rank
        for n, s in zip(names, shape, strict=True):
            coords[n] = rest % s
            rest //= s
        key = tuple(coords[n] for n in names if n != dim)
        groups.setdefault(key, []).append(rank)
    assert len(list(itertools.chain(*groups.values()))) == world_size
    return {tuple(g) for g in groups.values()}


@pytest.mark.parametrize(
    ("layout", "order"),
    [
        ({"cp": 2}, "tp-sp-cp-dp-pp"),
        ({"cp": 4}, "tp-sp-cp-dp-pp"),
        ({"cp": 2, "tp": 2}, "tp-sp-cp-dp-pp"),
        ({"sp": 2, "pp": 2}, "tp-sp-cp-dp-pp"),
        ({"cp": 2, "tp": 2, "pp": 2}, "tp-cp-dp-pp"),
        ({"cp": 2}, "dp-cp"),  # dp inner to cp: ranks 0..dp-1 hold cp slice 0
        ({"cp": 3, "tp": 2}, "cp-tp-pp-dp-sp"),
    ],
)
def test_ranks_are_laid_out_as_megatron_orders_them(layout: dict, order: str) -> None:
    world_size = 24
    worlds = [World(rank=r, world_size=world_size, order=order, **layout) for r in range(24)]
    sizes = {"tp": 1, "sp": 1, "cp": 1, "pp": 1, **layout}
    sizes["dp"] = world_size // (sizes["tp"] * sizes["sp"] * sizes["cp"] * sizes["pp"])
    full_order = order.split("-") + [n for n in ("tp", "sp", "cp", "dp", "pp") if n not in order]
    for dim in ("tp", "sp", "cp", "dp", "pp"):
        want = megatron_groups(world_size, sizes, "-".join(full_order), dim)
        assert set(worlds[0].groups(dim)) == want, dim
        assert {w.group(dim) for w in worlds} == want, dim
        for w in worlds:  # a rank's index in its group is its coordinate
            assert w.group(dim).index(w.rank) == w.coords()[dim]
    assert {w.dp_size for w in worlds} == {sizes["dp"]}
    # the ranks of one data-parallel rank: the product of every other group
    for w in worlds:
        peers = [v.rank for v in worlds if v.dp_rank == w.dp_rank]
        assert w.dp_peers == tuple(peers)
        assert w.is_dp_leader == (w.rank == peers[0])
    assert worlds[0].dp_leaders() == [v.rank for v in worlds if v.is_dp_leader]


def test_the_default_layout_puts_cp_inside_dp() -> None:
    got = [(w.dp_rank, w.cp_rank) for w in (World(r, 8, cp=2) for r in range(8))]
    assert got == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]
    # the plain World is unchanged: every rank its own data-parallel rank
    plain = World(rank=3, world_size=4)
    assert (plain.dp_rank, plain.dp_size, plain.cp_rank, plain.cp_size) == (3, 4, 0, 1)
    assert plain.dp_peers == (3,) and plain.is_dp_leader


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"world_size": 6, "cp": 4}, r"world_size=6 is not a multiple of tp x sp x cp x pp = 4"),
        ({"world_size": 4, "cp": 0}, "World.cp must be >= 1"),
        ({"world_size": 4, "sp": 2.0}, "World.sp must be an int"),
        ({"world_size": 4, "cp": 2, "order": "tp-dp"}, "leaves out cp, whose size is above 1"),
        ({"world_size": 4, "cp": 2, "order": "cp-ep-dp"}, "must name each of tp, sp, cp, dp, pp"),
        ({"world_size": 4, "cp": 2, "order": "cp-cp-dp"}, "at most once"),
        ({"world_size": 4, "order": 3}, "must be a string"),
    ],
)
def test_invalid_layouts_name_the_field_and_the_fix(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        World(**kwargs)


def test_detect_takes_sizes_from_arguments_then_chute_then_accelerate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = ("CHUTE_CP", "CHUTE_SP", "CHUTE_TP", "CHUTE_PP", "CHUTE_RANK_ORDER")
    for name in (*names, "PARALLELISM_CONFIG_CP_SIZE", "PARALLELISM_CONFIG_TP_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert World.detect() == World(rank=5, world_size=8)
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_SIZE", "4")  # what `accelerate launch` sets
    assert (World.detect().cp_size, World.detect().dp_rank) == (4, 1)
    monkeypatch.setenv("CHUTE_CP", "2")  # chute's own variable wins
    assert (World.detect().cp_size, World.detect().cp_rank, World.detect().dp_rank) == (2, 1, 2)
    assert World.detect(cp=1).cp_size == 1  # and an argument wins over both
    monkeypatch.setenv("CHUTE_RANK_ORDER", "dp-cp")
    assert (World.detect().cp_rank, World.detect().dp_rank) == (1, 1)
    assert World.detect(order="cp-dp").cp_rank == 1
    monkeypatch.setenv("CHUTE_TP", "two")
    with pytest.raises(ConfigError, match="CHUTE_TP='two' is not an integer"):
        World.detect()
