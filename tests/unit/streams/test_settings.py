"""streams.settings: CHORUS_* variables, the checks on them, and the derived topic values."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streams.settings import (
    RECORD_OVERHEAD_BYTES,
    EmptyApiToken,
    RetiredSetting,
    Settings,
    bearer_header,
    get_settings,
)


def _settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_environment_variables_with_the_prefix_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_PARTITIONS", "7")
    monkeypatch.setenv("CHORUS_PROJECTIONS", '["pkg.mod:Name"]')
    monkeypatch.setenv("PARTITIONS", "99")  # no prefix: not ours
    settings = _settings()
    assert settings.partitions == 7
    assert settings.projections == ["pkg.mod:Name"]


def test_topic_names_carry_the_prefix() -> None:
    assert _settings().topic("messages") == "chorus.messages"
    assert _settings(topic_prefix="t1.").topic("recaps") == "t1.recaps"


def test_topics_accept_a_message_plus_its_envelope() -> None:
    settings = _settings(max_message_bytes=100_000)
    assert settings.topic_max_message_bytes == 100_000 + RECORD_OVERHEAD_BYTES


def test_a_segment_smaller_than_the_largest_record_is_refused() -> None:
    with pytest.raises(ValidationError, match="compacted_segment_bytes"):
        _settings(max_message_bytes=1_000_000, compacted_segment_bytes=1_000_000)
    fits = 1_000_000 + RECORD_OVERHEAD_BYTES
    assert _settings(max_message_bytes=1_000_000, compacted_segment_bytes=fits)


def test_a_fetch_smaller_than_the_largest_record_is_refused() -> None:
    with pytest.raises(ValidationError, match="consumer_fetch_bytes"):
        Settings(consumer_fetch_bytes=512 * 1024)
    assert Settings().consumer_fetch_bytes >= Settings().topic_max_message_bytes


def test_an_empty_ca_file_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_SSL_CAFILE", "")
    assert _settings().ssl_cafile is None


def test_the_api_token_travels_as_a_bearer_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_API_TOKEN", "s3cret")
    expected = {"Authorization": "Bearer s3cret"}
    assert bearer_header(_settings().api_token) == bearer_header("s3cret") == expected
    assert bearer_header(None) == {}


def test_an_empty_api_token_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty token would guard nothing: the API must not run open by accident."""
    monkeypatch.setenv("CHORUS_API_TOKEN", "")
    with pytest.raises(EmptyApiToken, match=r"^CHORUS_API_TOKEN is empty: unset it"):
        _settings()


@pytest.mark.parametrize(
    "values",
    [
        {"batch_max": 0},
        {"batch_wait_ms": 0},
        {"compacted_segment_ms": 999},
        {"commitments_max_active": 0},
        {"summary_max_tokens": 15},
    ],
)
def test_bounds_are_checked(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        _settings(**values)


def test_secrets_do_not_show_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_SASL_PASSWORD", "hunter2")
    settings = _settings()
    assert "hunter2" not in repr(settings)
    assert settings.sasl_password is not None
    assert settings.sasl_password.get_secret_value() == "hunter2"


def test_get_settings_reads_once() -> None:
    get_settings.cache_clear()
    try:
        assert get_settings() is get_settings()
    finally:
        get_settings.cache_clear()


@pytest.mark.parametrize(
    ("variable", "replaced_by"),
    [
        ("CHORUS_FOLD_URL", "the fold role renders their commitments when a view is read"),
        ("CHORUS_CONTEXT_URL", "from the chorus.summaries and chorus.recaps topics"),
        ("CHORUS_FOLD_BATCH_MAX", "it is CHORUS_BATCH_MAX now"),
        ("CHORUS_FOLD_BATCH_WAIT_MS", "it is CHORUS_BATCH_WAIT_MS now"),
    ],
)
def test_a_retired_setting_is_refused_in_one_line_naming_what_replaced_it(
    variable: str, replaced_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment that still sets what chorus no longer reads (where to call another
    role, a renamed setting) is told so, not silently ignored (for one release)."""
    monkeypatch.setenv(variable, "1")
    with pytest.raises(RetiredSetting) as raised:
        _settings()
    message = str(raised.value)
    assert message.startswith(f"{variable} is no longer read and must be unset")
    assert replaced_by in message and "\n" not in message
    monkeypatch.delenv(variable)
    assert _settings().fold_url is None and _settings().context_url is None
