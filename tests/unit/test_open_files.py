"""The service raises its soft open-files limit (one socket per PLC connection) and gives it back."""

from __future__ import annotations

import resource

import pytest

from agent.service.runtime import raise_open_files_limit, tuned_process


@pytest.fixture
def low_soft_limit() -> object:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = before[1]
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"the hard limit here is {hard}: nothing to raise to")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # what systemd gives a service
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_the_service_raises_a_systemd_soft_limit_and_restores_it(low_soft_limit: object) -> None:
    hard = low_soft_limit
    with tuned_process():
        soft, now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert soft == (65_536 if hard == resource.RLIM_INFINITY else min(65_536, hard))
        assert now_hard == hard
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 1024


def test_a_soft_limit_already_high_enough_is_left_alone(low_soft_limit: object) -> None:
    assert raise_open_files_limit(wanted=512) is None
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 1024
