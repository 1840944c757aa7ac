"""The in-flight byte budget of the admission routes (pure asyncio)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from webhook_svc.admission_gate import (
    MIN_RESERVATION_BYTES,
    BodyReader,
    ByteBudget,
    OverloadedError,
)


def test_requests_that_fit_run_together_and_the_rest_wait() -> None:
    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        order: list[str] = []
        big_done = asyncio.Event()

        async def hold(name: str, size: int, until: asyncio.Event) -> None:
            async with budget.reserve(size, wait_seconds=30):
                order.append(f"{name} in")
                await until.wait()
            order.append(f"{name} out")

        first = asyncio.create_task(hold("big1", 60, big_done))
        await asyncio.sleep(0)
        small_gate = asyncio.Event()
        small = asyncio.create_task(hold("small", 30, small_gate))
        await asyncio.sleep(0)
        assert budget.used == 90
        second = asyncio.create_task(hold("big2", 60, asyncio.Event()))
        await asyncio.sleep(0)
        assert "big2 in" not in order  # waits: 90 + 60 > 100
        small_gate.set()
        await small
        big_done.set()
        await first
        await asyncio.sleep(0)
        assert "big2 in" in order
        second.cancel()
        return order

    assert asyncio.run(scenario())[:2] == ["big1 in", "small in"]


def test_the_smallest_waiter_goes_first() -> None:
    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        order: list[str] = []
        release = asyncio.Event()

        async def blocker() -> None:
            async with budget.reserve(100, wait_seconds=30):
                await release.wait()

        async def waiter(name: str, size: int) -> None:
            async with budget.reserve(size, wait_seconds=30):
                order.append(name)

        holder = asyncio.create_task(blocker())
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(waiter(n, s)) for n, s in (("big", 90), ("small", 5))]
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(holder, *tasks)
        return order

    assert asyncio.run(scenario()) == ["small", "big"]


def test_a_waiter_that_never_fits_in_time_is_overloaded_and_leaves_nothing_behind() -> None:
    async def scenario() -> ByteBudget:
        budget = ByteBudget(100)
        release = asyncio.Event()

        async def blocker() -> None:
            async with budget.reserve(80, wait_seconds=30):
                await release.wait()

        holder = asyncio.create_task(blocker())
        await asyncio.sleep(0)
        with pytest.raises(OverloadedError):
            async with budget.reserve(50, wait_seconds=0.01):
                pass
        release.set()
        await holder
        return budget

    budget = asyncio.run(scenario())
    assert budget.used == 0
    assert all(future.done() for _, _, future in budget._waiters)


def test_a_request_larger_than_the_budget_runs_alone() -> None:
    async def scenario() -> int:
        budget = ByteBudget(100)
        async with budget.reserve(10_000, wait_seconds=1):
            return budget.used

    assert asyncio.run(scenario()) == 100


def test_a_body_is_charged_as_its_bytes_arrive() -> None:
    """Rule (byte budget): a request that declared 1 MiB and sent nothing holds no
    budget, so a small request gets through at once; what a body holds is its bytes
    received plus the fixed part, given back on release."""

    async def scenario() -> None:
        budget = ByteBudget(1024 * 1024)
        reader = BodyReader(budget, 1024 * 1024)
        never = asyncio.Event()

        async def stalled() -> dict[str, Any]:
            await never.wait()
            return {}

        waiting = asyncio.create_task(reader.read({"content-length": "1048576"}, stalled))
        await asyncio.sleep(0.05)
        assert budget.used == 0
        messages = [{"type": "http.request", "body": b"x" * 100, "more_body": False}]

        async def small() -> dict[str, Any]:
            return messages.pop()

        body, held = await asyncio.wait_for(reader.read({"content-length": "100"}, small), 1)
        assert body == b"x" * 100
        assert held == budget.used == 100 + MIN_RESERVATION_BYTES
        reader.release(held)
        assert budget.used == 0
        waiting.cancel()

    asyncio.run(scenario())
