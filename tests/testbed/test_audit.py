"""The apiserver's audit log as the testbed reads it: one request each, with who asked and over what scope."""

from __future__ import annotations

import json

from fracnb_testbed.audit import (
    AuditedRequest,
    apiserver_flags,
    count_by_resource,
    log_files,
    parse_events,
    policy,
    requests_in,
)


def event(verb: str, uri: str, stage: str, agent: str = "OpenAPI-Generator/35.0.0/python") -> str:
    resource = "nodes" if "/nodes" in uri else "pods"
    return json.dumps(
        {
            "kind": "Event",
            "level": "Metadata",
            "stage": stage,
            "verb": verb,
            "requestURI": uri,
            "userAgent": agent,
            "objectRef": {"resource": resource, "apiVersion": "v1"},
        }
    )


def test_a_list_counts_once_when_it_completes_and_a_watch_once_when_its_stream_starts() -> None:
    lines = [
        event("list", "/api/v1/pods?labelSelector=a%3Db", "ResponseComplete"),
        event("watch", "/api/v1/nodes?watch=true&resourceVersion=7", "ResponseStarted", agent="kube-scheduler/v1.36.3"),
        event(
            "watch", "/api/v1/nodes?watch=true&resourceVersion=7", "ResponseComplete", agent="kube-scheduler/v1.36.3"
        ),
        event("list", "/api/v1/namespaces/jhub/pods?labelSelector=/namespaces/x", "ResponseComplete"),
        '{"kind":"Event","verb":"li',  # the apiserver is still writing this line
    ]
    assert list(parse_events(lines)) == [
        AuditedRequest("list", "pods", True, "OpenAPI-Generator/35.0.0/python", "/api/v1/pods?labelSelector=a%3Db"),
        AuditedRequest("watch", "nodes", True, "kube-scheduler/v1.36.3", "/api/v1/nodes?watch=true&resourceVersion=7"),
        # The scope is read from the path alone, not from a query that happens to name a namespace.
        AuditedRequest(
            "list",
            "pods",
            False,
            "OpenAPI-Generator/35.0.0/python",
            "/api/v1/namespaces/jhub/pods?labelSelector=/namespaces/x",
        ),
    ]


def test_the_policy_logs_lists_and_watches_of_pods_and_nodes_and_nothing_else(tmp_path) -> None:
    assert policy()["rules"] == [
        {"level": "Metadata", "verbs": ["list", "watch"], "resources": [{"group": "", "resources": ["pods", "nodes"]}]},
        {"level": "None"},
    ]
    assert f"--audit-policy-file={tmp_path / 'audit-policy.yaml'}" in apiserver_flags(tmp_path)
    assert f"--audit-log-path={tmp_path / 'audit.log'}" in apiserver_flags(tmp_path)


def test_the_rotated_file_is_read_first_and_a_missing_log_is_empty(tmp_path) -> None:
    assert requests_in(tmp_path) == []  # the apiserver has not written yet
    # The apiserver's rotation renames the full file to audit-<time>.log and starts audit.log again.
    (tmp_path / "audit-2026-12-06T01-20-54.123.log").write_text(
        event("list", "/api/v1/nodes", "ResponseComplete") + "\n"
    )
    (tmp_path / "audit.log").write_text(event("list", "/api/v1/namespaces/jhub/pods", "ResponseComplete") + "\n")
    (tmp_path / "audit-policy.yaml").write_text("not a log\n")
    assert [path.name for path in log_files(tmp_path)] == ["audit-2026-12-06T01-20-54.123.log", "audit.log"]
    assert [request.resource for request in requests_in(tmp_path)] == ["nodes", "pods"]


def test_one_clients_lists_by_resource_and_scope() -> None:
    hub = "OpenAPI-Generator/35.0.0/python"
    requests = list(
        parse_events(
            [
                event("list", "/api/v1/nodes", "ResponseComplete"),
                event("list", "/api/v1/pods", "ResponseComplete"),
                event("list", "/api/v1/namespaces/jhub/pods", "ResponseComplete"),
                event("list", "/api/v1/namespaces/jhub/pods", "ResponseComplete"),
                event("watch", "/api/v1/pods?watch=true", "ResponseStarted"),
                event("list", "/api/v1/pods", "ResponseComplete", agent="kube-scheduler/v1.36.3"),
            ]
        )
    )
    assert count_by_resource(requests, hub) == {"nodes": 1, "pods": 3}
    assert count_by_resource(requests, hub, cluster_wide=True) == {"nodes": 1, "pods": 1}
    assert count_by_resource(requests, hub, cluster_wide=False) == {"pods": 2}
    assert count_by_resource(requests, hub, "watch") == {"pods": 1}
    assert count_by_resource(requests, "kube-scheduler/v1.36.3") == {"pods": 1}
