"""The service's configuration read in a child process: the parse's memory never becomes the service's.

Parsing YAML makes many short-lived objects (a thousand-PLC file: a document of about 60 MB in
objects for 1.2 MB of text) among which the configuration's own objects are allocated; freed, they
leave Python's memory arenas partly used, and the process keeps them: measured, a 1,000-PLC
configuration left the service 70 MB larger when read in the process, 16 MB when read in a child
and handed over by pickle (bench/gateway_scale.py). `edge-agent run` reads its configuration this
way before anything else starts (no thread yet, so `fork` is safe); a reload (with the service's
threads running) reads in the process.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from agent.config.loader import Config, load
from agent.core.errors import ConfigError


def load_apart(path: str | Path) -> Config:
    """`agent.config.loader.load(path)` done in a forked child; its result or its ConfigError here."""
    if not hasattr(os, "fork"):
        return load(path)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: load, hand the result over, end without cleanup (the parent's to do)
        os.close(read_end)
        try:
            try:
                data = pickle.dumps(("config", load(path)))
            except ConfigError as exc:
                data = pickle.dumps(("error", exc))
            except BaseException as exc:
                data = pickle.dumps(("crash", f"{type(exc).__name__}: {exc}"))
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    if not data:
        return load(path)  # the child died without a word: read it here, as before
    kind, value = pickle.loads(data)
    if kind == "config":
        assert isinstance(value, Config)
        return value
    if kind == "error":
        raise value
    raise RuntimeError(f"reading the configuration failed in its child process: {value}")
