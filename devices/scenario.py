"""Scripted scenarios and random load, both pure: parsing and deciding, never sleeping.

A scenario file (YAML) declares controllers and a list of steps::

    controllers:
      - name: PUMP-07
        boot_id: counter          # counter | random32 | none
        boot_id_start: 17
        ring: 8
        channels:
          - {name: Trip, values: {0: Normal, 1: Trip}, counter_bits: 16}
    steps:
      - {transition: PUMP-07/Trip, state: 1}
      - {wait: 0.5}
      - {transition: PUMP-07/Trip, count: 3}      # three transitions, no wait between them
      - {set_counter: PUMP-07/Trip, value: 65534}
      - {restart: PUMP-07, clock_jump_ms: 0}
      - {cut: PUMP-07, seconds: 2}               # link cut on every path of the device
      - {half_open: PUMP-07, seconds: 2}
      - {slow: PUMP-07, delay: 0.3, seconds: 2}

Model steps (transition, set_counter, restart) are applied here by :func:`apply_model_step`;
``wait`` and the faults need time and sockets, so :mod:`devices.plant` runs them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import yaml

from devices.controller import BootIdMode, ChannelSpec, Clock, Controller, system_clock

MODEL_ACTIONS = ("transition", "set_counter", "restart")
PLANT_ACTIONS = ("wait", "cut", "half_open", "slow")


@dataclass(frozen=True)
class Step:
    """One scenario step: an action, its target (``DEVICE`` or ``DEVICE/CHANNEL``) and its options."""

    action: str
    target: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return self.target.split("/", 1)[0]

    @property
    def channel(self) -> str:
        if "/" not in self.target:
            raise ValueError(f"step {self.action}: target {self.target!r} must be DEVICE/CHANNEL")
        return self.target.split("/", 1)[1]


@dataclass(frozen=True)
class Scenario:
    controllers: list[Controller]
    steps: list[Step]


def parse_step(raw: Mapping[str, Any]) -> Step:
    """``{transition: PUMP-07/Trip, state: 1}`` -> Step("transition", "PUMP-07/Trip", {"state": 1})."""
    actions = [k for k in raw if k in MODEL_ACTIONS + PLANT_ACTIONS]
    if len(actions) != 1:
        raise ValueError(
            f"step {dict(raw)!r}: needs exactly one of {', '.join(MODEL_ACTIONS + PLANT_ACTIONS)}"
        )
    action = actions[0]
    options = {k: v for k, v in raw.items() if k != action}
    if action == "wait":
        return Step("wait", "", {"seconds": float(raw["wait"])})
    return Step(action, str(raw[action]), options)


def controller_from_dict(raw: Mapping[str, Any], *, clock: Clock = system_clock, seed: int = 0) -> Controller:
    """Build a controller from its scenario/CLI description (see the module docstring)."""
    channels = [
        ChannelSpec(
            name=str(c["name"]),
            values={int(k): str(v) for k, v in (c.get("values") or {0: "Normal", 1: "Trip"}).items()},
            counter_bits=int(c.get("counter_bits", 32)),  # type: ignore[arg-type]
            skip_zero=bool(c.get("skip_zero", False)),
        )
        for c in raw.get("channels") or [{"name": "Trip"}]
    ]
    mode = str(raw.get("boot_id", "counter"))
    if mode not in ("counter", "random32", "none"):
        raise ValueError(f"controller {raw.get('name')!r}: boot_id must be counter, random32 or none")
    return Controller(
        str(raw["name"]),
        channels,
        boot_id_mode=cast(BootIdMode, mode),
        boot_id_start=int(raw.get("boot_id_start", 17)),
        ring_capacity=int(raw.get("ring", 8)),
        seed=int(raw.get("seed", seed)),
        clock=clock,
    )


def load_scenario(text: str, *, clock: Clock = system_clock) -> Scenario:
    """Parse a scenario YAML document; unknown actions and bad targets fail here, before anything runs."""
    doc = yaml.safe_load(text) or {}
    controllers = [
        controller_from_dict(c, clock=clock, seed=i) for i, c in enumerate(doc.get("controllers", []))
    ]
    steps = [parse_step(s) for s in doc.get("steps", [])]
    names = {c.name for c in controllers}
    for step in steps:
        if step.action != "wait" and controllers and step.device not in names:
            raise ValueError(f"step {step.action}: unknown controller {step.device!r}")
    return Scenario(controllers, steps)


def apply_model_step(controllers: Mapping[str, Controller], step: Step) -> bool:
    """Apply a model step to its controller; False when the step is the plant's business."""
    if step.action not in MODEL_ACTIONS:
        return False
    ctrl = controllers[step.device]
    if step.action == "transition":
        state = step.options.get("state")
        for _ in range(int(step.options.get("count", 1))):
            ctrl.transition(step.channel, None if state is None else int(state))
    elif step.action == "set_counter":
        ctrl.set_counter(step.channel, int(step.options["value"]))
    else:
        boot = step.options.get("boot_id")
        ctrl.restart(
            clock_jump_ms=int(step.options.get("clock_jump_ms", 0)),
            boot_id=None if boot is None else int(boot),
        )
    return True


class RandomLoad:
    """Random transitions at a mean ``rate`` per second over all channels of all controllers.

    Inter-arrival times are exponential (a Poisson process), which gives bursts: some channels
    change faster than any poll interval, which is the point of a load test.
    """

    def __init__(self, controllers: list[Controller], rate: float, *, seed: int = 0) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0 transitions per second")
        self.rate = rate
        self.rng = random.Random(seed)
        self.targets = [(c, i) for c in controllers for i in range(len(c.channels))]

    def next(self) -> tuple[float, Controller, int]:
        """The delay (s) before the next transition, and where it happens."""
        ctrl, channel = self.rng.choice(self.targets)
        return self.rng.expovariate(self.rate), ctrl, channel
