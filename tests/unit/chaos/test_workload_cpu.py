"""The campaign's clients take CPU only when the brokers and etcd leave it: nice 19 in a
scheduler autogroup of nice 19 (seed 102: their threads kept the brokers from running for
seconds, and 2 s leases lapsed with no fault)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SHOW = """
import os
from tests.chaos.workload import yield_cpu
yield_cpu()
print(os.nice(0), open("/proc/self/autogroup").read().split()[-1])
"""


def test_the_clients_yield_the_cpu_to_the_cluster() -> None:
    shown = subprocess.run([sys.executable, "-c", SHOW], cwd=Path(__file__).parents[3], check=True,
                           capture_output=True, text=True, start_new_session=True).stdout.split()
    assert shown == ["19", "19"]
