"""Headless Chromium driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``:
the browser reads commands on fd 3 and writes replies and events on fd 4, each a JSON message
ended by a NUL byte), standard library only. ``open_page`` loads a file at a window width and
returns what a person (and a test) needs to know of it: every request that left the file system,
console errors and uncaught exceptions, each image's load state, what overflows the window's
width, and a full-page screenshot."""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--hide-scrollbars", "--remote-debugging-pipe")
MOVE_FDS = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); "
            "os.dup2(w, 4); os.close(r); os.close(w); os.execv(sys.argv[3], sys.argv[3:])")
# schemes a self-contained report may load from: anything else went to (or tried) the network
LOCAL = ("file:", "data:", "about:", "blob:", "chrome:", "devtools:")

# Run in the page: images that did not load, and the elements whose right edge passes the
# window's width (outermost first, at most 10), with the document's own scroll width.
PROBE = """(() => {
  const w = window.innerWidth;
  const broken = Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)
    .map(i => i.alt || i.src.slice(0, 60));
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > w + 1 && !wide.some(p => p.contains(el)))
      wide.push(el);
  }
  return JSON.stringify({width: w, scroll_width: document.documentElement.scrollWidth,
    images: document.images.length, broken: broken,
    overflow: wide.slice(0, 10).map(e => e.tagName.toLowerCase() + (e.className ?
      '.' + e.className : '') + ' right=' + Math.round(e.getBoundingClientRect().right))});
})()"""


def find() -> str | None:
    """The path of a Chromium-family browser on PATH, or None."""
    return next(filter(None, map(shutil.which, CANDIDATES)), None)


@dataclass
class Page:
    url: str
    width: int
    requests: list[str] = field(default_factory=list)   # every URL the page asked for
    errors: list[str] = field(default_factory=list)     # console errors, exceptions, failures
    images: int = 0
    broken: list[str] = field(default_factory=list)     # images that did not load
    scroll_width: int = 0
    overflow: list[str] = field(default_factory=list)   # elements past the window's width
    screenshot: bytes = b""

    @property
    def network(self) -> list[str]:
        """The requests that were not for a local file or inline data."""
        return [u for u in self.requests if not u.startswith(LOCAL)]


class Browser:
    """One headless Chromium; ``with Browser() as b: b.open_page(path, 1024)``."""

    def __init__(self, binary: str | None = None, timeout_s: float = 60.0):
        self.binary = binary or find()
        if self.binary is None:
            raise FileNotFoundError(f"no browser on PATH (tried {', '.join(CANDIDATES)})")
        self.timeout_s = timeout_s
        self._next_id = 0
        self._buf = b""
        self._events: list[dict] = []

    def __enter__(self) -> Browser:
        self._profile = tempfile.mkdtemp(prefix="harness-browser-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # the browser's ends, numbered clear of 3 and 4, are moved onto fd 3 (commands in) and
        # fd 4 (replies out) by a small Python that then execs it (no preexec_fn: no fork of
        # this multithreaded process)
        read, write = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
                       for fd in (to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", MOVE_FDS, str(read), str(write), self.binary, *FLAGS,
             f"--user-data-dir={self._profile}", "about:blank"],
            pass_fds=(read, write), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(read)
        os.close(write)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # the browser may be gone already; it is killed below either way
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("the browser did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise ConnectionError("the browser closed its pipe")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send one command; events that arrive before its reply are kept for ``events``."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not any(e.get("method") == method and e.get("sessionId") == session
                      for e in self._events):
            self._events.append(self._read(deadline))

    def open_page(self, path: Path, width: int, height: int = 900) -> Page:
        """Load ``path`` in a fresh tab ``width`` CSS pixels wide and read it back."""
        url = Path(path).resolve().as_uri()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self._events.clear()
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session)
        self.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", session, url=url)
        self.wait_for("Page.loadEventFired", session)
        page = Page(url=url, width=width)
        page.__dict__.update(json.loads(self.call(
            "Runtime.evaluate", session, expression=PROBE, returnByValue=True)["result"]["value"]))
        size = self.call("Page.getLayoutMetrics", session)["cssContentSize"]
        shot = self.call("Page.captureScreenshot", session, format="png",
                         captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": max(width, size["width"]),
                               "height": size["height"], "scale": 1})
        page.screenshot = base64.b64decode(shot["data"])
        for e in self._events:
            if e.get("sessionId") != session:
                continue
            p = e.get("params", {})
            method = e.get("method")
            if method == "Network.requestWillBeSent":
                page.requests.append(p["request"]["url"])
            elif method == "Network.loadingFailed":
                page.errors.append(f"load failed: {p.get('errorText')}")
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                page.errors.append("console: " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                page.errors.append(f"exception: {p['exceptionDetails'].get('text')}")
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                page.errors.append(f"log: {p['entry'].get('text')}")
        self.call("Target.closeTarget", targetId=target)
        return page
