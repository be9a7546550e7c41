"""The hub's choices as the service knows them from the hub's config file: their display names, and the
slot kinds they compete for, in GPU shares. Pure, once the config is read.

The service page names a server's choice as the spawn form does ("0.25 GPU", not ``quarter``), a
slot kind by what it is ("0.25 GPU (time-slicing)", not ``nvidia.com-gpu.shared.local.4.time-slicing``),
and the admin's GPU capacity per slot kind that a profile can use: GPU shares on the nodes the
profiles select, not every node's units added up. A ``profile_list`` computed per user (a callable)
cannot be known here: names then fall back to the slugs, and the capacity table is empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from traitlets.config import Config

from fracnb_spawner.cluster.nodes import free_by_node
from fracnb_spawner.cluster.slots import Ask, Cluster, ResourceAsk, servers_free
from fracnb_spawner.common.podkeys import FRACTION_ANNOTATION, SLOT_KIND_LABEL, is_waiting
from fracnb_spawner.config.profiles import InvalidUserOptionsError, initialize_profiles, select
from fracnb_spawner.config.traits import configured_traits, spawner_section
from fracnb_spawner.form.rows import RowKey, describe
from fracnb_spawner.gpu.backends import is_gpu_resource
from fracnb_spawner.gpu.plan import GPUConfigError, GPUPlan
from fracnb_spawner.gpu.words import describe_plan, where
from fracnb_spawner.quota.policy import gpus_text, parse_gpus
from fracnb_spawner.spawnplan import SpawnContext, SpawnPlan, plan_spawn

GPU_COUNT_LABEL = "nvidia.com/gpu.count"  # GFD: physical GPUs of a node
PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class OfferedChoice:
    key: RowKey
    name: str  # as the spawn form shows it: the profile's display name, and the choice's
    plan: GPUPlan
    ask: Ask | None


@dataclass(frozen=True)
class HubChoices:
    """What the service knows of the hub's profile list."""

    choices: tuple[OfferedChoice, ...] = ()
    profile_names: Mapping[str, str] = field(default_factory=dict)

    def profile_name(self, slug: str) -> str:
        """The profile's display name; the slug itself for a profile the list does not have (any more)."""
        return self.profile_names.get(slug, slug)

    def kind_name(self, kind: str) -> str:
        """A slot kind in words: "0.25 GPU (time-slicing)"; the label itself for kinds no choice has."""
        found = next((c for c in self.choices if c.ask is not None and c.ask.kind == kind), None)
        return kind if found is None else describe_plan(found.plan) + where(found.plan)

    def kinds(self) -> dict[str, list[OfferedChoice]]:
        """Slot kind -> the choices that compete for it, in the profile list's order."""
        kinds: dict[str, list[OfferedChoice]] = {}
        for choice in self.choices:
            if choice.ask is not None:
                kinds.setdefault(choice.ask.kind, []).append(choice)
        return kinds


def hub_choices(config: Config) -> HubChoices:
    """The hub's choices from its config (empty for a callable profile list or one that does not load)."""
    raw = spawner_section(config).get("profile_list", [])
    if callable(raw) or not raw:
        return HubChoices()
    try:
        traits = configured_traits(config)
        profiles = initialize_profiles(raw)
        rows = describe(profiles, traits.gpu_defaults())
    except Exception:  # the hub refuses such a config at its start; the page then shows slugs
        return HubChoices()
    names = {p["slug"]: str(p.get("display_name") or p["slug"]) for p in profiles}
    backend = traits.backend_settings()
    gpu_cull, cpu_cull = traits.cull_defaults()
    node_selector = _configured(config, "node_selector") or {}
    context = SpawnContext(backend, gpu_cull, cpu_cull, node_selector, "jupyter-service")
    offered = []
    for key, row in rows.items():
        slug, option, choice = key
        if option is None and any(k[0] == slug and k[1] is not None for k in rows):
            continue  # a profile with options: its choices are listed instead
        try:
            selection = select(profiles, {"profile": slug} if option is None else {"profile": slug, option: choice})
            plan = plan_spawn(selection, row.plan, context, lambda name: is_gpu_resource(name, backend))
        except (InvalidUserOptionsError, GPUConfigError):
            continue
        name = names[slug] if option is None else f"{names[slug]}: {_choice_name(profiles, key)}"
        offered.append(OfferedChoice(key, name, row.plan, plan.ask or _counting_ask(plan, node_selector)))
    return HubChoices(tuple(offered), names)


def _counting_ask(plan: SpawnPlan, node_selector: Mapping[str, str]) -> ResourceAsk | None:
    """For a choice another scheduler places (HAMi, KAI), the extended resource its pod asks for, so that
    the admin page can count its nodes' capacity all the same; None without one."""
    kind = plan.pod.labels.get(SLOT_KIND_LABEL)
    if not plan.pod.resources or not kind:
        return None
    resource, amount = next(iter(plan.pod.resources.items()))
    selector = {**{k: str(v) for k, v in node_selector.items()}, **plan.pod.node_selector}
    return ResourceAsk(kind, resource, selector, int(amount) if str(amount).isdigit() else 1)


def _configured(config: Config, name: str) -> Any:
    for section in ("FractionalSpawner", "KubeSpawner", "Spawner"):
        if section in config and name in config[section]:
            return config[section][name]
    return None


def _choice_name(profiles: list[dict], key: RowKey) -> str:
    slug, option, choice = key
    profile = next(p for p in profiles if p["slug"] == slug)
    entry = profile["profile_options"][option]["choices"][choice]
    return str(entry.get("display_name") or choice)


# ---- capacity per slot kind ------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotKindUse:
    """One slot kind the hub's choices use, in GPU shares, on the nodes their selector picks only."""

    kind: str
    what: str  # "0.25 GPU (time-slicing)"
    choices: tuple[str, ...]  # display names of the choices that compete for it
    product: str
    nodes: int
    gpus: Fraction  # capacity: the units those nodes offer, in GPUs
    in_use: Fraction  # what pods bound there take of it (the hub's servers and anything else)
    waiting: Fraction  # shares the servers queued for it ask
    free_servers: int  # more servers of its choices that fit now (what the spawn form says)
    share: Fraction  # one server's share

    @property
    def free(self) -> Fraction:
        """Shares free now: the servers that fit, never more than the capacity not in use."""
        return max(min(self.free_servers * self.share, self.gpus - self.in_use), Fraction(0))


def slot_kind_uses(
    choices: HubChoices, nodes: list[Mapping[str, Any]], pods: list[Mapping[str, Any]]
) -> list[SlotKindUse]:
    """Each slot kind of the hub's choices counted by extended resources (device plugins), with what the
    cluster's nodes offer and pods take of it, in GPU shares. DRA kinds need the devices and are left out."""
    uses = []
    cluster = Cluster(nodes=[dict(n) for n in nodes], pods=[dict(p) for p in pods])
    for kind, offered in choices.kinds().items():
        ask, plan = offered[0].ask, offered[0].plan
        if not isinstance(ask, ResourceAsk):
            continue
        matching = [n for n in nodes if _matches(n, ask)]
        if not matching:
            continue
        per_unit = [_gpus_per_unit(n, ask, plan) for n in matching]
        allocatable = [_units(n, ask.resource) for n in matching]
        free = list(free_by_node(matching, pods, ask.resource, ask.selector))
        uses.append(
            SlotKindUse(
                kind=kind,
                what=describe_plan(plan),
                choices=tuple(c.name for c in offered),
                product=_product(matching),
                nodes=len(matching),
                gpus=sum((u * a for u, a in zip(per_unit, allocatable, strict=True)), Fraction(0)),
                in_use=sum((u * (a - f) for u, a, f in zip(per_unit, allocatable, free, strict=True)), Fraction(0)),
                waiting=_waiting_shares(pods, kind),
                free_servers=servers_free(ask, cluster),
                share=plan.fraction,
            )
        )
    return uses


def _units(node: Mapping[str, Any], resource: str) -> int:
    text = str(((node.get("status") or {}).get("allocatable") or {}).get(resource, "0"))
    return int(text) if text.isdigit() else 0


def _matches(node: Mapping[str, Any], ask: ResourceAsk) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    unschedulable = (node.get("spec") or {}).get("unschedulable")
    return (
        not unschedulable
        and all(labels.get(k) == v for k, v in ask.selector.items())
        and _units(node, ask.resource) > 0
    )


def _gpus_per_unit(node: Mapping[str, Any], ask: ResourceAsk, plan: GPUPlan) -> Fraction:
    """What one unit of the resource is in GPUs: a server's share over its units; on HAMi nodes, whose
    units split each GPU deviceSplitCount ways whatever the share, the node's GPUs over its units."""
    count = ((node.get("metadata") or {}).get("labels") or {}).get(GPU_COUNT_LABEL, "")
    if plan.backend == "hami" and count.isdigit():
        return Fraction(int(count), _units(node, ask.resource))
    return plan.fraction / max(ask.units, 1)


def _product(nodes: Iterable[Mapping[str, Any]]) -> str:
    products = sorted({((n.get("metadata") or {}).get("labels") or {}).get(PRODUCT_LABEL, "") for n in nodes} - {""})
    return ", ".join(p.removesuffix("-SHARED") for p in products) or "unknown product"


def _waiting_shares(pods: Iterable[Mapping[str, Any]], kind: str) -> Fraction:
    total = Fraction(0)
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if (metadata.get("labels") or {}).get(SLOT_KIND_LABEL) != kind or not is_waiting(pod):
            continue
        try:
            total += parse_gpus((metadata.get("annotations") or {}).get(FRACTION_ANNOTATION, "0"))
        except ValueError:
            continue
    return total


def shares_text(amount: Fraction | None) -> str:
    """ "0.75 GPU", "0 GPUs", "—" for unknown (the amounts' rule: quota.gpus_text)."""
    return "—" if amount is None else gpus_text(amount)
