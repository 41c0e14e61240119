"""Who a local attempt runs as (crossrail.control.isolation), and who the local CLI's admin is."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from tests.security.sandboxing import open_directory, python_for_others

from crossrail.client import Client
from crossrail.control import isolation
from crossrail.errors import UsageError
from crossrail.spec import Fleet
from crossrail.spec.loader import parse_document
from crossrail.spec.validate import parse_fleet

NOBODY = 65534

FLEET = """
apiVersion: crossrail/v1
kind: Fleet
metadata: {name: f}
spec:
  pools:
    - {name: cpu, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, backend: local}
    - {name: safe, accelerator: gpu, chip_type: h100, chips: 8, chips_per_host: 8, backend: local, trusted: true}
  queues:
    - {name: q, stage: eval, teams: [teama, teamb], quota: {cpu: 8, safe: 8}}
"""


def fleet(extra: str = "") -> Fleet:
    return parse_fleet(parse_document(FLEET + textwrap.indent(extra, "  "), "fleet.yaml"))


def test_each_team_gets_its_own_stable_uid_and_the_groups_of_the_teams_that_share_with_it() -> None:
    shared = fleet("sharing: [{from: teama, to: [teamb]}]\n")
    a, b = isolation.run_as(shared, "teama"), isolation.run_as(shared, "teamb")
    assert a.uid == a.gid == isolation.team_uid("teama")
    assert b.uid == b.gid == isolation.team_uid("teamb") != a.uid
    assert min(a.uid, b.uid) >= isolation.UID_BASE
    assert max(a.uid, b.uid) < isolation.UID_BASE + isolation.UID_SPAN
    assert b.groups == (a.gid,)  # team b may read team a's checkpoints, as their group
    assert a.groups == ()  # and not the other way round
    assert isolation.run_as(shared, None).uid not in (a.uid, b.uid)  # runs of no team are no team's


def test_two_teams_pinned_to_one_uid_are_refused_and_a_pin_moves_a_team() -> None:
    pinned = fleet("isolation: {run_as: per-team, uids: {teama: 300000123}}\n")
    assert isolation.run_as(pinned, "teama").uid == 300000123
    clash = fleet("isolation: {uids: {teama: 300000123, teamb: 300000123}}\n")
    with pytest.raises(UsageError, match="would share uid 300000123"):
        isolation.run_as(clash, "teamb")


def test_run_as_a_named_user_and_a_user_this_machine_lacks() -> None:
    assert isolation.run_as(fleet("isolation: {run_as: nobody}\n"), "teama").uid == NOBODY
    with pytest.raises(UsageError, match="no user of this machine"):
        isolation.run_as(fleet("isolation: {run_as: no-such-user-here}\n"), "teama")


def test_isolation_is_off_in_a_one_person_workspace_and_on_once_it_has_a_token(checkout: Path) -> None:
    with Client(cwd=checkout) as client:
        store = client.service.store
        assert not isolation.isolating(client.service.fleet, store)
        assert isolation.isolating(fleet("isolation: {run_as: per-team}\n"), store)  # the fleet may say so
        client.token_create(team="teama", role="submitter")
        assert isolation.isolating(client.service.fleet, store)


# Run as another uid than root's: what a server, or the CLI, that is not root decides.
PROBE = """
import json, sys
from pathlib import Path
from crossrail.control import access, isolation
from crossrail.core.access import Actor, Role
from crossrail.errors import ForbiddenError
from crossrail.spec.loader import parse_document
from crossrail.spec.validate import parse_fleet
fleet = parse_fleet(parse_document(sys.argv[1], "fleet.yaml"))
def submit(role, pools):
    actor = Actor(who="b", team="teamb", role=role, origin="test", token_id="t")
    try:
        spec = fleet.spec.model_copy(update={"pools": pools})
        isolation.check_submission(fleet.model_copy(update={"spec": spec}), actor)
        return "accepted"
    except ForbiddenError as exc:
        return "refused: " + str(exc)
everywhere, trusted = fleet.spec.pools, [p for p in fleet.spec.pools if p.trusted]
print(json.dumps({
    "submitter": submit(Role.SUBMITTER, everywhere),
    "submitter_trusted_only": submit(Role.SUBMITTER, trusted),
    "admin": submit(Role.ADMIN, everywhere),
    "someone_elses_workspace": str(access.local_role(Path(sys.argv[2]))),
    "own_workspace": str(access.local_role(Path(sys.argv[3]))),
}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process under another uid takes root")
@pytest.mark.slow
def test_a_process_that_is_not_root_refuses_team_runs_on_untrusted_local_pools_and_is_no_admin_elsewhere() -> None:
    python, env = python_for_others()
    with open_directory("crossrail-isolation-") as root:
        theirs, mine = root / "theirs", root / "mine"
        theirs.mkdir()
        mine.mkdir()
        os.chown(mine, NOBODY, NOBODY)
        done = subprocess.run(
            [python, "-c", PROBE, FLEET, str(theirs), str(mine)],
            env={"PATH": os.environ["PATH"], **env},
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["submitter"].startswith("refused: ")
    assert "local pool cpu" in out["submitter"]
    assert "trusted: true" in out["submitter"]
    assert out["submitter_trusted_only"] == "accepted"
    assert out["admin"] == "accepted"
    assert out["someone_elses_workspace"] == "viewer"
    assert out["own_workspace"] == "admin"
