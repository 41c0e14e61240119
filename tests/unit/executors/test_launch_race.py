"""Two agents on one host (a leader and the one that just took over from it) launching the same attempt at once
through their own local executors over one workspace: one process runs, both see the same attempt."""

from __future__ import annotations

import threading
from pathlib import Path

from crossrail.control.executor import AttemptStatus
from crossrail.executors.local import LocalExecutor

from .helpers import RUN, ended, request


def test_two_executors_launching_one_attempt_at_once_start_one_process(state_dir: Path, tmp_path: Path) -> None:
    count = tmp_path / "count"
    req = request("import os; open(os.environ['COUNT'], 'a').write('ran\\n')", env={"COUNT": str(count)})
    executors = [LocalExecutor(state_dir) for _ in range(2)]
    seen: list[AttemptStatus] = []
    go = threading.Barrier(2)

    def launch(executor: LocalExecutor) -> None:
        go.wait()
        seen.append(executor.launch(req))

    threads = [threading.Thread(target=launch, args=(e,)) for e in executors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert {(s.run, s.attempt) for s in seen} == {(RUN, 1)}
    assert ended(executors[1]).exit_code == 0
    assert count.read_text() == "ran\n"
