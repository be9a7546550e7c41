"""``api/advice``: a user's advice for their next session, for the notebook's panel and widget.

The pure part (``advice_document`` over literal records and the test hub's menu) and the endpoint
of the real service behind a real JupyterHub: who may ask, and that only the caller's own sessions
count.
"""

from __future__ import annotations

import pytest
from traitlets.config import Config

from fracnb_schemas import SERVICE_ADVICE, problems
from fracnb_spawner.service.advicemenu import advice_document, menu_from_config
from fracnb_testbed.procs import wait_until
from tests.history.records import GIB
from tests.service.calls import new_report, post, server_token, user_token

PROFILES = [
    {
        "display_name": "A100",
        "slug": "a100",
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {
                    "eighth": {"display_name": "1/8 GPU", "gpu": {"fraction": "1/8"}},
                    "half": {"display_name": "1/2 GPU", "gpu": {"fraction": 0.5}, "default": True},
                },
            }
        },
    },
    {"display_name": "CPU only", "slug": "cpu"},
]


def config(**spawner):
    return Config({"FractionalSpawner": {"gpu_memory": "80Gi", "profile_list": PROFILES, **spawner}})


def record(choice="size=half", peak_gib=6.0, **figures):
    return {"profile": "a100", "choice": choice, "budget_bytes": 40 * GIB, "peak_bytes": int(peak_gib * GIB),
            "oom_events": 0, "seconds_above_95": 0.0, **figures}  # fmt: skip


def valid(document):
    assert problems(SERVICE_ADVICE, document) == []
    return document


def test_advice_for_a_servers_choice_from_its_users_sessions():
    records = [record(peak_gib=p) for p in (5.0, 6.1, 4.0)]
    assert valid(advice_document(menu_from_config(config()), records, "a100", "size=half")) == {
        "state": "advice",
        "text": "Your last 3 sessions on 1/2 GPU peaked at 6.1 GiB or less. 1/8 GPU (10 GiB) would have fit.",
        "larger": False,
        "sessions": 3,
        "p95_bytes": int(6.1 * GIB),
    }


def test_reaching_the_budget_advises_the_next_size_up():
    records = [record("size=eighth", 9.9, budget_bytes=10 * GIB, oom_events=1), *[record("size=eighth", 4.0)] * 2]
    document = valid(advice_document(menu_from_config(config()), records, "a100", "size=eighth"))
    assert (document["state"], document["larger"]) == ("advice", True)
    assert document["text"].endswith("1/2 GPU (40 GiB) gives more room.")


def test_too_few_sessions_say_how_many_are_needed():
    menu = menu_from_config(config(right_sizing_min_sessions=4))
    document = advice_document(menu, [record(), record("size=eighth")], "a100", "size=half")
    assert valid(document) == {"state": "waiting", "text": "No advice yet: 4 sessions needed (1 so far)."}


@pytest.mark.parametrize(
    ("settings", "profile", "choice"),
    [
        ({}, "a100", "size=eighth"),  # the choice used is the smallest already
        ({}, "gone", ""),  # a profile the hub no longer offers
        ({}, "cpu", ""),  # no GPU: nothing to advise
        ({"right_sizing_advice": False}, "a100", "size=half"),
        ({"profile_list": lambda spawner: PROFILES}, "a100", "size=half"),  # per-user menus cannot be known
    ],
    ids=["fits", "unknown-profile", "cpu", "advice-off", "callable-profile-list"],
)
def test_nothing_to_say(settings, profile, choice):
    records = [record(choice="size=eighth", peak_gib=2.0, budget_bytes=10 * GIB)] * 3 + [record()] * 3
    menu = menu_from_config(config(**settings))
    assert valid(advice_document(menu, records, profile, choice)) == {"state": "none"}


# ---- the endpoint, behind a real JupyterHub (its menu: tests/service/conftest.py) ----------------

ADVICE = "api/advice?profile=a100&choice=size%3Dhalf"


@pytest.fixture
def service_url(hub, new_user):
    """The service's URL once it has opened its database (it answers 503 until then, after it listens)."""
    token = user_token(hub, new_user())
    wait_until(lambda: hub.http("GET", hub.service_url + "api/sessions", token=token)[0] != 503,
               what="the session history to open", timeout=60)  # fmt: skip
    return hub.service_url


def test_a_servers_token_gets_its_users_advice_from_their_own_sessions_only(hub, new_user, service_url):
    owner, other = new_user(), new_user()
    token = server_token(hub, owner)
    status, body = hub.http("GET", service_url + ADVICE, token=token)
    assert (status, body) == (200, {"state": "waiting", "text": "No advice yet: 3 sessions needed (0 so far)."})
    for peak in (5, 6, 4):
        assert post(hub, new_report(peak_bytes=peak * GIB), token)[0] == 204
    status, body = hub.http("GET", service_url + ADVICE, token=token)
    assert status == 200
    assert valid(body)["text"] == (
        "Your last 3 sessions on 1/2 GPU peaked at 6 GiB or less. 1/8 GPU (10 GiB) would have fit."
    )
    # Another user's server asks the same question: the owner's sessions are not theirs.
    status, body = hub.http("GET", service_url + ADVICE, token=server_token(hub, other))
    assert (status, body["state"]) == (200, "waiting")


def test_wrong_or_no_tokens_and_a_missing_profile_are_refused(hub, new_user, service_url):
    for token in (None, "not-a-token", hub.admin_token):  # the last: a service's, not a user's
        assert hub.http("GET", service_url + ADVICE, token=token)[0] == 403, token
    status, body = hub.http("GET", service_url + "api/advice", token=user_token(hub, new_user()))
    assert status == 400
    assert "give the server's profile" in body["message"]
