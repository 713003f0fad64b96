"""A small Chrome DevTools Protocol client for tests: headless Chromium, one page, a few verbs.

Chromium is started with ``--remote-debugging-port=0``; it writes the port it chose and the
browser's websocket path to ``DevToolsActivePort`` in its profile folder. Everything else goes
over that one websocket (the ``websockets`` package, synchronous client): a page target is
created and attached in flat mode, so each command carries the page's ``sessionId``. Events that
arrive while waiting for a reply are kept: console errors, uncaught exceptions, log entries and
network requests, which the tests assert on.

Waits are bounded polls of a condition, never fixed sleeps.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._servers import describe_exit, startup_failure

__all__ = ("FLAGS", "Browser", "BrowserError", "Page", "find_chromium", "launch")

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1440,1000",
    "--remote-debugging-port=0",
)
WAIT = 30.0
"""Upper bound, in seconds, of any wait for the browser."""


class BrowserError(Exception):
    """The browser did not start, did not answer, or reported an error."""


def find_chromium() -> str | None:
    """The Chromium executable on PATH, if any."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def wait_until(condition: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Poll ``condition`` until it returns something truthy; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BrowserError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Browser:
    """One Chromium process and its DevTools websocket."""

    def __init__(self, process: subprocess.Popen[bytes], socket: Any) -> None:
        self.process = process
        self.socket = socket
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; events received meanwhile are kept."""
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self.socket.send(json.dumps(message))
        deadline = time.monotonic() + WAIT
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError(f"no answer to {method}")
            reply = json.loads(self.socket.recv(timeout=remaining))
            if reply.get("id") != message_id:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise BrowserError(f"{method}: {reply['error']}")
            result: dict[str, Any] = reply.get("result", {})
            return result

    def pump(self) -> None:
        """Keep the events that have arrived, without blocking for long."""
        while True:
            try:
                self.events.append(json.loads(self.socket.recv(timeout=0.01)))
            except TimeoutError:
                return

    def new_page(self, width: int = 1440, height: int = 1000) -> Page:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = Page(self, session, target)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        page.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return page

    def close(self) -> None:
        """Ask the browser to quit and wait for it; ``launch`` kills it if it does not."""
        from websockets.exceptions import ConnectionClosed

        try:
            self.send("Browser.close")
            self.process.wait(timeout=WAIT)
        except (BrowserError, OSError, subprocess.TimeoutExpired, ConnectionClosed):
            pass  # already gone, or stuck: launch() ends the process either way


class Page:
    """One tab, addressed by its flat-mode session id."""

    def __init__(self, browser: Browser, session: str, target: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, self.session, **params)

    def _mine(self) -> Iterator[dict[str, Any]]:
        self.browser.pump()
        return (e for e in self.browser.events if e.get("sessionId") == self.session)

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        wait_until(lambda: self.evaluate("document.readyState") == "complete", f"{url} to load")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited, returned by value)."""
        reply = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = WAIT) -> Any:
        return wait_until(lambda: self.evaluate(expression), expression, timeout)

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element, scrolled into view first."""
        box = self.evaluate(
            f"(() => {{ const n = document.querySelector({json.dumps(selector)}); if (!n) return null;"
            " n.scrollIntoView({block: 'center'}); const r = n.getBoundingClientRect();"
            " return {x: r.x + r.width / 2, y: r.y + Math.min(r.height / 2, 12)}; })()"
        )
        if box is None:
            raise BrowserError(f"nothing matches {selector!r}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"], button="left", clickCount=1
            )

    def press(self, key: str, code: str, key_code: int) -> None:
        """Press and release one key on the focused element."""
        for kind in ("keyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent",
                type=kind,
                key=key,
                code=code,
                windowsVirtualKeyCode=key_code,
                nativeVirtualKeyCode=key_code,
            )

    def prefer_dark(self, dark: bool) -> None:
        value = "dark" if dark else "light"
        self.send("Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": value}])

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))
        return path

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        found: list[str] = []
        for event in self._mine():
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args"))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def requests(self) -> list[str]:
        """URLs of every request the page made."""
        return [
            e["params"]["request"]["url"]
            for e in self._mine()
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def close(self) -> None:
        self.browser.send("Target.closeTarget", targetId=self.target)


@contextmanager
def launch(executable: str, profile: Path, extra: Sequence[str] = ()) -> Iterator[Browser]:
    """Start headless Chromium with a fresh profile folder (and ``extra`` flags); stop it on exit."""
    from websockets.sync.client import connect

    profile.mkdir(parents=True, exist_ok=True)
    (profile / "DevToolsActivePort").unlink(missing_ok=True)  # a stale one would name a dead port
    with (profile.parent / "chromium.log").open("wb") as log:
        process = subprocess.Popen(
            [executable, *FLAGS, *extra, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = wait_until(lambda: _endpoint(process, profile, log.name), "Chromium's DevTools port")
            with connect(url, max_size=None, proxy=None, open_timeout=WAIT) as socket:
                browser = Browser(process, socket)
                try:
                    yield browser
                finally:
                    browser.close()
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=WAIT)


def _endpoint(process: subprocess.Popen[bytes], profile: Path, log: str) -> str | None:
    """The browser's websocket URL, once Chromium has written DevToolsActivePort."""
    if process.poll() is not None:
        raise BrowserError(startup_failure("Chromium", describe_exit(process.returncode), Path(log)))
    port_file = profile / "DevToolsActivePort"
    lines = port_file.read_text().split() if port_file.exists() else []
    return f"ws://127.0.0.1:{lines[0]}{lines[1]}" if len(lines) >= 2 else None
