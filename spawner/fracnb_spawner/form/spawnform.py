"""The spawn form of one user: rows of choices, annotated with free capacity, the queue and quota refusals.

Free capacity and the queue come from the hub-wide watches (no request per form load), GPUs held
from KubeSpawner's pod reflector; the spawn itself recounts exactly. Anything the cluster cannot
tell now (RBAC, an apiserver away) leaves a row without counts rather than breaking the form.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Protocol

from markupsafe import Markup

from fracnb_spawner.borrowing.decide import Borrow
from fracnb_spawner.cluster.nodes import free_units, largest_allocatable
from fracnb_spawner.cluster.slots import Ask, Cluster, ResourceAsk, servers_free
from fracnb_spawner.config.profiles import InvalidUserOptionsError, Selection, select
from fracnb_spawner.form.advice import FormAdvice
from fracnb_spawner.form.rows import ChoiceRow, RowKey, describe, render
from fracnb_spawner.gpu.words import no_node_reason
from fracnb_spawner.quota.policy import QuotaDecision, QuotaPolicy
from fracnb_spawner.quota.words import quota_line


class FormHost(Protocol):
    """What the form reads of its spawner (``FractionalSpawner``)."""

    show_availability: bool
    refuse_unplaceable_choices: bool
    user_options: Any

    def gpu_defaults(self) -> Any: ...
    def quota_policy(self) -> QuotaPolicy: ...
    async def resolve_profiles(self) -> list[dict]: ...
    async def quota_decision_now(self, row: ChoiceRow | None) -> QuotaDecision: ...
    async def form_advice_for(self, profiles: list[dict], rows: Mapping[RowKey, ChoiceRow]) -> FormAdvice: ...
    def choice_ask(self, selection: Selection, row: ChoiceRow) -> tuple[Ask | None, float, Borrow | None]: ...
    async def read_cluster(self, ask: Ask | None, *, wait: bool) -> Cluster | None: ...
    async def queue_text(
        self, ask: Ask | None, max_wait: float, fraction: Fraction, borrow: Borrow | None = None
    ) -> str | None: ...
    def kept_place_text(self) -> Markup | None: ...
    async def preselection(
        self, profiles: list[dict], advised: Mapping[str, str] | None
    ) -> tuple[dict, Markup | None]: ...


async def render_form(host: FormHost) -> str:
    """The whole form (empty without profiles): advice, a kept place in the queue, the quota, the choices."""
    profiles = await host.resolve_profiles()
    if not profiles:
        return ""
    rows = await annotate(host, profiles, describe(profiles, host.gpu_defaults()))
    quota = quota_line(await host.quota_decision_now(None)) if host.quota_policy().has_limits else None
    advice = await host.form_advice_for(profiles, rows)
    shown, why = await host.preselection(profiles, advice.preselect)
    return advice.html + render(profiles, rows, shown, quota, host.kept_place_text(), preselected=why)


async def annotate(host: FormHost, profiles: list[dict], rows: dict[RowKey, ChoiceRow]) -> dict[RowKey, ChoiceRow]:
    """Free capacity (cluster-wide), the queue, and quota refusals, per row."""
    has_limits = host.quota_policy().has_limits
    annotated = {}
    for key, original in rows.items():
        row = original
        selection = _row_selection(profiles, key)
        if selection is not None and host.show_availability:
            ask, max_wait, borrow = host.choice_ask(selection, row)
            queue = await host.queue_text(ask, max_wait, row.plan.fraction, borrow)
            row = await _with_availability(host, row, ask, queue)
        if row.allowed and has_limits and row.plan.fraction > 0:
            decision = await host.quota_decision_now(row)
            if not decision.allowed:
                row = row.refused(decision.message)
        annotated[key] = row
    return annotated


async def _with_availability(host: FormHost, row: ChoiceRow, ask: Ask | None, queue: str | None) -> ChoiceRow:
    """A row's free count, from the hub-wide views of nodes and pods (and DRA devices for dra choices); without
    them (the hub may not list nodes), the queue line alone, which may come from elsewhere (Kueue's quotas)."""
    cluster = await host.read_cluster(ask, wait=True) if ask is not None else None
    if cluster is None or ask is None:
        return row.with_availability(None, queue) if queue else row
    if isinstance(ask, ResourceAsk):
        free = free_units(cluster.nodes, cluster.pods, ask.resource, ask.selector)
        fits = largest_allocatable(cluster.nodes, ask.resource, ask.selector) >= ask.units
    else:
        free, fits = servers_free(ask, cluster), ask.could_ever_fit(cluster)
    row = row.with_availability(free, queue)
    if host.refuse_unplaceable_choices and not fits:
        row = row.refused(no_node_reason(row.plan))
    return row


def _row_selection(profiles: list[dict], key: RowKey) -> Selection | None:
    slug, option, choice = key
    try:
        return select(profiles, {"profile": slug} if option is None else {"profile": slug, option: choice})
    except InvalidUserOptionsError:
        return None
