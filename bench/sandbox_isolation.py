"""The cost of a code sandbox's walls: a sandbox's start and a trivial program's run, isolated
(bubblewrap namespaces and cgroup limits, as the reference platform's codebox service starts
them) against the same init program as a plain subprocess (the no-isolation defect), side by
side in one run.

- start: from spawning the sandbox to its init program's ready line (the simulated boot delay of
  the platform, `codebox_boot_s`, is not part of it);
- run: one request to the init program, `python3 -c pass` in the workspace, to its answer.

Rounds alternate isolated and plain; P50 and P95 of each, and the ratios isolated / plain. Needs
bubblewrap, and root for the cgroups (without root the walls are namespaces only, said so).

Run: python bench/sandbox_isolation.py [--starts 20] [--runs 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from drillbook.measure import percentile
from drillbook.sandbox import isolation


async def start(folder: Path, init: Path, isolated: bool, groups: isolation.Cgroups | None, number: int
                ) -> tuple[float, asyncio.subprocess.Process, isolation.CgroupSet]:
    workspace = folder / f"ws-{number}"
    workspace.mkdir()
    as_root = os.geteuid() == 0
    made = isolation.CgroupSet()
    if isolated:
        if as_root:
            os.chown(workspace, isolation.NOBODY, isolation.NOBODY)
        if groups is not None and groups.enforced:
            made = groups.create(f"bench-{number}", isolation.Limits(256 << 20, 64, 0.5))
        argv, setup = isolation.sandbox_argv(workspace, init), isolation.preexec(made, as_root)
    else:
        argv, setup = isolation.plain_argv(init), isolation.preexec(made, False)
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.DEVNULL, cwd=str(workspace),
                                                   preexec_fn=setup, start_new_session=True)
    assert process.stdout is not None
    line = await process.stdout.readline()
    assert json.loads(line)["ready"], line
    return time.perf_counter() - began, process, made


async def run_once(process: asyncio.subprocess.Process) -> float:
    assert process.stdin is not None and process.stdout is not None
    began = time.perf_counter()
    process.stdin.write(b'{"code": "pass"}\n')
    await process.stdin.drain()
    answer = json.loads(await process.stdout.readline())
    assert answer["exit_code"] == 0, answer
    return time.perf_counter() - began


async def stop(process: asyncio.subprocess.Process, made: isolation.CgroupSet) -> None:
    process.kill()
    await process.wait()
    made.remove()


async def main(starts: int, runs: int) -> None:
    if isolation.bwrap_path() is None:
        raise SystemExit("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    folder = isolation.live_folder(Path(tempfile.mkdtemp()) / "record")
    groups = isolation.Cgroups(f"drillbook-bench-{os.getpid()}")
    print(f"walls: namespaces (bubblewrap), cgroup limits {'on' if groups.enforced else 'off: ' + groups.why}")
    times: dict[str, dict[str, list[float]]] = {kind: {"start": [], "run": []} for kind in ("isolated", "plain")}
    try:
        for number in range(starts):
            for kind in ("isolated", "plain") if number % 2 == 0 else ("plain", "isolated"):
                seconds, process, made = await start(folder, folder / "init.py", kind == "isolated", groups,
                                                     number * 2 + (kind == "plain"))
                times[kind]["start"].append(seconds)
                if number == 0:
                    for _ in range(runs):
                        times[kind]["run"].append(await run_once(process))
                await stop(process, made)
    finally:
        groups.close()
        shutil.rmtree(folder, ignore_errors=True)

    def ms(values: list[float], quantile: float) -> float:
        return percentile(values, quantile) * 1000

    print(f"{'':24}{'isolated P50':>14}{'P95':>9}{'plain P50':>12}{'P95':>9}{'ratio P50':>11}")
    for what, label in (("start", f"sandbox start ({starts})"), ("run", f"trivial run ({runs})")):
        iso, plain = times["isolated"][what], times["plain"][what]
        print(f"{label:24}{ms(iso, .5):>12.1f}ms{ms(iso, .95):>7.1f}ms{ms(plain, .5):>10.1f}ms{ms(plain, .95):>7.1f}ms"
              f"{percentile(iso, .5) / percentile(plain, .5):>10.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--runs", type=int, default=50)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.starts, arguments.runs))
