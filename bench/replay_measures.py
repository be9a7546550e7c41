"""What the replay measures, pure: figures per step from who holds which card, then the day's summary.

One step is a snapshot: every pod holding (part of) a card, whether its work keeps the GPU busy and
how much of the card's compute that work would use (the model's ``sm_demand_*``), plus the
notebook starts waiting for a slot. docs/evidence.md gives each measure's formula; in short, per
pool (development, training) and for the whole cluster:

- a card is **held** while anyone holds a share of it, **busy** while one of its holders is busy;
  occupancy and busy hours per card per day are those card-hours over the pool's cards;
- **packing efficiency** at the development pool's peak (the step where notebooks hold the most
  shares there): ⌈notebook shares⌉ / cards holding notebooks; **cards freed** at that step: the
  pool's cards no notebook holds (free, or lent to training jobs where the run lends);
- **allocated but idle**: each notebook's share of a card times the time it is not busy;
- **stranded**: free capacity on partly held cards in pieces each too small for a start that waits
  in that pool at that moment, counted when together they would have fitted it;
- **modelled utilisation** of a card: its busy holders' demand, capped at the whole card.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

DAY = 86400
DEV_POOL = "development"
TRAIN_POOL = "training"
POOLS = (DEV_POOL, TRAIN_POOL)


@dataclass(frozen=True)
class Holder:
    """One pod on one card at one moment."""

    card: str
    pool: str
    share: Fraction
    busy: bool
    demand: float = 0.0
    notebook: bool = True


@dataclass(frozen=True)
class Waiting:
    """A notebook start waiting for a slot: the pool and the share of a card it asks for."""

    pool: str
    share: Fraction


@dataclass(frozen=True)
class PoolStep:
    cards: int  # schedulable cards of the pool
    held: int  # cards with a holder
    busy: int  # cards with a busy holder
    shares: float  # shares held, summed (GPUs)
    notebooks: int
    notebook_cards: int  # cards with a notebook on them
    notebook_shares: float
    idle_notebook_shares: float  # shares of notebooks that are not busy
    job_shares: float
    utilisation: float  # capped modelled compute, summed over cards
    stranded: float  # GPUs


@dataclass(frozen=True)
class StepFigures:
    moment: int
    pools: Mapping[str, PoolStep]
    waiting: int = 0  # notebook starts waiting for a slot
    seconds: int = 60  # how long the snapshot stands for (up to the next step)

    def total(self, name: str) -> float:
        return sum(getattr(pool, name) for pool in self.pools.values())


def _stranded(free: Mapping[str, Fraction], waiting: Iterable[Waiting], pool: str) -> Fraction:
    best = Fraction(0)
    for request in waiting:
        if request.pool != pool:
            continue
        pieces = sum((room for room in free.values() if 0 < room < request.share), Fraction(0))
        if pieces >= request.share:
            best = max(best, pieces)
    return best


def step_figures(
    moment: int,
    holders: Iterable[Holder],
    cards: Mapping[str, Sequence[str]],
    waiting: Sequence[Waiting] = (),
    seconds: int = 60,
) -> StepFigures:
    """The figures of one snapshot. ``cards``: each pool's schedulable cards."""
    holders = list(holders)
    pools = {}
    for pool, names in cards.items():
        mine = [h for h in holders if h.pool == pool]
        held: dict[str, Fraction] = {}
        demand: dict[str, float] = {}
        for holder in mine:
            held[holder.card] = held.get(holder.card, Fraction(0)) + holder.share
            if holder.busy:
                demand[holder.card] = demand.get(holder.card, 0.0) + holder.demand
        free = {card: 1 - held[card] for card in names if card in held}
        notebooks = [h for h in mine if h.notebook]
        pools[pool] = PoolStep(
            cards=len(names),
            held=len(held),
            busy=len(demand),
            shares=float(sum(held.values(), Fraction(0))),
            notebooks=len(notebooks),
            notebook_cards=len({h.card for h in notebooks}),
            notebook_shares=float(sum((h.share for h in notebooks), Fraction(0))),
            idle_notebook_shares=float(sum((h.share for h in notebooks if not h.busy), Fraction(0))),
            job_shares=float(sum((h.share for h in mine if not h.notebook), Fraction(0))),
            utilisation=sum(min(1.0, load) for load in demand.values()),
            stranded=float(_stranded(free, waiting, pool)),
        )
    return StepFigures(moment, pools, len(waiting), seconds)


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` 0.95 for p95); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass(frozen=True)
class Outcomes:
    """What happened to spawns, kernels and jobs during a run (counted by the driver)."""

    waits: tuple[float, ...] = ()  # seconds from a researcher's first request to a running server
    served: int = 0  # researchers who had a server at some point
    refused: int = 0  # start attempts refused (quota) or timed out (no slot)
    given_up: int = 0  # times a researcher stopped trying for a while after repeated refusals
    culled: int = 0
    busy_culled: int = 0  # servers culled while their kernel was busy
    demand_culled: int = 0  # culled by the shorter idle timeout while someone waited for the slot kind
    state_lost: int = 0  # culled servers whose kernel state was lost
    hibernated: int = 0  # culled servers whose kernel state was saved (hibernation, modelled)
    slowdowns: tuple[float, ...] = ()  # per busy segment run, wall time over planned time
    jobs_finished: int = 0
    jobs_preempted: int = 0  # by kube-scheduler, for a notebook
    jobs_reclaimed: int = 0  # by the run, from lent development cards, for a notebook
    redone_hours: float = 0.0  # training GPU-hours run since a stopped job's last checkpoint, to be done again
    reclaim_waits: tuple[float, ...] = ()  # seconds to a running server for starts lent cards were reclaimed for
    bound_slowdowns: tuple[float, ...] = ()  # per busy segment, under the fluid bound on the cards the run held
    contention: str = ""  # the run's contention rule (bench/replay_contention.py)
    borrowed_peak: int = 0  # the most training cards notebooks borrowed at one step


@dataclass(frozen=True)
class PoolSummary:
    cards: int
    occupancy: float  # hours held per card per day
    busy: float  # hours busy per card per day
    utilisation: float  # modelled, mean over cards and the day (0..1)
    idle_notebook_hours: float
    notebook_hours: float  # GPU-hours held by notebooks
    job_hours: float  # GPU-hours held by training jobs
    stranded_hours: float


@dataclass(frozen=True)
class Summary:
    pools: Mapping[str, PoolSummary]
    cluster: PoolSummary
    researcher_hours: float
    peak_notebooks: int
    peak_dev_shares: float  # notebook shares at the development pool's peak
    peak_dev_cards_held: int  # development cards holding notebooks then
    peak_notebook_cards: int  # cards of any pool holding a notebook, at the development pool's peak
    dev_cards: int
    queue_peak: int
    outcomes: Outcomes = field(default_factory=Outcomes)

    @property
    def packing(self) -> float:
        """⌈shares held⌉ / cards held at the development pool's peak (1.0 when nothing is held)."""
        if not self.peak_dev_cards_held:
            return 1.0
        return math.ceil(self.peak_dev_shares - 1e-9) / self.peak_dev_cards_held

    @property
    def dev_cards_freed(self) -> int:
        return self.dev_cards - self.peak_dev_cards_held

    @property
    def idle_per_researcher_hour(self) -> float:
        return self.cluster.idle_notebook_hours / self.researcher_hours if self.researcher_hours else 0.0

    @property
    def wait_p50(self) -> float:
        return percentile(self.outcomes.waits, 0.5)

    @property
    def wait_p95(self) -> float:
        return percentile(self.outcomes.waits, 0.95)

    @property
    def slowdown_p95(self) -> float:
        return percentile(self.outcomes.slowdowns, 0.95) if self.outcomes.slowdowns else 1.0

    @property
    def slowdown_bound(self) -> float:
        """The fluid bound's p95: the best any placement could do on the cards this run held, under its rule."""
        bound = self.outcomes.bound_slowdowns
        return percentile(bound, 0.95) if bound else 1.0

    @property
    def reclaim_p95(self) -> float:
        return percentile(self.outcomes.reclaim_waits, 0.95)

    @property
    def redone_share(self) -> float:
        """Training GPU-hours redone over those delivered (held by jobs)."""
        return self.outcomes.redone_hours / self.cluster.job_hours if self.cluster.job_hours else 0.0

    @property
    def jobs_a_week(self) -> float:
        return self.outcomes.jobs_finished * 7


def _pool_summary(pools: Sequence[tuple[PoolStep, float]], scale: float) -> PoolSummary:
    """``pools``: each step's figures with the hours it stands for."""
    cards = max((p.cards for p, _ in pools), default=0)
    per_card_day = scale / cards if cards else 0.0
    span = sum(hours for _, hours in pools) or 1.0

    def hours_of(name: str) -> float:
        return sum(getattr(p, name) * hours for p, hours in pools)

    return PoolSummary(
        cards=cards,
        occupancy=hours_of("held") * per_card_day,
        busy=hours_of("busy") * per_card_day,
        utilisation=hours_of("utilisation") / (cards * span) if cards else 0.0,
        idle_notebook_hours=hours_of("idle_notebook_shares"),
        notebook_hours=hours_of("notebook_shares"),
        job_hours=hours_of("job_shares"),
        stranded_hours=hours_of("stranded"),
    )


def _merged(pools: Sequence[PoolStep]) -> PoolStep:
    return PoolStep(*(sum(getattr(p, name) for p in pools) for name in PoolStep.__dataclass_fields__))


def summarize(steps: Sequence[StepFigures], outcomes: Outcomes) -> Summary:
    """The day's figures. Hours per card per day are scaled to a 24-hour day when the run is shorter."""
    scale = DAY / (sum(s.seconds for s in steps) or DAY)  # card-hours over the run -> per card per day
    names = sorted({name for s in steps for name in s.pools})
    pools = {
        name: _pool_summary([(s.pools[name], s.seconds / 3600) for s in steps if name in s.pools], scale)
        for name in names
    }
    cluster = _pool_summary([(_merged(list(s.pools.values())), s.seconds / 3600) for s in steps], scale)
    peak = (
        max(steps, key=lambda s: (s.pools[DEV_POOL].notebook_shares, -s.moment), default=None)
        if DEV_POOL in names
        else None
    )
    return Summary(
        pools=pools,
        cluster=cluster,
        researcher_hours=sum(s.total("notebooks") * s.seconds / 3600 for s in steps),
        peak_notebooks=max((int(s.total("notebooks")) for s in steps), default=0),
        peak_dev_shares=peak.pools[DEV_POOL].notebook_shares if peak else 0.0,
        peak_dev_cards_held=peak.pools[DEV_POOL].notebook_cards if peak else 0,
        peak_notebook_cards=int(peak.total("notebook_cards")) if peak else 0,
        dev_cards=pools[DEV_POOL].cards if DEV_POOL in pools else 0,
        queue_peak=max((s.waiting for s in steps), default=0),
        outcomes=outcomes,
    )


def reduction(before: float, after: float) -> float:
    """Percent fewer (positive) or more (negative) ``after`` has than ``before``; 0 when both are 0."""
    return 0.0 if before == 0 else (1 - after / before) * 100
