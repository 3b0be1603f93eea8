"""The web config file as exporter-toolkit documents it (docs/web-configuration.md), basic auth."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import bcrypt
import pytest

from mirrorwatch.exporter.basic_auth import BasicAuthUsers, WatchedUsers
from mirrorwatch.exporter.cli import main
from mirrorwatch.exporter.web_config import WebConfigError, load_web_config, tls_context
from tests.exporter.certificates import Authority, Pair, bcrypt_hash, write_web_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "web-config.yml"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority.create(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def server(authority: Authority) -> Pair:
    return authority.issue("server")


def _tls(authority: Authority, server: Pair, **extra: object) -> dict[str, object]:
    return {"cert_file": str(server.cert), "key_file": str(server.key), **extra}


def test_an_empty_file_means_plain_http_without_auth(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("", encoding="utf-8")
    config = load_web_config(path)
    assert config.tls is None
    assert config.users == {}


def test_paths_are_relative_to_the_file_as_the_toolkit_resolves_them(tmp_path: Path) -> None:
    path = write_web_config(
        tmp_path / "web.yml", {"tls_server_config": {"cert_file": "a.crt", "key_file": "a.key"}}
    )
    config = load_web_config(path)
    assert config.tls is not None
    assert config.tls.cert_file == tmp_path / "a.crt"
    assert config.tls.key_file == tmp_path / "a.key"


@pytest.mark.parametrize(
    ("section", "names"),
    [
        ({"tls_server_config": {"cipher_suites": ["TLS_AES_128_GCM_SHA256"]}}, "cipher_suites"),
        ({"tls_server_config": {"curve_preferences": ["X25519"]}}, "curve_preferences"),
        ({"http_server_config": {"http2": False}}, "http_server_config.http2"),
        ({"http_server_config": {"headers": {"X-Frame-Options": "deny"}}}, "headers"),
    ],
)
def test_keys_python_cannot_honour_are_refused_by_name(
    tmp_path: Path, section: dict[str, object], names: str
) -> None:
    path = write_web_config(tmp_path / "web.yml", section)
    with pytest.raises(WebConfigError, match=f"not supported by mirrorwatch-exporter: .*{names}"):
        load_web_config(path)


def test_an_unknown_key_is_refused_as_the_toolkit_refuses_it(tmp_path: Path) -> None:
    path = write_web_config(tmp_path / "web.yml", {"basic_auth_user": {"a": "b"}})
    with pytest.raises(WebConfigError, match="unknown key basic_auth_user"):
        load_web_config(path)


@pytest.mark.parametrize("kind", ["RequestClientCert", "RequireAnyClientCert"])
def test_unverified_client_certificates_are_refused(tmp_path: Path, kind: str) -> None:
    path = write_web_config(
        tmp_path / "web.yml",
        {"tls_server_config": {"cert_file": "a", "key_file": "b", "client_auth_type": kind}},
    )
    with pytest.raises(WebConfigError, match=f"{kind} is not supported"):
        load_web_config(path)


def test_verifying_clients_needs_a_client_ca_file(tmp_path: Path) -> None:
    path = write_web_config(
        tmp_path / "web.yml",
        {
            "tls_server_config": {
                "cert_file": "a",
                "key_file": "b",
                "client_auth_type": "RequireAndVerifyClientCert",
            }
        },
    )
    with pytest.raises(WebConfigError, match="client_ca_file: needed"):
        load_web_config(path)


def test_a_basic_auth_user_needs_a_bcrypt_hash(tmp_path: Path) -> None:
    path = write_web_config(tmp_path / "web.yml", {"basic_auth_users": {"prom": "secret"}})
    with pytest.raises(WebConfigError, match=r"basic_auth_users\.prom: expected a bcrypt hash"):
        load_web_config(path)


def test_min_version_above_max_version_is_refused(tmp_path: Path) -> None:
    tls = {"cert_file": "a", "key_file": "b", "min_version": "TLS13", "max_version": "TLS12"}
    path = write_web_config(tmp_path / "web.yml", {"tls_server_config": tls})
    with pytest.raises(WebConfigError, match="min_version: TLS13 is above max_version TLS12"):
        load_web_config(path)


def test_the_context_takes_versions_and_client_verification_from_the_file(
    tmp_path: Path, authority: Authority, server: Pair
) -> None:
    tls = _tls(
        authority,
        server,
        client_auth_type="RequireAndVerifyClientCert",
        client_ca_file=str(authority.cert),
        min_version="TLS13",
    )
    config = load_web_config(write_web_config(tmp_path / "web.yml", {"tls_server_config": tls}))
    assert config.tls is not None
    context = tls_context(config.tls)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3


def test_a_key_that_is_not_the_certificates_is_named(
    tmp_path: Path, authority: Authority, server: Pair
) -> None:
    other = authority.issue("other")
    tls = {"cert_file": str(server.cert), "key_file": str(other.key)}
    config = load_web_config(write_web_config(tmp_path / "web.yml", {"tls_server_config": tls}))
    assert config.tls is not None
    with pytest.raises(WebConfigError, match="are not a PEM certificate and its key"):
        tls_context(config.tls)


@pytest.mark.parametrize(
    "content",
    [
        "tls_server_config: [",
        "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [X]\n",
    ],
    ids=["not-yaml", "missing-certificate", "unsupported-key"],
)
def test_a_bad_file_is_exit_2_and_one_line(
    tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "web.yml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["--simulate", "healthy", "--web-config-file", str(path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"mirrorwatch-exporter: error: --web-config-file {path}: ")
    assert "Traceback" not in err


def test_a_correct_password_is_checked_by_bcrypt_once_then_cached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds: list[bytes] = []
    checkpw = bcrypt.checkpw

    def counted(password: bytes, hashed: bytes) -> bool:
        rounds.append(password)
        return checkpw(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counted)
    users = BasicAuthUsers({"prom": bcrypt_hash("secret").encode()})
    assert [users.check("prom", "secret") for _ in range(5)] == [True] * 5
    assert users.check("prom", "wrong") is False
    assert len(rounds) == 2


def test_an_unknown_user_still_pays_a_bcrypt_round(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds: list[bytes] = []
    checkpw = bcrypt.checkpw

    def counted(password: bytes, hashed: bytes) -> bool:
        rounds.append(hashed)
        return checkpw(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counted)
    users = BasicAuthUsers({"prom": bcrypt_hash("secret").encode()})
    assert users.check("nobody", "secret") is False
    assert len(rounds) == 1  # so its answer takes as long as a wrong password's


def test_a_changed_password_is_a_new_cache_key(tmp_path: Path) -> None:
    path = write_web_config(tmp_path / "web.yml", {"basic_auth_users": {"p": bcrypt_hash("one")}})
    watched = WatchedUsers(path, load_web_config(path).users)
    assert watched.current().check("p", "one")
    write_web_config(path, {"basic_auth_users": {"p": bcrypt_hash("two")}})
    assert not watched.current().check("p", "one")
    assert watched.current().check("p", "two")


def test_a_file_broken_while_running_keeps_the_users_it_had(tmp_path: Path) -> None:
    path = write_web_config(tmp_path / "web.yml", {"basic_auth_users": {"p": bcrypt_hash("one")}})
    watched = WatchedUsers(path, load_web_config(path).users)
    path.write_text("basic_auth_users: [", encoding="utf-8")
    assert watched.current().check("p", "one")


def test_the_example_web_config_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run `make tools`", pytrace=False)
    # promtool loads the certificates it names: real ones, at the example's paths.
    copy = tmp_path / "web-config.yml"
    shutil.copy(EXAMPLE, copy)
    config = load_web_config(copy)
    assert config.tls is not None
    assert config.tls.client_ca_file is not None
    authority = Authority.create(tmp_path / "tls", config.tls.client_ca_file.stem)
    issued = authority.issue(config.tls.cert_file.stem)
    assert (issued.cert, issued.key) == (config.tls.cert_file, config.tls.key_file)
    result = subprocess.run(
        [promtool, "check", "web-config", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert config.users, "the example shows basic_auth_users"
