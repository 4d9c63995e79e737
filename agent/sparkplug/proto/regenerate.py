"""Regenerate `sparkplug_b_pb2.py` and `sparkplug_b_pb2.pyi` from `sparkplug_b.proto` with the
pinned generator (grpcio-tools' protoc; pyproject's `dev` extra installs that version).

    python -m agent.sparkplug.proto.regenerate            # write the two files beside the schema
    python -m agent.sparkplug.proto.regenerate --check    # exit 1 when the checked-in ones differ

The gencode names the protobuf runtime it needs (`ValidateProtobufRuntimeVersion`): the runtime
dependency in pyproject.toml must allow it (protoc 35.x -> protobuf >= 7.35, < 8). A change of
`GENERATOR` therefore goes with a look at that range. tests/unit/test_sparkplug_proto.py runs
`--check`'s comparison on every test run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import metadata
from pathlib import Path

GENERATOR = "grpcio-tools"
GENERATOR_VERSION = "1.85.4"  # bundles protoc 35.1 (gencode for protobuf 7.35.1)
HERE = Path(__file__).resolve().parent
SCHEMA = HERE / "sparkplug_b.proto"
OUTPUTS = ("sparkplug_b_pb2.py", "sparkplug_b_pb2.pyi")


class GeneratorMissing(RuntimeError):
    """grpcio-tools is not installed, or not the pinned version."""


def _protoc_main() -> object:
    pinned = f"{GENERATOR}=={GENERATOR_VERSION}"
    try:
        installed = metadata.version(GENERATOR)
    except metadata.PackageNotFoundError as exc:
        raise GeneratorMissing(f"{GENERATOR} is not installed (pip install {pinned})") from exc
    if installed != GENERATOR_VERSION:
        raise GeneratorMissing(f"{GENERATOR} {installed} is installed; the pinned generator is {pinned}")
    from grpc_tools import protoc

    return protoc.main


def generate(out_dir: Path) -> dict[str, bytes]:
    """Run the pinned protoc on the schema into `out_dir`; the generated files' bytes by name."""
    main = _protoc_main()
    args = ["protoc", f"-I{HERE}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", str(SCHEMA)]
    rc = main(args)  # type: ignore[operator]
    if rc != 0:
        raise RuntimeError(f"protoc exited {rc}")
    return {name: (out_dir / name).read_bytes() for name in OUTPUTS}


def stale() -> list[str]:
    """The checked-in generated files that differ from what the pinned generator writes now."""
    with tempfile.TemporaryDirectory(prefix="sparkplug-proto-") as tmp:
        fresh = generate(Path(tmp))
    return [name for name, data in fresh.items() if (HERE / name).read_bytes() != data]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="compare only; exit 1 when stale")
    args = p.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{name} is stale: run python -m agent.sparkplug.proto.regenerate", file=sys.stderr)
        return 1 if names else 0
    generate(HERE)
    print(f"wrote {', '.join(OUTPUTS)} with {GENERATOR} {GENERATOR_VERSION}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
