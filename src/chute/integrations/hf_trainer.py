"""Train with the Hugging Face ``Trainer`` on a chute ``Loader``, resuming mid-epoch exactly.

The Trainer's own data path (a ``DataLoader`` over a ``Dataset``, and ``skip_first_batches``
on resume) gives up chute's guarantees: it re-reads and re-tokenizes every skipped batch on
resume, and its sampler knows nothing about bad samples or equal batch counts. With
``ChuteTrainer`` the Trainer iterates the chute ``Loader`` instead:

* ``get_train_dataloader()`` returns a view of the loader that passes only model inputs
  (``sample_ids`` and other bookkeeping stay behind) and reports the epoch's full length, so
  the Trainer's epoch and step arithmetic is the same before and after a resume;
* every checkpoint (``checkpoint-N/``) gets the loader's state (``chute_loader.rank{r}.json``);
* ``train(resume_from_checkpoint=...)`` restores it: the loader continues with exactly the
  batches an uninterrupted run would have seen. The Trainer still "skips" the batches its
  checkpoint says the epoch had trained (``ignore_data_skip`` stays off), but on the view that
  skip reads nothing: it only tells the Trainer where in the epoch it is, so its step counting
  (which batches make each optimizer step under gradient accumulation, where the epoch's short
  last step falls) and its RNG restore are those of an uninterrupted run;
* the Trainer's ``state.epoch`` (the ``epoch`` it logs and saves) is set from the loader's
  position after every step (``trainer_epoch``), which stays right after an elastic resume.

Example (needs ``pip install 'chute[hf]'``)::

    from chute import Loader, Recipe
    from chute.integrations.hf_trainer import ChuteTrainer

    loader = Loader("data/*.jsonl", Recipe(tokenizer="qwen3/tokenizer.json", template="qwen3"),
                    batch_size=8, num_workers=4)
    trainer = ChuteTrainer(model=model, args=training_args, train_loader=loader)
    trainer.train(resume_from_checkpoint=True)   # after a crash: continues mid-epoch

Use ``ChuteTrainerMixin`` to add the same behaviour to another Trainer subclass
(``class MyTrainer(ChuteTrainerMixin, SFTTrainer)``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

from chute.errors import ConfigError, MissingDependency

__all__ = [  # noqa: F822 - ChuteTrainer is built on first access (module __getattr__)
    "MODEL_INPUTS",
    "ChuteTrainer",
    "ChuteTrainerMixin",
    "TrainerView",
    "last_checkpoint",
    "loader_state_file",
    "trainer_epoch",
]

log = logging.getLogger("chute.hf_trainer")

# What a batch may carry that Hugging Face models accept as keyword arguments.
MODEL_INPUTS = (
    "input_ids",
    "labels",
    "attention_mask",
    "position_ids",
    "pixel_values",
    "image_grid_thw",
    "image_sizes",
    "batch_num_images",
    "pixel_values_videos",
    "video_grid_thw",
    "second_per_grid_ts",
    "mm_token_type_ids",
)


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise MissingDependency(
            "chute.integrations.hf_trainer needs transformers and accelerate: "
            "pip install 'chute[hf]'"
        ) from None
    return transformers


def last_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest ``checkpoint-N`` folder in ``output_dir``, or ``None`` (no folder, none saved).

    One line that starts a run and resumes it after a crash:
    ``trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))``
    (``transformers``' ``get_last_checkpoint`` raises where the folder does not exist yet).

    Example:
        >>> last_checkpoint("/nonexistent/out") is None
        True
    """
    if not os.path.isdir(output_dir):
        return None
    found = _require_transformers().trainer_utils.get_last_checkpoint(os.fspath(output_dir))
    return None if found is None else str(found)


def loader_state_file(checkpoint_dir: str | os.PathLike[str], rank: int) -> str:
    """Where a checkpoint keeps the loader state of ``rank``."""
    return os.path.join(os.fspath(checkpoint_dir), f"chute_loader.rank{rank}.json")


def trainer_epoch(loader: Any, per_epoch: int | None = None) -> float:
    """The Trainer's ``state.epoch`` at the loader's position: whole epochs plus this one's share.

    An uninterrupted ``transformers.Trainer`` sets ``epoch + (step + 1) / steps_in_epoch`` after
    each optimizer step, ``step`` counting the epoch's batches from 0 and ``steps_in_epoch`` the
    dataloader's length. Resumed with ``ignore_data_skip``, the Trainer counts the resumed
    epoch's batches from 0 again, so its figure restarts near the epoch's start (0.002 where
    the uninterrupted run logs 0.008). The loader knows how many batches of its epoch it
    yielded, before the resume too; this is the uninterrupted figure from it. After an elastic
    resume (another world size) the epoch's share is counted from the batches left on the new
    layout.

    Args:
        loader: a chute ``Loader``.
        per_epoch: ``loader.batches_per_epoch`` when the caller knows it (it plans an epoch).

    Example:
        >>> from chute import Loader, World
        >>> loader = Loader([{"input_ids": [i]} for i in range(10)], batch_size=2, world=World())
        >>> it = iter(loader)
        >>> _ = next(it), next(it)
        >>> trainer_epoch(loader)
        0.4
    """
    total = loader.batches_per_epoch if per_epoch is None else per_epoch
    done = max(0, total - loader.batches_left)
    # the cursor's epoch: after a state saved at an epoch's end, loader.epoch names the next
    epoch = loader.position[0] if hasattr(loader, "position") else loader.epoch
    return epoch + done / total if total else float(epoch)


def _epoch_callback(loader: Any) -> Any:
    """A ``TrainerCallback`` setting ``state.epoch`` from ``loader`` at the end of every step."""
    transformers = _require_transformers()

    class LoaderEpoch(transformers.TrainerCallback):  # type: ignore[misc, name-defined]
        per_epoch: tuple[int, int] = (-1, 0)  # (epoch, its batches): planned once an epoch

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.per_epoch[0] != loader.epoch:
                self.per_epoch = (loader.epoch, loader.batches_per_epoch)
            state.epoch = trainer_epoch(loader, self.per_epoch[1])

    return LoaderEpoch()


def packed_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """Packed rows as transformers recognises them: one flattened row, no KV cache.

    transformers finds packed sequences from ``position_ids`` only in a batch of one row
    (flash-attention-2) and only without a KV cache (all implementations), and a model makes a
    cache whenever ``use_cache`` is on, even in training; otherwise the samples of a row would
    attend to each other. See ``chute.collate.packed.hf_packed_inputs`` and docs/padding.md.
    """
    from chute.collate.packed import flatten_packed

    # Qwen-VL's (4, rows, width) position_ids become (4, 1, rows * width), as the model takes them
    return flatten_packed(inputs)


class TrainerView:
    """What the Trainer iterates: the loader's batches reduced to model inputs.

    Args:
        loader: a chute ``Loader``.
        model_inputs: batch keys passed to the model (default ``MODEL_INPUTS``); the rest
            (``sample_ids``, packing bookkeeping) is dropped after ``on_batch`` sees it.
        on_batch: optional callback receiving each full batch first (to audit ``sample_ids``).
    """

    def __init__(
        self, loader: Any, model_inputs: Iterable[str] = MODEL_INPUTS, on_batch: Any = None
    ):
        self.loader = loader
        self.model_inputs = frozenset(model_inputs)
        self.on_batch = on_batch

    def __len__(self) -> int:
        # The full epoch, also mid-epoch after a resume: the Trainer derives its epoch count and
        # the epoch it resumes in from this number and the global step.
        return self.loader.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def resumed(self, skipped: int) -> TrainerView:
        """This view, where the Trainer skips ``skipped`` batches of its resumed epoch.

        The restored loader state has already left them behind, so nothing is read; the
        Trainer's skip only sets its step count. A loader elsewhere in its epoch (an elastic
        resume onto another world size, a loader state from another checkpoint) is warned
        about: the Trainer's optimizer steps then no longer fall where the loader's epoch has
        them.
        """
        done = self.loader.batches_per_epoch - self.loader.batches_left
        if done != skipped:
            log.warning(
                "chute: the Trainer resumes %d batches into its epoch, the loader %d (of %d); "
                "the Trainer's optimizer steps are counted from its own position",
                skipped,
                done,
                self.loader.batches_per_epoch,
            )
        return self

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch in self.loader:
            if self.on_batch is not None:
                self.on_batch(batch)
            inputs = {k: v for k, v in batch.items() if k in self.model_inputs}
            if "cu_seqlens" in batch:  # packed rows: keep the samples of a row apart
                inputs = packed_inputs(inputs)
            yield inputs


class ChuteTrainerMixin:
    """Makes a ``transformers.Trainer`` subclass read from a chute ``Loader``.

    Args:
        train_loader: the chute ``Loader`` of this rank.
        model_inputs: batch keys passed to the model (default ``MODEL_INPUTS``).
        on_batch: optional callback receiving each full batch (with ``sample_ids``).
        *args, **kwargs: the Trainer's own arguments (``train_dataset`` must not be given).
    """

    def __init__(
        self,
        *args: Any,
        train_loader: Any,
        model_inputs: Iterable[str] = MODEL_INPUTS,
        on_batch: Any = None,
        **kwargs: Any,
    ):
        _require_transformers()
        if kwargs.get("train_dataset") is not None:
            raise ConfigError(
                "ChuteTrainer reads from train_loader; do not also pass train_dataset"
            )
        super().__init__(*args, **kwargs)
        self.chute_loader = train_loader
        self._chute_view = TrainerView(train_loader, model_inputs, on_batch)
        # first, so every other callback's on_step_end (and the log after it) sees this epoch
        self.callback_handler.callbacks.insert(0, _epoch_callback(train_loader))  # type: ignore[attr-defined]
        # The loader state resumes the data. The Trainer's skip of the trained batches is kept
        # (it sets the Trainer's step count and restores its RNG) and made to read nothing;
        # where that cannot be arranged, the Trainer must not skip at all (it would skip twice).
        self.args.ignore_data_skip = not _count_skips_on_views()  # type: ignore[attr-defined]

    def get_train_dataloader(self) -> TrainerView:
        return self._chute_view

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        transformers = _require_transformers()
        run_dir = self._get_output_dir(trial=trial)  # type: ignore[attr-defined]
        step = self.state.global_step  # type: ignore[attr-defined]
        folder = os.path.join(run_dir, f"{transformers.trainer_utils.PREFIX_CHECKPOINT_DIR}-{step}")
        os.makedirs(folder, exist_ok=True)
        path = loader_state_file(folder, self.chute_loader.world.rank)
        with open(path, "w") as f:
            json.dump(self.chute_loader.state_dict(), f)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        if resume_from_checkpoint:
            folder = self._resolve_checkpoint(resume_from_checkpoint)
            self._restore_loader(folder)
            resume_from_checkpoint = folder
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)  # type: ignore[misc]

    def _resolve_checkpoint(self, resume: str | bool) -> str:
        if isinstance(resume, str):
            return resume
        transformers = _require_transformers()
        folder = transformers.trainer_utils.get_last_checkpoint(self.args.output_dir)  # type: ignore[attr-defined]
        if folder is None:
            raise ConfigError(
                f"resume_from_checkpoint=True but no checkpoint-* folder is in "
                f"{self.args.output_dir!r}"  # type: ignore[attr-defined]
                f": a first run starts with None; resume_from_checkpoint=last_checkpoint("
                f"output_dir) (chute.integrations.hf_trainer) is None until one is saved, so "
                f"one line starts the run and resumes it"
            )
        return folder

    def _restore_loader(self, folder: str) -> None:
        rank = self.chute_loader.world.rank
        path = loader_state_file(folder, rank)
        if not os.path.exists(path):
            # Elastic resume onto more ranks: any rank's state resumes every rank.
            path = loader_state_file(folder, 0)
        if not os.path.exists(path):
            raise ConfigError(
                f"{folder} has no chute loader state ({os.path.basename(path)}); was it written "
                f"by ChuteTrainer? Resume without it with a fresh Trainer and ignore_data_skip=False"
            )
        with open(path) as f:
            self.chute_loader.load_state_dict(json.load(f))
        log.info("chute: loader resumed from %s (epoch %d)", path, self.chute_loader.epoch)


def _count_skips_on_views() -> bool:
    """Make the Trainer's ``skip_first_batches`` count, not read, on a ``TrainerView``.

    ``transformers.Trainer`` resumes mid-epoch by wrapping its dataloader in
    ``skip_first_batches(dataloader, k)`` and counting its steps from ``k``; on a view the
    wrapper returns the view itself (``TrainerView.resumed``). Every other dataloader gets the
    Trainer's own function. Returns ``False`` where this Trainer has no such function to wrap.
    """
    import transformers.trainer as trainer_module

    original = getattr(trainer_module, "skip_first_batches", None)
    if original is None:
        return False
    if getattr(original, "counts_views", False):
        return True

    def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
        if isinstance(dataloader, TrainerView):
            return dataloader.resumed(num_batches)
        return original(dataloader, num_batches)

    skip_first_batches.counts_views = True  # type: ignore[attr-defined]
    # set by name: transformers.trainer does not export it (mypy would refuse the attribute)
    setattr(trainer_module, "skip_first_batches", skip_first_batches)  # noqa: B010
    return True


def _make_trainer_class() -> type:
    transformers = _require_transformers()

    class ChuteTrainer(ChuteTrainerMixin, transformers.Trainer):  # type: ignore[misc, name-defined]
        """``transformers.Trainer`` reading from a chute ``Loader`` (see the module docstring)."""

    return ChuteTrainer


def __getattr__(name: str) -> Any:
    # ChuteTrainer subclasses transformers.Trainer, so build it on first use: importing this
    # module must not require transformers.
    if name == "ChuteTrainer":
        cls = _make_trainer_class()
        globals()["ChuteTrainer"] = cls
        return cls
    raise AttributeError(name)
