"""The model server's slot scheduler, exercised with real asyncio tasks."""

import asyncio

from drillbook.sandbox.model import SlotScheduler


async def grant_order(fair: bool) -> list[str]:
    """One slot; the aggressor queues 5 requests before the victim queues 1."""
    scheduler = SlotScheduler(slots=1, fair=fair)
    await scheduler.acquire("aggressor")  # holds the only slot
    order: list[str] = []

    async def request(tenant: str) -> None:
        await scheduler.acquire(tenant)
        order.append(tenant)
        await asyncio.sleep(0)
        scheduler.release(tenant)

    tasks = [asyncio.create_task(request("aggressor")) for _ in range(5)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(request("victim")))
    await asyncio.sleep(0)
    scheduler.release("aggressor")
    await asyncio.gather(*tasks)
    return order


def test_fair_sharing_serves_the_victim_before_the_aggressors_backlog():
    order = asyncio.run(grant_order(fair=True))
    assert order.index("victim") == 0


def test_first_come_first_served_makes_the_victim_wait_behind_the_flood():
    order = asyncio.run(grant_order(fair=False))
    assert order.index("victim") == 5


def test_slots_are_never_oversubscribed():
    async def scenario() -> int:
        scheduler = SlotScheduler(slots=3, fair=True)
        peak = 0

        async def request(tenant: str) -> None:
            nonlocal peak
            await scheduler.acquire(tenant)
            peak = max(peak, scheduler.in_use)
            await asyncio.sleep(0.001)
            scheduler.release(tenant)

        await asyncio.gather(*(request(f"t{i % 4}") for i in range(40)))
        assert scheduler.in_use == 0 and scheduler.queue_depth("t0") == 0
        return peak

    assert asyncio.run(scenario()) == 3


def test_a_cancelled_waiter_leaves_the_queue():
    async def scenario() -> None:
        scheduler = SlotScheduler(slots=1, fair=True)
        await scheduler.acquire("a")
        waiter = asyncio.create_task(scheduler.acquire("b"))
        await asyncio.sleep(0)
        assert scheduler.queue_depth("b") == 1
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert scheduler.queue_depth("b") == 0
        scheduler.release("a")
        assert scheduler.in_use == 0

    asyncio.run(scenario())


def test_a_waiter_cancelled_before_it_is_served_does_not_leak_a_slot():
    """Task.cancel() cancels the awaited future at once; a release in the same tick must skip it."""

    async def scenario() -> None:
        scheduler = SlotScheduler(slots=1, fair=True)
        await scheduler.acquire("a")
        waiter = asyncio.create_task(scheduler.acquire("b"))
        await asyncio.sleep(0)
        waiter.cancel()  # the future is cancelled now; the task sees it on the next tick
        scheduler.release("a")  # dispatches in this same tick
        await asyncio.gather(waiter, return_exceptions=True)
        assert scheduler.in_use == 0 and scheduler.queue_depth("b") == 0
        await asyncio.wait_for(scheduler.acquire("c"), 1)  # the slot is still usable

    asyncio.run(scenario())
