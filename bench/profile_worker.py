"""One `payments worker --once` under pyinstrument: where reconciling a backlog spends its time.

Runs the worker's own entry point (`worker.main.run_worker`, once) in this process under a
statistical profiler of the main thread (every 1 ms, whole stacks, idle included) and writes
the same report as `bench/profile_api.py` to `--output`: `profile.txt`, `profile-flat.txt`
and `by_library.json`.

    python -m bench.profile_worker --output DIR     (same environment as the worker)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pyinstrument import Profiler

from app.settings import Settings
from bench.profile_api import write_profile
from worker.main import run_worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_worker", description=__doc__)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    profiler = Profiler(interval=0.001, async_mode="disabled")
    profiler.start()
    try:
        code = run_worker(settings, once=True)
    finally:
        profiler.stop()
    summary = write_profile(profiler, args.output)
    print(json.dumps(summary))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
