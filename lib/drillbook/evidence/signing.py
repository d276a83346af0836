"""Ed25519 signing of manifest digests: create a key, sign, verify, fingerprint.

The private key is a PEM file (mode 0600); its public half is written beside it as ``.pub``.
A fingerprint is the sha256 of the raw 32-byte public key, in hex.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from drillbook.errors import ConfigError


def fingerprint(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_key_b64(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def public_key_from_b64(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(text))


def new_key(path: Path, overwrite: bool = False) -> str:
    """Create a signing key at path (and path.pub); returns its fingerprint."""
    if path.exists() and not overwrite:
        raise ConfigError(f"{path} already exists; refusing to replace a signing key")
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    public = key.public_key()
    Path(str(path) + ".pub").write_bytes(public.public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
    return fingerprint(public)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as error:
        raise ConfigError(f"cannot read signing key {path}: {error}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"signing key {path} is not an Ed25519 key")
    return key


def load_public_keys(path: Path) -> list[Ed25519PublicKey]:
    """The Ed25519 public keys in a file: one `.pub` from `drillbook keys new`, or a trusted-keys
    file of several PEM blocks (the keys a team signed with, rotated ones included). A private key
    is refused: trust is given to public halves only."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read public key file {path}: {error.strerror or error}") from None
    if b"PRIVATE KEY" in data:
        raise ConfigError(f"{path} holds a private key; trust its public half ({path.name}.pub) instead")
    blocks = re.findall(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", data, flags=re.S)
    if not blocks:
        raise ConfigError(f"{path} holds no PEM public key")
    keys = []
    for block in blocks:
        try:
            key = serialization.load_pem_public_key(block)
        except (ValueError, TypeError) as error:
            raise ConfigError(f"cannot read a public key in {path}: {error}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"a public key in {path} is not an Ed25519 key")
        keys.append(key)
    return keys


def trusted_fingerprints(paths: list[Path]) -> set[str] | None:
    """Fingerprints of every public key in these files; None when no file is named (nothing is trusted)."""
    if not paths:
        return None
    return {fingerprint(key) for path in paths for key in load_public_keys(path)}


def sign(key: Ed25519PrivateKey, digest_hex: str) -> str:
    return base64.b64encode(key.sign(bytes.fromhex(digest_hex))).decode()


def signed_by(info: object, digest_hex: str, signature_b64: object) -> bool:
    """Whether a recorded signing block ({public_key, fingerprint}) signed digest_hex with
    signature_b64, the fingerprint matching the key; anything malformed is False."""
    try:
        public_key = public_key_from_b64(info["public_key"])  # type: ignore[index]
        return fingerprint(public_key) == info["fingerprint"] and verify(  # type: ignore[index]
            public_key, digest_hex, signature_b64)  # type: ignore[arg-type]
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


def verify(public_key: Ed25519PublicKey, digest_hex: str, signature_b64: str) -> bool:
    try:
        public_key.verify(base64.b64decode(signature_b64), bytes.fromhex(digest_hex))
    except (InvalidSignature, ValueError):
        return False
    return True
