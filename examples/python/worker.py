#!/usr/bin/env python3
"""A turnstile worker in Python, with nothing but the standard library.

It serves two runners: "py.wordcount" (counts the words of input.text) and
"py.sleep" (waits input.seconds, or until it is told to stop). An action
whose runner is one of them runs here, under turnstile's FIFO queue and
limits.

    TURNSTILE_SERVER=http://127.0.0.1:8080 TURNSTILE_TOKEN=<worker token> \
        python3 examples/python/worker.py

The protocol (API.md, "Workers over HTTP"; docs/workers.md, "Writing a
worker in any language"): register once (a token of role worker), then
long-poll with the session it returns, report "running" before the work
and "completed" / "failed" / "timed_out" / "cancelled" after it, with the
assignment's attempt. While a handler runs, a thread keeps the lease
(a heartbeat every third of it) and asks what to stop (a poll with "max":0
returns only cancels): the handler runs in the main thread, however long,
and the worker is not declared lost meanwhile. A report is idempotent:
send it again until the server answers. A 409 means the server decided
otherwise (the run was taken back, or ended past its deadline): drop it. A
401 means the incarnation ended (say, declared lost after a long network
cut): register again. SIGTERM drains: nothing new is taken, the run in
flight finishes.
"""
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

SERVER = os.environ.get("TURNSTILE_SERVER", "http://127.0.0.1:8080").rstrip("/")
TOKEN = os.environ.get("TURNSTILE_TOKEN", "")
NAME = os.environ.get("TURNSTILE_WORKER_NAME", "py-" + socket.gethostname())


class Job:
    """What a handler is given besides its input: when to stop."""

    def __init__(self, assignment):
        self.execution = assignment["execution"]
        self.attempt = assignment["attempt"]
        # The action's timeout counts from the start; past it (and a grace)
        # the server ends the run timed_out whatever the worker does.
        self.deadline = time.monotonic() + float(assignment.get("timeout_seconds") or 0)
        self.cancelled = threading.Event()  # set when the server says stop

    def expired(self):
        return time.monotonic() >= self.deadline


class Stopped(Exception):
    """A handler gave up: the job was cancelled or its deadline passed."""


def word_count(job, payload):
    """The user's code: count the words of input.text."""
    text = payload.get("text", "")
    if not isinstance(text, str):
        raise ValueError("input.text must be a string")
    return {"words": len(text.split()), "upper": text.upper()}


def sleep(job, payload):
    """The user's code: wait input.seconds, stopping early when told to."""
    seconds = payload.get("seconds", 0)
    if not isinstance(seconds, (int, float)) or seconds < 0:
        raise ValueError("input.seconds must be a number of seconds")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if job.cancelled.is_set() or job.expired():
            raise Stopped()
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))
    return {"slept": seconds}


HANDLERS = {"py.wordcount": word_count, "py.sleep": sleep}


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


class Keeper(threading.Thread):
    """Keeps the lease while a handler runs, and passes on the cancels.

    Every third of the lease it sends a heartbeat (the lease is kept) and a
    poll with "max":0 (no new work, only the ids of runs to stop). The
    worker's main thread is busy in the handler meanwhile: without this, a
    handler longer than the lease gets the worker declared lost, its result
    refused and its run handed out again.
    """

    def __init__(self, name, session, lease_seconds, job):
        super().__init__(daemon=True)
        self.name, self.session, self.job = name, session, job
        self.every = max(lease_seconds / 3.0, 0.05)
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(self.every):
            try:
                call("/api/v1/workers/%s/heartbeat" % self.name, {}, self.session, timeout=self.every)
                got = call("/api/v1/workers/%s/poll" % self.name, {"max": 0, "wait_seconds": 0}, self.session, timeout=self.every)
                if self.job.execution in got["cancels"]:
                    self.job.cancelled.set()
            except Ended:
                self.job.cancelled.set()  # the incarnation is gone: nothing it reports will be taken
                return
            except (urllib.error.URLError, OSError, ValueError):
                pass  # the network: try again at the next tick

    def stop(self):
        self.done.set()
        self.join()


def run_one(name, session, lease_seconds, a):
    """Run assignment a: report its start, run its handler while a Keeper
    keeps the lease, report its end."""
    if not report(name, session, {"execution": a["execution"], "attempt": a["attempt"], "status": "running"}):
        return
    job = Job(a)
    keeper = Keeper(name, session, lease_seconds, job)
    keeper.start()
    try:
        handler = HANDLERS.get(a["runner"])
        if handler is None:
            raise ValueError("runner %s is not served here" % a["runner"])
        rep = {"status": "completed", "result": handler(job, a.get("input") or {})}
    except Stopped:
        rep = {"status": "cancelled" if job.cancelled.is_set() else "timed_out"}
    except Exception as e:  # the user's code failed
        rep = {"status": "failed", "error": str(e)}
    finally:
        keeper.stop()
    rep.update(execution=a["execution"], attempt=a["attempt"])
    if not report(name, session, rep):
        print("report on %s refused: the server took it back or ended it" % a["execution"], file=sys.stderr, flush=True)


def main():
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while not stopping:
        reg = call("/api/v1/workers/register", {"name": NAME, "runners": sorted(HANDLERS), "slots": 1}, TOKEN)
        session, lease = reg["session"], float(reg["lease_seconds"])
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
                    if a["execution"] not in got["cancels"]:
                        run_one(NAME, session, lease, a)
            call("/api/v1/workers/%s/drain" % NAME, {}, session)
            print("drained", file=sys.stderr, flush=True)
        except Ended:
            print("the server ended this incarnation; registering again", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
