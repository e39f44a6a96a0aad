"""The docs' examples run as written: docs/quickstart.md end to end, in a temporary directory.

Blocks run in document order, sharing one namespace, as in ``test_readme.py``:

* ```` ```python ```` blocks are executed;
* ```` ```yaml ```` blocks whose first line is ``# NAME`` are written to the file ``NAME``;
* ```` ```console ```` blocks hold ``$ chute ...`` commands, each followed by its output. Every
  command runs in-process; every output line shown must appear in the real output (timings and
  rates are normalised, ``...`` stands for lines left out). A shown ``error:`` means a failing
  exit status, anything else a zero one.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chute.cli import app
from conftest import REPO

BLOCK = re.compile(r"```(python|yaml|console)\n(.*?)```", flags=re.S)
# "0.91 s", "2,439 records/s", "0.128 GB/s": they change from run to run
TIMING = re.compile(r"[\d,]*\.?\d+ (s|records/s|rec/s|GB/s)\b")


def normalise(line: str) -> str:
    return TIMING.sub(r"N \1", line.rstrip())


def console_commands(block: str) -> list[tuple[str, list[str]]]:
    """``[(command, shown output lines)]`` of a console block."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
    return commands


def check_command(command: str, shown: list[str]) -> None:
    args = shlex.split(command)
    assert args[0] == "chute", f"only chute commands run here: {command}"
    result = CliRunner().invoke(app, args[1:])
    output = result.stdout + "\n" + result.stderr  # separately: progress bars stay on stderr
    failing = any(line.startswith("error:") for line in shown)
    assert (result.exit_code != 0) == failing, f"$ {command}\n{output}"
    real = {normalise(line) for line in output.splitlines()}
    for line in shown:
        if "..." in line and line.strip() == "...":
            continue
        if "..." in line:  # a line with a part left out: its pieces, in order
            pattern = ".*".join(re.escape(normalise(p)) for p in line.split("..."))
            assert any(re.fullmatch(pattern, r) for r in real), f"$ {command}\nnot shown: {line}"
            continue
        assert normalise(line) in real, f"$ {command}\nexpected line: {line!r}\ngot:\n{output}"


def run_markdown(path: Path) -> None:
    namespace: dict = {}
    for kind, body in BLOCK.findall(path.read_text()):
        if kind == "python":
            exec(compile(body, str(path), "exec"), namespace)
        elif kind == "yaml":
            first = body.splitlines()[0]
            if first.startswith("# "):
                Path(first[2:].strip()).write_text(body)
        else:
            for command, shown in console_commands(body):
                check_command(command, shown)


@pytest.mark.timeout(600)
def test_quickstart_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_markdown(REPO / "docs" / "quickstart.md")
    assert (tmp_path / "ckpt" / "loader.json").is_file()  # train.py checkpointed the loader


def test_console_parsing() -> None:
    block = "$ chute a\nout 1\n...\n$ chute b --x\n"
    assert console_commands(block) == [("chute a", ["out 1", "..."]), ("chute b --x", [])]
    assert normalise("in 0.91 s, 2,439 records/s") == "in N s, N records/s"
