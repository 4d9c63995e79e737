"""Secrets out of URLs before a URL is logged or shown: the password of the userinfo and every
query value (tokens and signatures travel there) become ``***``. The user name, host, port
and path stay, so the line still says where."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit, urlunsplit

MASK = "***"


def mask_url(url: str) -> str:
    """``url`` with its password and query values masked; text that is no URL comes back as is."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    netloc = parts.netloc
    if parts.password is not None or (parts.username is not None and "@" in netloc):
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        user = parts.username or ""
        userinfo = f"{user}:{MASK}" if parts.password is not None else user
        netloc = f"{userinfo}@{host}" + (f":{port}" if port is not None else "")
    query = "&".join(_mask_pair(pair) for pair in parts.query.split("&")) if parts.query else ""
    return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, query, parts.fragment))


def _mask_pair(pair: str) -> str:
    name, sep, value = pair.partition("=")
    return f"{name}={MASK}" if sep and value else pair


def mask_url_text(text: str, url: str) -> str:
    """``text`` (e.g. an exception message that quotes the URL) with ``url`` masked in it."""
    return text.replace(url, mask_url(url)) if url else text
