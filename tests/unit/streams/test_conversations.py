from projections.model import MessageType
from streams.conversations import Conversation, Turn, _clean, as_messages, conversations


def test_questions_become_queries_answered_by_the_next_speaker() -> None:
    convo = Conversation(
        "x",
        "test",
        [
            Turn("ann", "Shall we ship?"),
            Turn("ann", "Anyone?"),
            Turn("bob", "Yes."),
            Turn("bob", "Ok"),
        ],
    )
    messages = as_messages(convo, "demo/x")
    assert [m.type for m in messages] == [
        MessageType.QUERY,
        MessageType.QUERY,
        MessageType.RESPONSE,
        MessageType.STATUS,
    ]
    assert messages[2].in_reply_to == messages[1].id
    assert messages[2].correlation_id == messages[1].correlation_id
    assert messages[1].created_at > messages[0].created_at
    assert as_messages(convo, "demo/x")[0].correlation_id == messages[0].correlation_id


def test_markup_is_removed() -> None:
    assert _clean("so {disfmarker} we  go {vocalsound}") == "so we go"


def test_some_real_conversation_is_available() -> None:
    first = next(conversations())
    assert len(first.turns) > 10 and all(turn.text for turn in first.turns)
