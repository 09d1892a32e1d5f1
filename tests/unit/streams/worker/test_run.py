import pytest


def test_a_stop_deadline_exits_once_after_its_time() -> None:
    import threading

    from streams.worker.run import StopDeadline

    fired = threading.Event()
    calls: list[int] = []

    def exit_now() -> None:
        calls.append(1)
        fired.set()

    deadline = StopDeadline(0.05, exit_now)
    deadline.arm()
    deadline.arm()  # a second signal does not move or double it
    assert fired.wait(5)
    assert calls == [1]


def test_the_worker_arms_its_stop_deadline_and_freezes_its_heap_on_a_signal() -> None:
    """Faust's stores each collect the whole heap's garbage as they stop (seconds a table
    at many channels): what lives at the signal is frozen, so they collect nothing."""
    import signal
    from unittest.mock import patch

    from streams.settings import Settings
    from streams.worker.compose import build_worker
    from streams.worker.run import STOP_GRACE_SECONDS, ChorusWorker

    settings = Settings(store="memory://", bootstrap_servers="127.0.0.1:1")
    app = build_worker(settings, broker="127.0.0.1:1").runtime.app
    worker = ChorusWorker(app, settings, quiet=True)
    assert worker.stop_deadline.seconds == STOP_GRACE_SECONDS <= 10
    with (
        patch.object(worker.stop_deadline, "arm") as arm,
        patch("faust.Worker._schedule_shutdown") as graceful,
        patch("gc.freeze") as freeze,
    ):
        worker._schedule_shutdown(signal.SIGTERM)
    arm.assert_called_once_with()
    freeze.assert_called_once_with()
    graceful.assert_called_once_with(signal.SIGTERM)


def test_the_context_role_runs_below_the_fold_roles_priority() -> None:
    """Summaries and recaps take the CPU the fold does not need: nothing waits on them."""
    from unittest.mock import patch

    from streams.settings import Settings
    from streams.worker.run import CONTEXT_NICENESS, run_worker

    class Started(Exception):
        pass

    settings = Settings(store="memory://", bootstrap_servers="127.0.0.1:1")
    for role, niceness in (("context", [((CONTEXT_NICENESS,), {})]), ("fold", [])):
        with (
            patch("os.nice") as nice,
            patch("streams.worker.run.create_role_topics", side_effect=Started),
            pytest.raises(Started),
        ):
            run_worker(settings, role=role)  # type: ignore[arg-type]
        assert nice.call_args_list == niceness


def test_each_role_maps_its_large_blocks_apart_before_it_starts() -> None:
    from unittest.mock import patch

    from streams.settings import Settings
    from streams.worker.run import run_worker

    class Started(Exception):
        pass

    settings = Settings(store="memory://", bootstrap_servers="127.0.0.1:1")
    for role in ("context", "fold"):
        with (
            patch("os.nice"),
            patch("streams.worker.run.map_large_blocks_apart") as apart,
            patch("streams.worker.run.create_role_topics", side_effect=Started),
            pytest.raises(Started),
        ):
            run_worker(settings, role=role)  # type: ignore[arg-type]
        apart.assert_called_once_with()
