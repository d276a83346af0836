"""The repository keeps its promises: the README's commands are the ones CI runs, notebooks and
layout match DESIGN.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", quick_start, re.S)]


def test_quick_start_is_two_commands():
    commands = readme_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands)


def test_ci_runs_exactly_the_readme_commands_in_a_new_virtual_environment():
    script = (ROOT / ".ci" / "run").read_text()
    ci_lines = [line.strip() for line in script.splitlines()]
    main_command, test_command = readme_commands()
    assert main_command in ci_lines and test_command in ci_lines
    assert script.count("python3 -m venv ") == 1 and "--system-site-packages" not in script
    assert script.index(main_command) < script.index(test_command)


def test_every_top_level_folder_explains_itself():
    for folder in ("runbooks", "runbooks/oncall", "experiments", "loadtests", "gamedays", "targets", "deploy",
                   "results", "bench", "tests"):
        readme = ROOT / folder / "README.md"
        assert readme.exists() and len(readme.read_text().split()) > 15, folder


def test_results_content_is_ignored():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/results/*" in ignored and "!/results/README.md" in ignored
