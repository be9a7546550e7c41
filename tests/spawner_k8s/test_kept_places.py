"""After a hub restart, until their spawns resume, gated pods keep their place: a newcomer queues behind
them, a freed slot waits for the one it fits rather than going to the newcomer, and the spawn form
counts them as waiting (docs/queue.md, "A hub restart while spawns wait")."""

from __future__ import annotations

import asyncio

from fracnb_spawner.hubstate import HubState
from fracnb_testbed.procs import wait_until_async
from tests.spawner_k8s.helpers import ticket_of

from .test_queue import fill_every_slot, gated, in_group, quarter_config, queued


async def test_a_newcomer_after_a_restart_waits_behind_the_kept_places(cluster_spawner, testbed, k8s_namespace) -> None:
    fillers = await fill_every_slot(testbed, k8s_namespace)
    henry = in_group(cluster_spawner({"profile": "quarter"}, user="henry", config=quarter_config()))
    (task,) = await queued([henry])
    task.cancel()  # the hub goes away with the spawn waiting; the pod keeps its place
    await asyncio.gather(task, return_exceptions=True)
    await HubState.discard()

    nina = in_group(cluster_spawner({"profile": "quarter"}, user="nina", config=quarter_config()))
    (waiting,) = await queued([nina])
    # henry's kept place is first
    await wait_until_async(lambda: ticket_of(nina).position == 2, what="nina second in line", timeout=60)
    capacity = await HubState.current().queue.capacity(nina.queue.ask)
    assert (capacity.free, capacity.waiting) == (0, 2)
    testbed.delete_pod(k8s_namespace, fillers[0], grace_seconds=0)
    # The freed slot is held for henry: nina stays queued, first in line of the spawns this hub waits on.
    await wait_until_async(lambda: ticket_of(nina).position == 1, what="nina first in line", timeout=60)
    assert gated(testbed, k8s_namespace, nina.pod_name)
    # henry's spawn resumes (the fracnb service asks the hub to start it again) and takes the slot.
    again = in_group(cluster_spawner({"profile": "quarter"}, user="henry", config=quarter_config()))
    await asyncio.wait_for(again.start(), 60)
    assert gated(testbed, k8s_namespace, nina.pod_name)
    testbed.delete_pod(k8s_namespace, fillers[1], grace_seconds=0)
    await asyncio.wait_for(waiting, 60)
    await asyncio.gather(again.stop(), nina.stop())
