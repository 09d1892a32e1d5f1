"""A channel's title and keyphrases, read from its summary and window when asked for."""

from projections.model import Message, MessageType
from projections.recap.title import channel_keyphrases, channel_title, summary_material


def said(content: str) -> Message:
    return Message(channel="c", sender="ann", type=MessageType.STATUS, content=content)


DIGEST = (
    "Participants: ann, bob\n"
    "Key terms: parser, unicode, release\n"
    "Discussed:\n"
    "- [ann] The parser rejects unicode channel names.\n"
    "- [bob] The unicode parser fix ships with the release."
)


def test_summary_material_is_what_the_summary_says_without_its_structure() -> None:
    assert summary_material(DIGEST) == [
        "parser, unicode, release",
        "The parser rejects unicode channel names.",
        "The unicode parser fix ships with the release.",
    ]
    assert summary_material(None) == [] and summary_material("") == []
    assert summary_material("We agreed to ship Friday.") == ["We agreed to ship Friday."]


def test_the_title_says_what_the_whole_channel_is_about_not_only_its_last_messages() -> None:
    window = [said("Lunch at noon?"), said("Sure."), said("Noon works, the usual place.")]
    assert channel_title(window, "The parser rejects unicode.") == "Noon"
    found = channel_title(window, "The parser rejects unicode.", DIGEST)
    assert found is not None and found.startswith("Parser, unicode")
    assert "ann" not in found and "participant" not in found.lower()
    counts = channel_keyphrases(window, DIGEST)
    assert counts["parser"][0] == 3 and counts["noon"][0] == 2


def test_before_a_phrase_repeats_the_opening_is_the_title() -> None:
    assert channel_title([said("Plan the release train")], "Plan the release train") == (
        "Plan the release train"
    )
    assert channel_title([said("yeah"), said("okay")], None) is None


def test_a_summary_quoting_the_window_does_not_make_its_phrases_repeat() -> None:
    # The verbatim tier's summary of a one-message channel is that message: the title is
    # still the opening until the channel says a phrase again.
    opening = "we are migrating the billing tables"
    window = [said(opening)]
    assert channel_title(window, opening, f"[ann] {opening}") == opening
    assert channel_keyphrases(window, f"[ann] {opening}")["billing table"][0] == 1
    again = [*window, said("the billing tables move on Friday")]
    assert channel_title(again, opening, f"[ann] {opening}") == "Billing table"


def test_keyphrases_counted_already_give_the_title_they_would_give_counted_again() -> None:
    window = [said("Lunch at noon?"), said("Sure."), said("Noon works, the usual place.")]
    counted = channel_keyphrases(window, DIGEST)
    assert channel_title(window, "x", DIGEST, counted) == channel_title(window, "x", DIGEST)
    # The counts given are what is read: none, and the opening stands in.
    assert channel_title(window, "Plan the release train", DIGEST, {}) == "Plan the release train"
