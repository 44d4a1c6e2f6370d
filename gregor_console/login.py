"""The console's own login, for a console exposed beyond this machine: `--token-file FILE`
names a secret every request must carry, as the cookie the login page sets (HttpOnly,
SameSite=Strict) or as `Authorization: Bearer TOKEN` (scripts reading the JSON). Without a
token file the console serves only on a loopback address."""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

COOKIE = "gregor_console_token"
OPEN_PATHS = ("/login", "/static/")


class LoginError(Exception):
    """A token file the console cannot use, or an exposed address without one."""


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise LoginError(f"cannot read --token-file {path}: {exc.strerror}") from None
    if len(token) < 16:
        raise LoginError(f"--token-file {path}: the token must be at least 16 characters")
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None, no_login: bool) -> None:
    """A console on an address beyond loopback needs a token, or `--no-login` said outright."""
    if token is None and not no_login and not is_loopback(host):
        raise LoginError(f"serving on {host} exposes the console beyond this machine: "
                         "give --token-file with a secret to log in with (or --no-login, when "
                         "what reaches that address is trusted)")


def carries(request: web.Request, token: str) -> bool:
    """Whether the request carries the token (cookie or bearer header)."""
    given = request.cookies.get(COOKIE, "")
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        given = header.removeprefix("Bearer ").strip()
    return hmac.compare_digest(given.encode(), token.encode())


def middleware(token: str) -> Middleware:
    @web.middleware
    async def login_required(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(OPEN_PATHS) or carries(request, token):
            return await handler(request)
        if request.path.startswith("/api/"):
            return web.json_response({"error": "log in: send Authorization: Bearer TOKEN"}, status=401)
        raise web.HTTPSeeOther("/login")
    return login_required


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Log in · Gregor console</title>
<link rel="stylesheet" href="/static/console.css"></head>
<body><main><h1>Gregor console</h1>{message}
<form method="post" action="/login"><label>Token <input type="password" name="token" autofocus></label>
<button>Log in</button></form></main></body></html>"""


def routes(token: str) -> list[web.RouteDef]:
    async def form(request: web.Request) -> web.StreamResponse:
        return web.Response(text=LOGIN_PAGE.format(message=""), content_type="text/html")

    async def submit(request: web.Request) -> web.StreamResponse:
        given = str((await request.post()).get("token", ""))
        if not hmac.compare_digest(given.encode(), token.encode()):
            page = LOGIN_PAGE.format(message='<p class="banner error">wrong token</p>')
            return web.Response(text=page, status=403, content_type="text/html")
        answer = web.HTTPSeeOther("/transactions")
        answer.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        raise answer

    return [web.get("/login", form), web.post("/login", submit)]
