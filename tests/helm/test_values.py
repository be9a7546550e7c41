"""The Zero-to-JupyterHub values in helm-values/: they parse, the chart's schema accepts them
merged over its defaults, and the hub configuration they yield gives the expected pods."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from fracnb_spawner import dryrun
from fracnb_spawner.configure import SERVICE_SCOPES
from fracnb_spawner.gpu.companions import CLAIM_VERBS
from tests.helm.conftest import VALUES_DIR, merged, values_of
from tests.helm.scenarios import EXPECTED, SCENARIOS


@pytest.mark.parametrize("path", sorted(VALUES_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_file_parses(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert documents, f"{path.name} is empty"
    for document in documents:
        # ConfigMaps carry device-plugin configs as YAML text: those must parse too.
        for text in (document.get("data") or {}).values():
            assert yaml.safe_load(text)["version"] == "v1"


def test_every_scenario_is_listed_in_the_readme() -> None:
    readme = (VALUES_DIR / "README.md").read_text()
    for name in [*SCENARIOS, "rbac"]:
        assert f"`{name}.yaml`" in readme


def test_rbac_lets_the_hub_read_nodes_and_pods() -> None:
    role, binding, *_dra = yaml.safe_load_all((VALUES_DIR / "rbac.yaml").read_text())
    (rule,) = role["rules"]
    assert set(rule["resources"]) == {"nodes", "pods"}
    assert {"get", "list", "watch"} <= set(rule["verbs"])
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}


def granted_rules(role: dict) -> set[tuple[str, str, str]]:
    """Each (API group, resource, verb) a Role or ClusterRole grants."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_lets_the_hub_manage_claims_and_read_slices_for_dra_and_no_more() -> None:
    _role, _binding, role, binding, *_reclaim = yaml.safe_load_all((VALUES_DIR / "rbac.yaml").read_text())
    granted = granted_rules(role)
    needed = {("resource.k8s.io", "resourceclaims", verb) for verb in CLAIM_VERBS}
    needed |= {
        ("resource.k8s.io", kind, verb) for kind in ("resourceclaims", "resourceslices") for verb in ("list", "watch")
    }
    assert needed == granted
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_values_pass_the_chart_schema(scenario: str, chart: tuple[dict, dict]) -> None:
    defaults, schema = chart
    values = merged(defaults, values_of(scenario))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(values)]
    assert not errors
    assert values["cull"]["enabled"] is False
    assert values["hub"]["config"]["JupyterHub"]["spawner_class"] == "fractional"
    assert "fracnb" in values["hub"]["services"]
    assert values["hub"]["loadRoles"]["user"]["scopes"] == ["self", "access:services!service=fracnb"]
    # The service's role as setup(c) makes it (access:servers: it asks servers to hibernate before a cull).
    assert values["hub"]["loadRoles"]["fracnb"]["scopes"] == SERVICE_SCOPES


def test_the_schema_check_catches_a_misplaced_key(chart: tuple[dict, dict]) -> None:
    defaults, schema = chart
    values = merged(defaults, {"hub": {"config": {"fractionalSpawner": {"gpu_memory": "80Gi"}}}})
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert list(validator.iter_errors(values))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_profiles_give_the_expected_pods(scenario: str, chart: tuple[dict, dict], tmp_path: Path, capsys) -> None:
    defaults, _schema = chart
    path = tmp_path / f"{scenario}.yaml"
    path.write_text(yaml.safe_dump(merged(defaults, values_of(scenario))))
    assert dryrun.main([str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    seen = {
        ",".join(filter(None, [row["profile"], row["choice"]])): (
            {k: str(v) for k, v in row["gpu_resources"].items()},
            row["node_selector"],
            row["scheduler"],
        )
        for row in rows
    }
    assert seen == EXPECTED[scenario]


def test_dra_values_claim_slices_mig_devices_and_whole_gpus(chart: tuple[dict, dict], tmp_path: Path, capsys) -> None:
    path = tmp_path / "dra.yaml"
    path.write_text(yaml.safe_dump(merged(chart[0], values_of("dra"))))
    assert dryrun.main([str(path), "--json"]) == 0
    requests = {
        ",".join(filter(None, [row["profile"], row["choice"]])): [
            request["exactly"] for claim in row["companions"] for request in claim["spec"]["devices"]["requests"]
        ]
        for row in json.loads(capsys.readouterr().out)
    }
    assert requests["cpu"] == []
    assert requests["slice,size=quarter"] == [
        {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "20Gi"}}}
    ]
    assert requests["slice,size=half"][0]["capacity"] == {"requests": {"memory": "40Gi"}}
    assert requests["mig-1g"][0]["deviceClassName"] == "mig.nvidia.com"
    assert requests["full"] == [{"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}]


def test_config_from_values_reads_the_fracnb_sections() -> None:
    config = dryrun.config_from_values(values_of("mixed-cluster"))
    assert config.JupyterHub.spawner_class == "fractional"
    assert config.FracnbQuotas.group_quotas == {"team-a": 6, "team-b": 2}
    assert config.FractionalSpawner.fracnb_service_name == "fracnb"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_dry_run_summarises_quotas_and_the_service_page_logs_in(
    scenario: str, chart: tuple[dict, dict], tmp_path: Path, capsys
) -> None:
    values = values_of(scenario)
    # Services > fracnb is the service's page, behind the hub's OAuth without an "authorize" prompt.
    assert values["hub"]["services"]["fracnb"]["oauth_no_confirm"] is True
    defaults, _schema = chart
    path = tmp_path / f"{scenario}.yaml"
    path.write_text(yaml.safe_dump(merged(defaults, values)))
    assert dryrun.main([str(path)]) == 0
    out = capsys.readouterr().out
    summary = out[out.index("quotas (FracnbQuotas):") :]
    quotas = values["hub"]["config"].get("FracnbQuotas", {})
    for group, gpus in (quotas.get("group_quotas") or {}).items():
        assert f"{group} {gpus} GPU" in summary
    service = values["hub"]["config"].get("FracnbService", {})
    if "warning_lead" in service:
        assert f"warning shown in the notebook {service['warning_lead'] // 60} min before a deadline" in summary


def test_dry_run_refuses_a_bad_quota_in_values(chart: tuple[dict, dict], tmp_path: Path, capsys) -> None:
    values = values_of("mixed-cluster")
    values["hub"]["config"]["FracnbQuotas"]["default_user_quota"] = "lots"
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(merged(chart[0], values)))
    assert dryrun.main([str(path)]) == 1
    assert "FracnbQuotas.default_user_quota: 'lots' is not a number of GPUs" in capsys.readouterr().err


def test_example_images_name_the_packages_one_version() -> None:
    """extension/package.json holds the version (pyproject.toml reads it); the examples follow it."""
    version = json.loads((VALUES_DIR.parent / "extension" / "package.json").read_text())["version"]
    for scenario in SCENARIOS:
        values = values_of(scenario)
        assert (values["hub"]["image"]["tag"], values["singleuser"]["image"]["tag"]) == (version, version), scenario
    readme = (VALUES_DIR / "README.md").read_text()
    pins = re.findall(r"fracnb\[\w+\]==([\w.+-]+)", readme)
    assert pins, "the README pins the package in its image recipes"
    assert set(pins) == {version}


def test_rbac_lets_the_service_evict_and_explain_for_reclaim() -> None:
    documents = list(yaml.safe_load_all((VALUES_DIR / "rbac.yaml").read_text()))
    [role] = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "fracnb-service-reclaim"]
    [binding] = [
        d for d in documents if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "fracnb-service-reclaim"
    ]
    granted = granted_rules(role)
    assert {
        ("", "pods/eviction", "create"),
        ("", "events", "create"),
        ("", "events", "list"),  # read back at start: the per-minute limit across a restart
        ("policy", "poddisruptionbudgets", "list"),
    } <= granted
    assert {("resource.k8s.io", kind, "list") for kind in ("resourceclaims", "resourceslices")} <= granted
    assert binding["roleRef"]["kind"] == "ClusterRole"


def test_rbac_lets_the_service_patch_pods_in_the_hubs_namespace_for_busy_marks_and_no_more() -> None:
    documents = list(yaml.safe_load_all((VALUES_DIR / "rbac.yaml").read_text()))
    [role] = [d for d in documents if d["kind"] == "Role" and d["metadata"]["name"] == "fracnb-hub-pod-patch"]
    [binding] = [
        d for d in documents if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert granted_rules(role) == {("", "pods", "patch")}
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == binding["subjects"][0]["namespace"]
    assert (binding["roleRef"]["kind"], binding["subjects"][0]["name"]) == ("Role", "hub")


def test_lending_batch_runs_below_the_notebooks_and_never_preempts() -> None:
    priority_class, *objects = yaml.safe_load_all((VALUES_DIR / "lending.yaml").read_text())
    assert priority_class["value"] < 0
    assert priority_class["preemptionPolicy"] == "Never"
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert {job["spec"]["template"]["spec"]["priorityClassName"] for job in jobs} == {
        priority_class["metadata"]["name"]
    }
