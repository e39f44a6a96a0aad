"""The CLI in-process: chute index and chute validate, text and --json."""

from __future__ import annotations

from pathlib import Path

import orjson
from typer.testing import CliRunner

from chute.cli import app

runner = CliRunner()


def write(path: Path) -> Path:
    path.write_bytes(b'{"id": 0}\n\n{"id": 1}\n{broken\n[1, 2]\n{"id": 4}')
    return path


def test_index_json_contract(tmp_path: Path) -> None:
    p = write(tmp_path / "d.jsonl")
    result = runner.invoke(app, ["index", str(p), "--json"])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    assert out["records"] == 5 and out["blank_lines"] == 1
    assert out["bytes"] == p.stat().st_size
    assert out["seconds"] >= 0 and out["files"][0]["built"] is True
    again = orjson.loads(runner.invoke(app, ["index", str(p), "--json"]).stdout)
    assert again["files"][0]["built"] is False


def test_index_text_output(tmp_path: Path) -> None:
    p = write(tmp_path / "d.jsonl")
    result = runner.invoke(app, ["index", str(p), "--quiet", "--rebuild"])
    assert result.exit_code == 0
    assert "5 records, 1 blank lines" in result.stdout and "GB/s" in result.stdout


def test_validate_json_contract_and_rejects_file(tmp_path: Path) -> None:
    p = write(tmp_path / "d.jsonl")
    rejects = tmp_path / "r.jsonl"
    result = runner.invoke(app, ["validate", str(p), "--json", "--rejects", str(rejects)])
    assert result.exit_code == 1, result.output  # 40% rejected: above the Loader's 25% budget
    out = orjson.loads(result.stdout)
    assert (out["records"], out["valid"], out["rejected"]) == (5, 3, 2)
    assert out["over_budget"] is True and out["max_bad_fraction"] == 0.25
    assert (out["target"], out["ok"]) == ("files", False)  # ok says what the exit status says
    assert out["by_reason"] == {"bad_json": 1, "not_an_object": 1}
    assert [orjson.loads(x)["line"] for x in rejects.read_bytes().splitlines()] == [4, 5]


def test_validate_text_shows_reasons_with_locations_and_strict_fails(tmp_path: Path) -> None:
    p = write(tmp_path / "d.jsonl")
    result = runner.invoke(app, ["validate", str(p), "--quiet", "--max-bad-fraction", "0.5"])
    assert result.exit_code == 0
    assert f"{p}:4: bad_json" in result.stdout and "not_an_object" in result.stdout
    strict = ["validate", str(p), "--strict", "--quiet", "--max-bad-fraction", "0.5"]
    assert runner.invoke(app, strict).exit_code == 1


def test_validate_says_so_when_no_record_was_rejected(tmp_path: Path) -> None:
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b'{"id": 0}\n{"id": 1}\n')
    rejects = tmp_path / "r.jsonl"
    result = runner.invoke(app, ["validate", str(clean), "--quiet", "--rejects", str(rejects)])
    assert result.exit_code == 0, result.output
    assert f"no record was rejected ({rejects} is empty)" in result.stdout
    assert "rejected records written to" not in result.stdout
    assert rejects.read_bytes() == b""
    ok = runner.invoke(app, ["validate", str(clean), "--json"])
    assert ok.exit_code == 0 and orjson.loads(ok.stdout)["ok"] is True
    p = write(tmp_path / "d.jsonl")
    args = ["validate", str(p), "--quiet", "--max-bad-fraction", "0.5", "--rejects", str(rejects)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"rejected records written to {rejects}" in result.stdout


def test_missing_file_is_one_clear_line_not_a_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2
    assert "error:" in result.output and "no such file" in result.output
    assert "Traceback" not in result.output


def test_an_error_with_json_is_one_json_object_on_stdout(tmp_path: Path) -> None:
    """``--json`` promised one JSON object; a failed command printed nothing on stdout."""
    missing = tmp_path / "none.jsonl"
    for args in (["validate", str(missing), "--json"], ["index", str(missing), "--json"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2
        got = orjson.loads(result.stdout)
        assert got["error"]["exit_code"] == 2 and "no such file" in got["error"]["message"]
    result = runner.invoke(app, ["validate", str(missing)])  # without --json: stderr only
    assert result.exit_code == 2 and result.stdout == ""


def test_a_misspelt_option_with_json_is_a_json_error_on_stdout(tmp_path: Path) -> None:
    p = write(tmp_path / "d.jsonl")
    result = runner.invoke(app, ["validate", str(p), "--tempalte", "qwen3", "--json"])
    assert result.exit_code == 2
    error = orjson.loads(result.stdout)["error"]
    assert "No such option: --tempalte" in error["message"] and error["exit_code"] == 2
    plain = runner.invoke(app, ["validate", str(p), "--tempalte", "qwen3"])
    assert plain.exit_code == 2 and plain.stdout == ""  # without --json: stderr only


def test_workers_below_one_are_refused(tmp_path: Path) -> None:
    p = write(tmp_path / "d.jsonl")
    for n in ("0", "-1"):
        result = runner.invoke(app, ["validate", str(p), "--workers", n])
        assert result.exit_code == 2 and "--workers" in result.output


def test_files_unreadable_as_utf8_lines_say_why(tmp_path: Path) -> None:
    lines = [b'{"id": %d}' % i for i in range(5)]
    cases = {
        "utf16.jsonl": (b"\n".join(lines) + b"\n").decode().encode("utf-16"),
        "mac.jsonl": b"\r".join(lines) + b"\r",
        "empty.json": b"[]",
    }
    expected = {
        "utf16.jsonl": "looks UTF-16 encoded",
        "mac.jsonl": "lines end with a lone CR",
        "empty.json": "holds no records (an empty JSON array)",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        result = runner.invoke(app, ["validate", str(tmp_path / name)])
        assert result.exit_code == 2 and expected[name] in result.output, result.output
    # a JSON array with lone-CR line ends reads fine: its records do not depend on lines
    array = tmp_path / "array.json"
    array.write_bytes(b"[\r" + b",\r".join(lines) + b"\r]")
    assert runner.invoke(app, ["validate", str(array), "-q"]).exit_code == 0
    one = tmp_path / "one.jsonl"  # one record ended by a CR: a record, not classic Mac lines
    one.write_bytes(lines[0] + b"\r")
    assert runner.invoke(app, ["validate", str(one), "-q"]).exit_code == 0
