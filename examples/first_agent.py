import asyncio
import uuid
from datetime import timedelta

from streams.client import Client, MessageType, decided


async def main() -> None:
    channel = f"team/release-{uuid.uuid4().hex[:6]}"  # a channel of its own on each run
    async with Client() as chorus:  # settings from the CHORUS_* environment
        await chorus.configure(channel, termination=["all-commitments-resolved"])
        ask = await chorus.send(  # a request: its correlation_id is generated
            channel,
            sender="planner",
            type="command",
            content="write the changelog",
            target="instance:ana",
            deadline=timedelta(minutes=30),
        )
        await chorus.reply(ask, sender="ana", type=MessageType.STATUS, content="on it")
        await chorus.reply(ask, sender="ana", type="done", content="docs/changelog.md")
        outcome = await chorus.wait_for(ask, timeout=60)  # how ask ended: FULFILLED
        # The first decision since ask: never one the channel reached before it.
        event = await chorus.wait(channel, until=decided, after=ask, timeout=60)
        context = await chorus.context(channel, max_tokens=500, for_agent="ana")
        print(outcome.state, event.decision)
        print(context.text)


asyncio.run(main())
