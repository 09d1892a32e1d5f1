import pytest
from aiokafka.errors import GroupCoordinatorNotAvailableError, TopicAuthorizationFailedError

from streams.worker.run import with_retries


async def test_transient_startup_errors_are_retried() -> None:
    calls = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise GroupCoordinatorNotAvailableError()
        return "done"

    assert await with_retries(flaky, attempts=5, delay=0) == "done"
    assert len(calls) == 3


async def test_permanent_errors_and_exhausted_retries_are_raised() -> None:
    async def denied() -> None:
        raise TopicAuthorizationFailedError()

    with pytest.raises(TopicAuthorizationFailedError):
        await with_retries(denied, attempts=5, delay=0)

    async def never() -> None:
        raise GroupCoordinatorNotAvailableError()

    with pytest.raises(GroupCoordinatorNotAvailableError):
        await with_retries(never, attempts=2, delay=0)
