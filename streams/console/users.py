"""The console's users: a name, one role, and a salted scrypt hash of the password, in a JSON file.

What holds:

* **No default user, no default password.** A user exists only once an operator ran ``clingate console
  users add NAME --role ROLE`` and typed the password (standard input, never an argument, so it is in no
  shell history or process list). A weak password is refused with the reason (:func:`check_password`):
  shorter than :data:`MIN_PASSWORD_LENGTH` characters, made of fewer than :data:`MIN_DISTINCT_CHARACTERS`
  different characters or of one sequence repeated (``aaaaaaaaaaaa``, twelve spaces, ``abcabcabcabc``),
  the user's name (or containing it, for a name of :data:`MIN_NAME_IN_PASSWORD` characters or more), or
  a common password (:func:`common_passwords`) with only digits, spaces or punctuation around it
  (``Password1234!``).
* **Passwords are stored hashed with a current algorithm**, scrypt (RFC 7914, ``hashlib.scrypt``), with
  a random 16-byte salt per password and a 32-byte key, as
  ``scrypt$<n>$<r>$<p>$<salt, base64>$<key, base64>``. The parameters follow OWASP's Password Storage
  Cheat Sheet (https://cheatsheetseries.owasp.org/cheatsheets/Password_Storage_Cheat_Sheet.html), which
  asks of scrypt at least N=2^17, r=8, p=1 or one of its equivalents of equal cost: N=2^16 with p=2,
  N=2^15 with p=3, N=2^14 with p=5, N=2^13 with p=10. clingate takes N=2^15, r=8, p=3: 32 MiB a hash
  instead of 128 MiB (a sign-in costs the console that much memory while it is checked), about 0.26 s
  of one core on the development VM. Each stored hash carries its parameters, so raising them later
  leaves the existing hashes verifiable.
* **Verification compares in constant time** (``hmac.compare_digest``), and a sign-in with an unknown
  name costs the same scrypt as a wrong password (:func:`verify_password` against
  :func:`decoy_hash`), so the time taken does not say which names exist.
* **A sign-in's check never holds up a page** (:class:`PasswordChecks`): checks run on a pool of their own
  threads, not on asyncio's default pool where the pages read Kafka, and at most
  :data:`CHECKS_WAITING` wait for it; a check beyond those is refused at once (:class:`ChecksBusy`)
  instead of queueing without bound.
* **A flood of sign-ins never keeps a known user out**: a sign-in of a name from an address it signed in
  from before waits in a queue of its own, :data:`CHECKS_WAITING` long, served before the others, so
  anonymous guesses from any number of addresses can fill their queue but never take a known user's
  place.
* **The file is written whole or not at all** (a temporary file in the same directory renamed over it),
  readable by its owner only (mode 0600, its directory 0700); it holds no password, only hashes.
  :meth:`UserStore.get` reads it at every sign-in, so a user added while the console runs can sign in
  at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import string
import tempfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from schemas.console import Role

SCRYPT_N = 2**15
"""scrypt's CPU/memory cost (module docstring: OWASP's N=2^15, r=8, p=3)."""
SCRYPT_R = 8
"""scrypt's block size (r=8: 1 KiB blocks)."""
SCRYPT_P = 3
"""scrypt's parallelisation (run in sequence by OpenSSL: it multiplies the time, not the memory)."""
KEY_BYTES = 32
SALT_BYTES = 16
MIN_PASSWORD_LENGTH = 12
"""The shortest password ``users add`` accepts, in characters."""
MIN_DISTINCT_CHARACTERS = 5
"""Different characters a password needs at least."""
MIN_NAME_IN_PASSWORD = 4
"""A name this long or longer may not be part of its user's password (any name may not be all of it)."""
PASSWORD_RULE = (
    f"at least {MIN_PASSWORD_LENGTH} characters, at least {MIN_DISTINCT_CHARACTERS} of them different, "
    f"not one sequence repeated, neither the user's name nor containing a name of {MIN_NAME_IN_PASSWORD} "
    "characters or more, and not a common password (alone or with digits, spaces or punctuation around it)"
)
"""What :func:`check_password` asks of a password, in words (the ``users add`` help says it)."""
COMMON_PASSWORDS = Path(__file__).parent / "common-passwords.json"
"""Common passwords (:func:`common_passwords`), with where they come from."""
_AROUND = string.digits + string.punctuation + string.whitespace
"""What may surround a common password and still leave it one."""

CHECK_THREADS = 2
"""Password checks that run at once (32 MiB and a quarter of a second of one core each)."""
CHECKS_WAITING = 8
"""Password checks that may wait for a thread, of known sign-ins and of the others each; one more is
refused (:class:`ChecksBusy`)."""

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
"""A user name: what is safe as a record key, in a log line and in a URL, up to 64 characters."""

_SCHEME = "scrypt"


class UserError(ValueError):
    """A user that cannot be added, or a users file that cannot be read; the message says why."""


@cache
def common_passwords() -> frozenset[str]:
    """The common passwords no user may have, case-folded (``common-passwords.json`` says where from)."""
    document = json.loads(COMMON_PASSWORDS.read_text(encoding="utf-8"))
    return frozenset(password.casefold() for password in document["passwords"])


def check_password(password: str, name: str) -> None:
    """Refuse a password ``users add`` must not store for the user ``name`` (module docstring).

    Raises:
        UserError: the password is weak; the message says why.
    """
    if not password:
        raise UserError("the password is empty")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise UserError(f"the password has {len(password)} characters; at least {MIN_PASSWORD_LENGTH}")
    if len(set(password)) < MIN_DISTINCT_CHARACTERS:
        raise UserError(
            f"the password uses {len(set(password))} different characters; at least {MIN_DISTINCT_CHARACTERS}"
        )
    if re.fullmatch(r"(.+?)\1+", password, re.DOTALL):
        raise UserError("the password is one sequence of characters repeated")
    folded, user = password.casefold(), name.casefold()
    if folded == user or (len(user) >= MIN_NAME_IN_PASSWORD and user in folded):
        raise UserError("the password contains the user's name")
    if folded in common_passwords() or folded.strip(_AROUND) in common_passwords():
        raise UserError("the password is a common one, which is among the first that attackers try")


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    # OpenSSL refuses to use more than `maxmem` bytes; scrypt needs 128 * r * n of them (and a little).
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=KEY_BYTES, maxmem=2 * 128 * r * n
    )


def hash_password(password: str) -> str:
    """The stored form of ``password``: ``scrypt$<n>$<r>$<p>$<salt b64>$<key b64>``, with a new salt."""
    salt = secrets.token_bytes(SALT_BYTES)
    key = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    encoded = (base64.b64encode(part).decode("ascii") for part in (salt, key))
    return "$".join([_SCHEME, str(SCRYPT_N), str(SCRYPT_R), str(SCRYPT_P), *encoded])


def _parse(stored: str) -> tuple[int, int, int, bytes, bytes]:
    """The parameters, salt and key of a stored hash.

    Raises:
        UserError: ``stored`` is not a hash :func:`hash_password` writes.
    """
    parts = stored.split("$")
    try:
        scheme, n, r, p, salt, key = parts
        if scheme != _SCHEME:
            raise ValueError(scheme)
        return (
            int(n), int(r), int(p),
            base64.b64decode(salt, validate=True), base64.b64decode(key, validate=True),
        )  # fmt: skip
    except (ValueError, binascii.Error) as exc:
        raise UserError(f"not a {_SCHEME} password hash ({len(parts)} fields)") from exc


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` is the one ``stored`` was made from (compared in constant time)."""
    n, r, p, salt, key = _parse(stored)
    return hmac.compare_digest(_scrypt(password, salt, n, r, p), key)


@cache
def decoy_hash() -> str:
    """A hash of a random password nobody knows: checked when a sign-in names no user, so that it
    costs what a wrong password costs (made once per process)."""
    return hash_password(secrets.token_urlsafe(32))


@dataclass(frozen=True)
class User:
    """One person who may sign in."""

    name: str
    role: Role
    password: str
    """The stored hash (:func:`hash_password`), never the password."""


class ChecksBusy(RuntimeError):
    """:data:`CHECK_THREADS` password checks run and :data:`CHECKS_WAITING` wait: no more now."""


class PasswordChecks:
    """Sign-ins' password checks on :data:`CHECK_THREADS` threads of their own (module docstring)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="console-password-check")
        self._running = 0
        self._waiting: tuple[deque[asyncio.Future[None]], deque[asyncio.Future[None]]] = (deque(), deque())
        """Checks waiting for a thread: the known sign-ins', served first, then the others'."""

    @property
    def pending(self) -> int:
        """Checks running or waiting."""
        return self._running + sum(len(queue) for queue in self._waiting)

    async def check(self, password: str, user: User | None, *, known: bool = False) -> bool:
        """Whether ``password`` is ``user``'s; with no user, :func:`decoy_hash` is checked instead, so that
        it takes as long. ``known``: the name signed in from this address before (its check goes first).

        Raises:
            ChecksBusy: too many checks are under way to wait for this one.
        """
        if self._running < CHECK_THREADS:
            self._running += 1
        else:
            queue = self._waiting[0 if known else 1]
            if len(queue) >= CHECKS_WAITING:
                raise ChecksBusy(f"{self.pending} password checks under way")
            turn = asyncio.get_running_loop().create_future()
            queue.append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if not turn.cancelled():  # handed a thread just as the sign-in was given up: hand it on
                    self._hand_on()
                elif turn in queue:
                    queue.remove(turn)
                raise
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, _verify, password, user)
        finally:
            self._hand_on()

    def _hand_on(self) -> None:
        """Give the thread a check leaves to the next waiting one, a known sign-in's first."""
        for queue in self._waiting:
            while queue:
                turn = queue.popleft()
                if not turn.done():  # one cancelled, not yet removed, gave its sign-in up
                    turn.set_result(None)
                    return
        self._running -= 1

    def close(self) -> None:
        """Stop the threads (checks still waiting are dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _verify(password: str, user: User | None) -> bool:
    return verify_password(password, user.password if user is not None else decoy_hash())


class UserStore:
    """The users file (module docstring): ``{"users": [{"name", "role", "password"}, ...]}``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def users(self) -> list[User]:
        """Every user, in the order they were added (none while the file does not exist).

        Raises:
            UserError: the file is not a users file (its path and what is wrong).
        """
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise UserError(f"{self.path}: {exc}") from exc
        try:
            users = [User(u["name"], Role(u["role"]), u["password"]) for u in document["users"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{self.path}: not a users file ({exc!r})") from exc
        for user in users:
            _parse(user.password)
        return users

    def get(self, name: str) -> User | None:
        """The user called ``name`` (None: no such user), read from the file now."""
        return next((user for user in self.users() if user.name == name), None)

    def add(self, name: str, role: Role, password: str) -> User:
        """Add a user with a hash of ``password`` and write the file.

        Raises:
            UserError: the name is not a :data:`NAME_PATTERN` name or is taken, or the password is
                refused (:func:`check_password`).
        """
        if NAME_PATTERN.fullmatch(name) is None:
            raise UserError(
                f"{name!r} is not a user name: up to 64 letters, digits and . _ @ -, the first a letter "
                "or digit"
            )
        check_password(password, name)
        users = self.users()
        if any(user.name == name for user in users):
            raise UserError(f"a user {name!r} exists already")
        user = User(name, role, hash_password(password))
        self._write([*users, user])
        return user

    def _write(self, users: list[User]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        document = {"users": [{**asdict(user), "role": user.role.value} for user in users]}
        fd, temporary = tempfile.mkstemp(prefix=".users-", dir=self.path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(document, out, indent=2)
                out.write("\n")
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
