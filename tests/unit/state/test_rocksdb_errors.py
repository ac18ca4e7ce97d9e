"""What a RocksDB store that cannot be opened says: where, RocksDB's reason, and a hint only where the
cause is known. The lock hint is asked of the lock itself, so it appears only while another process
really holds it (a full disk, the other known cause, is the chaos test's: it needs a filesystem to fill,
tests/integration/test_chaos.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from state import StateError
from state.rocksdb import RocksDBStore

_HOLD = """
import sys
from state.rocksdb import RocksDBStore
store = RocksDBStore(sys.argv[1])
print("open", flush=True)
sys.stdin.read()
"""


def test_a_store_another_process_holds_says_so(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path / "db")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        with pytest.raises(StateError, match="another process holds its lock") as raised:
            RocksDBStore(tmp_path / "db")
        assert str(tmp_path / "db") in str(raised.value)
    finally:
        holder.communicate("")
    RocksDBStore(tmp_path / "db").close()  # the holder gone, the store opens


_TRY = """
import sys
from state import StateError
from state.rocksdb import RocksDBStore
try:
    RocksDBStore(sys.argv[1])
except StateError as error:
    print(error)
"""


def test_a_store_this_process_holds_gets_no_hint_and_keeps_its_lock(tmp_path: Path) -> None:
    with RocksDBStore(tmp_path / "db"):
        with pytest.raises(StateError) as raised:
            RocksDBStore(tmp_path / "db")
        assert "another process" not in str(raised.value)
        # The failed open released nothing: another process still finds the lock held.
        tried = subprocess.run([sys.executable, "-c", _TRY, str(tmp_path / "db")], capture_output=True,
                               text=True, check=True)  # fmt: skip
        assert "another process holds its lock" in tried.stdout


def test_a_store_that_cannot_be_opened_for_another_reason_blames_no_lock(tmp_path: Path) -> None:
    (tmp_path / "db").write_text("a file, not a directory")
    with pytest.raises(StateError) as raised:
        RocksDBStore(tmp_path / "db")
    message = str(raised.value)
    assert message.startswith(f"cannot open RocksDB store at {tmp_path / 'db'}: ")
    assert "another process" not in message and "disk" not in message
