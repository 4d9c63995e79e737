"""`edge-agent ledger run` on SIGHUP: the ledger reads `ledger.yaml` again without stopping.

Invalid: nothing changes, every problem is logged once with its file:line. Valid:

- the notification rules are the writer's from its next batch; a notifier starts when rules appear;
- the MQTT intake (and the status records' intake) restarts when its settings change (broker,
  topic, group, client id, ...), and only then: a subscriber with the same client id finds its
  persistent session again, so what the broker queued meanwhile is delivered;
- the review page's token file is read again (a new token ends the sessions signed before it);
- what only a new process can take (the database, its password, the HTTP intake's, metrics' and
  review page's listeners, `require_sync_standby`) waits for the next start, and the log says so.

Each part runs with its own stop event, so a reload stops only what it replaces.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from agent.config.fingerprint import files_fingerprint
from agent.core.errors import ConfigError
from agent.ledger.config import LedgerConfig, load
from agent.ledger.intake_mqtt import MqttSubscriber
from agent.ledger.status_intake import StatusStore, run_mqtt
from agent.ledger.writer import Writer

log = logging.getLogger(__name__)

PENDING_RESTART = ("dsn", "password_file", "http", "metrics", "require_sync_standby", "retention")


@dataclass
class _Part:
    task: asyncio.Task[None]
    stop: asyncio.Event


@dataclass
class LedgerParts:
    """The ledger's replaceable parts under one task group, and its reloads."""

    tg: asyncio.TaskGroup
    config: LedgerConfig
    writer: Writer
    statuses: StatusStore
    notifier: Callable[[], Any] | None = None  # makes a Notifier (imported only when rules exist)
    hooks: list[Callable[[LedgerConfig], None]] = field(default_factory=list)  # e.g. the page's token
    reported: list[Callable[[str, str], None]] = field(default_factory=list)  # (file hash, result): metrics
    parts: dict[str, _Part] = field(default_factory=dict)
    reloads: dict[str, int] = field(default_factory=dict)
    last_reload: dict[str, Any] | None = None

    def start(self, name: str, work: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
        stop = asyncio.Event()
        self.parts[name] = _Part(self.tg.create_task(work(stop), name=name), stop)

    async def stop_part(self, name: str) -> None:
        part = self.parts.pop(name, None)
        if part is not None:
            part.stop.set()
            await asyncio.wait({part.task}, timeout=30)

    def stop_all(self) -> None:
        for part in self.parts.values():
            part.stop.set()

    def start_intakes(self, cfg: LedgerConfig, replaced: LedgerConfig | None = None) -> None:
        """The MQTT intake and the status records' intake, when `cfg` has `mqtt:`. `replaced`: the
        configuration a reload replaces; its subscription is dropped from the session (same client id)."""
        mqtt = cfg.mqtt
        if mqtt is None:
            return
        subscriber = MqttSubscriber(mqtt, self.writer)
        old = replaced.mqtt if replaced is not None else None
        if old is not None and old.client_id == mqtt.client_id and old.subscription != mqtt.subscription:
            subscriber.forget = (old.subscription,)
        self.start("mqtt-intake", subscriber.run)
        self.start("status-intake", lambda stop: run_mqtt(mqtt, cfg.status_topic, self.statuses, stop))

    def start_notifier(self) -> None:
        if self.notifier is not None and "notifier" not in self.parts:
            self.start("notifier", self.notifier().run)

    async def reload(self) -> str:
        """Read the file again and apply it (see the module's text); returns the result."""
        old = self.config
        log.info("ledger reload asked for: reading %s", old.file)
        try:
            new = await asyncio.to_thread(load, old.file)
        except ConfigError as exc:
            problems = str(exc).splitlines()
            for line in problems:
                log.error("ledger reload refused, the configuration in force is kept: %s", line)
            return self._done("invalid", {"problems": problems})
        try:
            for hook in self.hooks:
                hook(new)
        except (OSError, ValueError) as exc:
            log.error("ledger reload refused, the configuration in force is kept: %s", exc)
            return self._done("invalid", {"problems": [str(exc)]})
        try:
            done = await self._apply(old, new)
        except Exception as exc:  # a fault in a reload never stops the ledger
            log.exception("ledger reload failed unexpectedly; what runs goes on as it is: %s", exc)
            return self._done("failed", {"problems": [f"{type(exc).__name__}: {exc}"]})
        pending = [k for k in PENDING_RESTART if getattr(old, k) != getattr(new, k)]
        if _listener(old.web) != _listener(new.web):
            pending.append("web")
        for key in pending:
            log.warning("ledger reload: %s changed; it takes effect at the next restart", key)
        kept = {k: getattr(old, k) for k in PENDING_RESTART}
        web = new.web if _listener(old.web) == _listener(new.web) else old.web
        self.config = dataclasses.replace(new, **kept, web=web)
        summary = (
            "; ".join(done + ([f"pending a restart: {', '.join(pending)}"] if pending else [])) or "no change"
        )
        log.info("ledger reload applied: %s", summary)
        return self._done("applied", {"summary": summary})

    async def _apply(self, old: LedgerConfig, new: LedgerConfig) -> list[str]:
        done: list[str] = []
        if new.notify != old.notify:
            self.writer.rules = new.notify
            done.append(f"{len(new.notify)} notification rules")
            if new.notify:
                self.start_notifier()
        if new.mqtt != old.mqtt or new.status_topic != old.status_topic:
            await asyncio.gather(self.stop_part("mqtt-intake"), self.stop_part("status-intake"))
            self.start_intakes(new, replaced=old)
            done.append("MQTT intake restarted" if new.mqtt is not None else "MQTT intake stopped")
        if self.hooks and new.web is not None and new.web.token_file:
            done.append("review token read again")
        return done

    def _done(self, result: str, detail: dict[str, Any]) -> str:
        self.reloads[result] = self.reloads.get(result, 0) + 1
        self.last_reload = {"result": result, **detail}
        for report in self.reported:
            report(file_hash(self.config.file), result)
        return result


def file_hash(path: str) -> str:
    """The file's fingerprint as the gateway's (`edge_ledger_config_info`)."""
    return files_fingerprint([path])


def _listener(web: Any) -> Any:
    """A review page's settings but its token file (read again on a reload)."""
    return None if web is None else dataclasses.replace(web, token_file=None)
