"""The in-flight byte budget of the admission routes (pure asyncio)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakes import held
from webhook_svc.http.admission_gate import (
    MIN_RESERVATION_BYTES,
    SMALL_BODY_BYTES,
    BodyReader,
    BodyTimeoutError,
    ByteBudget,
    OverloadedError,
)

Message = dict[str, Any]


def chunks(*parts: bytes, then_stall: bool = False, gap: float = 0.0) -> Any:
    """An ASGI ``receive`` giving ``parts`` as one body (``gap`` seconds apart), then,
    with ``then_stall``, waiting forever for the rest."""
    pending = list(parts)

    async def receive() -> Message:
        if not pending:
            await asyncio.Event().wait()
        if gap:
            await asyncio.sleep(gap)
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending) or then_stall}

    return receive


def test_requests_that_fit_run_together_and_the_rest_wait() -> None:
    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        order: list[str] = []
        big_done = asyncio.Event()

        async def hold(name: str, size: int, until: asyncio.Event) -> None:
            async with held(budget, size, wait_seconds=30):
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
            async with held(budget, 100, wait_seconds=30):
                await release.wait()

        async def waiter(name: str, size: int) -> None:
            async with held(budget, size, wait_seconds=30):
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
            async with held(budget, 80, wait_seconds=30):
                await release.wait()

        holder = asyncio.create_task(blocker())
        await asyncio.sleep(0)
        with pytest.raises(OverloadedError):
            async with held(budget, 50, wait_seconds=0.01):
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
        async with held(budget, 10_000, wait_seconds=1):
            return budget.used

    assert asyncio.run(scenario()) == 100


def test_a_body_is_charged_as_its_bytes_arrive() -> None:
    """Rule (byte budget): a request that declared 1 MiB and sent nothing holds no
    budget, so a small request gets through at once; what a body holds is its bytes
    received plus the fixed part, given back on release."""

    async def scenario() -> None:
        budget = ByteBudget(1024 * 1024)
        reader = BodyReader(budget, 1024 * 1024)
        waiting = asyncio.create_task(reader.read({"content-length": "1048576"}, chunks()))
        await asyncio.sleep(0.05)
        assert budget.used == reader.arriving.used == 0
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


def test_a_partly_sent_stalled_large_body_never_delays_a_small_one() -> None:
    """Rule (small bodies never wait behind large stalled ones): a body that sent
    all but one byte of a declared 1 MiB and stalled holds arrival budget only; a
    small body is read and charged to the judging budget at once, and while the
    stalled body holds the arrival budget, another large body waits for it."""

    async def scenario() -> None:
        mib = 1024 * 1024
        reader = BodyReader(ByteBudget(mib + MIN_RESERVATION_BYTES), mib, stall_seconds=60)
        stalled = asyncio.create_task(
            reader.read({"content-length": str(mib)}, chunks(b"x" * (mib - 1), then_stall=True))
        )
        await asyncio.sleep(0.05)
        assert reader.arriving.used == mib - 1
        assert reader.budget.used == 0

        body, held = await asyncio.wait_for(
            reader.read({"content-length": "3000"}, chunks(b"y" * 3000)), 0.5
        )
        assert len(body) == 3000
        assert held == 3000 + MIN_RESERVATION_BYTES
        reader.release(held)

        other = asyncio.create_task(
            reader.read({"content-length": str(200_000)}, chunks(b"z" * 200_000))
        )
        await asyncio.sleep(0.05)
        assert not other.done()  # waits for arrival budget the stalled body holds
        stalled.cancel()
        body, held = await asyncio.wait_for(other, 1)
        assert len(body) == 200_000
        reader.release(held)
        assert reader.arriving.used == reader.budget.used == 0

    asyncio.run(scenario())


def test_a_small_body_is_not_charged_while_it_arrives() -> None:
    """Rule: a body declared at most SMALL_BODY_BYTES holds no budget until complete."""

    async def scenario() -> None:
        reader = BodyReader(ByteBudget(1024 * 1024), 1024 * 1024, stall_seconds=60)
        task = asyncio.create_task(
            reader.read({"content-length": "1000"}, chunks(b"x" * 999, then_stall=True))
        )
        await asyncio.sleep(0.05)
        assert reader.arriving.used == reader.budget.used == 0
        task.cancel()

    asyncio.run(scenario())


def test_a_chunked_body_is_charged_once_it_grows_past_small() -> None:
    """Rule: without a declared length a body is small until it is not; from then on
    everything it received holds arrival budget."""

    async def scenario() -> None:
        reader = BodyReader(ByteBudget(1024 * 1024), 1024 * 1024, stall_seconds=60)
        first, second = b"a" * SMALL_BODY_BYTES, b"b" * 10
        task = asyncio.create_task(reader.read({}, chunks(first, second, then_stall=True)))
        await asyncio.sleep(0.05)
        assert reader.arriving.used == SMALL_BODY_BYTES + 10
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert reader.arriving.used == 0

    asyncio.run(scenario())


def test_a_stalled_body_is_cut_with_408_and_gives_its_bytes_back() -> None:
    """Rule 408 (stall): a body that receives no byte for ``stall_seconds`` is a
    BodyTimeoutError saying so, and holds nothing afterwards."""

    async def scenario() -> None:
        reader = BodyReader(ByteBudget(1024 * 1024), 1024 * 1024, stall_seconds=0.1)
        started = asyncio.get_running_loop().time()
        with pytest.raises(BodyTimeoutError, match=r"no body bytes received for 0\.1 s"):
            await reader.read({"content-length": "200000"}, chunks(b"x" * 100_000, then_stall=True))
        assert asyncio.get_running_loop().time() - started < 1
        assert reader.arriving.used == reader.budget.used == 0

    asyncio.run(scenario())


def test_a_trickled_body_is_cut_with_408_at_the_read_bound() -> None:
    """Rule 408 (slow body): chunks that keep coming, each inside the stall bound, still
    must complete the body within ``read_seconds``."""

    async def scenario() -> None:
        reader = BodyReader(
            ByteBudget(1024 * 1024), 1024 * 1024, read_seconds=0.3, stall_seconds=0.2
        )
        trickle = chunks(*[b"x"] * 100, gap=0.05)
        with pytest.raises(BodyTimeoutError, match=r"body not received within 0\.3 s"):
            await reader.read({"content-length": "100"}, trickle)
        assert reader.arriving.used == reader.budget.used == 0

    asyncio.run(scenario())
