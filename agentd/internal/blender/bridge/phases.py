"""Where an execute's time goes, phase by phase (BenchmarkBridgePhases).

Off unless hello's ``faults`` name "phases": then every execute that
succeeds adds its wall time per phase to TOTALS, and the ``phases`` method
returns the totals and starts them again. Off, each hook is one test of ON.

The phases, in the order an execute passes them (nanoseconds):

    request  the request line decoded (JSON) and dispatched to execute
    schema   the args checked against the tool's schema
    tool     the tool: Blender's work, the tool's Python, its undo data
    reply    the result, the undo record and the files encoded (JSON)
    records  the records the call touched, built by the tool or read back
    hashing  their digests, and the scene hash before and after
    answer   the response line: the hashes and the envelope (JSON)
    write    the line written to the pipe
"""

import time

PHASES = ("request", "schema", "tool", "reply", "records", "hashing", "answer", "write")

ON = False
now = time.perf_counter_ns
TOTALS = dict.fromkeys(PHASES, 0)
CALLS = [0]
NESTED = {"hashing": 0}  # hashing inside the phase being timed (_record's)
DONE = [None]  # the last execute's marks, until serve accounts for its line


class Marks:
    """One execute's phases: mark(phase) ends a phase where the last ended,
    less the time nested() took inside it."""

    def __init__(self):
        self.start = self.last = now()
        self.ns = dict.fromkeys(PHASES, 0)
        NESTED["hashing"] = 0

    def mark(self, phase):
        t = now()
        nested, NESTED["hashing"] = NESTED["hashing"], 0
        self.ns["hashing"] += nested
        self.ns[phase] += t - self.last - nested
        self.last = t

    def done(self):
        """The execute succeeded: serve accounts for its line (served)."""
        DONE[0] = self


def nested(ns):
    NESTED["hashing"] += ns


def served(before, handled, encoded, written):
    """Account for a request line served at these times, if an execute
    succeeded in it."""
    m, DONE[0] = DONE[0], None
    if m is None:
        return
    m.ns["request"] += (handled - before) - (m.last - m.start)
    m.ns["answer"] += encoded - handled
    m.ns["write"] += written - encoded
    for k, v in m.ns.items():
        TOTALS[k] += v
    CALLS[0] += 1


def take():
    """{"calls": n, "ns": {phase: total}} since the last take; starts again."""
    out = {"calls": CALLS[0], "ns": dict(TOTALS)}
    CALLS[0] = 0
    for k in TOTALS:
        TOTALS[k] = 0
    return out
