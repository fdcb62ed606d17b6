"""Policies evaluated in a child process, each within a deadline (docs/governance.md, "A policy
that runs too long").

Rego has no loops, but a built-in can be asked for a lot: `numbers.range(1, 20000000)` took
rego-cpp a minute and 10 GB before its statement limit stopped it, and a comprehension over two
ranges of 3,000 held the CPU for 17 s. Evaluated inside the planner, one tenant administrator's
policy froze admission for every tenant and could take the process down; rego-cpp has no time
limit to set. So the planner (and `muster policy test`) hand each evaluation to a child process
(`python -m services.governance.sandbox`) and wait at most `deadline_s` for its answer: past it,
the child is killed, the policy denies (fail closed) saying it ran too long, and the next
evaluation starts a new child. A child that dies (out of memory) denies the same way.

The protocol is one JSON line each way: `{"name", "version", "source", "document"}` in,
`{"deny": [...], "warn": [...]}` out (messages, as `policies.evaluate_one` reads them); the
child compiles each (name, version, source) once. It exits when its input closes, so a planner
that dies leaves no child behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import IO, Any

from .domain.deadline import POLICY_DEADLINE_S
from .domain.policies import Finding, PolicySource, Verdict, evaluate_one
from .domain.stored import compile_all

START_TIMEOUT_S = 30.0
"""How long a child may take to start (import rego-cpp) before the policies deny."""
COMPILED_KEPT = 512


def _failed(policy: PolicySource, why: str) -> Verdict:
    return Verdict((Finding(policy.name, policy.version, f"policy {policy.name!r} failed to evaluate: {why}; denied (fail closed)"),))


def _read_line(stream: IO[bytes], deadline: float) -> bytes | None:
    """One line from the child by the monotonic `deadline`; None past it, b'' when it ended."""
    fd, got = stream.fileno(), b""
    while not got.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b""
        got += chunk
    return got


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


KEPT_ENVIRONMENT = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
"""What of the planner's environment the child gets: enough to start Python. A policy reads its
process's environment with `opa.runtime().env` and may say it in a denial: tenant beta's
administrator read the planner's (its credentials file, the secrets files' paths, and whatever
the operator exported where `muster up` ran: a token, a cloud's keys)."""


def child_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in KEPT_ENVIRONMENT}


class PolicySandbox:
    """Evaluates policies in one child process, one at a time, each within `deadline_s`. Safe
    to share between threads and event loops (the exchange runs in a thread, under a lock)."""

    def __init__(self, deadline_s: float = POLICY_DEADLINE_S, start_timeout_s: float = START_TIMEOUT_S,
                 prints: bool = False) -> None:
        """`prints`: what a policy prints (`print(...)`) goes to this process's stderr (`muster
        policy test`, an author's own terminal). Not the planner's: its stderr is its log file, and a
        tenant administrator's policy wrote lines of its choosing there (a forged log line, or
        megabytes of them at every request)."""
        self.deadline_s, self.start_timeout_s, self.prints = deadline_s, start_timeout_s, prints
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None

    async def evaluate(self, policies: Sequence[PolicySource], document: dict[str, Any]) -> Verdict:
        if not policies:
            return Verdict()
        return await asyncio.to_thread(self.evaluate_now, policies, document)

    def evaluate_now(self, policies: Sequence[PolicySource], document: dict[str, Any]) -> Verdict:
        """Every policy on the same input, blocking (the CLI's `policy test`; the planner goes
        through `evaluate`, in a thread)."""
        doc = json.dumps(document, default=str)
        denials: list[Finding] = []
        warnings: list[Finding] = []
        with self._lock:
            for policy in policies:
                verdict = self._one(policy, doc)
                denials += verdict.denials
                warnings += verdict.warnings
        return Verdict(tuple(denials), tuple(warnings))

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _one(self, policy: PolicySource, doc: str) -> Verdict:
        line = (json.dumps({"name": policy.name, "version": policy.version, "source": policy.source})[:-1]
                + f', "document": {doc}}}\n').encode()
        for attempt in (1, 2):  # a child that died since the last evaluation is replaced once
            proc = self._started()
            if proc is None:
                return _failed(policy, "the policy evaluator did not start (see the planner's log)")
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(line)
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self._stop()
                if attempt == 1:
                    continue
                return _failed(policy, "the policy evaluator ended")
            answer = _read_line(proc.stdout, time.monotonic() + self.deadline_s)
            if answer is None:
                self._stop()
                return _failed(policy, f"it ran longer than {self.deadline_s:g} s (a built-in asked for too much: a "
                                       "large numbers.range, a comprehension over big inputs?)")
            if not answer:
                self._stop()
                return _failed(policy, "its evaluation ended the policy evaluator (out of memory?)")
            try:
                reply = json.loads(answer)
                return Verdict(tuple(Finding(policy.name, policy.version, str(m)) for m in reply["deny"]),
                               tuple(Finding(policy.name, policy.version, str(m)) for m in reply["warn"]))
            except (ValueError, KeyError, TypeError):
                self._stop()
                return _failed(policy, "the policy evaluator's answer was not readable")
        raise AssertionError("unreachable")

    def _started(self) -> subprocess.Popen[bytes] | None:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        proc = subprocess.Popen([sys.executable, "-m", "services.governance.sandbox"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=None if self.prints else subprocess.DEVNULL,
                                start_new_session=True, env=child_environment())
        self._proc, self._finalizer = proc, weakref.finalize(self, _kill, proc)
        assert proc.stdout is not None
        if _read_line(proc.stdout, time.monotonic() + self.start_timeout_s) != b"ready\n":
            self._stop()
            return None
        return proc

    def _stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # kills and reaps the child, once
        self._proc, self._finalizer = None, None


# -- the child ------------------------------------------------------------------------------------


def _key(request: dict[str, Any]) -> tuple[str, int, str]:
    return str(request["name"]), int(request["version"]), hashlib.sha256(str(request["source"]).encode()).hexdigest()


def main() -> None:
    import muster  # noqa: F401  (loads rego-cpp the way every muster process does: muster/_startup.py)

    # Only answers go to the parent: anything rego-cpp prints goes to stderr instead.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    compiled: dict[tuple[str, int, str], Any] = {}
    answers.write("ready\n")
    answers.flush()
    for line in sys.stdin.buffer:
        answers.write(json.dumps(_answer(compiled, line)) + "\n")
        answers.flush()


def _answer(compiled: dict[tuple[str, int, str], Any], line: bytes) -> dict[str, list[str]]:
    try:
        request = json.loads(line)
        key = _key(request)
        if key not in compiled:
            if len(compiled) >= COMPILED_KEPT:
                compiled.pop(next(iter(compiled)))
            compiled[key] = compile_all([(key[0], str(request["source"]), key[1])])[0]
        verdict = evaluate_one(compiled[key], request["document"])
    except Exception as err:  # noqa: BLE001 - any failure denies, and the child goes on
        return {"deny": [f"the policy could not be evaluated: {type(err).__name__}: {err}; denied (fail closed)"], "warn": []}
    return {"deny": [d.message for d in verdict.denials], "warn": [w.message for w in verdict.warnings]}


if __name__ == "__main__":
    main()
