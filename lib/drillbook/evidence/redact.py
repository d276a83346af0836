"""Keep secrets out of evidence: redact by name (tokens, passwords, keys, DSN passwords) and by value.

A value is a secret when its name says so, or when it equals the value of a secret-named
environment variable or any secret handed to the bundle; every text written to a bundle is
scrubbed of every known secret value, of passwords in URLs and DSNs, and of the values of
secret-named options and settings written in it (`--token=…`, `--api-key …`, `password: …`,
as in a profile's commands or a free-text parameter). Numbers and booleans are never secrets:
a figure whose name holds "token" (first_token) is a figure.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

REDACTED = "***REDACTED***"
# The words that make a name a secret's, wherever it is written; a variable's or field's name
# (SECRET_NAME) has a few more, which in free text would mask too much ("auth", "cookie", "pwd").
SECRET_WORDS = r"token|secret|passw|api[_-]?key|apikey|private[_-]?key|credential"
SECRET_NAME = re.compile(rf"({SECRET_WORDS}|pwd|auth|(^|[_-])key$|keys$|cookie|session[_-]?key)", re.I)
# Bounded repetitions keep this linear on long texts without a URL in them.
URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]{0,30}://)(?P<user>[^:/@\s]{0,256}):"
                             r"(?P<password>[^@/\s]{1,256})@", re.I)
DSN_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.I)
# A secret-named option or setting written in a text, and its value: `--token=v`, `--api-key v`,
# `token=v`, `api_key: v`, `"password": "v"`. Matched from the word that makes the name a
# secret's (a search anchored on it stays linear on megabytes of request logs); the value stops
# at whitespace, a quote or a separator, and a number is never taken for one.
NAMED_SECRET = re.compile(
    rf"(?P<word>{SECRET_WORDS})(?P<rest>[A-Za-z0-9_.-]{{0,80}})"
    r"(?P<sep>[\"']?[ \t]*[=:][ \t]*[\"']?|[ \t]+)"
    r"(?![-+]?\d[\d.]*(?:[eE][-+]?\d+)?(?=[\s'\",;&|}]|$))(?P<value>(?!-)[^\s'\",;&|}]{1,4096})", re.I)
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
MIN_SECRET_LENGTH = 6
# The shell's working-folder variables match "pwd" but hold the folder, which is no secret.
NOT_SECRETS = frozenset({"PWD", "OLDPWD"})


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def _secret_variable(name: str, value: str) -> bool:
    """An environment variable whose value is a secret: a secret name, and not a path that exists
    (SSH_AUTH_SOCK, XAUTHORITY, DRILLBOOK_SIGNING_KEY name files; the files are never copied)."""
    if not value or name in NOT_SECRETS or not is_secret_name(name):
        return False
    return not (value.startswith("/") and os.path.exists(value))


def _masked(match: re.Match[str]) -> str:
    """A secret-named option's or setting's value masked, unless it is no secret's: a boolean, a
    path (`--token-file /run/secrets/t` names a file; files are never copied), or after a space
    where the name is no option (`session token expired`)."""
    text, start = match.string, match.start()
    while start > 0 and match.start() - start < 80 and text[start - 1] in NAME_CHARS:
        start -= 1
    name, value = text[start:match.end("rest")], match["value"]
    option = name.startswith("--")
    if (not option and not match["sep"].strip(" \t")) or value == REDACTED \
            or value.lower() in ("true", "false", "none", "null") or value.startswith(("/", "~/", "./")) \
            or name.lower().endswith(("file", "path", "dir")):
        return match.group(0)
    return match.group(0)[:match.start("value") - match.start()] + REDACTED


def scrub_named_values(text: str) -> str:
    """The values of secret-named options and settings written in a text, masked."""
    return NAMED_SECRET.sub(_masked, text)


def scrub_credentials(text: str) -> str:
    """Mask passwords inside URLs and key=value DSNs, and the values of secret-named options
    and settings (numbers and booleans stay)."""
    text = URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    text = DSN_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)
    return scrub_named_values(text)


class Redactor:
    """Knows the secret values of one run and removes them from whatever is written."""

    def __init__(self, secrets: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        values = {value for value in secrets if value}
        values |= {value for name, value in environ.items() if _secret_variable(name, value)}
        for name, value in environ.items():  # tenant=key lists and DSNs in environment variables
            if _secret_variable(name, value) and "=" in value:
                values |= {part.split("=", 1)[1] for part in value.split(",") if "=" in part}
        self.values = sorted((v for v in values if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True)

    def add(self, *secrets: str) -> None:
        self.values = sorted({*self.values, *(s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH)},
                             key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return scrub_credentials(text)

    def data(self, value: Any, name: str = "") -> Any:
        """A JSON-like structure with secret-named entries redacted and secret values scrubbed.
        Numbers and booleans are never redacted, whatever their name."""
        if isinstance(value, (bool, int, float)) or value is None:
            return value
        if name and is_secret_name(name) and value not in ("", [], {}):
            if isinstance(value, dict):
                return {key: REDACTED for key in value}
            return REDACTED
        if isinstance(value, dict):
            return {key: self.data(item, str(key)) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(item) for item in value]
        if isinstance(value, str):
            return self.text(value)
        return value
