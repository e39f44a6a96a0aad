"""Templates never read the clock: a Llama 3.2 rendering is the same on any day.

Llama 3.x's Jinja template writes ``strftime_now("%d %b %Y")`` into every system block; rendered
with the clock, the same data gives another cache tomorrow. chute's ``strftime_now`` formats a
fixed date (26 Jul 2024, the template's own fallback), and ``--template-var date_string=...``
(``Recipe(template_vars=...)``, config ``recipe.template_vars``) sets another, in the
fingerprint.
"""

from __future__ import annotations

import datetime as real_datetime
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from chute import Recipe
from chute.cache.config import RecipeConfig
from chute.cli import app
from chute.templates import jinja_env

pytestmark = pytest.mark.shared_data
JINJA = "tokenizers/llama3.2/meta-llama-Llama-3.2-3B-Instruct.jinja"

GOLDEN = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
    "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
)
RECORD = {
    "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
}


def _clock_at(day: real_datetime.datetime) -> type:
    class Clock(real_datetime.datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return day

    return Clock


def _llama(shared_data: Path, **options: object) -> Recipe:
    return Recipe(
        tokenizer=str(shared_data / "tokenizers/llama3.2"),
        template=str(shared_data / JINJA),
        **options,  # type: ignore[arg-type]
    )


def test_llama32_renders_the_same_on_two_dates(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts, ids = [], []
    for day in (real_datetime.datetime(2025, 1, 2), real_datetime.datetime(2031, 12, 30)):
        monkeypatch.setattr(jinja_env, "datetime", _clock_at(day))
        recipe = _llama(shared_data)
        texts.append(recipe.render(RECORD).text)
        ids.append(recipe(RECORD)["input_ids"].tolist())
    assert texts[0] == texts[1] == GOLDEN
    assert ids[0] == ids[1]


def test_a_date_is_a_template_variable_and_part_of_the_fingerprint(shared_data: Path) -> None:
    dated = _llama(shared_data, template_vars={"date_string": "01 Jan 2025"})
    assert "Today Date: 01 Jan 2025\n" in dated.render(RECORD).text
    plain = _llama(shared_data)
    assert dated.fingerprint()["template_vars"] == {"date_string": "01 Jan 2025"}
    assert dated.fingerprint() != plain.fingerprint()
    config = RecipeConfig(
        tokenizer=str(shared_data / "tokenizers/llama3.2"),
        template=str(shared_data / JINJA),
        template_vars={"date_string": "01 Jan 2025"},
    ).build()
    assert config.fingerprint() == dated.fingerprint()


def test_template_var_flag_on_the_command_line(shared_data: Path, tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_bytes(orjson.dumps(RECORD) + b"\n")
    base = ["inspect", str(data), "--tokenizer", str(shared_data / "tokenizers/llama3.2")]
    base += ["--template", str(shared_data / JINJA)]
    plain = orjson.loads(CliRunner().invoke(app, [*base, "--json"]).stdout)
    assert "Today Date: 26 Jul 2024" in plain["text"]
    result = CliRunner().invoke(app, [*base, "--template-var", "date_string=01 Jan 2025", "--json"])
    assert result.exit_code == 0, result.output
    assert "Today Date: 01 Jan 2025" in orjson.loads(result.stdout)["text"]
    wrong = CliRunner().invoke(app, [*base, "--template-var", "no value"])
    assert wrong.exit_code == 2 and "--template-var: expected KEY=VALUE" in wrong.output
