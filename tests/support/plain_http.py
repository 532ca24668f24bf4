"""One HTTP client for a test's many requests to a plain-HTTP server.

``httpx.get`` makes a client per request, and each client a TLS context from the CA
bundle: most of a cheap request's cost, for a server that speaks no TLS. This client is
made once; it keeps no cookie, so each request goes as a client of its own would send it
(a refusal is never a cookie's doing)."""

from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

__all__ = ["cookieless"]


def cookieless(timeout: float = 30) -> httpx.Client:
    """A client that takes no cookie from any answer (close it after)."""
    # httpx keeps a CookieJar given as is (an httpx.Cookies would be copied without its policy).
    return httpx.Client(timeout=timeout, cookies=CookieJar(DefaultCookiePolicy(allowed_domains=())))
