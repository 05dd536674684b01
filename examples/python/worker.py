#!/usr/bin/env python3
"""A turnstile worker in Python, with nothing but the standard library.

It serves the runner "py.wordcount": an action whose runner is
"py.wordcount" runs here, under turnstile's FIFO queue and limits.

    TURNSTILE_SERVER=http://127.0.0.1:8080 TURNSTILE_TOKEN=<worker token> \
        python3 examples/python/worker.py

The protocol (API.md, "Workers over HTTP"): register once (a token of role
worker), then long-poll with the session it returns, report "running"
before the work and "completed" / "failed" after it. A report is
idempotent: send it again until the server answers. A 401 means the
incarnation ended (say, declared lost after a long network cut): register
again. SIGTERM drains: nothing new is taken, the run in flight finishes.
"""
import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request

SERVER = os.environ.get("TURNSTILE_SERVER", "http://127.0.0.1:8080").rstrip("/")
TOKEN = os.environ.get("TURNSTILE_TOKEN", "")
NAME = os.environ.get("TURNSTILE_WORKER_NAME", "py-" + socket.gethostname())
RUNNER = "py.wordcount"


def word_count(payload):
    """The user's code: count the words of input.text."""
    text = payload.get("text", "")
    if not isinstance(text, str):
        raise ValueError("input.text must be a string")
    return {"words": len(text.split()), "upper": text.upper()}


class Ended(Exception):
    """The server ended this incarnation's session (401)."""


def call(path, body, secret, timeout=70):
    req = urllib.request.Request(SERVER + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if secret:
        req.add_header("Authorization", "Bearer " + secret)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise Ended() from e
        raise


def report(name, session, rep):
    """Send a report until the server answers; True if it was accepted."""
    delay = 0.05
    while True:
        try:
            call("/api/v1/workers/%s/report" % name, rep, session)
            return True
        except urllib.error.HTTPError as e:
            if e.code == 409:  # taken back or ended: nothing more to do for it
                return False
            if e.code < 500 and e.code != 429:
                raise
        except (urllib.error.URLError, OSError):
            pass  # the network: the report is idempotent, send it again
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def main():
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while not stopping:
        reg = call("/api/v1/workers/register", {"name": NAME, "runners": [RUNNER], "slots": 1}, TOKEN)
        session = reg["session"]
        print("registered %s incarnation %s" % (NAME, reg["incarnation"]), file=sys.stderr, flush=True)
        try:
            while not stopping:
                try:
                    got = call("/api/v1/workers/%s/poll" % NAME, {"max": 1, "wait_seconds": 1}, session)
                except (urllib.error.URLError, OSError) as e:
                    if isinstance(e, urllib.error.HTTPError) and e.code < 500:
                        raise
                    time.sleep(0.2)  # the network or the server: poll again
                    continue
                for a in got["assignments"]:
                    if a["execution"] in got["cancels"]:
                        continue
                    if not report(NAME, session, {"execution": a["execution"], "attempt": a["attempt"], "status": "running"}):
                        continue
                    try:
                        result = word_count(a.get("input") or {})
                        rep = {"status": "completed", "result": result}
                    except Exception as e:  # the user's code failed
                        rep = {"status": "failed", "error": str(e)}
                    rep.update(execution=a["execution"], attempt=a["attempt"])
                    report(NAME, session, rep)
            call("/api/v1/workers/%s/drain" % NAME, {}, session)
            print("drained", file=sys.stderr, flush=True)
        except Ended:
            print("the server ended this incarnation; registering again", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
