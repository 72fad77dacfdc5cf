"""Every form in which a URL's ``user:password@`` leaves this process, so that redaction knows each of them.

An HTTP client does not send a URL's credentials as written: httpx (under the ``openai`` client) takes them out of
the URL and sends ``Authorization: Basic <base64(user:password)>`` (RFC 7617, UTF-8: httpx ``BasicAuth``), and a
password with reserved characters is percent-encoded in the URL. A model or a server that echoes a request can
therefore echo any of these forms. :func:`url_credential_forms` lists them for a URL (the redactor,
:func:`rerankeval.core.settings.redact`, replaces each literally), and :func:`scrub_basic` replaces the token of
any ``Basic <base64 of "user:password">`` header, known or not (a proxy's, another tool's).

A leaf module (imports nothing of ours): :mod:`rerankeval.core.settings` uses it.
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import SplitResult, quote, unquote

_SUB_DELIMS = "!$&'()*+,;="  # RFC 3986 characters a userinfo may hold unencoded
_BASIC = re.compile(r"(?i:\bbasic)(\s+)([A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])")


def _b64(text: str, encoding: str) -> list[str]:
    """base64 of ``text``, padded and not (an echo may drop the ``=``); none when ``encoding`` cannot hold it."""
    try:
        token = base64.b64encode(text.encode(encoding)).decode("ascii")
    except UnicodeEncodeError:
        return []
    return [token, token.rstrip("=")]


def url_credential_forms(parts: SplitResult) -> list[str]:
    """The forms of the credentials of a split URL that a client sends or a server may echo: the password as
    written, decoded and percent-encoded, and the base64 token of ``Authorization: Basic`` (UTF-8 as httpx sends
    it, Latin-1 as ``requests`` does). A URL without ``@`` has none; a lone user (a token) counts as the secret."""
    if "@" not in parts.netloc:
        return []
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    secret = password or user
    forms = [parts.password or parts.username or "", secret, quote(secret, safe=""), quote(secret, safe=_SUB_DELIMS)]
    pair = f"{user}:{password}"
    forms += _b64(pair, "utf-8") + _b64(pair, "latin-1")
    return list(dict.fromkeys(f for f in forms if f))


def _is_credential_token(token: str) -> bool:
    """True when ``token`` is the base64 of printable ``user:password`` text (what a Basic header carries)."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in text and text.isprintable()


def scrub_basic(text: str, replacement: str) -> str:
    """``text`` with the token of every ``Basic <base64 of user:password>`` replaced by ``replacement`` (the word
    "basic" followed by an ordinary word is left alone: its base64 decoding is not printable ``user:password``)."""
    return _BASIC.sub(
        lambda m: f"Basic{m.group(1)}{replacement}" if _is_credential_token(m.group(2)) else m.group(0), text
    )
