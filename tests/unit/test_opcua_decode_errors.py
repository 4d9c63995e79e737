"""The OPC UA boundary maps only decoding errors to "cannot be decoded"; our own bugs go through."""

from __future__ import annotations

import pytest
from asyncua.common.utils import Buffer
from asyncua.ua import ua_binary

from agent.core.errors import SourceUnavailable
from agent.sources.opcua.session import link_errors

LINK = ("read refused", "read failed", "the response", 1 << 20)


def test_a_value_asyncua_cannot_decode_is_a_refused_read() -> None:
    with pytest.raises(SourceUnavailable, match="the response cannot be decoded"), link_errors(*LINK):
        ua_binary.nodeid_from_binary(Buffer(b"\x07"))  # ValueError raised inside asyncua (via enum)


@pytest.mark.parametrize("error", [KeyError("k"), TypeError("t"), IndexError("i"), ValueError("v")])
def test_our_own_type_key_index_and_value_errors_are_not_taken_for_undecodable_answers(
    error: Exception,
) -> None:
    def ours() -> None:
        raise error

    with pytest.raises(type(error)), link_errors(*LINK):
        ours()
