"""Broker identities for a fleet: one per device, collector and deploy user; and each device's signing key.

    provision("rpi-01", password_file="/etc/mosquitto/edgeopt.passwd")          # a password
    provision("rpi-01", cert=True)                                              # a client certificate
    provision("collector-a", role="collector", password_file=..., acl_file="/etc/mosquitto/edgeopt.acl")

A password goes into Mosquitto's password file through Mosquitto's own `mosquitto_passwd -b`
(so the hash is whatever the installed broker reads). A certificate is signed by the fleet CA,
made on first use beside the signing keys (~/.config/edgeopt/keys/fleet-ca.{crt,key}); its CN is
the identity's name, which Mosquitto takes as the user name with `use_identity_as_username`.
The broker's ACL (scripts/mosquitto.acl) then ties user name X to the topics edgeopt/v1/X/...;
collector and deploy users get their own `user` block, appended to the ACL file here.

A device also gets its own Ed25519 signing key (`device.key`, 0600, and `device.pub`; its
agent.toml names it as `device_key`), which signs everything the board sends. Given the fleet
database (`fleet_db`), its public key is pinned there at once, so the collector never learns it
from whoever publishes first under the board's name (a pin from provisioning wins over one made
on first sight).

Every file and folder written here is checked first: a symlink is refused (a planted link would
redirect the write), a folder of ours that others may enter is made 0700, and files are written
to a new name and renamed over the old one. Mosquitto 2 reads its password file, ACL and TLS
files after dropping root to the `mosquitto` user, so when this runs as root and that user exists
(`broker_account()`), the files the broker reads are given to its group, owned by root (owner
root, group `mosquitto`, mode 0640; the broker identity's folder 0750): the broker reads them but
cannot rewrite them, its own ACL included.
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import secrets
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from edgeopt_agent import wire

from ..errors import MissingExtraError, UserError, require

log = logging.getLogger(__name__)

PathLike = Union[str, Path]
ROLES = ("device", "collector", "deploy", "broker")
CA_CERT_NAME = "fleet-ca.crt"
CA_KEY_NAME = "fleet-ca.key"
CA_DAYS = 3650
CERT_DAYS = 825
MOSQUITTO_PASSWD_FALLBACK = "/usr/bin/mosquitto_passwd"
DEFAULT_OUT = "edgeopt-credentials"
DEVICE_KEY_NAME = "device.key"  # the board's signing key (edgeopt_agent.message_signing)
DEVICE_PUBLIC_NAME = "device.pub"
BROKER_USER = "mosquitto"  # the user Mosquitto's packages run the broker as (it drops root to it)
BROKER_FILE_MODE = 0o640
BROKER_DIR_MODE = 0o750
BROKER_FILE_OWNER = 0  # root: the broker's files are only readable to it (group), never writable

# What each role may do besides what scripts/mosquitto.acl grants every user on its own device
# topics. {name} is the identity's user name.
ROLE_ACL = {
    "collector": (
        "topic read edgeopt/v1/+/status",
        "topic read edgeopt/v1/+/telemetry",
        "topic read edgeopt/v1/+/results",
        "topic write edgeopt/v1/+/confirm",
        # The jobs `edgeopt deploy --db` kept, sent again until their board answers (edgeopt.fleet.jobs).
        "topic write edgeopt/v1/+/jobs",
        "topic readwrite edgeopt/collectors/{name}/status",
        # The ACL's pattern lines give every login edgeopt/v1/<login>/...: this login is no device.
        "topic deny edgeopt/v1/{name}/#",
    ),
    "deploy": (
        "topic read edgeopt/v1/+/status",
        "topic read edgeopt/v1/+/results",
        "topic read edgeopt/v1/+/transfer",
        "topic write edgeopt/v1/+/jobs",
        "topic write edgeopt/v1/+/chunks",
        "topic deny edgeopt/v1/{name}/#",
    ),
}


@dataclass
class Provisioned:
    name: str
    role: str
    folder: Path  # this identity's files: password, certificate, key, CA, config
    password_file: Optional[Path] = None  # the broker's password file that got the entry
    password_path: Optional[Path] = None  # the password itself, readable by its owner only
    cert: Optional[Path] = None
    key: Optional[Path] = None
    ca_cert: Optional[Path] = None
    ca_created: bool = False
    acl_file: Optional[Path] = None  # the ACL file the user block was appended to
    acl_lines: List[str] = field(default_factory=list)  # the user block (collector and deploy)
    device_key: Optional[Path] = None  # a device's signing key (private, 0600), and its public key
    device_public_key: Optional[Path] = None
    device_key_id: Optional[str] = None
    pinned_in: Optional[str] = None  # the fleet database its key was pinned in (display URL)
    config_path: Optional[Path] = None
    config: str = ""  # agent.toml for a device; command-line options otherwise
    notes: List[str] = field(default_factory=list)  # folders made private, files given to the broker's user

    def to_json(self) -> Dict[str, Any]:
        return {key: str(value) if isinstance(value, Path) else value for key, value in asdict(self).items()}


def provision(
    name: str,
    role: str = "device",
    password_file: Optional[PathLike] = None,
    cert: bool = False,
    out_dir: Optional[PathLike] = None,
    keys_dir: Optional[PathLike] = None,
    broker: str = "localhost",
    acl_file: Optional[PathLike] = None,
    server_names: Sequence[str] = (),
    force: bool = False,
    fleet_db: Optional[str] = None,
) -> Provisioned:
    """Make `name`'s broker credentials (and a device's signing key, pinned in `fleet_db` when given);
    see the module's docstring."""
    if role not in ROLES:
        raise UserError(f"unknown role '{role}'; use one of {', '.join(ROLES)}")
    wire.validate_device_id(name)  # one topic level, and a safe file and user name
    if role == "broker":
        if password_file is not None:
            raise UserError("a broker identity is a server certificate only; drop --password-file")
        cert = True
    elif password_file is None and not cert:
        raise UserError(f"say how {name} proves who it is: --password-file FILE (Mosquitto's password file), "
                        "--cert (a client certificate from the fleet CA), or both")
    folder = Path(out_dir).expanduser() if out_dir is not None else Path(DEFAULT_OUT) / name
    # Every path written below is checked before anything is written: a planted link stops it all.
    for path in (folder, *(folder / f for f in ("password", f"{name}.crt", f"{name}.key", "ca.crt", "agent.toml",
                                                "options.txt", DEVICE_KEY_NAME, DEVICE_PUBLIC_NAME)),
                 *(Path(p).expanduser() for p in (password_file, acl_file) if p is not None)):
        _lstat(path)
    mine = ("password", f"{name}.crt", f"{name}.key") + ((DEVICE_KEY_NAME,) if role == "device" else ())
    existing = [folder / f for f in mine if (folder / f).exists()]
    if existing and not force:
        raise UserError(f"{name} already has credentials in {folder}; pass --force to replace them "
                        "(the old ones then stop working)")
    result = Provisioned(name=name, role=role, folder=folder)
    account = broker_account()
    if out_dir is None:
        _prepare_dir(folder.parent, result.notes)
    # The broker's own certificate and key are read by the broker, after it dropped root.
    _prepare_dir(folder, result.notes, account if role == "broker" else None)
    if password_file is not None:
        result.password_file = Path(password_file).expanduser()
        result.password_path = _add_password(result.password_file, name, folder, force, account, result.notes)
    if cert:
        ca = FleetCA.open(keys_dir)
        result.ca_created = ca.created
        hosts = list(dict.fromkeys([name, *server_names])) if role == "broker" else []
        result.cert, result.key = ca.issue(name, folder, server_names=hosts, server=role == "broker")
        result.ca_cert = folder / "ca.crt"
        _write_file(result.ca_cert, ca.cert_path.read_bytes(), 0o644)
        if role == "broker":
            _give_to_broker(result.key, account, result.notes)
    if role in ROLE_ACL:
        result.acl_lines = [f"user {name}"] + [line.format(name=name) for line in ROLE_ACL[role]]
        if acl_file is not None:
            result.acl_file = Path(acl_file).expanduser()
            _append_acl(result.acl_file, name, result.acl_lines, force, result.notes)
            _give_to_broker(result.acl_file, account, result.notes)
    if role == "device":
        _device_key(result, fleet_db)
    if role != "broker":
        result.config_path, result.config = _write_config(result, broker)
    return result


def _device_key(result: Provisioned, fleet_db: Optional[str]) -> None:
    """The board's own signing key, beside its credentials; pinned in the fleet database when given."""
    from edgeopt_agent.message_signing import DeviceKey

    try:
        key = DeviceKey.generate()
    except MissingExtraError:
        raise UserError("making a device's signing key needs the cryptography package: "
                        "pip install 'edgeopt[fleet]'") from None
    result.device_key, result.device_public_key = result.folder / DEVICE_KEY_NAME, result.folder / DEVICE_PUBLIC_NAME
    _write_private(result.device_key, key.private_pem())
    _write_file(result.device_public_key, key.public_pem(), 0o644)
    result.device_key_id = key.fingerprint
    if fleet_db is not None:
        from .store import open_store

        with open_store(fleet_db) as store:
            store.pin_device_key(result.name, key.public_key)
            result.pinned_in = store.url


# --- passwords ----------------------------------------------------------------------------------


def mosquitto_passwd() -> str:
    found = shutil.which("mosquitto_passwd")
    if found:
        return found
    if os.access(MOSQUITTO_PASSWD_FALLBACK, os.X_OK):
        return MOSQUITTO_PASSWD_FALLBACK
    raise UserError("mosquitto_passwd is not installed; install Mosquitto's tools (Debian/Ubuntu: "
                    "apt install mosquitto; it ships mosquitto_passwd), or use --cert instead of --password-file")


def password_users(path: Path) -> List[str]:
    """The user names in a Mosquitto password file."""
    if not path.exists():
        return []
    return [line.split(":", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()
            if ":" in line and not line.startswith("#")]


def _add_password(password_file: Path, name: str, folder: Path, force: bool, account: Optional["BrokerAccount"],
                  notes: List[str]) -> Path:
    tool = mosquitto_passwd()
    found = _lstat(password_file)  # a link is refused before anything reads or writes through it
    if name in password_users(password_file) and not force:
        raise UserError(f"{name} is already in {password_file}; pass --force to give it a new password "
                        "(its old one then stops working)")
    password = secrets.token_urlsafe(24)
    try:
        if found is None:
            password_file.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(str(password_file), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600))
        # -b takes the password as an argument: it is visible in the process list for the
        # moment mosquitto_passwd runs. Run this on the broker's host, not a shared one.
        done = subprocess.run([tool, "-b", str(password_file), name, password], capture_output=True, text=True,
                              timeout=30)
    except OSError as exc:
        raise UserError(f"cannot update the password file {password_file}: {exc.strerror}") from exc
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"mosquitto_passwd could not add {name} to {password_file}: "
                        f"{reason[0] if reason else f'exit status {done.returncode}'}")
    # Mosquitto reads it as its own user (it drops root before reading it): group, not owner.
    _give_to_broker(password_file, account, notes)
    path = folder / "password"
    _write_private(path, (password + "\n").encode())
    return path


# --- certificates -------------------------------------------------------------------------------


class FleetCA:
    """The fleet's certificate authority: an EC P-256 key and a self-signed certificate."""

    def __init__(self, cert_path: Path, key_path: Path, created: bool):
        self.cert_path = cert_path
        self.key_path = key_path
        self.created = created
        serialization = _crypto("cryptography.hazmat.primitives.serialization")
        x509 = _crypto("cryptography.x509")
        try:
            self.cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            self.key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise UserError(f"cannot read the fleet CA in {cert_path.parent}: {exc}") from exc

    @classmethod
    def open(cls, keys_dir: Optional[PathLike] = None) -> "FleetCA":
        """The CA in `keys_dir` (default: beside the signing keys), made there on first use."""
        from ..deploy.keys import default_dir

        folder = Path(keys_dir).expanduser() if keys_dir is not None else default_dir()
        cert_path, key_path = folder / CA_CERT_NAME, folder / CA_KEY_NAME
        if cert_path.exists() != key_path.exists():
            missing = key_path if cert_path.exists() else cert_path
            raise UserError(f"the fleet CA in {folder} is incomplete ({missing.name} is missing); restore it from a "
                            "backup, or move both files away to make a new CA (every certificate must then be re-issued)")
        created = not cert_path.exists()
        if created:
            _make_ca(folder, cert_path, key_path)
        return cls(cert_path, key_path, created)

    def issue(self, name: str, folder: Path, server_names: Sequence[str] = (), server: bool = False):
        """A certificate with CN=name (client, or server for `server_names`), written to folder/name.{crt,key}."""
        x509 = _crypto("cryptography.x509")
        ec = _crypto("cryptography.hazmat.primitives.asymmetric.ec")
        hashes = _crypto("cryptography.hazmat.primitives.hashes")
        ipaddress = __import__("ipaddress")
        oid = x509.oid
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(oid.NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                         data_encipherment=False, key_agreement=True, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([oid.ExtendedKeyUsageOID.SERVER_AUTH if server
                                                  else oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if server_names:
            names = []
            for host in server_names:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
        _write_private(key_path, _private_pem(key))
        _write_file(cert_path, certificate.public_bytes(_crypto("cryptography.hazmat.primitives.serialization").Encoding.PEM),
                    0o644)
        return cert_path, key_path


def _make_ca(folder: Path, cert_path: Path, key_path: Path) -> None:
    x509 = _crypto("cryptography.x509")
    ec = _crypto("cryptography.hazmat.primitives.asymmetric.ec")
    hashes = _crypto("cryptography.hazmat.primitives.hashes")
    serialization = _crypto("cryptography.hazmat.primitives.serialization")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "edgeopt fleet CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, key_encipherment=False, content_commitment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _prepare_dir(folder, [])
    _write_private(key_path, _private_pem(key))
    _write_file(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)


def _private_pem(key: Any) -> bytes:
    serialization = _crypto("cryptography.hazmat.primitives.serialization")
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


# --- ACL and config -----------------------------------------------------------------------------


def _append_acl(acl_file: Path, name: str, lines: List[str], force: bool, notes: List[str]) -> None:
    _lstat(acl_file)  # a link is refused before anything reads or writes through it
    text = acl_file.read_text(encoding="utf-8") if acl_file.exists() else ""
    present = [line.strip() for line in text.splitlines()]
    if f"user {name}" in present:
        if not force:
            raise UserError(f"{acl_file} already has a 'user {name}' block; edit it there, or pass --force "
                            "to keep it as it is")
        if lines[-1] not in present:
            notes.append(f"{acl_file}: the existing 'user {name}' block lacks '{lines[-1]}' (without it the "
                         f"ACL's pattern lines let {name} publish as a device named {name}); add it there")
        return
    block = "\n".join(lines) + "\n"
    try:
        fd = os.open(str(acl_file), os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as out:
            out.write(("\n" if text and not text.endswith("\n\n") else "") + block)
    except OSError as exc:
        raise UserError(f"cannot append to the ACL file {acl_file}: {exc.strerror}") from exc


def _write_config(result: Provisioned, broker: str) -> tuple:
    tls = {"tls_ca": result.ca_cert, "tls_cert": result.cert, "tls_key": result.key}
    if result.role == "device":
        lines = [f"device_id = {json.dumps(result.name)}", f"broker = {json.dumps(broker)}"]
        if result.password_path is not None:
            lines += [f"username = {json.dumps(result.name)}",
                      f"password_file = {json.dumps(result.password_path.name)}"]
        lines += [f"{key} = {json.dumps(path.name)}" for key, path in tls.items() if path is not None]
        if result.device_key is not None:
            lines.append(f"device_key = {json.dumps(result.device_key.name)}")
        path = result.folder / "agent.toml"
        text = "# edgeopt-agent settings (paths are relative to this file)\n" + "\n".join(lines) + "\n"
    else:
        options = [f"--broker {broker}"]
        if result.password_path is not None:
            options += [f"--username {result.name}", f"--password-file {result.password_path.resolve()}"]
        options += [f"--{key.replace('_', '-')} {path.resolve()}" for key, path in tls.items() if path is not None]
        if result.role == "collector":
            options.append(f"--client-id {result.name}")
        command = "edgeopt fleet serve" if result.role == "collector" else "edgeopt deploy OUTDIR --all"
        path = result.folder / "options.txt"
        text = f"{command} " + " ".join(options) + "\n"
    _write_file(path, text.encode("utf-8"), 0o644)
    return path, text


# --- files: no links, private folders, the broker's own files ------------------------------------

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True)
class BrokerAccount:
    name: str
    uid: int
    gid: int


def broker_account(user: str = BROKER_USER) -> Optional[BrokerAccount]:
    """The user the broker reads its files as, when this runs as root and that user exists; else None.

    Mosquitto started as root drops to `mosquitto` before it reads the password file, the ACL and
    its TLS files (measured with 2.0.11: a root-owned 0600 password file stops it from starting).
    Not running as root, the files stay the caller's: the broker then runs as the caller.
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        import pwd
        entry = pwd.getpwnam(user)
    except (ImportError, KeyError):
        return None
    return BrokerAccount(user, entry.pw_uid, entry.pw_gid)


def _lstat(path: Path) -> Optional[os.stat_result]:
    """`path`'s own status (None if missing); a symbolic link is refused."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot check {path}: {exc.strerror}") from exc
    if stat.S_ISLNK(info.st_mode):
        raise UserError(f"{path} is a symbolic link, and provisioning does not write through links (one planted "
                        "there would send the credentials elsewhere); remove it or give the real path")
    return info


def _prepare_dir(folder: Path, notes: List[str], account: Optional[BrokerAccount] = None) -> None:
    """Make `folder` (0700), or check the one there: a folder, no link, ours, and closed to others.

    With `account` it is the broker's folder: group `account`, 0750.
    """
    info = _lstat(folder)
    if info is None:
        missing, here = [], folder
        while not os.path.lexists(here) and here != here.parent:
            missing.append(here)
            here = here.parent
        for each in reversed(missing):
            try:
                each.mkdir(mode=0o700)  # the folders made here (parents too) are private
                os.chmod(each, 0o700)
            except FileExistsError:
                pass  # made meanwhile: checked below like any other
            except OSError as exc:
                raise UserError(f"cannot create {each}: {exc.strerror}; pass a writable --out") from exc
        info = _lstat(folder)
        if info is None:
            raise UserError(f"{folder} vanished while it was being made; run the command again")
    if not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{folder} is not a folder; pass another --out")
    if hasattr(os, "geteuid") and info.st_uid not in {os.geteuid(), account.uid if account else os.geteuid()}:
        raise UserError(f"{folder} belongs to another user (uid {info.st_uid}), who could read or replace what is "
                        "written there; remove it or pass another --out")
    if account is not None:
        _give_to_broker(folder, account, notes, mode=BROKER_DIR_MODE)
        return
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        try:
            os.chmod(folder, 0o700)
        except OSError as exc:
            raise UserError(f"{folder} is open to other users (mode {mode:04o}) and cannot be made private: "
                            f"{exc.strerror}") from exc
        notes.append(f"{folder}: was open to other users (mode {mode:04o}); now 0700")
        log.warning("%s was open to other users (mode %04o); made it 0700", folder, mode)


def _give_to_broker(path: Path, account: Optional[BrokerAccount], notes: List[str],
                    mode: int = BROKER_FILE_MODE) -> None:
    """Let the broker's user read `path` and not change it: owner root, group `account`, `mode`.

    Owned by the broker's user, its password file and ACL could be rewritten by a compromised
    broker (its own ACL widened). The change is made through one descriptor opened without
    following a link (O_NOFOLLOW), after checking that it is the very file or folder checked
    before (a link or another file swapped in meanwhile is refused, not followed; chmod by path
    has no reliable no-follow form on Linux), and that a file has no second name (a hard link
    would hand that other file to the broker's group).
    """
    if account is None:
        return
    checked = _lstat(path)
    if checked is None:
        raise UserError(f"{path} vanished before it could be given to the broker's user {account.name}; "
                        "run the command again")
    try:
        fd = os.open(str(path), os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise UserError(f"cannot give {path} to the broker's user {account.name}: {exc.strerror} (a symbolic "
                        "link there is not followed)") from exc
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino):
            raise UserError(f"{path} was replaced while provisioning ran; nothing was given to the broker's user "
                            f"{account.name}: check who else writes there, and run the command again")
        if not (stat.S_ISREG(opened.st_mode) or stat.S_ISDIR(opened.st_mode)):
            raise UserError(f"{path} is not a regular file or folder; remove it or give another path")
        if stat.S_ISREG(opened.st_mode) and opened.st_nlink != 1:
            raise UserError(f"{path} has {opened.st_nlink} names (hard links): giving it to the broker's group would "
                            "give the other names too; replace it with a file of its own")
        os.chown(fd, BROKER_FILE_OWNER, account.gid)  # on the descriptor: what was checked, never a link
        os.chmod(fd, mode)
    except OSError as exc:
        raise UserError(f"cannot give {path} to the broker's user {account.name}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    notes.append(f"{path}: owner root, group {account.name}, mode {mode:04o} "
                 "(the broker reads it as that user and cannot change it)")


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """Write `path` whole: to a new file beside it, renamed over it (never through a link or an old inode)."""
    _lstat(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(str(temporary), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.chmod(temporary, mode)  # whatever the umask took away or left
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from exc


def _write_private(path: Path, data: bytes) -> None:
    _write_file(path, data, 0o600)


def _crypto(module: str) -> Any:
    return require(module, "fleet", "broker certificates")
