"""A run's command on a local pool is not the workspace owner: under its team's uid, with an environment of its
own, it can neither act on the store (tokens, other runs) nor touch the store's file or another team's
checkpoints. Taking on another uid needs root: skipped elsewhere (CI runs as root)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from tests.conftest import drive as drive_agent
from tests.conftest import make_checkout, standalone_eval
from tests.security.sandboxing import open_directory, python_for_others
from tests.unit.executors.helpers import kill_everything

from crossrail.client import Client
from crossrail.control import access, isolation
from crossrail.control.agent.loop import AgentConfig
from crossrail.core.access import Actor

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="running a command under its team's uid takes root")

FAST = AgentConfig(poll_s=0.1, fallback_wait_s=0.0, stop_grace_s=2.0, heartbeat_s=1.0)

VICTIM = (
    "import os, time\n"
    "d = os.environ['CROSSRAIL_CHECKPOINT_DIR'].removeprefix('file://')\n"
    "os.makedirs(d, exist_ok=True)\n"
    "open(os.path.join(d, 'weights.bin'), 'w').write('team a weights')\n"
    "time.sleep(120)\n"
)

# Each try records what came of it: an exit status (the CLI) or the error's class (a file).
ATTACK = (
    "import json, os, subprocess, sys\n"
    "ws, weights = sys.argv[1], sys.argv[2]\n"
    "def cli(*args):\n"
    "    env = dict(os.environ, CROSSRAIL_HOME=ws)\n"
    "    done = subprocess.run([sys.executable, '-m', 'crossrail.cli', *args], env=env, capture_output=True)\n"
    "    return done.returncode\n"
    "def attempt(fn):\n"
    "    try:\n"
    "        fn()\n"
    "        return 'done'\n"
    "    except OSError as exc:\n"
    "        return type(exc).__name__\n"
    "def write_store():\n"
    "    with open(os.path.join(ws, 'state.db'), 'ab') as f:\n"
    "        f.write(b'x')\n"
    "def read_weights():\n"
    "    with open(weights, 'rb') as f:\n"
    "        f.read()\n"
    "out = {'uid': os.getuid(),\n"
    "       'secret_env': sorted(k for k in os.environ if k in ('CROSSRAIL_TOKEN', 'CROSSRAIL_HOME')),\n"
    "       'token': cli('token', 'create', '--team', 'teamb', '--role', 'admin'),\n"
    "       'cancel': cli('cancel', 'avictim-1'),\n"
    "       'state_db': attempt(write_store), 'checkpoint': attempt(read_weights)}\n"
    "print('RESULT ' + json.dumps(out), flush=True)\n"
)


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A workspace whose public parts the teams' uids can reach, with the agent's own token in its environment."""
    for name in ("CROSSRAIL_HOME", "CROSSRAIL_STORE_URL", "CROSSRAIL_SERVER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CROSSRAIL_TOKEN", "crt_agent_secret_the_commands_must_not_see")
    with open_directory("crossrail-security-") as root:
        make_checkout(root)
        Client.init(root)
        standalone_eval(root)
        try:
            yield root
        finally:  # nothing of the teams' outlives the test, whatever it asserted
            kill_everything(root / ".crossrail" / "attempts")


def submitter(client: Client, team: str) -> Actor:
    made = client.token_create(team=team, role="submitter")
    return access.authenticate(client.service.store, made["token"], origin="test", now=time.time())


def submit(client: Client, actor: Actor, name: str, code: str, *args: str) -> str:
    text = (client.workspace.experiments_dir / "eval-smoke.yaml").read_text()
    python, env = python_for_others()
    sets = [
        f"metadata.name={name}",
        f"metadata.team={actor.team}",
        f"spec.command=[{python}, -c, {json.dumps(code)}]",
        f"spec.args={json.dumps(list(args))}",
        *(f"spec.env.{k}={v}" for k, v in env.items()),
    ]
    as_team = client.transport.operations.as_actor(actor)  # the run is its token team's, as over the API
    return str(as_team.submit_text(text, source=f"{name}.yaml", sets=sets)["run"]["id"])


drive = partial(drive_agent, config=FAST)


@pytest.mark.slow
def test_a_submitters_command_can_neither_act_as_admin_nor_reach_the_store_or_another_teams_checkpoints(
    shared: Path,
) -> None:
    with Client(cwd=shared) as client:
        team_a, team_b = submitter(client, "teama"), submitter(client, "teamb")
        victim = submit(client, team_a, "avictim", VICTIM)
        weights = Path(client.service.store.get_run(victim).run_checkpoint_dir.removeprefix("file://")) / "weights.bin"
        drive(client, weights.exists)
        ws = client.workspace.root
        attacker = submit(client, team_b, "attacker", ATTACK, str(ws), str(weights))
        audit, tokens, db = client.audit()["entries"], client.tokens(), (ws / "state.db").stat()
        drive(client, lambda: client.service.store.get_run(attacker).state in ("succeeded", "failed"))

        assert client.service.store.get_run(attacker).state == "succeeded"
        log = client.logs(attacker)["attempts"][0]["log"]
        result = json.loads(next(line for line in log.splitlines() if line.startswith("RESULT "))[7:])
        assert result["uid"] == isolation.team_uid("teamb") != 0
        assert result["secret_env"] == []  # the agent's token and workspace never reach the command
        assert result["token"] != 0
        assert result["cancel"] != 0
        assert result["state_db"] == "PermissionError"
        assert result["checkpoint"] == "PermissionError"
        # Nothing was done: no token, no cancel, no audit row, the store's file as it was, the victim running.
        assert client.tokens() == tokens
        assert client.audit()["entries"] == audit
        assert client.service.store.get_run(victim).state == "running"
        assert (ws / "state.db").stat().st_size == db.st_size
        assert weights.read_text() == "team a weights"
        assert weights.stat().st_uid == isolation.team_uid("teama")
        client.cancel(victim)
        drive(client, lambda: not [s for s in client.executor.observe() if s.phase == "running"])
