"""The fracnb service's read of training demand for borrowed cards (:mod:`.demand`): one LIST of every
namespace's pods, and only while a borrower runs."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from fracnb_spawner.borrowing.demand import is_borrower, training_demand, with_training_demand

log = logging.getLogger("fracnb.service")
T = TypeVar("T")


async def training_demand_of(source: Any, singleuser_pods: Iterable[Mapping[str, Any]]) -> dict[str, datetime]:
    """Slot kind of borrowers -> since when training has waited for their pool; {} while nobody borrows, or when
    the pods of every namespace cannot be listed (said in the log; the borrowers then keep their usual timeout).
    ``source``: the service's pod source (``gpu_capacity()`` lists nodes and every namespace's pods)."""
    borrowers = [pod for pod in singleuser_pods if is_borrower(pod)]
    listing = getattr(source, "gpu_capacity", None)
    if not borrowers or listing is None:
        return {}
    try:
        _nodes, pods = await listing()
    except Exception as error:  # no list on pods cluster-wide: borrowers are culled as other servers
        log.warning("No training demand for borrowed cards: cannot list the pods of every namespace (%s)", error)
        return {}
    return training_demand(borrowers, pods)


async def with_training_waits(judge: T, source: Any, singleuser_pods: Iterable[Mapping[str, Any]]) -> T:
    """The cull pass's judge (a frozen dataclass with a ``demand`` by slot kind) with training's demand for the
    borrowers' pools added (:func:`training_demand_of`): their idle borrowers get their timeout under demand."""
    training = await training_demand_of(source, singleuser_pods)
    if not training:
        return judge
    return replace(judge, demand=with_training_demand(judge.demand, training))  # type: ignore[type-var]
