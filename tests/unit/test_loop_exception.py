"""The service's event-loop exception handler: known MQTT socket noise is one line, the rest unchanged."""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest

from agent.service.signals import loop_exception


async def test_known_paho_socket_race_is_one_line_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.WARNING):
        loop_exception(
            loop,
            {
                "message": "Exception in callback BaseSelectorEventLoop.add_writer(13, <function>)",
                "exception": OSError(errno.EBADF, "Bad file descriptor"),
                "handle": "<Handle BaseSelectorEventLoop.add_writer(13, <function Client._on_socket_open>)>",
            },
        )
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert caplog.records[0].exc_info is None


async def test_an_unread_aiomqtt_disconnect_future_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    import aiomqtt

    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.WARNING):
        loop_exception(
            loop,
            {
                "message": "Future exception was never retrieved",
                "exception": aiomqtt.MqttCodeError(7, "Unexpected disconnection"),
            },
        )
    assert [r.levelname for r in caplog.records] == ["WARNING"] and caplog.records[0].exc_info is None


async def test_any_other_loop_error_keeps_the_default_report(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.ERROR):
        loop_exception(loop, {"message": "boom", "exception": ValueError("boom")})
    assert any(r.levelname == "ERROR" and r.exc_info for r in caplog.records)
