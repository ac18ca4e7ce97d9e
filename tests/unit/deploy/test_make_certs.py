"""``deploy/security/make-certs.sh`` writes every key readable by its owner only, whatever the umask it is
run under, and the CA certificate every client reads."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "security" / "make-certs.sh"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="make-certs.sh needs openssl")
def test_the_keys_are_written_0600_and_the_ca_certificate_0644(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    subprocess.run(
        ["bash", "-c", 'umask 000 && exec "$0" "$@"', str(SCRIPT), str(out), "127.0.0.1", "kafka-0"],
        check=True,
    )
    modes = {path.name: path.stat().st_mode & 0o777 for path in out.iterdir()}
    assert modes.pop("ca.pem") == 0o644
    assert set(modes) >= {"ca.key", "127.0.0.1.pem", "kafka-0.pem"}
    assert set(modes.values()) == {0o600}, modes
    assert "PRIVATE KEY" in (out / "kafka-0.pem").read_text(encoding="ascii")
    assert os.access(SCRIPT, os.X_OK)
