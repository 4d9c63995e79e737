"""`edge-agent ledger import` and `edge-agent ledger run`: the two ways events come in."""

from __future__ import annotations

import sys

import click

from agent.cli.ledger.context import LedgerContext, run_ledger


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON result per non-blank line, after commit.")
@click.option(
    "--gateway",
    metavar="NAME",
    default="import",
    show_default=True,
    help="Gateway recorded for lines without their own `gateway` field.",
)
@click.pass_obj
def import_cmd(obj: LedgerContext, file: str, as_json: bool, gateway: str) -> None:
    """Ingest FILE (the offline JSON Lines file of the contract) into the ledger.

    Each batch is one transaction; with --json its result lines (exactly as `edge-agent import
    --json`) are printed only after it committed. Unparseable lines are kept as `rejected`.

    \b
      edge-agent ledger import capture.jsonl --json
      edge-agent ledger import line-7.jsonl --gateway line-7

    Exit 0 every line stored, 69 PostgreSQL unreachable, 74 the ledger could not be written.
    """
    import gc

    from agent.cli.records import IMPORT_GC_THRESHOLD, ImportTally, _json_results
    from agent.ledger import arbiter, retention_state
    from agent.ledger.arrivals import file_digest, from_import
    from agent.sources.importer import read_batches

    tally = ImportTally()

    async def go() -> None:
        conn = await obj.open(migrate=True)
        # The identity horizon and arrivals' period the ledger's prune works to (its last run's
        # settings): an import of old lines meets pruned identities as `ledger run` would, never
        # as new keys, and its arrival keys are looked up over the arrivals the prune keeps.
        horizon_s, keys_s = await retention_state.stored_periods(conn)
        # The young generation's collections wait for 10,000 allocations, as in `edge-agent
        # import`: a batch's thousands of objects live until it is committed and go by reference
        # counting. (Parsing ahead in a second process, as `edge-agent import` does, was tried:
        # 7-8 us more CPU per line for the wire, and no steady gain in wall time on two busy
        # cores, docs/performance.md.)
        try:
            thresholds = gc.get_threshold()
            gc.set_threshold(IMPORT_GC_THRESHOLD, *thresholds[1:])
            try:
                digest = file_digest(file)  # (digest, line) is each line's arrival key: a re-run adds none
                for batch in read_batches(file, receiver=f"ledger-import:{gateway}"):
                    arrivals = [from_import(it, gateway, digest) for it in batch.items]
                    outcomes = await arbiter.record(conn, arrivals, horizon_s=horizon_s, keys_s=keys_s)
                    if as_json:
                        sys.stdout.write(_json_results(batch.lines, outcomes))
                        sys.stdout.flush()
                    tally.add(batch.lines, outcomes)
            finally:
                gc.set_threshold(*thresholds)
        finally:
            await conn.close()

    run_ledger(go)
    if not as_json:
        for line in tally.lines(file):
            click.echo(line)


@click.command("run")
@click.option(
    "-c",
    "--config",
    "config_path",
    metavar="FILE",
    default="/etc/edge-ledger/ledger.yaml",
    show_default=True,
    help="Ledger configuration (YAML): dsn, mqtt and/or http intake, notify rules.",
)
@click.pass_obj
def run_cmd(obj: LedgerContext, config_path: str) -> None:
    """Run the intakes until SIGTERM (then drain and exit 0); the group's --dsn wins over the config's.

    MQTT (shared subscription, PUBACK after commit) and/or HTTP (2xx after commit) as the
    config says, and the notification workers. While PostgreSQL is away it keeps running and
    acknowledges nothing (HTTP answers 503). The schema is migrated on start.

    \b
      edge-agent ledger run -c ledger.yaml
      edge-agent ledger --dsn "host=/run/postgresql dbname=ledger" run -c ledger.yaml

    Exit 0 after SIGTERM, 74 the schema is newer than this program, 78 a configuration error
    (every problem, each with file:line).
    """
    from agent.ledger import config, service
    from agent.service import logs

    logs.setup()  # as the gateway's: a timestamp on a terminal or in a file, none under journald

    async def go() -> None:
        cfg = config.load(config_path)
        await service.run(cfg, dsn=obj.dsn)

    run_ledger(go)
