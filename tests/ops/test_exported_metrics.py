"""Every metric the dashboard, the alert rules and their unit tests name is one the hub's or the
fracnb service's ``/metrics`` really exports: both scraped on the demo stack on the testbed, with a
token of the scopes docs/operations.md gives Prometheus, while a user's GPU server runs."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fracnb_testbed.demo import RunningDemo
from fracnb_testbed.handle import Testbed
from fracnb_testbed.procs import wait_until
from tests.e2e.stack import answer_of, demo_with_fake_gpu

from .promql import (
    TARGET_LABELS,
    alert_test_series,
    dashboard_queries,
    exported_series,
    label_names,
    metric_names,
    rule_expressions,
)

SCRAPER_TOKEN = secrets.token_hex(16)
TEST_TOKEN = secrets.token_hex(16)
EXTRA_CONFIG = "\n".join([
    # Prometheus's token: read the hub's metrics and reach the fracnb service, nothing else.
    f"c.JupyterHub.services = [{{'name': 'prometheus', 'api_token': {SCRAPER_TOKEN!r}}},"
    f" {{'name': 'ops-test', 'api_token': {TEST_TOKEN!r}}}]",
    "c.JupyterHub.load_roles = ["
    "{'name': 'prometheus', 'scopes': ['read:metrics', 'access:services!service=fracnb'], 'services': ['prometheus']},"
    " {'name': 'ops-test', 'scopes': ['admin:users', 'admin:servers'], 'services': ['ops-test']}]",
    # The service runs its reclaim loop (nothing to evict here) and exports its metrics.
    "c.FracnbReclaim.enabled = True",
])  # fmt: skip


@dataclass(frozen=True)
class Scraped:
    hub: dict[str, frozenset[str] | None]
    service: dict[str, frozenset[str] | None]
    service_text: str
    urls: tuple[str, str]  # the hub's and the service's /metrics

    def service_samples(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {
            frozenset(sample.labels.items()): sample.value
            for family in text_string_to_metric_families(self.service_text)
            for sample in family.samples
            if sample.name == name
        }

    def service_sample(self, name: str, labels: dict[str, str]) -> float | None:
        return self.service_samples(name).get(frozenset(labels.items()))

    @property
    def both(self) -> dict[str, frozenset[str] | None]:
        merged = dict(self.hub)
        for name, labels in self.service.items():
            merged[name] = labels if merged.get(name) is None else merged[name] | (labels or frozenset())
        return merged


def scrape(url: str, token: str | None = SCRAPER_TOKEN) -> str:
    """GET a /metrics page as Prometheus does, with ``authorization: {type: Bearer}``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - the demo's own http URL
        assert answer.status == 200
        return answer.read().decode()


def service_url(demo: RunningDemo) -> str:
    # As Prometheus on z2jh reaches it: the service's own port in the hub pod, not the proxy.
    return f"http://127.0.0.1:{demo.settings.service_port}/services/fracnb/metrics"


def hub_url(demo: RunningDemo) -> str:
    return f"http://127.0.0.1:{demo.settings.hub_port}/hub/metrics"


def service_text(demo: RunningDemo) -> str:
    return scrape(service_url(demo))


def server_ready(demo: RunningDemo, user: str) -> bool:
    return bool(answer_of(demo, f"hub/api/users/{user}", TEST_TOKEN)["servers"].get("", {}).get("ready"))


@pytest.fixture(scope="module")
def scraped(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    with demo_with_fake_gpu(testbed, tmp_path_factory.mktemp("ops"), extra_config=EXTRA_CONFIG, cull_every=5) as demo:
        answer_of(demo, "hub/api/users/ann/server", TEST_TOKEN, method="POST", body={"profile": "quarter"})
        wait_until(lambda: server_ready(demo, "ann"), what="ann's 0.25 GPU server to be ready", timeout=180)
        # A culling pass after the start: the gauges of what is held and what is free have samples.
        wait_until(
            lambda: (
                'fracnb_allocated_gpus{profile="quarter"} 0.25' in service_text(demo)
                and "fracnb_gpu_free_units{" in service_text(demo)
            ),
            what="the service's gauges to show ann's server",
            timeout=60,
        )
        text = service_text(demo)
        urls = (hub_url(demo), service_url(demo))
        yield Scraped(exported_series(scrape(urls[0])), exported_series(text), text, urls)


def used_names() -> dict[str, set[str]]:
    """Metric name -> where it is used (dashboard panels, alert rules, alert unit tests)."""
    used: dict[str, set[str]] = {}
    for title, expr in dashboard_queries():
        for name in metric_names(expr):
            used.setdefault(name, set()).add(f"dashboard panel {title!r}")
    for alert, expr in rule_expressions():
        for name in metric_names(expr):
            used.setdefault(name, set()).add(f"alert {alert}")
    for path, name, _labels in alert_test_series():
        used.setdefault(name, set()).add(f"alert test {path.name}")
    return used


def test_every_metric_used_is_exported(scraped: Scraped) -> None:
    exported = scraped.both
    missing = {name: sorted(where) for name, where in used_names().items() if name not in exported}
    assert missing == {}


def test_the_hub_and_the_service_keep_to_their_own_metrics(scraped: Scraped) -> None:
    """The queue's waits are the hub's; the culler's, the cluster's and the history's are the service's."""
    assert "fracnb_queue_wait_seconds_bucket" in scraped.hub
    assert "fracnb_queue_gave_up_total" in scraped.hub
    for name in ("fracnb_last_cull_pass_timestamp_seconds", "fracnb_group_quota_gpus", "fracnb_gpu_free_units",
                 "fracnb_hibernations_total", "fracnb_session_peak_budget_ratio_bucket"):  # fmt: skip
        assert name in scraped.service, name
        assert name not in scraped.hub, name
    # Both count their own failures of the session database, under one name.
    assert scraped.hub["fracnb_session_database_errors_total"] == {"operation"}
    assert scraped.service["fracnb_session_database_errors_total"] == {"operation"}


def test_labels_used_are_the_exported_ones(scraped: Scraped) -> None:
    """Where a metric has samples, every label a query, a rule or a unit test's series names is on them."""
    exported = scraped.both
    wrong = []
    for path, name, labels in alert_test_series():
        have = exported.get(name)
        if have is not None and labels - TARGET_LABELS - have:
            wrong.append(f"{path.name}: {name} has no label {sorted(labels - TARGET_LABELS - have)}")
    for where, expr in [*dashboard_queries(), *rule_expressions()]:
        used = label_names(expr)
        names = metric_names(expr)
        for name, labels in used.items():
            have = exported.get(name)
            if name and have is not None and labels - have:
                wrong.append(f"{where}: {name} has no label {sorted(labels - have)}")
        grouped = used[""] - {"le"}
        offered = set().union(*(exported.get(n) or set() for n in names))
        if grouped and all(exported.get(n) is not None for n in names) and grouped - offered:
            wrong.append(f"{where}: no metric of {sorted(names)} has the label(s) {sorted(grouped - offered)}")
    assert wrong == []


def test_the_testbed_values_are_what_the_panels_show(scraped: Scraped) -> None:
    """ann's 0.25 GPU server shows where the dashboard looks for it, against the demo's quotas
    (team-a: ann and bob, 1/2 GPU; team-b: carol, 1 GPU, nobody running) and its A100 sliced 4 ways."""
    sample = scraped.service_sample
    assert sample("fracnb_group_allocated_gpus", {"group": "team-a"}) == 0.25
    assert sample("fracnb_group_quota_gpus", {"group": "team-a"}) == 0.5
    # A group with a quota is observed even while none of its members has a server.
    assert sample("fracnb_group_allocated_gpus", {"group": "team-b"}) == 0
    assert sample("fracnb_group_quota_gpus", {"group": "team-b"}) == 1
    # ann's pod takes one time-sliced replica; every kind's free units are what no pod requests.
    kinds = [(dict(labels), value) for labels, value in scraped.service_samples("fracnb_gpu_allocatable_units").items()]
    assert any(k["resource"] == "nvidia.com/gpu.shared" and sample("fracnb_gpu_allocated_units", k) for k, _ in kinds)
    for kind, allocatable in kinds:
        allocated = sample("fracnb_gpu_allocated_units", kind)
        assert allocated is not None
        assert sample("fracnb_gpu_free_units", kind) == max(allocatable - allocated, 0)
    assert sample("fracnb_hibernations_total", {"outcome": "saved"}) == 0
    assert sample("fracnb_queue_overdue_spawns", {"slot_kind": "nvidia.com-gpu.shared"}) is None


@pytest.mark.parametrize("token", [None, "not-a-token", TEST_TOKEN], ids=["none", "unknown", "without-the-scopes"])
def test_a_scrape_without_the_scopes_is_refused(scraped: Scraped, token: str | None) -> None:
    for url in scraped.urls:
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(url, token)
        refused.value.close()
        assert refused.value.code == 403, url
