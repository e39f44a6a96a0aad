"""``chute migrate llamafactory|xtuner``: a mixture YAML from another tool's data config.

``chute migrate llamafactory train.yaml`` reads the training YAML's data arguments (``dataset``,
``dataset_dir``, ``mix_strategy``, ``interleave_probs``, ``max_samples``, ``val_size``, ...) and
its ``dataset_info.json``; ``chute migrate xtuner config.py`` reads an XTuner ``ConcatDataset``.
Both print the mixture (or write it with ``-o``), ready for ``chute preprocess``, ``chute
stats`` and ``Loader("mixture.yaml")``. What maps to what: docs/mixtures.md.
"""

from __future__ import annotations

from pathlib import Path

import typer

from chute.cli._output import guarded

migrate_app = typer.Typer(
    help="Write a mixture YAML from a LLaMA-Factory or XTuner data config.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(migrate_app, name="migrate")


def _write(text: str, out: Path | None) -> None:
    if out is None:
        typer.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    typer.echo(f"mixture written to {out}", err=True)


@migrate_app.command("llamafactory")
@guarded
def llamafactory(
    config: Path = typer.Argument(..., help="LLaMA-Factory training YAML (its data arguments)."),
    dataset_dir: Path | None = typer.Option(
        None, "--dataset-dir", help="The data folder (default: the YAML's dataset_dir, or data)."
    ),
    dataset_info: Path | None = typer.Option(
        None, "--dataset-info", help="dataset_info.json (default: in the data folder)."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the mixture YAML here."),
) -> None:
    """A mixture of the run's datasets: formats, columns, tags, amounts, val hold-outs."""
    from chute.mixture.migrate import from_llamafactory

    mixture = from_llamafactory(config, dataset_dir=dataset_dir, dataset_info=dataset_info)
    _write(mixture.to_yaml(), out)


@migrate_app.command("xtuner")
@guarded
def xtuner(
    config: Path = typer.Argument(..., help="XTuner config .py (its train_dataset)."),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="The run-wide tokenizer (XTuner's is a Hub model object)."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the mixture YAML here."),
) -> None:
    """A mixture of an XTuner ConcatDataset's datasets (each once per epoch)."""
    from chute.mixture.migrate import from_xtuner

    mixture = from_xtuner(config, recipe={"tokenizer": tokenizer} if tokenizer else None)
    _write(mixture.to_yaml(), out)
