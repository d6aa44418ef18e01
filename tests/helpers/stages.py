"""A staging folder left by a real run killed with SIGKILL (no cleanup code runs), for the stale-stage tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from st_magnitude._trust.stages import MARKER

REPO = Path(__file__).resolve().parents[2]

#: a run killed while it writes its stage (SIGKILL: no cleanup code runs)
_KILLED = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from st_magnitude._trust.stages import held_stage
    target, infix, suffix, run = sys.argv[1:5]
    with held_stage(Path(target), infix=infix, suffix=suffix, run=run) as stage:
        (stage / "model.safetensors").write_bytes(b"half a model")
        print(stage, flush=True)
        time.sleep(120)
    """
)


def killed_stage(target: Path, *, infix: str = "", suffix: str = "", run: str) -> Path:
    """The staging folder of a real run of ``run`` killed (SIGKILL) while writing ``target``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(target), infix, suffix, run], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        stage = Path(proc.stdout.readline().strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert stage.is_dir() and (stage / MARKER).is_file()
    return stage
