"""What a log line or a stored failure may say of a text: its length and a keyed digest, never
the text (STYLE rule 18). A text in a log is text no erasure reaches.

- :func:`said` reduces a value, label, subject, tag, prompt or model's answer to
  ``len=12 #a1b2c3d4``: enough to see that two lines speak of the same text, or that a text was
  empty or long, and nothing to read.
- :func:`described` reduces an exception to its type and what the database names of its schema
  (SQLSTATE, constraint, table, column): a database error quotes the row it refused ("Key
  (label)=(clinic) already exists", "invalid byte sequence …"), a model client's or a
  validation's error quotes the answer. The message itself is left out.
- :func:`traced` is :func:`described` with where it was raised: the frames of the traceback (file,
  line, function, the line of code), for what ``log.exception`` would have said, without the
  message ``log.exception`` prints under them.
- :func:`hold_uncaught` makes an exception nothing caught (in the main thread or another) a
  log line of :func:`traced`, where Python would print its message to stderr — serve's log.

The digest is an HMAC-SHA256 under a key this process draws at random when it starts and never
stores. A key derived from the master key would outlive every erasure (the master key is not
destroyed when a person is forgotten): whoever holds it could hash a guess — ``alice``,
``clinic`` — and find it in an old log. A per-process key dies with the process, so a digest
can be matched only against other lines of the same process, and no guess can ever be checked
against it. Digests of two processes (or two runs) differ on purpose.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import sys
import threading
import traceback
from types import TracebackType

#: Drawn once per process, never written anywhere (see the module's notes).
_KEY = os.urandom(32)

#: What :func:`described` reads of a database error: names of the schema, never of a row.
_DIAGNOSTICS = ("sqlstate", "constraint_name", "table_name", "column_name")


#: How many exceptions of a chain :func:`traced` follows.
_CHAIN = 5


def said(text: object) -> str:
    """``text`` as its length and an 8-hex keyed digest: ``len=12 #a1b2c3d4`` (``None``: ``none``).
    A non-string is reduced by its ``str``; a list or tuple by the count and each item."""
    if text is None:
        return "none"
    if isinstance(text, (list, tuple, set, frozenset)):
        items = [said(item) for item in text]
        return f"{len(items)} item(s) [{', '.join(items)}]" if items else "0 item(s)"
    value = text if isinstance(text, str) else str(text)
    digest = hmac.new(_KEY, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return f"len={len(value)} #{digest[:8]}"


def described(error: BaseException) -> str:
    """An exception as its type and, for a database error, the names PostgreSQL gives of where
    it failed: ``UniqueViolation (sqlstate 23505, constraint cards_pkey, table cards)``. The
    message, which may quote a value, is left out; the result is the same in every process, so
    a rebuild records the failure an incremental projector records."""
    kind = type(error).__name__
    diag = getattr(error, "diag", None)
    sqlstate = getattr(error, "sqlstate", None)
    parts = []
    for name in _DIAGNOSTICS:
        value = sqlstate if name == "sqlstate" else getattr(diag, name, None)
        if value:
            parts.append(f"{name.removesuffix('_name')} {value}")
    return f"{kind} ({', '.join(parts)})" if parts else kind


def traced(error: BaseException) -> str:
    """``error`` described with the frames it was raised through, then each exception it was
    raised from (at most ``_CHAIN``), the same way: a traceback without messages."""
    lines: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < _CHAIN:
        seen.add(id(current))
        lines.append(("raised from " if lines else "") + described(current))
        lines += [line.rstrip("\n") for line in traceback.format_list(
            traceback.extract_tb(current.__traceback__))]
        current = current.__cause__ or current.__context__
    return "\n".join(lines)


_uncaught = logging.getLogger("palimpsest.uncaught")


def hold_uncaught() -> None:
    """An exception nothing caught, in any thread, logged :func:`traced` (at CRITICAL), not
    printed with its message: every ``palimpsest`` process calls this when it starts."""

    def main_thread(kind: type[BaseException], error: BaseException,
                    tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, error, tb)
            return
        _uncaught.critical("uncaught in the main thread: %s", traced(error.with_traceback(tb)))

    def other_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or issubclass(args.exc_type, SystemExit):
            return
        name = args.thread.name if args.thread is not None else "?"
        _uncaught.critical("uncaught in thread %s: %s", name,
                           traced(args.exc_value.with_traceback(args.exc_traceback)))

    sys.excepthook = main_thread
    threading.excepthook = other_thread
