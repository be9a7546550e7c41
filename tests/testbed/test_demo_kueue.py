"""The demo on Kueue (``--engine kueue``) without Kueue: the objects it creates, the hub config it writes,
and its refusals before anything starts. tests/kueue/test_demo_on_kueue.py runs it on the real Kueue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from traitlets.config import PyFileConfigLoader

from fracnb_spawner import dryrun
from fracnb_spawner.queue.config import FracnbQueue
from fracnb_spawner.queue.kueue.model import priority_class_name
from fracnb_spawner.queue.localqueues import local_queue_name
from fracnb_spawner.quota.config import FracnbQuotas
from fracnb_testbed import demo, demo_kueue
from fracnb_testbed.clusters import load_cluster
from fracnb_testbed.demo import DEMO_USERS, DemoSettings, hub_config
from fracnb_testbed.state import STATE_FILE

SHIPPED = [doc for doc in yaml.safe_load_all(demo_kueue.HELM_QUEUES.read_text()) if doc]


def objects(kind: str) -> dict[str, dict]:
    return {
        doc["metadata"]["name"]: doc for doc in demo_kueue.queue_objects(DEMO_USERS, "demo-ns") if doc["kind"] == kind
    }


def gpu_quota(queue: dict) -> dict:
    (group,) = queue["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return next(r for r in flavor["resources"] if r["name"] == "fracnb.io/gpu-milli")


def test_each_team_gets_the_shipped_cluster_queue_with_a_quarter_gpu_in_the_shipped_cohort():
    shipped = next(doc for doc in SHIPPED if doc["kind"] == "ClusterQueue")
    queues = objects("ClusterQueue")
    assert set(queues) == {"team-a", "team-b", "no-team"}
    for team in ("team-a", "team-b"):
        spec = queues[team]["spec"]
        assert spec["cohortName"] == shipped["spec"]["cohortName"] == "university"
        assert spec["preemption"] == shipped["spec"]["preemption"]
        assert spec["queueingStrategy"] == shipped["spec"]["queueingStrategy"]
        assert gpu_quota(queues[team])["nominalQuota"] == "250"
        assert gpu_quota(queues[team])["borrowingLimit"] == gpu_quota(shipped)["borrowingLimit"]
    assert objects("Cohort") == {"university": next(doc for doc in SHIPPED if doc["kind"] == "Cohort")}
    # The shipped ClusterQueue is unchanged by the copies.
    assert gpu_quota(shipped)["nominalQuota"] == "1000"


def test_users_in_no_team_get_a_quota_of_their_own_outside_the_cohort():
    no_team = objects("ClusterQueue")["no-team"]
    assert "cohortName" not in no_team["spec"]
    assert gpu_quota(no_team) == {"name": "fracnb.io/gpu-milli", "nominalQuota": "250"}
    assert objects("LocalQueue")["fracnb-admin"]["spec"] == {"clusterQueue": "no-team"}


def test_each_user_has_the_local_queue_the_engine_labels_their_pods_with_pointing_to_their_team():
    queues = objects("LocalQueue")
    template = FracnbQueue().kueue_local_queue
    for user, groups in DEMO_USERS.items():
        queue = queues[local_queue_name(template, user)]
        assert queue["metadata"]["namespace"] == "demo-ns"
        assert queue["spec"]["clusterQueue"] == (groups[0] if groups else "no-team")
    assert len(queues) == len(DEMO_USERS)


def test_the_priority_class_of_the_demos_users_exists_and_ranks_above_batch():
    classes = objects("WorkloadPriorityClass")
    assert classes[priority_class_name(FracnbQueue().default_priority)]["value"] > classes["fracnb-batch"]["value"]


def test_the_flavor_selects_the_kueue_clusters_local_gpu_node_and_is_created_before_its_queues():
    flavors = objects("ResourceFlavor")
    (flavor,) = flavors.values()
    local_gpu = next(group for group in load_cluster("kueue").groups if group.name == "local-a100-ts4")
    assert flavor["spec"]["nodeLabels"].items() <= local_gpu.labels.items()
    kinds = [doc["kind"] for doc in demo_kueue.queue_objects(DEMO_USERS, "demo-ns")]
    assert kinds.index("ResourceFlavor") < kinds.index("ClusterQueue") < kinds.index("LocalQueue")
    assert kinds.index("WorkloadPriorityClass") < kinds.index("LocalQueue")


@pytest.fixture
def kueue_config_file(tmp_path: Path) -> Path:
    settings = DemoSettings(
        state_dir=tmp_path,
        kubeconfig=tmp_path / "kubeconfig",
        namespace="demo-ns",
        port=18124,
        engine="kueue",
        kueue_visibility_url="https://127.0.0.1:18999",
    )
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(hub_config(settings, "/opt/chp"))
    return path


def test_the_hub_config_selects_kueue_and_leaves_team_quotas_to_it(kueue_config_file: Path):
    config = PyFileConfigLoader(kueue_config_file.name, path=str(kueue_config_file.parent)).load_config()
    settings = FracnbQueue(config=config)
    assert settings.engine == "kueue"
    assert settings.kueue_local_queue == demo_kueue.LOCAL_QUEUE_TEMPLATE
    assert settings.kueue_visibility_url == "https://127.0.0.1:18999"
    policy = FracnbQuotas(config=config)
    assert policy.group_quotas == {}  # the ClusterQueues hold them; the hub keeps each user's cap
    assert policy.default_user_quota == demo.DEFAULT_USER_QUOTA


def test_the_hub_offers_only_choices_kueue_counts_on_the_kueue_cluster(
    kueue_config_file: Path, capsys: pytest.CaptureFixture[str]
):
    assert dryrun.main([str(kueue_config_file), "--json"]) == 0  # the engine's own check of the backends passes
    rows = {row["profile"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"cpu", "quarter", "small"}
    (transformation,) = load_cluster("kueue").kueue["resources"]["transformations"]
    for slug in ("quarter", "small"):
        assert rows[slug]["gpu_resources"] == {transformation["input"]: "1"}
        assert rows[slug]["node_selector"]["nvidia.com/gpu.replicas"] == "4"
        assert rows[slug]["backend"] == "time-slicing"


def test_the_builtin_demo_is_unchanged(tmp_path: Path):
    settings = DemoSettings(state_dir=tmp_path, kubeconfig=tmp_path / "kc", namespace="demo-ns", port=18125)
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(hub_config(settings, "/opt/chp"))
    config = PyFileConfigLoader(path.name, path=str(tmp_path)).load_config()
    assert FracnbQueue(config=config).engine == "builtin"
    assert FracnbQuotas(config=config).group_quotas == demo.GROUP_QUOTAS
    assert {p["slug"] for p in config.FractionalSpawner.profile_list} == {p["slug"] for p in demo.PROFILES}


def test_without_kueue_built_the_demo_says_how_to_build_it_and_starts_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FRACNB_KUEUE_DIR", str(tmp_path / "no-kueue"))
    state_dir = tmp_path / "state"
    assert demo.main(["--engine", "kueue", "--state-dir", str(state_dir)]) == 1
    said = capsys.readouterr().err
    assert "--engine kueue needs Kueue's manager, which is not built" in said
    assert str(tmp_path / "no-kueue" / "bin" / "kueue") in said
    assert "./dev setup" in said
    assert "testbed/go/build-kueue.sh" in said
    assert not (demo.cluster_dir(state_dir) / STATE_FILE).exists()
    assert not (state_dir / "fakenvml").exists()  # refused before the fake GPU is even compiled


def test_kueue_on_a_cluster_of_ones_own_is_refused_before_anything_starts(tmp_path, capsys):
    state_dir = tmp_path / "state"
    argv = ["--engine", "kueue", "--kubeconfig", str(tmp_path / "kc"), "--state-dir", str(state_dir)]
    assert demo.main(argv) == 2
    assert "apply helm-values/kueue/" in capsys.readouterr().err
    assert not state_dir.exists()


def test_an_unknown_engine_is_refused_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_:
        demo.build_parser().parse_args(["--engine", "volcano"])
    assert exit_.value.code == 2
    assert "choose from 'builtin', 'kueue'" in capsys.readouterr().err
