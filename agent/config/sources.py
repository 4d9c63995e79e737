"""Typed settings of one controller (one entry of the config's `devices:` list).

No parsing and no YAML here: the loader builds these, the sources read them.
Plain frozen dataclasses, built by the YAML loader (`agent.config.loader`, which checks them and
reports every problem with file and line) and by tests. The sources read only these, so they
never depend on the loader, the sinks' settings or YAML. The YAML shape is in
`docs/pollers.md` and `config.example.yaml`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from agent.config.registers import WORDS

WordOrder = Literal["big", "little"]


@dataclass(frozen=True)
class Field:
    """Where one value lives: a Modbus register (``register``/``offset``, ``type``, ``table``)
    and/or an OPC UA node (``node``). ``values`` names state values; ``unit``/``clock`` say how a
    number is a time (ms or s since the Unix epoch, in UTC or in the PLC's local zone)."""

    register: int | None = None
    type: str = "uint16"
    table: str = "holding"
    node: str | None = None
    values: Mapping[int, str] = field(default_factory=dict)
    unit: str = "ms"
    clock: str = "UTC"
    offset: int | None = None
    value: int | None = None
    word_order: WordOrder | None = None
    line: int = 0

    @property
    def words(self) -> int:
        return WORDS[self.type]


@dataclass(frozen=True)
class Channel:
    """One event channel. ``source_timestamp`` None with ``time_from_state`` True means the OPC UA
    state node's ``DataValue.SourceTimestamp`` (``source_timestamp: source``).

    ``transition_id`` None: a channel without a counter that opted in to window keys
    (``identity: window``, ``window`` in seconds; docs/window-keys.md). ``path`` and ``line``
    name the channel's ``window`` key in the config, for the checks made across sections."""

    name: str
    transition_id: Field | None
    state: Field
    source_timestamp: Field | None = None
    time_from_state: bool = False
    latched: Mapping[str, Field] = field(default_factory=dict)
    window: float | None = None
    path: str = ""
    line: int = 0

    @property
    def window_ms(self) -> int | None:
        """The window in whole milliseconds (the unit of the key's window index), or None."""
        return None if self.window is None else max(1, round(self.window * 1000))


@dataclass(frozen=True)
class Ring:
    """The controller's offline buffer: head (entries ever written), capacity, and slots.

    Modbus: slot k starts at ``slots_register + k * slot_size``; each field has an ``offset``.
    OPC UA: each field is an array node indexed by slot. ``read`` is the one Modbus request
    (register, count) that returns header and slots together."""

    head: Field
    capacity: Field
    fields: Mapping[str, Field]
    slot_count: int
    slots_register: int | None = None
    slot_size: int | None = None
    read: tuple[int, int] | None = None

    @property
    def channel_names(self) -> Mapping[int, str]:
        ch = self.fields.get("channel")
        return ch.values if ch is not None else {}


@dataclass(frozen=True)
class Events:
    """OPC UA events of the controller object (``node``) of one event ``type``."""

    node: str
    type: str


@dataclass(frozen=True)
class ModbusTcp:
    host: str
    port: int = 502
    unit: int = 1
    timeout: float = 1.0

    @property
    def receiver(self) -> str:
        return f"modbus:{self.host}:{self.port}"


@dataclass(frozen=True)
class ModbusRtu:
    serial: str
    baudrate: int = 19200
    parity: str = "N"
    stopbits: int = 1
    bytesize: int = 8
    unit: int = 1
    timeout: float = 1.0

    @property
    def receiver(self) -> str:
        return f"modbus-rtu:{self.serial}:{self.unit}"


SECURE_POLICIES = ("Basic256Sha256", "Aes128_Sha256_RsaOaep", "Aes256_Sha256_RsaPss")
DEPRECATED_POLICIES = ("Basic128Rsa15", "Basic256")
MAX_MESSAGE_SIZE = 4 * 1024 * 1024


@dataclass(frozen=True)
class OpcUaSecurity:
    """How an OPC UA connection is secured. Secure by default: ``SignAndEncrypt`` with
    ``Basic256Sha256``; ``policy: "None"`` only when the config says so (the source warns).

    ``certificate``/``private_key`` are ours (``edge-agent certs`` makes them); the server's
    certificate must be in the trust list: ``server_certificate`` (one pinned certificate)
    and/or ``trusted`` (a directory of trusted certificates). There is no trust on first use.
    ``application_uri`` empty means the URI in our certificate's subjectAltName."""

    policy: str = "Basic256Sha256"
    mode: str = "SignAndEncrypt"
    certificate: str | None = None
    private_key: str | None = None
    server_certificate: str | None = None
    trusted: str | None = None
    application_uri: str = ""

    @property
    def insecure(self) -> bool:
        return self.policy == "None"


@dataclass(frozen=True)
class OpcUa:
    """``subscribe``: data-change (and, with ``events`` mapped, event) subscription plus a
    reconciling read on every (re)connect and every ``reconcile``; otherwise plain reads.
    ``max_message_size`` caps one response (and its chunk count): a larger one is refused."""

    endpoint: str
    security: OpcUaSecurity = field(default_factory=OpcUaSecurity)
    username: str | None = None
    password_file: str | None = None
    subscribe: bool = False
    publishing: float = 0.1
    reconcile: float = 5.0
    timeout: float = 2.0
    max_message_size: int = MAX_MESSAGE_SIZE

    @property
    def receiver(self) -> str:
        return f"opcua:{self.endpoint}"


Connection = ModbusTcp | ModbusRtu | OpcUa


@dataclass(frozen=True)
class Device:
    name: str
    connections: tuple[Connection, ...]
    channels: tuple[Channel, ...]
    poll: float = 0.25
    boot_id: Field | None = None
    ring: Ring | None = None
    events: Events | None = None
    namespace: str | None = None
    word_order: WordOrder = "big"
    backoff_initial: float = 0.25
    backoff_max: float = 10.0
    file: str = ""
    line: int = 0
