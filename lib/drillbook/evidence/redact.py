"""Keep secrets out of evidence: redact by name (tokens, passwords, keys, DSN passwords) and by value.

A value is a secret when its name says so, or when it equals the value of a secret-named
environment variable or any secret handed to the bundle; every text written to a bundle is
scrubbed of every known secret value.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

REDACTED = "***REDACTED***"
SECRET_NAME = re.compile(r"(token|secret|passw|pwd|api[_-]?key|apikey|private[_-]?key|credential|auth|"
                         r"(^|[_-])key$|keys$|cookie|session[_-]?key)", re.I)
# Bounded repetitions keep this linear on long texts without a URL in them.
URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]{0,30}://)(?P<user>[^:/@\s]{0,256}):"
                             r"(?P<password>[^@/\s]{1,256})@", re.I)
DSN_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.I)
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


def scrub_credentials(text: str) -> str:
    """Mask passwords inside URLs and key=value DSNs."""
    text = URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    return DSN_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)


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
        """A JSON-like structure with secret-named entries redacted and secret values scrubbed."""
        if name and is_secret_name(name) and value not in (None, "", [], {}):
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
