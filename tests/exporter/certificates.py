"""A throwaway CA with server and client certificates, made at test time by the openssl CLI."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
import yaml

_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str | Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.fail("openssl is not installed (Debian package openssl)", pytrace=False)
    subprocess.run([binary, *map(str, args)], check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    """A CA that signs certificates into ``folder``."""

    folder: Path
    cert: Path
    key: Path

    @classmethod
    def create(cls, folder: Path, name: str = "mirrorwatch-test-ca") -> Authority:
        folder.mkdir(parents=True, exist_ok=True)
        cert, key = folder / f"{name}.crt", folder / f"{name}.key"
        _openssl(
            "req", "-x509", *_CURVE, "-keyout", key, "-out", cert, "-days", "2",
            "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        return cls(folder, cert, key)

    def issue(
        self,
        name: str,
        *,
        hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
        usage: str = "serverAuth",
        expired: bool = False,
    ) -> Pair:
        """A certificate for ``hosts`` (IPs or names); ``expired``: its validity already over."""
        cert, key, request = (self.folder / f"{name}.{ext}" for ext in ("crt", "key", "csr"))
        _openssl("req", *_CURVE, "-keyout", key, "-out", request, "-subj", f"/CN={name}")
        names = ",".join(
            f"IP:{host}" if host.replace(".", "").isdigit() else f"DNS:{host}" for host in hosts
        )
        extensions = self.folder / f"{name}.ext"
        extensions.write_text(
            f"subjectAltName={names}\nextendedKeyUsage={usage}\n"
            "basicConstraints=critical,CA:FALSE\n",
            encoding="utf-8",
        )
        # An expired one: valid for a day, two days ago (x509 -not_before/-not_after need 3.4).
        validity = ["-days", "1"] if not expired else ["-days", "-1"]
        _openssl(
            "x509", "-req", "-in", request, "-CA", self.cert, "-CAkey", self.key,
            "-CAcreateserial", "-out", cert, *validity, "-extfile", extensions,
        )  # fmt: skip
        return Pair(cert, key)


def bcrypt_hash(password: str) -> str:
    """The hash basic_auth_users holds; cost 4 (the least) keeps the tests quick."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()


def write_web_config(path: Path, config: dict[str, object]) -> Path:
    """Written whole under another name, then renamed: a reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    partial.replace(path)
    return path
