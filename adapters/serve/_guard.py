"""Who may read and who may write: loopback names, the Origin of a write, the token.

Reads are open to whoever reaches the server (loopback only, by default). When the server is
bound to a loopback address, a request whose ``Host`` names anything else is refused, so a page
on another site cannot read the store through a DNS name rebound to 127.0.0.1. A write (a
decision) needs all of: decisions allowed at start, the token printed at start in the
``X-Agentledger-Token`` header (compared in constant time), a JSON body (no HTML form can send
one across sites), and, when the browser says where it comes from (``Origin``,
``Sec-Fetch-Site``), a loopback origin and no cross-site request.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ("TOKEN_HEADER", "host_is_loopback", "refuse_read", "refuse_write")

TOKEN_HEADER = "x-agentledger-token"


def host_is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, without a port) is this machine's loopback."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _hostname(authority: str) -> str:
    """The host of a ``Host`` header value (``name:port``, ``[::1]:port``)."""
    return urlsplit("//" + authority).hostname or ""


def refuse_read(headers: Mapping[str, str], *, bound_to_loopback: bool) -> str | None:
    """Why a request may not even be read (a rebound name), or None."""
    if bound_to_loopback and not host_is_loopback(_hostname(headers.get("host", ""))):
        return "this server answers to loopback names only (127.0.0.1, localhost)"
    return None


def refuse_write(headers: Mapping[str, str], *, token: str, allowed: bool) -> str | None:
    """Why a write may not go ahead, or None when it may."""
    if not allowed:
        return "this server is read-only: start it with --allow-decisions to decide here"
    origin = headers.get("origin")
    if origin is not None and (origin == "null" or not host_is_loopback(urlsplit(origin).hostname or "")):
        return f"writes are accepted from loopback pages only, not from origin {origin!r}"
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return "cross-site writes are refused"
    if not headers.get("content-type", "").startswith("application/json"):
        return "a decision is sent as JSON"
    given = headers.get(TOKEN_HEADER, "")
    if not given or not hmac.compare_digest(given.encode(), token.encode()):
        return "a write needs the token the server printed at start (X-Agentledger-Token)"
    return None
