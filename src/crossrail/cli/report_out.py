"""`crossrail report --out DIR`: build the report beside the workspace's store and write it
(control/reports/report_doc.py)."""

from __future__ import annotations

from pathlib import Path

from crossrail.cli.common import client
from crossrail.cli.output import console, print_json
from crossrail.errors import UsageError


def write_report(
    home: Path | None,
    server: str | None,
    out: Path,
    *,
    since: str | None,
    before: str | None,
    after: str | None,
    as_json: bool,
) -> None:
    from crossrail.control.reports import report_doc
    from crossrail.metrics import parse_selection

    try:
        start = parse_selection(f"since={since}").since if since else None
    except UsageError:
        raise UsageError(f"--since {since!r} is not a date; write 2026-11-01 or 2026-11-01T12:00 (UTC)") from None
    report_doc.check_out(out, (report_doc.MARKDOWN, report_doc.HTML))  # before the store is read, not after
    with client(home, server) as c:
        local = c.require_local("report --out (it reads the workspace's store)")
        doc = report_doc.build(
            local.service.store, local.service.fleet, local.clock.now(), since=start, before=before, after=after
        )
    written = report_doc.write(doc, out)
    drawn = [f.name for f in doc.figures if f.png is not None]
    missing = {f.name: f.note for f in doc.figures if f.png is None}
    if as_json:
        print_json({"kind": "ReportFiles", "files": [str(p) for p in written], "figures": drawn, "not_drawn": missing})
        return
    console.print(f"wrote {len(written)} files to {out}: {', '.join(p.name for p in written)}", markup=False)
    if doc.verdict is not None:
        console.print(f"[bold]{doc.verdict.sentence}[/]")
    for name, why in missing.items():
        console.print(f"not drawn: {name}: {why}", markup=False)
