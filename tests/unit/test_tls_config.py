"""TLS listener settings (``listener.ssl.*``) and the server context built from them."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest

from services.common.config import ConfigError, load
from services.listener.config import TlsOptions, ssl_listeners, ws_listeners
from services.listener.tls import build_context, identity
from services.node.schema import checked, schema
from tests.support.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_listeners_resolve_per_listener_options_over_the_transports() -> None:
    config = load(
        schema(),
        None,
        {
            "listener.ssl.certfile": "/c.crt",
            "listener.ssl.keyfile": "/c.key",
            "listener.ssl.a": "127.0.0.1:8883",
            "listener.ssl.b": "127.0.0.1:8884",
            "listener.ssl.b.require_certificate": "on",
            "listener.ssl.b.certfile": "/b.crt",
            "listener.ssl.b.mountpoint": "m",
        },
    )
    got = {lst.name: lst for lst in ssl_listeners(config)}
    assert sorted(got) == ["a", "b"]  # option keys are not listeners
    a, b = got["a"].tls, got["b"].tls
    assert a is not None and b is not None
    assert (a.certfile, a.require_certificate, got["a"].mountpoint) == ("/c.crt", False, "")
    assert (b.certfile, b.keyfile, b.require_certificate) == ("/b.crt", "/c.key", True)
    assert got["b"].mountpoint == "m" and got["b"].port == 8884


def test_no_tls_listener_unless_one_is_declared() -> None:
    assert ssl_listeners(load(schema(), None)) == []


def test_an_unknown_tls_version_is_refused() -> None:
    with pytest.raises(ConfigError, match=re.escape("tlsv1.2, tlsv1.3")):
        load(schema(), None, {"listener.ssl.tls_version": "sslv3"})


def test_a_listener_with_an_unreadable_file_fails_the_configuration_check(tmp_path: Path) -> None:
    config = load(
        schema(),
        None,
        {
            "listener.ssl.default": "127.0.0.1:8883",
            "listener.ssl.certfile": str(tmp_path / "missing.crt"),
            "listener.ssl.keyfile": str(tmp_path / "missing.key"),
        },
    )
    with pytest.raises(ConfigError, match=re.escape("missing.crt")):
        checked(config)


def test_the_context_requires_and_checks_client_certificates(certs: Certs) -> None:
    opts = TlsOptions(
        str(certs.server.cert),
        str(certs.server.key),
        cafile=str(certs.ca),
        require_certificate=True,
        tls_version="tlsv1.3",
    )
    ctx = build_context("x", opts)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"certfile": ""}, "needs listener.ssl.certfile"),
        ({"keyfile": "CA"}, "cannot load certfile"),
        ({"require_certificate": True}, "require_certificate needs listener.ssl.cafile"),
        ({"use_identity_as_username": True}, "needs require_certificate"),
        ({"ciphers": "NO-SUCH-CIPHER"}, "ciphers"),
        ({"cafile": "/nonexistent/ca.crt"}, "cannot load cafile /nonexistent/ca.crt"),
        ({"crlfile": "/nonexistent/ca.crl"}, "cannot load crlfile /nonexistent/ca.crl"),
    ],
)
def test_a_bad_setting_is_an_os_error_naming_it(
    certs: Certs, change: dict[str, object], says: str
) -> None:
    fields: dict[str, object] = {
        "certfile": str(certs.server.cert),
        "keyfile": str(certs.server.key),
    }
    fields.update({k: str(certs.ca) if v == "CA" else v for k, v in change.items()})
    with pytest.raises(OSError, match=re.escape(says)):
        build_context("x", TlsOptions(**fields))  # type: ignore[arg-type]


def test_identity_is_the_subjects_common_name() -> None:
    cert = {"subject": ((("countryName", "DE"),), (("commonName", "device-7"),))}
    assert identity(cert) == "device-7"
    assert identity({"subject": ((("organizationName", "x"),),)}) is None
    assert identity(None) is None


def test_websocket_listeners_plain_and_over_tls() -> None:
    config = load(
        schema(),
        None,
        {
            "listener.ws.default": "127.0.0.1:8080",
            "listener.ws.default.proxy_protocol": "on",
            "listener.wss.default": "127.0.0.1:8443",
            "listener.wss.certfile": "/w.crt",
            "listener.wss.keyfile": "/w.key",
        },
    )
    ws, wss = ws_listeners(config)
    assert (ws.transport, ws.port, ws.tls, ws.proxy_protocol) == ("ws", 8080, None, True)
    assert wss.transport == "wss" and wss.tls is not None and wss.tls.certfile == "/w.crt"
    assert ssl_listeners(config) == []


def test_a_wss_listener_with_an_unreadable_file_names_its_key(tmp_path: Path) -> None:
    config = load(
        schema(),
        None,
        {
            "listener.wss.default": "127.0.0.1:8443",
            "listener.wss.certfile": str(tmp_path / "w.crt"),
            "listener.wss.keyfile": str(tmp_path / "w.key"),
        },
    )
    with pytest.raises(ConfigError, match=re.escape("listener.wss.default: cannot load")):
        checked(config)
