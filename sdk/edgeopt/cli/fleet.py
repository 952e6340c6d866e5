"""`edgeopt fleet`: run the collector, and look at what the fleet sent."""
from __future__ import annotations

import base64
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import click

from .broker_options import broker_options, broker_settings_from
from .option_alias import hidden_alias
from .output import console, table

PASSWORD_ENV = "EDGEOPT_FLEET_PASSWORD"
DB_HELP = "Fleet database: sqlite:///PATH (default: $EDGEOPT_FLEET_DB or sqlite:///fleet.db) or postgresql://USER@HOST:PORT/DB."


def _format_options(command):
    command = click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of a table.")(command)
    command = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(command)
    return click.option("--db", "db_url", metavar="URL", help=DB_HELP)(command)


@click.group()
def fleet():
    """Collect what devices publish, and show devices, results and telemetry."""


def guessable_group(group: str) -> bool:
    """A share group name a board could guess: short, or without the digits a random suffix has."""
    return len(group) < 12 or sum(c.isdigit() for c in group) < 4


@fleet.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface, anonymous: see docs/FLEET.md, 'Identities').")
@click.option("--port", type=click.IntRange(min=1, max=65535), default=1883, show_default=True, help="Port to listen on.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default="edgeopt-broker",
              show_default=True, help="Where Mosquitto keeps sessions and queued messages across restarts, "
                                      "and its log (started as root, the mosquitto account owns it; the "
                                      "config is handed to Mosquitto in memory, never written there).")
def broker(host, port, data_dir):
    """Run a local MQTT broker for the fleet until Ctrl-C: Mosquitto with the settings of
    scripts/mosquitto.conf when it is installed, else the embedded broker (MQTT 3.1.1, in memory)."""
    from ..errors import UserError
    from ..fleet.broker import SHIPPED_CONFIG, BrokerPortInUse, MqttBroker, mosquitto_settings

    shipped = SHIPPED_CONFIG.is_file()
    running = MqttBroker(data_dir, port=port, host=host, settings=mosquitto_settings(SHIPPED_CONFIG) if shipped else None)
    stop = threading.Event()
    # Ctrl-C or SIGTERM from the moment the broker starts (a supervisor may stop it as soon as it says
    # it started) stops the broker, never this process alone with the broker left running.
    with _stop_on_signals(stop):
        try:
            running.start()
        except BrokerPortInUse:
            raise UserError(f"port {port} on {host} is already in use (another broker?): stop that one, or give "
                            f"this one another with --port") from None
        try:
            _say_started(running, shipped, host)
            while not stop.wait(0.5):
                if not running.running:
                    raise UserError(f"{running.kind} exited with code {running.returncode}; see {running.log_path}")
        finally:
            running.stop()
    click.echo("broker stopped")


@fleet.command()
@broker_options(PASSWORD_ENV)
@click.option("--db", "db_url", metavar="URL", help=DB_HELP)
@click.option("--shared", "group", metavar="GROUP",
              help="Join an MQTT v5 shared subscription group, so several collectors split the load.")
@click.option("--client-id", metavar="ID",
              help="MQTT client id; keep it fixed so the broker holds messages while this collector is down "
                   "(default: edgeopt-collector[-GROUP]-HOSTNAME).")
@click.option("--max-batch", type=click.IntRange(min=1), default=500, show_default=True,
              help="Most messages committed (and then acknowledged) in one transaction.")
@click.option("--retain-days", type=click.FloatRange(min=0, min_open=True), metavar="DAYS",
              help="Delete telemetry and rejected messages older than this many days, at start and every hour.")
@click.option("--collector-key", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Signs every delivery confirmation: the .key of `edgeopt keys collector` (its .cert beside "
                   "it). Default: $EDGEOPT_COLLECTOR_KEY, or the one in ~/.config/edgeopt/keys, or else a key "
                   "certified at start by the fleet signing key of `edgeopt keys init`, when this host has it.")
def serve(db_url, group, client_id, max_batch, retain_days, collector_key, **broker):
    """Store every device's status, telemetry and results until Ctrl-C or SIGTERM."""
    from edgeopt_agent.wire import shared_subscription

    from ..deploy.collector_keys import collector_key as find_collector_key
    from ..fleet.collector import Collector, default_client_id
    from ..fleet.retention import Retention
    from ..fleet.store import open_store

    if group is not None:
        shared_subscription(group)  # a bad group name fails here, as a user error
        if guessable_group(group):
            import secrets

            click.echo(f"warning: share group '{group}' is easy to guess: on a broker with an acl_file, a board that "
                       f"subscribes to $share/{group}/... takes a share of the messages, which the broker then drops; "
                       f"give every collector a random name such as --shared fleet-{secrets.token_hex(6)} "
                       f"(docs/FLEET.md, 'Shared subscriptions and the ACL')", err=True)
    settings = broker_settings_from(PASSWORD_ENV, **broker)
    signer = find_collector_key(collector_key, client_id or default_client_id(group))
    store = open_store(db_url)
    try:
        collector = Collector(store, settings, client_id=client_id, shared_group=group, max_batch=max_batch,
                              collector_key=signer)
        click.echo(f"collecting from {settings.address} into {store.url} as '{collector.client_id}'"
                   + (f" in share group '{group}'" if group else "") + "; Ctrl-C to stop", err=True)
        if signer is None:
            click.echo("warning: delivery confirmations are UNSIGNED (no collector key): agents with a trusted key "
                       "ignore them and keep re-sending; run `edgeopt keys collector NAME` (or pass --collector-key)",
                       err=True)
        else:
            click.echo(f"signing delivery confirmations as {signer.describe()}", err=True)
            if signer.expired:
                click.echo("warning: the collector certificate has expired: agents with a trusted key ignore its "
                           "confirmations; issue a new one with `edgeopt keys collector NAME --force`", err=True)
        line = ProgressLine(sys.stderr)
        retention = Retention(store, retain_days) if retain_days else None

        def progress(running: Collector) -> None:
            line.update(running)
            if retention is not None:
                retention.tick()

        stop = threading.Event()
        with _stop_on_signals(stop):
            try:
                collector.run(stop, progress=progress)
            finally:
                line.finish(collector)
    finally:
        store.close()


class ProgressLine:
    """Messages stored per second, rejected and missing: rewritten in place on a terminal,
    one line every `every_s` seconds in a log."""

    def __init__(self, stream: Any, every_s: float = 10.0):
        self._stream = stream
        self._tty = stream.isatty()
        self._every_s = every_s
        self._last_count = 0
        self._last_time = time.monotonic()
        self._last_line = 0.0

    def update(self, collector: Any) -> None:
        now = time.monotonic()
        if not self._tty and now - self._last_line < self._every_s:
            return
        c = collector.counters
        rate = (c.stored - self._last_count) / max(now - self._last_time, 1e-9)
        self._last_count, self._last_time, self._last_line = c.stored, now, now
        state = "connected" if collector.connected else f"not connected to {collector.broker.address} (retrying; -v says why)"
        text = f"{state} · {self.describe(collector, rate)}"
        if self._tty:
            self._stream.write("\r\033[K" + text)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def finish(self, collector: Any) -> None:
        if self._tty:
            self._stream.write("\n")
        self._stream.write("stopped: " + self.describe(collector, None) + "\n")
        self._stream.flush()

    @staticmethod
    def describe(collector: Any, rate: Optional[float]) -> str:
        c = collector.counters
        parts = [f"{c.stored:,} stored" + (f" ({rate:,.0f}/s)" if rate is not None else ""),
                 f"{c.duplicate:,} duplicate", f"{c.rejected:,} rejected",
                 f"{c.missing:,} missing in {c.new_gaps:,} new gaps ({c.filled:,} filled late)"]
        if c.failed_commits:
            parts.append(f"{c.failed_commits:,} failed commits, last: {c.last_error}")
        return " · ".join(parts)


def _say_started(running, shipped: bool, host: str) -> None:
    if running.kind == "mosquitto":
        settings = "scripts/mosquitto.conf" if shipped else "built-in settings (scripts/mosquitto.conf not found)"
        click.echo(f"started mosquitto on {running.address} (settings: {settings}; persistence in {running.workdir}, "
                   f"run as {running.run_as}; log {running.log_path}); Ctrl-C to stop")
    else:
        click.echo(f"started the embedded broker (amqtt, MQTT 3.1.1) on {running.address} (in memory: nothing "
                   f"persists, install mosquitto for that; log {running.log_path}); Ctrl-C to stop")
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo("warning: anyone who reaches this address may connect without a login; on a shared network run "
                   "mosquitto with scripts/mosquitto-secure.conf (docs/FLEET.md)", err=True)


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _open(db_url: Optional[str]):
    from ..fleet.store import open_store

    return open_store(db_url, create=False)


def _emit(rows: Sequence[Any], columns, as_json: bool, as_csv: bool, title: str, empty: str,
          drop: Sequence[str] = (), optional: Sequence[str] = ()) -> None:
    from ..fleet import views

    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    if as_json:
        click.echo(views.to_json(list(rows)))
    elif as_csv:
        click.echo(views.to_csv(rows, drop=drop), nl=False)
    elif not rows:
        click.echo(empty)
    else:
        headers, cells = views.cells(columns, rows)
        console().print(table(headers, cells, title=title, optional=optional))


@fleet.command()
@_format_options
def devices(db_url, as_json, as_csv):
    """Every device seen: profile, online/offline, last seen, versions, temperature."""
    from ..fleet import views

    with _open(db_url) as store:
        rows = store.devices()
    _emit(rows, views.DEVICES, as_json, as_csv, "devices", "no devices have reported yet",
          optional=views.DEVICES_OPTIONAL)


@fleet.command()
@click.option("--model", help="Only this model (the manifest's model source).")
@click.option("--device-id", "device", metavar="ID", help="Only this device.")
@hidden_alias("--device", "--device-id", "device", metavar="ID")
@click.option("--profile", help="Only devices of this profile.")
@click.option("--all", "history", is_flag=True, help="Every result, not only the latest per device, model and artifact.")
@_format_options
def results(model, device, profile, history, db_url, as_json, as_csv):
    """Benchmark results, one row per (device, model, artifact), sorted by model then p50 latency."""
    from ..fleet import views

    with _open(db_url) as store:
        rows = store.results(model=model, device=device, profile=profile, latest=not history)
    _emit(rows, views.RESULTS, as_json, as_csv, "results", "no results match", optional=views.RESULTS_OPTIONAL)


class Fraction(click.ParamType):
    """A share: "5%" or 0.05."""

    name = "FRACTION"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            number = None
        if number is None or not 0 <= number < 1 or (not text.endswith("%") and number >= 1):
            self.fail(f"{value!r} is not a share: write it as 5% or 0.05", param, ctx)
        return number


@fleet.command()
@click.option("--model", required=True, metavar="MODEL", help="The model (its source, as `fleet results` shows it).")
@click.option("--candidate", metavar="BUILD",
              help="The build to judge: its version, or the start of its build id (default: the newest build).")
@click.option("--baseline", metavar="BUILD", help="The build to judge it against (default: the one before it).")
@click.option("--metric", type=click.Choice(("p50", "p90", "p99")), default="p50", show_default=True,
              help="The percentile the verdict and the gate read (all three are shown).")
@click.option("--threshold", type=Fraction(), default="5%", show_default=True,
              help="A change smaller than this, or whose interval holds no change, is no measurable change.")
@click.option("--max-slowdown", type=Fraction(),
              help="Exit 1 when a board or profile is measurably slower than this (default: --threshold).")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True, metavar="LEVEL",
              help="Of each interval.")
@_format_options
def compare(model, candidate, baseline, metric, threshold, max_slowdown, confidence, db_url, as_json, as_csv):
    """A candidate build of MODEL against a baseline on every board: p50/p90/p99 ratios with intervals, peak
    memory and energy change, and a verdict (faster, slower, no measurable change). Exits 1 when a board
    or profile is measurably slower than --max-slowdown: a release gate for CI."""
    from ..errors import UserError
    from ..fleet import releases, views

    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    with _open(db_url) as store:
        rows = store.results(model=model, latest=False, with_histogram=True)
        if not rows:
            known = releases.models(store.results())
            raise UserError(f"no results for model '{model}' in {store.url}; "
                            + (f"models there: {', '.join(known)}" if known else "it holds no results yet"))
    candidate_build, baseline_build = releases.choose(releases.builds(rows), model, candidate, baseline)
    found = releases.compare(rows, model, candidate_build, baseline_build, metric=metric, threshold=threshold,
                             max_slowdown=max_slowdown, confidence=confidence)
    data = found.to_dict()
    if as_json:
        click.echo(views.to_json(data))
    elif as_csv:
        click.echo(views.to_csv(views.comparison_rows(data)), nl=False)
    else:
        _print_comparison(found, data)
    if found.gated:
        click.get_current_context().exit(1)


def _print_comparison(found, data) -> None:
    from ..fleet import views
    from ..fleet.latency_ratio import METHOD

    out = console()
    same = " (the same convert output: any change is the boards')" if found.same_build else ""
    click.echo(f"{found.model}: candidate {found.candidate.label} against baseline {found.baseline.label}{same}; "
               f"verdict on {found.metric} at a {found.threshold:.0%} threshold, {found.confidence:.0%} intervals")
    rows = views.comparison_rows(data)
    headers, cells = views.cells(views.COMPARE, rows)
    out.print(table(headers, cells, optional=views.COMPARE_OPTIONAL))
    for row in rows:
        if row["scope"] == "board" and row["reason"]:
            click.echo(f"{row['device_id']}: {row['reason']}")
    boards = [b for b in found.boards if b.ratios or b.point_ratios]
    slower = [b.device_id for b in found.boards if b.verdict == "slower"]
    click.echo(f"slower on {len(slower)} of {len(boards)} board(s) compared" + (f" ({', '.join(slower)})" if slower else ""))
    if found.gated:
        click.echo(f"GATE FAILED: measurably slower than {found.max_slowdown:.0%} on {found.metric}: "
                   f"{', '.join(found.gated)}")
    click.echo(f"intervals: {METHOD}")
    if found.one_run_a_side:
        click.echo(f"{len(found.one_run_a_side)} board(s) compared on one benchmark of a build: their intervals "
                   "cannot see how much benchmarks of one build differ from run to run; deploy a build again under "
                   "the same --build-version to add runs (docs/FLEET.md, \"Comparing builds\")")


@fleet.command()
@click.option("--device-id", "device", metavar="ID", help="Only this device.")
@hidden_alias("--device", "--device-id", "device", metavar="ID")
@click.option("--since", metavar="WHEN", help="From this time on: 30s, 10m, 2h, 1d, epoch seconds or ISO time.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Newest N rows.")
@_format_options
def telemetry(device, since, limit, db_url, as_json, as_csv):
    """Telemetry over time: CPU load, memory, temperature, power."""
    from ..fleet import views

    start = views.parse_since(since) if since else None
    with _open(db_url) as store:
        rows = store.telemetry(device=device, since=start, limit=limit)
    _emit(rows, views.TELEMETRY, as_json, as_csv, "telemetry", "no telemetry matches", drop=("body",))


@fleet.command()
@click.option("--db", "db_url", metavar="URL", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats(db_url, as_json):
    """Messages stored, duplicates dropped, rejections by reason, gaps in sequence numbers, and
    confirmations the devices refused (forged or unsigned)."""
    from ..fleet import views

    with _open(db_url) as store:
        counts = store.stats()
        gaps = store.gaps(open_only=True)
        jumps = store.gaps(suspect=True)
        rejected = store.rejected(limit=10)
    if as_json:
        click.echo(views.to_json({**counts, "open_gaps": gaps, "suspect_jumps": jumps, "recent_rejections": rejected}))
        return
    out = console()
    rows = [[kind, f"{counts['stored'].get(kind, 0):,}", f"{counts['duplicate'].get(kind, 0):,}"]
            for kind in sorted(set(counts["stored"]) | set(counts["duplicate"]))]
    out.print(table(["kind", "stored", "duplicate"], rows, title="messages"))
    if counts["rejected"]:
        out.print(table(["reason", "rejected"], [[r, f"{n:,}"] for r, n in sorted(counts["rejected"].items())],
                        title="rejected"))
        out.print(table(["when", "topic", "reason", "detail"],
                        [[views.ago(r["received_at"]), r["topic"], r["reason"], r["detail"]] for r in rejected],
                        title="latest rejections"))
    else:
        out.print("rejected: none")
    if gaps:
        headers, cells = views.cells(views.GAPS, gaps)
        out.print(table(headers, cells, title=f"open gaps: {counts['gaps']['missing']:,} messages missing"))
    else:
        out.print(f"missing messages: none ({counts['gaps']['filled']:,} arrived late and were filled in)")
    if jumps:
        headers, cells = views.cells(views.GAPS, jumps)
        out.print(table(headers, cells, title=f"suspect sequence jumps (not counted as missing): {len(jumps):,}"))
    jobs = counts["jobs"]
    if any(jobs.values()):
        out.print(f"kept jobs: {jobs['waiting']:,} waiting for their board (sent again by the collector), "
                  f"{jobs['answered']:,} answered, {jobs['expired']:,} expired unanswered")
    refused = counts["unauthenticated_confirms"]
    if refused["total"]:
        out.print(f"refused confirmations: {refused['total']:,} (forged or unsigned; the devices forgot nothing)")
        out.print(table(["device", "refused confirmations"], [[d, f"{n:,}"] for d, n in refused["devices"].items()]))
    else:
        out.print("refused confirmations: none reported by the devices")


@fleet.command()
@click.argument("name")
@click.option("--role", type=click.Choice(["device", "collector", "deploy", "broker"]), default="device",
              show_default=True, help="What the identity does: a board's agent, a collector, a deploying user, "
                                      "or the broker itself (a server certificate).")
@click.option("--password-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Mosquitto's password file: adds NAME with a new random password (made if missing).")
@click.option("--cert", is_flag=True, help="Issue a client certificate (CN=NAME) from the fleet CA.")
@click.option("--acl-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Append the collector's or deploy user's `user` block to this Mosquitto ACL file.")
@click.option("--broker", default="localhost", show_default=True, metavar="HOST[:PORT]",
              help="The broker address written into the config.")
@click.option("--host", "server_names", multiple=True, metavar="NAME",
              help="With --role broker: another host name or IP address the broker is reached at "
                   "(repeatable; NAME is always one).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the credentials and config (default: ./edgeopt-credentials/NAME).")
@click.option("--keys-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the fleet CA lives (default: beside the signing keys, ~/.config/edgeopt/keys).")
@click.option("--force", is_flag=True, help="Replace NAME's existing password, certificate or device key.")
@click.option("--db", "db_url", metavar="URL",
              help="With a device: pin its new signing key in this fleet database (the collector's), so no one "
                   "else's key is taken for the board's on first sight. " + DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def provision(name, role, password_file, cert, acl_file, broker, server_names, out_dir, keys_dir, force, db_url,
              as_json):
    """Give NAME (a device id, collector or deploy user) its own broker identity.

    A password (written to the broker's password file with mosquitto_passwd) and/or a client
    certificate from the fleet CA, whose CN is NAME. The broker's ACL (scripts/mosquitto.acl)
    then lets it use only its own topics. A device also gets its own signing key (device.key),
    which signs everything it sends; --db pins it in the fleet database.
    """
    from ..errors import UserError
    from ..fleet import views
    from ..fleet.provision import provision as make

    if db_url is not None and role != "device":
        raise UserError("--db pins a device's signing key; a collector, deploy user or broker has none")
    done = make(name, role=role, password_file=password_file, cert=cert, out_dir=out_dir, keys_dir=keys_dir,
                broker=broker, acl_file=acl_file, server_names=server_names, force=force, fleet_db=db_url)
    if as_json:
        click.echo(views.to_json(done.to_json()))
        return
    for note in done.notes:
        click.echo(note)
    if done.ca_created:
        click.echo("made a new fleet CA (its key stays on this machine; the broker's cafile is its certificate, "
                   f"copied to {done.ca_cert})")
    if done.password_file:
        click.echo(f"{name}: added to {done.password_file}; its password is in {done.password_path} (keep it secret)")
    if done.cert:
        click.echo(f"{name}: certificate {done.cert}, key {done.key} (keep it secret), CA {done.ca_cert}")
    if done.acl_lines:
        if done.acl_file:
            click.echo(f"{name}: ACL block appended to {done.acl_file}; reload the broker (SIGHUP) to apply it")
        else:
            click.echo("add this block to the broker's ACL file (or pass --acl-file):\n  " + "\n  ".join(done.acl_lines))
    if done.config_path:
        what = "agent config" if role == "device" else "options"
        click.echo(f"{what} ({done.config_path}):")
        click.echo(done.config.rstrip("\n"))
    if done.device_key:
        click.echo(f"{name}: signing key {done.device_key} (keep it secret), public key {done.device_public_key}, "
                   f"key id {done.device_key_id}")
        if done.pinned_in:
            click.echo(f"{name}: key {done.device_key_id} pinned in {done.pinned_in}: the collector stores only what "
                       "this key signed under that name")
        else:
            click.echo(f"pin it where the collector stores (else the first key seen under {name} is pinned): "
                       f"edgeopt fleet pin-key {name} --key {done.device_public_key} --db URL")
    if role == "device":
        click.echo(f"copy {done.folder} to the board (e.g. /etc/edgeopt) and start: edgeopt-agent --config agent.toml")


@fleet.command("pin-key")
@click.argument("device_id", metavar="DEVICE_ID")
@click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="The board's public key (device.pub from `edgeopt fleet provision`, or the PEM public key of the "
                   "device.key an agent made in its data dir).")
@click.option("--accept-changed", is_flag=True,
              help="Pin the other key the board's messages came signed with (a reinstalled board's new key), as "
                   "`edgeopt fleet devices` shows it. Only when you know the board itself made it: whoever holds "
                   "that key then speaks for the board.")
@click.option("--db", "db_url", metavar="URL", help=DB_HELP)
def pin_key(device_id, key_file, accept_changed, db_url):
    """Pin DEVICE_ID's signing key: the collector then stores only messages it signed, under that name."""
    from edgeopt_agent import message_signing, signing

    from ..errors import UserError
    from ..fleet.store import open_store

    if (key_file is None) == (not accept_changed):
        raise UserError("say which key: --key FILE (the board's public key) or --accept-changed (the one its "
                        "messages now come signed with)")
    with open_store(db_url) as store:
        if accept_changed:
            raw = store.accept_changed_key(device_id)
        else:
            try:
                text = key_file.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as exc:
                raise UserError(f"cannot read {key_file}: {getattr(exc, 'strerror', None) or exc}") from None
            raw = signing.parse_public_key_pem(text, str(key_file))
            before = store.pin_device_key(device_id, raw)
            if before is not None and before["public_key"] != base64.b64encode(raw).decode("ascii"):
                click.echo(f"{device_id}: replaced key {before['fingerprint']} ({before['source']})")
        click.echo(f"{device_id}: key {message_signing.fingerprint(raw)} pinned in {store.url}; messages signed by "
                   "any other key are refused and flagged")


@fleet.command()
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="Delete telemetry and rejected messages older than this: 30d, 12h, or a time.")
@click.option("--db", "db_url", metavar="URL", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def prune(older_than, db_url, as_json):
    """Delete old telemetry and rejected messages (results and status are kept)."""
    from ..fleet import views

    cutoff = views.parse_since(older_than, option="--older-than")
    with _open(db_url) as store:
        deleted = store.prune(cutoff)
    if as_json:
        click.echo(views.to_json({"before": cutoff, "deleted": deleted}))
    else:
        click.echo(f"deleted {deleted['telemetry']:,} telemetry rows and {deleted['rejected']:,} rejected messages "
                   f"from before {views.clock(cutoff)}")
