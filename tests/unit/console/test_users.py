"""Users and passwords: scrypt hashes with their parameters, the password rule, the users file and the
``clingate console users`` commands (password from standard input, never printed back)."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.cli import console as console_command
from streams.console.users import (
    COMMON_PASSWORDS,
    MIN_PASSWORD_LENGTH,
    PASSWORD_RULE,
    Role,
    UserError,
    UserStore,
    check_password,
    common_passwords,
    hash_password,
    verify_password,
)
from streams.runtime.settings import get_settings

PASSWORD = "correct horse battery"


def test_a_hash_is_scrypt_with_its_parameters_a_16_byte_salt_and_a_32_byte_key() -> None:
    scheme, n, r, p, salt, key = hash_password(PASSWORD).split("$")
    assert (scheme, n, r, p) == ("scrypt", str(2**15), "8", "3")
    assert len(base64.b64decode(salt)) == 16 and len(base64.b64decode(key)) == 32


def test_the_right_password_verifies_and_a_wrong_one_does_not() -> None:
    stored = hash_password(PASSWORD)
    assert verify_password(PASSWORD, stored)
    assert not verify_password(PASSWORD + " ", stored)
    assert not verify_password("", stored)


def test_each_hash_has_its_own_salt() -> None:
    assert hash_password(PASSWORD) != hash_password(PASSWORD)


def test_a_hash_verifies_with_the_parameters_it_carries() -> None:
    """Raising the parameters later leaves the hashes stored before verifiable."""
    salt = b"0123456789abcdef"
    key = hashlib.scrypt(PASSWORD.encode(), salt=salt, n=2**10, r=8, p=1, dklen=32)
    stored = f"scrypt$1024$8$1${base64.b64encode(salt).decode()}${base64.b64encode(key).decode()}"
    assert verify_password(PASSWORD, stored)
    assert not verify_password("another password", stored)


@pytest.mark.parametrize(
    "stored", ["", "plain-text-password", "bcrypt$1$2$3$AAAA$AAAA", "scrypt$x$8$1$AA$AA"]
)
def test_anything_but_a_scrypt_hash_is_refused(stored: str) -> None:
    with pytest.raises(UserError, match="not a scrypt password hash"):
        verify_password(PASSWORD, stored)


@pytest.mark.parametrize(
    ("password", "reason"),
    [
        ("", "empty"),
        ("a long one!"[: MIN_PASSWORD_LENGTH - 1], f"at least {MIN_PASSWORD_LENGTH}"),
        ("aaaaaaaaaaaa", "1 different characters; at least 5"),
        (" " * 12, "1 different characters"),
        ("abababababab", "2 different characters"),
        ("abcdeabcdeabcde", "one sequence of characters repeated"),
        ("pharmacist-alice", "the user's name"),
        ("PHARMACIST-ALICE", "the user's name"),
        ("I am pharmacist-alice!", "the user's name"),
        ("password1234", "a common one"),
        ("Password1234!", "a common one"),
        ("  Sunshine 2024  ", "a common one"),
        ("qwertyuiop!!", "a common one"),
        ("clingate2026!", "a common one"),
    ],
)
def test_a_weak_password_is_refused_with_the_reason(password: str, reason: str) -> None:
    with pytest.raises(UserError, match=reason):
        check_password(password, "pharmacist-alice")


def test_a_short_name_may_be_part_of_a_password_but_not_all_of_it() -> None:
    """A name of fewer than four characters is in many good passwords (``ph`` in ``graph``)."""
    check_password("a graph of thirty nodes", "ph")
    check_password(PASSWORD, "pharmacist-alice")


def test_the_common_passwords_say_where_they_come_from() -> None:
    document = json.loads(COMMON_PASSWORDS.read_text(encoding="utf-8"))
    assert "SecLists" in document["source"] and "xato.net" in document["source"]
    assert {"password", "qwertyuiop", "iloveyou", "clingate"} <= common_passwords()
    assert all(p == p.casefold() for p in document["passwords"])


def test_the_store_keeps_hashes_only_in_a_file_its_owner_alone_reads(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "console" / "users.json")
    assert store.users() == [] and store.get("ph") is None, "no user exists until one is added"
    store.add("ph", Role.PHARMACIST, PASSWORD)
    user = store.get("ph")
    assert user is not None and user.role is Role.PHARMACIST and verify_password(PASSWORD, user.password)
    text = store.path.read_text()
    assert PASSWORD not in text
    assert json.loads(text) == {"users": [{"name": "ph", "role": "pharmacist", "password": user.password}]}
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize(
    ("name", "reason"),
    [("ph", "exists already"), ("", "not a user"), ("a b", "not a user"), ("-x", "not a user")],
)
def test_a_taken_or_malformed_name_is_refused(tmp_path: Path, name: str, reason: str) -> None:
    store = UserStore(tmp_path / "users.json")
    store.add("ph", Role.PHARMACIST, PASSWORD)
    with pytest.raises(UserError, match=reason):
        store.add(name, Role.SME, PASSWORD)
    assert [user.name for user in store.users()] == ["ph"]


def test_a_file_that_is_not_a_users_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    path.write_text('{"users": [{"name": "ph", "role": "pharmacist", "password": "hunter2hunter2"}]}')
    with pytest.raises(UserError, match="not a scrypt password hash"):
        UserStore(path).users()
    path.write_text('{"users": [{"name": "ph", "role": "admin", "password": ""}]}')
    with pytest.raises(UserError, match="not a users file"):
        UserStore(path).users()


@pytest.fixture
def users_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``CLINGATE_CONSOLE_USERS`` in the test's directory, for the commands' settings."""
    path = tmp_path / "users.json"
    monkeypatch.setenv("CLINGATE_CONSOLE_USERS", str(path))
    get_settings.cache_clear()
    yield path
    get_settings.cache_clear()


def _users(*arguments: str, stdin: str = "") -> tuple[int, str, str]:
    result = CliRunner().invoke(console_command.app, ["users", *arguments], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_users_add_reads_the_password_from_standard_input_and_list_shows_no_hash(users_file: Path) -> None:
    code, _, err = _users("add", "ph", "--role", "pharmacist", stdin=PASSWORD + "\n")
    assert code == 0, err
    assert _users("add", "sme-1", "--role", "sme", stdin=PASSWORD + "\n")[0] == 0
    user = UserStore(users_file).get("ph")
    assert user is not None and verify_password(PASSWORD, user.password), "the newline is not the password's"
    code, out, _ = _users("list")
    assert code == 0
    assert out.splitlines() == ["ph     pharmacist", "sme-1  sme"]
    assert "scrypt" not in out and PASSWORD not in out


@pytest.mark.parametrize(
    ("stdin", "reason"),
    [("", "empty"), ("\n", "empty"), ("short pw\n", "at least 12"), (" " * 12 + "\n", "different characters"),
     ("aaaaaaaaaaaa\n", "different characters"), ("abcd-abcd-abcd-\n", "repeated"),
     ("Password2026\n", "common")],
)  # fmt: skip
def test_users_add_refuses_a_weak_password_with_exit_2_and_the_reason(
    users_file: Path, stdin: str, reason: str
) -> None:
    code, _, err = _users("add", "ph", "--role", "pharmacist", stdin=stdin)
    assert code == 2 and reason in err
    assert not users_file.exists()


def test_users_add_refuses_an_unknown_role(users_file: Path) -> None:
    code, _, _ = _users("add", "ph", "--role", "admin", stdin=PASSWORD + "\n")
    assert code == 2 and not users_file.exists()


def test_the_help_of_users_add_states_the_password_rule() -> None:
    """Whoever creates a user learns the rule before a password is refused."""
    code, out, _ = _users("add", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert PASSWORD_RULE in text, text
    assert f"at least {MIN_PASSWORD_LENGTH} characters" in PASSWORD_RULE
    assert "common password" in PASSWORD_RULE
