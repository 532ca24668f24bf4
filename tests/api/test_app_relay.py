"""What the apps proxy forwards into a container and back (``services/api/app_relay.py``):
no credential of fgpu's goes in, no cookie of fgpu's names comes out, and a ticket or a
grant opens its one app alone (``services/api/app_grants.py``)."""

from services.api.app_grants import AppGrants, cookie_values
from services.api.app_relay import forwarded, kept_answer


def test_fgpus_cookies_and_csrf_header_never_go_in() -> None:
    sent = [
        (b"Cookie", b"fgpu_ui=secret; own=1; fgpu_app=grant; FGPU_X=y"),
        (b"X-CSRF-Token", b"token"),
        (b"Connection", b"keep-alive, Upgrade"),
        (b"Host", b"ui.example:8080"),
        (b"X-Forwarded-For", b"1.2.3.4"),
        (b"Authorization", b"Bearer the-apps-own"),
        (b"Content-Length", b"3"),
    ]
    got = dict(forwarded(sent, b"apps.example:9000", "/apps/s1/web"))
    assert got[b"cookie"] == b"own=1"
    assert b"x-csrf-token" not in got and b"connection" not in got
    assert got[b"host"] == b"apps.example:9000" and got[b"x-forwarded-prefix"] == b"/apps/s1/web"
    assert b"x-forwarded-for" not in got  # the proxy's own word only
    assert got[b"authorization"] == b"Bearer the-apps-own"  # the app's, not fgpu's
    assert got[b"content-length"] == b"3"
    only_ours = dict(forwarded([(b"cookie", b"fgpu_ui=a")], b"h", "/p"))
    assert b"cookie" not in only_ours


def test_an_app_plants_no_cookie_of_fgpus_names() -> None:
    answer = [
        (b"Set-Cookie", b"fgpu_ui=planted; Path=/"),
        (b"set-cookie", b" FGPU_app=x"),
        (b"Set-Cookie", b"own=1; Path=/"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Content-Type", b"text/html"),
    ]
    assert kept_answer(answer) == [
        (b"set-cookie", b"own=1; Path=/"),
        (b"content-type", b"text/html"),
    ]


def test_a_ticket_is_taken_once_and_its_grant_opens_its_one_app() -> None:
    now = [100.0]
    grants = AppGrants(lambda: now[0])
    ticket = grants.ticket("browser-a", "s1", "web")
    redeemed = grants.redeem(ticket)
    assert redeemed is not None and grants.redeem(ticket) is None  # once
    word, grant = redeemed
    assert grants.admit([word], "s1", "web") == grant
    assert grants.admit([word], "s1", "tb") is None
    assert grants.admit([word], "s2", "web") is None
    assert grants.admit(["nope", word], "s1", "web") == grant  # one cookie per path matched
    late = grants.ticket("browser-a", "s1", "web")
    now[0] += 31  # past a ticket's 30 s
    assert grants.redeem(late) is None
    assert cookie_values("a=1; fgpu_app=x; fgpu_app=y;b", "fgpu_app") == ["x", "y"]
