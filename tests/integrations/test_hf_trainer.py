"""ChuteTrainer: the Hugging Face Trainer on a chute Loader, crash and resume mid-epoch exactly."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

from transformers import GPT2Config, GPT2LMHeadModel, TrainerCallback, TrainingArguments  # noqa: E402

from chute import Loader, World  # noqa: E402
from chute.integrations.hf_trainer import ChuteTrainer, loader_state_file  # noqa: E402


def write_tokens(path: Path, n: int) -> Path:
    rows = [
        json.dumps({"input_ids": [(i * 7 + k) % 50 for k in range(3 + i % 9)]}) for i in range(n)
    ]
    rows[5] = '{"input_ids": [1, 2'  # a broken record: skipped and counted, never fatal
    path.write_text("\n".join(rows) + "\n")
    return path


class Crash(TrainerCallback):
    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if state.global_step == self.at_step:
            raise KeyboardInterrupt("simulated crash")


class LoggedEpochs(TrainerCallback):
    def __init__(self) -> None:
        self.epochs: dict[int, float] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
        if logs and "loss" in logs:
            self.epochs[state.global_step] = logs["epoch"]


class StepEnds(TrainerCallback):
    """How many batches the view had handed over at the end of each optimizer step."""

    def __init__(self, seen: list[list[int]]) -> None:
        self.seen, self.ends, self.losses = seen, [], {}  # type: ignore[var-annotated]

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.ends.append(len(self.seen))

    def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
        if logs and "loss" in logs:
            self.losses[state.global_step] = logs["loss"]

    def groups(self) -> list[list[list[int]]]:
        """The batches of each optimizer step."""
        return [self.seen[a:b] for a, b in zip([0, *self.ends], self.ends, strict=False)]


def run(
    data: Path,
    out: Path,
    *,
    crash_at: int | None = None,
    resume: bool | Path = False,
    logged: LoggedEpochs | None = None,
    accumulate: int = 1,
    max_steps: int = 14,
    save_steps: int = 4,
    steps: list[StepEnds] | None = None,
) -> list[list[int]]:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    )
    loader = Loader(data, batch_size=4, seed=3, world=World(), max_bad_fraction=None)
    seen: list[list[int]] = []
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        save_steps=save_steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=accumulate,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        logging_steps=1 if logged or steps is not None else 100,
    )
    ends = None
    if steps is not None:
        ends = StepEnds(seen)
        steps.append(ends)
    trainer = ChuteTrainer(
        model=model,
        args=args,
        train_loader=loader,
        on_batch=lambda b: seen.append(b["sample_ids"].tolist()),
        callbacks=[c for c in (Crash(crash_at) if crash_at else None, logged, ends) if c] or None,
    )
    # the loader state resumes the data; the Trainer's skip only counts (it reads nothing)
    assert not trainer.args.ignore_data_skip
    with contextlib.suppress(KeyboardInterrupt):
        trainer.train(
            resume_from_checkpoint=str(resume) if isinstance(resume, Path) else resume or None
        )
    return seen


def test_resume_from_a_checkpoint_continues_with_exactly_the_same_batches(tmp_path: Path) -> None:
    data = write_tokens(
        tmp_path / "tokens.jsonl", 30
    )  # 8 batches per epoch: 14 steps cross an epoch
    full = run(data, tmp_path / "full")
    assert len(full) == 14
    assert sorted(i for b in full[:8] for i in b) == [i for i in range(30) if i != 5]

    crashed = run(data, tmp_path / "run", crash_at=10)  # checkpoints at 4 and 8, then dies at 10
    assert crashed == full[:10]
    assert Path(loader_state_file(tmp_path / "run" / "checkpoint-8", 0)).exists()
    resumed = run(data, tmp_path / "run", resume=True)
    assert resumed == full[8:], "the resumed run must see exactly the batches after checkpoint-8"


def test_resume_with_gradient_accumulation_keeps_every_optimizer_step_s_batches(
    tmp_path: Path,
) -> None:
    # 8 batches an epoch in optimizer steps of 3, 3 and 2 batches
    data = write_tokens(tmp_path / "tokens.jsonl", 30)
    full: list[StepEnds] = []
    run(data, tmp_path / "full", accumulate=3, max_steps=8, save_steps=2, steps=full)
    groups = full[0].groups()
    assert [len(g) for g in groups] == [3, 3, 2, 3, 3, 2, 3, 3]
    # dies at step 5, after checkpoint-2 (epoch 0, before its short step) and checkpoint-4
    # (epoch 1, after its first step); logging every step, as a resumed Trainer keeps its
    # checkpoint's logging settings
    run(data, tmp_path / "run", accumulate=3, max_steps=8, save_steps=2, crash_at=5, steps=[])
    for checkpoint in (2, 4):
        resumed: list[StepEnds] = []
        folder = tmp_path / "run" / f"checkpoint-{checkpoint}"
        out = tmp_path / f"resumed-{checkpoint}"  # (its checkpoints do not replace the run's)
        run(data, out, accumulate=3, max_steps=8, save_steps=2, resume=folder, steps=resumed)
        # each optimizer step after the checkpoint trains on the batches it did uninterrupted
        # (the epoch's short step is not merged into the next epoch's first one)
        assert resumed[0].groups() == groups[checkpoint:], checkpoint
        after = {k: v for k, v in full[0].losses.items() if k > checkpoint}
        assert resumed[0].losses == pytest.approx(after, rel=1e-5), checkpoint


def test_the_logged_epoch_after_a_resume_is_the_uninterrupted_run_s(tmp_path: Path) -> None:
    data = write_tokens(tmp_path / "tokens.jsonl", 30)  # 8 batches per epoch
    full = LoggedEpochs()
    run(data, tmp_path / "full", logged=full)
    assert full.epochs[4] == 0.5 and full.epochs[10] == 1.25
    # (the crashed runs log every step too: a resumed Trainer keeps the checkpoint's settings)
    run(data, tmp_path / "run", crash_at=10, logged=LoggedEpochs())  # checkpoint-8: epoch 1
    resumed = LoggedEpochs()
    run(data, tmp_path / "run", resume=True, logged=resumed)
    assert resumed.epochs == {step: full.epochs[step] for step in range(9, 15)}

    run(data, tmp_path / "mid", crash_at=6, logged=LoggedEpochs())  # checkpoint-4: mid-epoch 0
    resumed = LoggedEpochs()
    run(data, tmp_path / "mid", resume=True, logged=resumed)
    assert resumed.epochs == {step: full.epochs[step] for step in range(5, 15)}
    state = json.loads((tmp_path / "mid" / "checkpoint-12" / "trainer_state.json").read_text())
    assert state["epoch"] == full.epochs[12] == 1.5


def test_model_only_sees_model_inputs(tmp_path: Path) -> None:
    data = write_tokens(tmp_path / "tokens.jsonl", 12)
    loader = Loader(data, batch_size=4, world=World(), max_bad_fraction=None)
    trainer = ChuteTrainer(
        model=GPT2LMHeadModel(
            GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
        ),
        args=TrainingArguments(output_dir=str(tmp_path / "o"), report_to=[], use_cpu=True),
        train_loader=loader,
    )
    view = trainer.get_train_dataloader()
    assert len(view) == 3
    batch = next(iter(view))
    assert set(batch) == {"input_ids", "labels", "attention_mask"}


def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    from chute import ConfigError

    data = write_tokens(tmp_path / "tokens.jsonl", 12)
    trainer = ChuteTrainer(
        model=GPT2LMHeadModel(
            GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
        ),
        args=TrainingArguments(output_dir=str(tmp_path / "empty"), report_to=[], use_cpu=True),
        train_loader=Loader(data, batch_size=4, world=World()),
    )
    with pytest.raises(ConfigError, match="no checkpoint-\\* folder.*last_checkpoint\\(output_dir"):
        trainer.train(resume_from_checkpoint=True)


def test_last_checkpoint_is_none_until_one_is_saved(tmp_path: Path) -> None:
    from chute.integrations.hf_trainer import last_checkpoint

    out = tmp_path / "out"
    assert last_checkpoint(out) is None  # the folder is not made yet (get_last_checkpoint raises)
    out.mkdir()
    assert last_checkpoint(out) is None
    (out / "checkpoint-2").mkdir()
    (out / "checkpoint-10").mkdir()
    assert last_checkpoint(out) == str(out / "checkpoint-10")


def test_packed_batches_reach_the_model_as_one_row_and_train_each_sample_alone(
    tmp_path: Path,
) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from chute.integrations.hf_trainer import TrainerView

    data = write_tokens(tmp_path / "t.jsonl", 40)
    loader = Loader(data, batch_size=2, world=World(), seed=1, max_bad_fraction=None,
                    plan="packed", plan_options={"max_length": 16})  # fmt: skip
    full: list[dict] = []
    inputs = next(iter(TrainerView(loader, on_batch=full.append)))
    assert set(inputs) == {"input_ids", "labels", "position_ids", "use_cache"}
    assert inputs["input_ids"].shape == (1, 32) and inputs["use_cache"] is False
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32,
            attn_implementation="sdpa",
        )
    ).eval()
    with torch.no_grad():
        packed = model(**inputs).loss
        total, targets = 0.0, 0
        for i in full[0]["sample_ids"].tolist():
            ids = torch.tensor([[(i * 7 + k) % 50 for k in range(3 + i % 9)]])
            total += float(model(input_ids=ids, labels=ids).loss) * (ids.shape[1] - 1)
            targets += ids.shape[1] - 1
    assert abs(float(packed) - total / targets) < 1e-5
