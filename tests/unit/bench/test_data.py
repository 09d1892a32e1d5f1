"""bench.data: real turns as channel messages, about one in five a request or its reply."""

from __future__ import annotations

from collections import Counter
from itertools import islice

import orjson

from bench.data import MAX_BYTES, MIN_BYTES, encoded_messages, message_stream
from bench.wake import warm_and_load
from projections.model import MessageType, encode_message
from streams.conversations import Conversation, Turn


def conversation(name: str, turns: int) -> Conversation:
    speakers = ["ana", "bo", "cy"]
    return Conversation(
        name,
        "test",
        [
            Turn(speakers[i % 3], f"turn {i} of {name}" + ("?" if i % 4 == 0 else " done."))
            for i in range(turns)
        ],
    )


CONVERSATIONS = [conversation(f"meeting-{n}", 40) for n in range(5)]


def test_single_turns_one_in_five_a_request_or_its_reply() -> None:
    messages = list(islice(message_stream(CONVERSATIONS, 20, merged=False), 4000))
    kinds = Counter(m.type for m in messages)
    requests = kinds[MessageType.QUERY] + kinds[MessageType.COMMAND]
    replies = kinds[MessageType.RESPONSE] + kinds[MessageType.DONE]
    assert 0.15 < (requests + replies) / len(messages) < 0.25
    assert kinds[MessageType.QUERY] and kinds[MessageType.COMMAND]
    assert abs(requests - replies) <= 20  # every channel has at most one request open


def test_replies_answer_an_earlier_request_of_their_channel_from_someone_else() -> None:
    opened: dict[str, tuple[str, str, MessageType]] = {}
    for message in islice(message_stream(CONVERSATIONS, 5, merged=False), 2000):
        if message.type in (MessageType.QUERY, MessageType.COMMAND):
            assert message.correlation_id
            opened[message.id] = (message.channel, message.sender, message.type)
        elif message.type in (MessageType.RESPONSE, MessageType.DONE):
            assert message.in_reply_to is not None
            channel, asker, kind = opened.pop(message.in_reply_to)
            assert channel == message.channel and asker != message.sender
            expected = MessageType.RESPONSE if kind is MessageType.QUERY else MessageType.DONE
            assert message.type is expected


def test_merged_messages_stay_between_half_and_two_kilobytes() -> None:
    records = encoded_messages(CONVERSATIONS, 300, 10)
    assert all(MIN_BYTES <= len(value) <= MAX_BYTES for _, value in records)
    assert all(key == orjson.loads(value)["channel"].encode() for key, value in records)


def test_single_turns_are_one_turn_each() -> None:
    message = next(message_stream(CONVERSATIONS, 3, merged=False))
    assert message.content is not None and "\n" not in message.content
    assert len(encode_message(message)) < MIN_BYTES


def test_warm_up_holds_each_channels_first_message_and_the_load_the_rest() -> None:
    warm, load = warm_and_load(CONVERSATIONS, 8, 100, "w")
    assert len(load) == 100
    assert sorted(key for _, key, _ in warm) == sorted({key for _, key, _ in warm})
    assert len(warm) == 8
    ids = [message_id for message_id, _, _ in warm + load]
    assert len(ids) == len(set(ids))
    firsts = {key: message_id for message_id, key, _ in reversed(warm + load)}
    assert all(firsts[key] == message_id for message_id, key, _ in warm)
