"""OfficialApi (the `kubernetes` client) sends the requests the API server expects: paths, methods, label
selectors, delete options and merge patches, recorded by a small HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from crossrail.executors.kubernetes import AlreadyExists, NotFound, OfficialApi

Seen = list[tuple[str, str, dict[str, list[str]], Any]]


class _Handler(BaseHTTPRequestHandler):
    seen: Seen
    replies: dict[tuple[str, str], tuple[int, Any]]

    def _answer(self) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.seen.append((self.command, url.path, parse_qs(url.query), body))
        created = 201 if self.command == "POST" else 200  # as the API server answers a create
        status, reply = self.replies.get((self.command, url.path), (created, body or {"items": []}))
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[OfficialApi, Seen, dict[tuple[str, str], tuple[int, Any]]]]:
    seen: Seen = []
    replies: dict[tuple[str, str], tuple[int, Any]] = {}
    handler = type("Handler", (_Handler,), {"seen": seen, "replies": replies})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{httpd.server_port}"}}],
        "users": [{"name": "t", "user": {"token": "x"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "current-context": "t",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    try:
        yield OfficialApi(str(path)), seen, replies
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_jobs_jobsets_pods_and_workloads_go_to_their_api_paths(server: Any) -> None:
    api, seen, replies = server
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "r-1-a1", "namespace": "team-a"}}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "r-1-a2", "namespace": "team-a"},
    }
    api.create(job)
    api.create(jobset)
    api.list("Job", "team-a", "crossrail.dev/run=r-1")
    api.list("Workload", "team-a", "")
    api.list("Pod", "team-a", "crossrail.dev/run=r-1,crossrail.dev/attempt=1")
    api.patch_annotations("JobSet", "team-a", "r-1-a2", {"crossrail.dev/stopped-by": "preempted"})
    api.delete("JobSet", "team-a", "r-1-a2", 30)
    api.delete("Job", "team-a", "r-1-a1", None)
    replies[("GET", "/api/v1/namespaces/team-a/pods/p-1/log")] = (200, "step 1")
    assert "step 1" in api.logs("team-a", "p-1", "trainer")
    calls = [(method, path) for method, path, _, _ in seen]
    assert calls[:8] == [
        ("POST", "/apis/batch/v1/namespaces/team-a/jobs"),
        ("POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets"),
        ("GET", "/apis/batch/v1/namespaces/team-a/jobs"),
        ("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads"),
        ("GET", "/api/v1/namespaces/team-a/pods"),
        ("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/r-1-a2"),
        ("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/r-1-a2"),
        ("DELETE", "/apis/batch/v1/namespaces/team-a/jobs/r-1-a1"),
    ]
    assert seen[0][3]["metadata"]["name"] == "r-1-a1"
    assert seen[4][2]["labelSelector"] == ["crossrail.dev/run=r-1,crossrail.dev/attempt=1"]
    assert seen[5][3] == {"metadata": {"annotations": {"crossrail.dev/stopped-by": "preempted"}}}
    assert seen[6][2]["gracePeriodSeconds"] == ["30"]
    assert seen[6][2]["propagationPolicy"] == ["Background"]


def test_conflicts_and_missing_objects_become_their_own_errors(server: Any) -> None:
    api, _, replies = server
    replies[("POST", "/apis/batch/v1/namespaces/a/jobs")] = (409, {"kind": "Status", "reason": "AlreadyExists"})
    replies[("DELETE", "/apis/batch/v1/namespaces/a/jobs/gone")] = (404, {"kind": "Status", "reason": "NotFound"})
    replies[("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/a/jobsets")] = (404, {"kind": "Status"})
    with pytest.raises(AlreadyExists):
        api.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x", "namespace": "a"}})
    with pytest.raises(NotFound):
        api.delete("Job", "a", "gone", None)
    assert api.list("JobSet", "a", "") == []  # JobSet not installed: nothing of that kind


def test_a_worker_reached_with_a_kubeconfig_read_from_a_secret_gets_its_secret_and_deletes_copies(server: Any) -> None:
    """A kubeconfig already read (a MultiKueue Secret's) makes its own client, to that server; the calls the executor
    makes there and on the manager for it: a Secret by name, deleting a Secret and a ConfigMap."""
    manager, seen, replies = server
    host = manager._api.configuration.host
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "w", "cluster": {"server": host}}],
        "users": [{"name": "w", "user": {"token": "y"}}],
        "contexts": [{"name": "w", "context": {"cluster": "w", "user": "w"}}],
        "current-context": "w",
    }
    worker = OfficialApi(config=config)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "eu-kubeconfig"},
        "data": {"kubeconfig": "eA=="},
    }
    replies[("GET", "/api/v1/namespaces/kueue-system/secrets/eu-kubeconfig")] = (200, secret)
    assert manager.get("Secret", "kueue-system", "eu-kubeconfig")["data"] == {"kubeconfig": "eA=="}
    worker.delete("Secret", "team-a", "r-1-a1-report", None)
    worker.delete("ConfigMap", "team-a", "r-1-a1-config", None)
    assert [(method, path) for method, path, _, _ in seen] == [
        ("GET", "/api/v1/namespaces/kueue-system/secrets/eu-kubeconfig"),
        ("DELETE", "/api/v1/namespaces/team-a/secrets/r-1-a1-report"),
        ("DELETE", "/api/v1/namespaces/team-a/configmaps/r-1-a1-config"),
    ]
