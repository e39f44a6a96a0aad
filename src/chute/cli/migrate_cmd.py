"""``chute migrate llamafactory|xtuner``: a mixture YAML from another tool's data config.

``chute migrate llamafactory train.yaml`` reads the training YAML's data arguments (``dataset``,
``dataset_dir``, ``mix_strategy``, ``interleave_probs``, ``max_samples``, ``val_size``, ...) and
its ``dataset_info.json``; ``chute migrate xtuner config.py`` reads an XTuner ``ConcatDataset``.
Both print the mixture (or write it with ``-o``), ready for ``chute preprocess``, ``chute
stats`` and ``Loader("mixture.yaml")``. What maps to what: docs/mixtures.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from chute._internal.spelling import spelling
from chute.cli._options import FLAGS
from chute.cli._output import emit_json, guarded

migrate_app = typer.Typer(
    help="Write a mixture YAML from a LLaMA-Factory or XTuner data config.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(migrate_app, name="migrate")


# How errors name migrate's own options on the command line.
_MIGRATE_FLAGS = FLAGS.with_names(
    {"dataset_dir": "--dataset-dir", "dataset_info": "--dataset-info", "tokenizer": "--tokenizer"}
)


def _write(migration: Any, out: Path | None, as_json: bool = False) -> None:
    """Each note as a warning on stderr, then the YAML (its notes as comments atop it).

    With ``--json``: one object with the YAML, the notes and where it was written.
    """
    text = migration.to_yaml()
    if out is not None:
        out.write_text(text, encoding="utf-8")
    if as_json:
        notes = [
            {"key": n.key, "value": n.value, "kind": n.kind, "text": n.text}
            for n in migration.notes
        ]
        written = str(out) if out is not None else None
        emit_json({"source": migration.source, "yaml": text, "notes": notes, "out": written})
        return
    for note in migration.notes:
        typer.secho(f"warning: {note.line()}", err=True, fg=typer.colors.YELLOW)
    if out is None:
        typer.echo(text, nl=False)
        return
    typer.echo(f"mixture written to {out}", err=True)


_JSON = typer.Option(False, "--json", help="Print one JSON object: the YAML and its notes.")


@migrate_app.command("llamafactory")
@guarded
def llamafactory(
    config: Path = typer.Argument(..., help="LLaMA-Factory training YAML (its data arguments)."),
    dataset_dir: Path | None = typer.Option(
        None,
        "--dataset-dir",
        help="LLaMA-Factory's data folder, holding dataset_info.json (default: the YAML's "
        "dataset_dir, else data, from the current directory).",
    ),
    dataset_info: Path | None = typer.Option(
        None, "--dataset-info", help="dataset_info.json (default: in the data folder)."
    ),
    tokenizer: str | None = typer.Option(
        None,
        "--tokenizer",
        help="The run-wide tokenizer: a local folder or tokenizer.json (default: the YAML's "
        "model_name_or_path, kept with a warning where it is a Hub id chute cannot load).",
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the mixture YAML here."),
    as_json: bool = _JSON,
) -> None:
    """A mixture of the run's datasets: formats, columns, tags, amounts, val hold-outs.

    Every key it drops or approximates (a Hub tokenizer id, a template chute renders a little
    differently, packing, ...) is a warning on stderr and a comment atop the YAML.
    """
    from chute.mixture.migrate import migrate_llamafactory

    with spelling(_MIGRATE_FLAGS):
        migration = migrate_llamafactory(
            config, dataset_dir=dataset_dir, dataset_info=dataset_info, tokenizer=tokenizer
        )
    _write(migration, out, as_json)


@migrate_app.command("xtuner")
@guarded
def xtuner(
    config: Path = typer.Argument(..., help="XTuner config .py (its train_dataset)."),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="The run-wide tokenizer (XTuner's is a Hub model object)."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the mixture YAML here."),
    as_json: bool = _JSON,
) -> None:
    """A mixture of an XTuner ConcatDataset's datasets (each once per epoch)."""
    from chute.mixture.migrate import migrate_xtuner

    with spelling(_MIGRATE_FLAGS):
        migration = migrate_xtuner(config, recipe={"tokenizer": tokenizer} if tokenizer else None)
    _write(migration, out, as_json)
