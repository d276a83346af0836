"""Bad input on the command line is one line and exit 2, before anything is touched (issue 32's
rough edges): a parameter given twice, a report period that ends before it starts, a list limit
below one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("args, said", [
    (["run", "cold-start", "-p", "trials=2", "-p", "trials=3", "--dry-run"],
     "-p trials is given twice ('2' and '3'): give it once"),
    (["report", "{results}", "--since", "2027-01-01", "--until", "2026-01-01"],
     "--since 2027-01-01 is after --until 2026-01-01: the period would hold nothing"),
    (["list", "{results}", "--limit", "-1"], "'--limit'"),
    (["keys", "new", "{file}/key.pem"], "key path {file}/key.pem cannot be written: {file} is a file"),
])
def test_bad_command_line_input_is_one_line_and_exit_2(args, said, tmp_path):
    results, a_file = tmp_path / "results", tmp_path / "a-file"
    a_file.write_text("")

    def filled(text: str) -> str:
        return text.replace("{results}", str(results)).replace("{file}", str(a_file))

    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "drillbook", *map(filled, args)], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and filled(said) in lines[0], done.stderr
    assert not results.exists() and not (tmp_path / "state").exists() and not (tmp_path / "report.html").exists()


def test_the_same_value_given_twice_is_not_a_conflict(tmp_path):
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "drillbook", "run", "cold-start", "-p", "trials=2", "-p", "trials=2",
                           "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "3 time(s)" not in done.stdout and "2 time(s)" in done.stdout, done.stderr


def test_help_names_the_environment_variables_an_option_falls_back_to():
    shown = subprocess.run([sys.executable, "-m", "drillbook", "run", "--help"], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0 and "(env DRILLBOOK_STATE_DIR)" in shown.stdout, shown.stdout
