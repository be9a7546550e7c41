"""The dry run on files that are not hub configuration: it says what the file is and that there is
nothing to check, with no traceback and a failing exit code; a config without profiles says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from fracnb_spawner.dryrun import main

REPO = Path(__file__).resolve().parents[2]
HELM_VALUES = REPO / "helm-values"
# Every file there that is not values for the chart: Kubernetes objects to apply with kubectl.
MANIFESTS = {
    "rbac.yaml": "ClusterRole fracnb-hub-reader, ClusterRoleBinding fracnb-hub-reader",
    "device-plugin-time-slicing.yaml": "ConfigMap fracnb-time-slicing",
    "device-plugin-mps.yaml": "ConfigMap fracnb-mps",
    "prometheus-rules.yaml": "PrometheusRule fracnb",
    "lending.yaml": "PriorityClass fracnb-batch, ResourceClaimTemplate whole-gpu, Job train-dra",
}


@pytest.mark.parametrize(("name", "objects"), MANIFESTS.items(), ids=MANIFESTS.keys())
def test_kubernetes_objects_are_named_and_not_checked(name: str, objects: str, capsys: pytest.CaptureFixture) -> None:
    assert main([str(HELM_VALUES / name)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"fracnb-dry-run: {name} holds Kubernetes objects to apply with kubectl ({objects}")
    assert "not hub values: there is nothing in it to check." in err
    assert "Give it a jupyterhub_config.py or a Zero-to-JupyterHub values file" in err
    assert "Traceback" not in err
    assert "quotas" not in err


def test_every_other_helm_values_file_is_checked(capsys: pytest.CaptureFixture) -> None:
    values = sorted(p for p in HELM_VALUES.glob("*.yaml") if p.name not in MANIFESTS)
    assert len(values) >= 7
    for path in values:
        assert main([str(path)]) == 0, path.name
        assert "idle policies (each choice above shows its own):" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[1, 2]\n", "has no hub or singleuser values"),
        ("proxy: {secretToken: x}\n", "has no hub or singleuser values"),
        ("a: [unclosed\n", "is not valid YAML"),
        ("hub: {}\n---\nsingleuser: {}\n", "has no hub or singleuser values"),
    ],
)
def test_other_yaml_says_what_is_wrong(tmp_path: Path, text: str, said: str, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(text)
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert f"values.yaml {said}" in err
    assert "Traceback" not in err


def test_a_config_without_profiles_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "jupyterhub_config.py"
    path.write_text("c = get_config()  # noqa\nc.FracnbQuotas.default_user_quota = 1\n")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no profiles: every server gets the spawner's own settings\n")
    assert "each choice above" not in out
    assert "each user: 1 GPU" in out
