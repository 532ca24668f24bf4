"""Page objects of the web UI for the browser tests: what a user reads and clicks, by what
shows on the page, never by a fixed wait."""

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

__all__ = [
    "AdminPage",
    "FoldersPage",
    "PipelinesPage",
    "ServingPage",
    "SessionPage",
    "SessionsPage",
]


class SessionsPage:
    """The page as a user sees it: what the tests read and click, by what shows."""

    def __init__(self, driver: "WebDriver", url: str) -> None:
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        self.d = driver
        self.url = url
        # The table is drawn again as the log moves on: a row read mid-draw is read again.
        self.wait = WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,))

    def until(self, check: Callable[["WebDriver"], object], what: str) -> None:
        self.wait.until(check, message=what)

    def css(self, selector: str) -> list[str]:
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.common.by import By

        for _ in range(10):
            try:
                return [e.text for e in self.d.find_elements(By.CSS_SELECTOR, selector)]
            except StaleElementReferenceException:
                continue
        raise AssertionError(f"{selector} kept changing under the test")

    def attr(self, selector: str, name: str) -> list[str]:
        from selenium.webdriver.common.by import By

        found = self.d.find_elements(By.CSS_SELECTOR, selector)
        return [e.get_attribute(name) or "" for e in found]

    def watch_csp(self) -> None:
        """From now on, keep what the page's Content-Security-Policy refuses."""
        self.d.execute_script(_CSP_LISTENER)

    def csp_refusals(self) -> list[str]:
        """What the policy refused since ``watch_csp``, by its listener and by the console."""
        heard: list[str] = self.d.execute_script("return window.cspRefusals") or []
        said = [
            e["message"]
            for e in self.d.get_log("browser")
            if "Content Security Policy" in e["message"]
            or "Content-Security-Policy" in e["message"]
        ]
        return heard + said

    def rows(self) -> list[str]:
        return self.attr("#session-table tbody tr", "data-session")

    def shown(self, selector: str) -> bool:
        from selenium.webdriver.common.by import By

        found = self.d.find_elements(By.CSS_SELECTOR, selector)
        return bool(found) and found[0].is_displayed()

    def sign_in(self, key: str, secret: str, user: str) -> None:
        from selenium.webdriver.common.by import By

        self.d.get(self.url)
        self.until(lambda d: d.execute_script("return document.body.dataset.ready"), "loaded")
        assert self.d.find_element(By.ID, "sign-in").is_displayed()
        self.d.find_element(By.ID, "sign-in-key").send_keys(key)
        self.d.find_element(By.ID, "sign-in-secret").send_keys(secret)
        self.d.find_element(By.ID, "sign-in-go").click()
        self.until(
            lambda d: d.execute_script("return document.body.dataset.signedIn") == user,
            f"signed in as {user}",
        )
        self.until(lambda d: self.css("#live-status") == ["live"], "the live stream open")

    def terminate(self, sid: str) -> None:
        from selenium.webdriver.common.by import By

        self.d.find_element(By.CSS_SELECTOR, f'button.terminate[data-session="{sid}"]').click()
        self.until(lambda d: d.find_element(By.ID, "confirm").is_displayed(), "asked to confirm")
        assert sid in self.d.find_element(By.ID, "confirm-session").text
        self.d.find_element(By.ID, "confirm-yes").click()

    def sign_out(self) -> None:
        from selenium.webdriver.common.by import By

        self.d.find_element(By.ID, "sign-out").click()
        self.until(lambda d: d.find_element(By.ID, "sign-in").is_displayed(), "signed out")


# Registered by a test once the page has loaded: every refusal of the page's
# Content-Security-Policy from then on, as "directive blocked-uri sample".
_CSP_LISTENER = """
window.cspRefusals = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.cspRefusals.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`);
});
"""
_ROWS = """
return Array.from(document.querySelectorAll("#terminal .xterm-rows > div"),
                  (row) => row.textContent.replace(/\\u00a0/g, " ").trimEnd());
"""


class SessionPage(SessionsPage):
    """One session's page (``#/sessions/ID``) and its terminal, as its user sees them."""

    def until(self, check: Callable[["WebDriver"], object], what: str) -> None:
        """Wait for ``check``; if it never comes, say how the terminal stood."""
        from selenium.common.exceptions import TimeoutException

        try:
            super().until(check, what)
        except TimeoutException as e:
            status = self.css("#terminal-status") + self.css("#session-problem")
            console = [entry["message"] for entry in self.d.get_log("browser")]
            raise AssertionError(
                f"waited for {what}; the terminal says {status}, shows {self.screen()}; "
                f"the console: {console}"
            ) from e

    def open(self, session_id: str) -> None:
        self.d.execute_script("location.hash = arguments[0]", f"#/sessions/{session_id}")
        self.until(
            lambda d: self.css("#session-details dd[data-field=status]") == ["RUNNING"],
            f"session {session_id} RUNNING",
        )

    def terminal_state(self) -> str:
        state: str = self.d.execute_script("return document.body.dataset.terminal || ''")
        return state

    def open_terminal(self) -> None:
        """Click "open a terminal" (or "reconnect") and wait for it to be open."""
        from selenium.webdriver.common.by import By

        button = self.d.find_element(By.ID, "terminal-open")
        self.until(lambda d: button.is_enabled(), "the terminal's button enabled")
        button.click()
        self.until(lambda d: self.terminal_state() == "open", "the terminal open")

    def screen(self) -> list[str]:
        """The terminal's visible rows, as text."""
        rows: list[str] = self.d.execute_script(_ROWS)
        return rows

    def text(self) -> str:
        return "\n".join(self.screen())

    def at_prompt(self) -> bool:
        """Whether the shell waits at its prompt (the last row with text ends with it)."""
        shown = [r for r in self.screen() if r.strip()]
        return bool(shown) and shown[-1].endswith("#")

    def type(self, keys: str) -> None:
        """Type ``keys`` into the terminal, as the keyboard would (it has the focus)."""
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(self.d).send_keys(keys).perform()


class AdminPage(SessionPage):
    """The administrators' page (``#/admin``), as an administrator sees it."""

    def open_admin(self) -> None:
        """Follow the header's admin link; back once the page has read what it shows."""
        from selenium.webdriver.common.by import By

        self.d.find_element(By.ID, "nav-admin").click()
        self.until(
            lambda d: d.execute_script("return document.body.dataset.adminReady") == "1",
            "the admin page read",
        )

    def shares(self, agent: str) -> list[str]:
        """The parts of ``agent``'s GPU bars that name a session's share."""
        return self.css(f'[data-agent="{agent}"] .bar .share')

    def waiting(self, session_id: str) -> str:
        """Why ``session_id`` waits, as the pending queue says ("" if not listed)."""
        found = self.css(f'#admin-pending tr[data-session="{session_id}"] td.why')
        return found[0] if found else ""

    def policy(self, level: str, target: str) -> list[str]:
        """The cells of the policy of ``level`` ``target`` (none if not listed)."""
        return self.css(f'#admin-policies tr[data-level="{level}"][data-target="{target}"] td')

    def result(self, form: str) -> str:
        """What the ``form``'s last write got, once answered."""
        selector = f"#admin-{form}-result"
        self.until(lambda _: self.css(selector)[0] not in ("", "asking…"), f"{form} answered")
        return self.css(selector)[0]

    def _fill(self, fields: dict[str, str]) -> None:
        from selenium.webdriver.common.by import By

        for name, value in fields.items():
            box = self.d.find_element(By.ID, name)
            box.clear()
            box.send_keys(value)

    def create_user(self, user: str, domain: str, projects: str) -> None:
        from selenium.webdriver.common.by import By

        self.d.execute_script("document.querySelector('#admin-user-result').textContent = ''")
        self._fill(
            {"admin-user-name": user, "admin-user-domain": domain, "admin-user-projects": projects}
        )
        self.d.find_element(By.ID, "admin-user-go").click()

    def new_keypair(self, user: str) -> tuple[str, str]:
        """Click ``user``'s "new keypair"; the access key and secret shown (once)."""
        from selenium.webdriver.common.by import By

        button = f'button.new-keypair[data-user="{user}"]'
        self.until(lambda d: d.find_elements(By.CSS_SELECTOR, button), f"{user} listed")
        self.d.find_element(By.CSS_SELECTOR, button).click()
        self.until(lambda _: self.shown("#admin-secret"), "the new secret shown")
        return self.css("#admin-secret-key")[0], self.css("#admin-secret-value")[0]

    def dismiss_secret(self) -> None:
        from selenium.webdriver.common.by import By

        self.d.find_element(By.ID, "admin-secret-done").click()
        self.until(lambda _: not self.shown("#admin-secret"), "the secret dismissed")

    def set_policy(self, level: str, target: str, *, fgpu: str) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        self.d.execute_script("document.querySelector('#admin-policy-result').textContent = ''")
        Select(self.d.find_element(By.ID, "admin-policy-level")).select_by_value(level)
        self._fill({"admin-policy-target": target, "admin-policy-fgpu": fgpu})
        self.d.find_element(By.ID, "admin-policy-go").click()

    def set_allow_list(self, domain: str, images: str) -> None:
        """Set ``domain``'s allow-list to ``images`` (entries by commas) with the form."""
        from selenium.webdriver.common.by import By

        self.d.execute_script("document.querySelector('#admin-images-result').textContent = ''")
        self._fill({"admin-images-domain": domain, "admin-images-list": images})
        self.d.find_element(By.ID, "admin-images-go").click()

    def allowed(self, domain: str) -> list[str]:
        """The entries of ``domain``'s allow-list as the table shows them."""
        return self.attr(
            f'#admin-images tr[data-domain="{domain}"] .entry[data-image]', "data-image"
        )

    def change_group(self, group: str, *, policy: str, quantum: str) -> None:
        """Edit ``group``'s row: its policy and fGPU quantum given, the rest kept."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        self.d.find_element(By.CSS_SELECTOR, f'tr[data-group="{group}"] .edit-group').click()
        Select(self.d.find_element(By.ID, "admin-group-policy")).select_by_value(policy)
        self._fill({"admin-group-quantum": quantum})
        self.d.execute_script("document.querySelector('#admin-group-result').textContent = ''")
        self.d.find_element(By.ID, "admin-group-update").click()

    def group(self, group: str) -> list[str]:
        """The cells of ``group``'s row."""
        return self.css(f'#admin-groups tr[data-group="{group}"] td')


class FoldersPage(SessionsPage):
    """The Folders page (``#/folders``) and one folder's files, as a user sees them."""

    def open_list(self) -> None:
        from selenium.webdriver.common.by import By

        self.d.find_element(By.ID, "nav-folders").click()
        self.until(lambda d: d.find_element(By.ID, "folder-list").is_displayed(), "the folders")
        self.until(lambda d: d.execute_script("return document.body.dataset.folders"), "listed")

    def folders(self) -> dict[str, str]:
        """Each folder's id, by its name (shown, or the list hidden behind a folder's
        files)."""
        return dict(
            zip(
                self.attr("#folder-table td.name", "textContent"),
                self.attr("#folder-table tbody tr", "data-folder"),
                strict=True,
            )
        )

    def create(self, name: str) -> str:
        """Ask for folder ``name``; what the page then says."""
        from selenium.webdriver.common.by import By

        box = self.d.find_element(By.ID, "folder-name")
        box.clear()
        box.send_keys(name)
        before = self.attr("#folder-create-result", "data-request-id")
        self.d.find_element(By.ID, "folder-create-go").click()
        self.until(
            lambda d: self.attr("#folder-create-result", "data-request-id") != before,
            f"an answer to creating {name!r}",
        )
        return self.css("#folder-create-result")[0]

    def open(self, name: str) -> None:
        from selenium.webdriver.common.by import By

        folder = self.folders()[name]
        self.d.find_element(By.CSS_SELECTOR, f'tr[data-folder="{folder}"] a.open').click()
        self.until(
            lambda d: d.execute_script("return document.body.dataset.filesShown") == f"{folder}/",
            f"folder {name}'s files",
        )

    def files(self) -> list[str]:
        return self.attr("#file-table tbody tr", "data-name")

    def share(self, user: str, access: str) -> str:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        self.d.find_element(By.ID, "share-who").send_keys(user)
        Select(self.d.find_element(By.ID, "share-access")).select_by_value(access)
        self.d.find_element(By.ID, "share-go").click()
        self.until(lambda d: self.attr("#share-result", "data-request-id") != [""], "an answer")
        return self.css("#share-result")[0]


class PipelinesPage(SessionsPage):
    """The Pipelines page (``#/pipelines``) and one run's DAG, as a user sees them."""

    def open_list(self) -> list[str]:
        """The runs listed, by id."""
        from selenium.webdriver.common.by import By

        self.d.find_element(By.ID, "nav-pipelines").click()
        self.until(lambda d: d.find_element(By.ID, "pipeline-list").is_displayed(), "the runs")
        self.until(
            lambda d: (
                self.attr("#pipeline-table tbody tr", "data-run")
                or d.find_element(By.ID, "pipelines-empty").is_displayed()
            ),
            "the runs listed",
        )
        return self.attr("#pipeline-table tbody tr", "data-run")

    def open_run(self, run_id: str) -> list[tuple[str, str]]:
        """Run ``run_id``'s DAG: each task's box, by name and state, in drawing order."""
        from selenium.webdriver.common.by import By

        self.d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run_id}"] td.id a').click()
        self.until(
            lambda d: (d.execute_script("return document.body.dataset.dagShown") or "").startswith(
                run_id
            ),
            f"run {run_id} drawn",
        )
        boxes = self.d.find_elements(By.CSS_SELECTOR, "#pipeline-dag svg g.dag-task")
        return [
            (b.get_attribute("data-task") or "", b.get_attribute("data-status") or "")
            for b in boxes
        ]


class ServingPage(SessionsPage):
    """The Serving page (``#/serving``) and one endpoint (``#/serving/NAME``), as a user
    sees them."""

    def open_list(self) -> list[str]:
        """The endpoints listed, by name."""
        from selenium.webdriver.common.by import By

        self.d.find_element(By.ID, "nav-serving").click()
        self.until(lambda d: d.find_element(By.ID, "endpoint-list").is_displayed(), "the list")
        self.until(
            lambda d: d.execute_script("return document.body.dataset.endpointsListed"),
            "the endpoints read",
        )
        return self.attr("#endpoint-table tbody tr", "data-endpoint")

    def open_endpoint(self, name: str) -> dict[str, list[str]]:
        """Endpoint ``name`` from its row's link: its summary, revisions and tokens, as
        shown."""
        from selenium.webdriver.common.by import By

        self.d.find_element(By.CSS_SELECTOR, f'tr[data-endpoint="{name}"] td.name a').click()
        self.until(
            lambda d: d.execute_script("return document.body.dataset.endpointShown") == name,
            f"endpoint {name} shown",
        )
        return {
            "summary": self.css("#endpoint-summary"),
            "revisions": self.css("#endpoint-revisions tbody tr"),
            "tokens": self.css("#endpoint-tokens tbody tr"),
        }

    def _answered(self, result: str, click: Callable[[], None]) -> str:
        """What ``result`` (an output's selector) says once ``click()`` is answered."""
        from selenium.webdriver.common.by import By

        self.d.execute_script("delete document.querySelector(arguments[0]).dataset.applied", result)
        click()
        self.until(
            lambda d: d.find_element(By.CSS_SELECTOR, result).get_attribute("data-applied"),
            f"{result} answered",
        )
        return self.css(result)[0]

    def scale(self, replicas: int) -> str:
        """The endpoint shown scaled with its form: what the page says of the answer."""
        from selenium.webdriver.common.by import By

        box = self.d.find_element(By.ID, "endpoint-scale-replicas")
        box.clear()
        box.send_keys(str(replicas))
        return self._answered(
            "#endpoint-scale-result", self.d.find_element(By.ID, "endpoint-scale").click
        )

    def make_token(self) -> tuple[str, str]:
        """A token made with its form: what the page says, and the token it shows."""
        from selenium.webdriver.common.by import By

        said = self._answered("#token-result", self.d.find_element(By.ID, "token-create").click)
        return said, self.css("#token-value")[0]

    def point(self, revision: int, *, at_once: bool) -> str:
        """All traffic moved to ``revision`` with its row's button (``at_once``: the box
        ticked, else a rolling update): what the page says of the answer."""
        from selenium.webdriver.common.by import By

        box = self.d.find_element(By.ID, "endpoint-point-at-once")
        if box.is_selected() != at_once:
            box.click()
        button = self.d.find_element(By.CSS_SELECTOR, f'button[data-point="{revision}"]')
        return self._answered("#endpoint-point-result", button.click)

    def split(self, shares: dict[int, int]) -> str:
        """The traffic split by typing each revision's new share and its button: what
        the page says of the answer."""
        from selenium.webdriver.common.by import By

        for revision, share in shares.items():
            box = self.d.find_element(By.CSS_SELECTOR, f'input[data-share="{revision}"]')
            box.clear()
            box.send_keys(str(share))
        button = self.d.find_element(By.ID, "endpoint-traffic-set")
        return self._answered("#endpoint-traffic-result", button.click)

    def autoscale(self, metric: str, fields: dict[str, float]) -> str:
        """The autoscaling form filled (``fields`` by input id suffix: up, down, min, max,
        step, cooldown) and sent: what the page says of the answer."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        Select(self.d.find_element(By.ID, "autoscale-metric")).select_by_value(metric)
        for name, value in fields.items():
            box = self.d.find_element(By.ID, f"autoscale-{name}")
            box.clear()
            box.send_keys(f"{value:g}")
        return self._answered(
            "#autoscale-result", self.d.find_element(By.ID, "autoscale-set").click
        )

    def autoscale_off(self) -> str:
        """Autoscaling turned off with its button: what the page says."""
        from selenium.webdriver.common.by import By

        return self._answered(
            "#autoscale-result", self.d.find_element(By.ID, "autoscale-off").click
        )

    def revoke(self, token_id: str) -> str:
        """Token ``token_id`` revoked with its row's button: what the page says."""
        from selenium.webdriver.common.by import By

        button = self.d.find_element(By.CSS_SELECTOR, f'button[data-revoke="{token_id}"]')
        return self._answered("#token-result", button.click)

    def go_to(self, name: str) -> str:
        """Endpoint ``name`` asked for by its address (``#/serving/NAME``): the problem
        said, once one is."""
        from selenium.webdriver.common.by import By

        self.d.execute_script("location.hash = arguments[0]", f"#/serving/{name}")
        self.until(lambda d: d.find_element(By.ID, "serving-problem").text, "a problem said")
        return self.css("#serving-problem")[0]
