"""Who may use the server: requests addressed to this machine, with JSON bodies, and the API key when one is set.

A web page in the user's browser can send requests to a local server. Two checks keep it out:
- the `Host` header, on a loopback bind: a page that had its own domain's DNS point to 127.0.0.1 (DNS
  rebinding) sends `Host: its-domain`, so only loopback names are answered;
- `Content-Type: application/json` on every POST: the only bodies a page can send without the browser first
  asking the server's permission (a CORS preflight, which this server never grants) are form and text/plain.
A server reachable from other machines has no such protection, so it must have an API key (OpenAI's
`Authorization: Bearer KEY`); only /health answers without it.
"""

from __future__ import annotations

import hmac
import ipaddress

from aiohttp import hdrs, web

from .protocol import ApiError

OPEN_PATHS = {"/health"}  # answered without the API key: liveness probes carry none


def is_loopback(host: str) -> bool:
    """A name or address that only this machine can reach: localhost, *.localhost, 127.0.0.0/8, ::1."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):  # browsers resolve these to loopback themselves
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a Host header: 'example.com:8000' -> 'example.com', '[::1]:8000' -> '::1'."""
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without an API key."""
    if not is_loopback(host) and not api_key:
        raise ValueError(f"--host {host} lets other machines reach the server, and nothing would stop them from "
                         "using it: set an API key with --api-key KEY (or the MTPEDGE_API_KEY environment "
                         "variable), which clients send as `Authorization: Bearer KEY`")


def access_guard(loopback_bind: bool, api_key: str | None):
    """The middleware that refuses requests the server should not answer (see the module docstring)."""
    key = api_key.encode() if api_key else None

    @web.middleware
    async def guard(request: web.Request, handler) -> web.StreamResponse:
        host = request.headers.get(hdrs.HOST)
        if loopback_bind and host is not None and not is_loopback(host_name(host)):
            raise ApiError(403, f"this server listens on loopback and answers requests for localhost only, not for "
                                f"Host {host[:80]!r} (a web page may be trying to reach it through DNS rebinding); "
                                "to serve other names, listen on another --host with an --api-key",
                           code="host_not_allowed")
        if key is not None and request.path not in OPEN_PATHS:
            scheme, _, token = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key):
                raise ApiError(401, "a valid API key is required: send `Authorization: Bearer KEY` with the key "
                                    "the server was started with", code="invalid_api_key",
                               headers={hdrs.WWW_AUTHENTICATE: "Bearer"})
        if request.method == "POST" and request.content_type != "application/json":
            raise ApiError(415, f"the request body must be JSON sent with `Content-Type: application/json`, "
                                f"not {request.content_type!r}", code="unsupported_media_type")
        return await handler(request)

    return guard
